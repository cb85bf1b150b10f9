#include "wal/errc.hpp"

#include <string>

namespace fusee::wal {
namespace {

class WalCategory final : public std::error_category {
 public:
  const char* name() const noexcept override { return "fusee.wal"; }
  std::string message(int code) const override {
    switch (static_cast<errc>(code)) {
      case errc::poisoned: return "the log is poisoned by an earlier failed flush; reopen it";
      case errc::queue_full: return "the log's staging queue is full; retry later";
      case errc::record_too_large: return "record too large for the log";
      case errc::recovery_refused: return "recovery refused: acknowledged data is damaged";
      case errc::closed: return "the log is closed";
      case errc::invalid_argument: return "invalid argument";
      case errc::corrupt: return "corrupt log data";
    }
    return "unknown fusee.wal error";
  }
};

}  // namespace

const std::error_category& wal_category() {
  static const WalCategory category;
  return category;
}

std::error_code make_error_code(errc code) { return {static_cast<int>(code), wal_category()}; }

}  // namespace fusee::wal
