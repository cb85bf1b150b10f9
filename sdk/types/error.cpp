#include "fusee/error.hpp"

#include <string>

namespace fusee {
namespace {

class Category final : public std::error_category {
 public:
  const char* name() const noexcept override { return "fusee"; }
  std::string message(int code) const override { return errc_name(static_cast<errc>(code)); }
};

}  // namespace

const std::error_category& error_category() noexcept {
  static const Category category;
  return category;
}

const char* errc_name(errc code) noexcept {
  switch (code) {
    case errc::busy: return "busy";
    case errc::not_found: return "not_found";
    case errc::already_exists: return "already_exists";
    case errc::unknown_workflow: return "unknown_workflow";
    case errc::step_failed: return "step_failed";
    case errc::failed: return "failed";
    case errc::cancelled: return "cancelled";
    case errc::timed_out: return "timed_out";
    case errc::nondeterminism: return "nondeterminism";
    case errc::storage: return "storage";
    case errc::invalid_argument: return "invalid_argument";
    case errc::shut_down: return "shut_down";
    case errc::wrong_shard_count: return "wrong_shard_count";
    case errc::unavailable: return "unavailable";
    case errc::conflict: return "conflict";
    case errc::wrong_thread: return "wrong_thread";
    case errc::rejected: return "rejected";
  }
  return "unknown";
}

}  // namespace fusee
