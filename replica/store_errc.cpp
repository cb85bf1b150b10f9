#include "replica/store_errc.hpp"

#include <string>

namespace fusee::replica {

namespace {

class StoreCategory final : public std::error_category {
 public:
  const char* name() const noexcept override { return "fusee.replica"; }
  std::string message(int value) const override {
    switch (static_cast<StoreErrc>(value)) {
      case StoreErrc::foreign_cluster: return "the directory is a replica of another cluster";
      case StoreErrc::already_initialized: return "the directory is already a replica of a cluster";
      case StoreErrc::payload_too_large: return "a batch is larger than the replica's segments take";
      case StoreErrc::malformed_batch: return "a batch's payload is no body of the shared log's sections";
      case StoreErrc::unreadable_batch: return "a durable batch reads back other than the chain holds it";
      case StoreErrc::retired_batch: return "the batch lies below the log's start: its segment was retired";
      case StoreErrc::store_behind_log:
        return "the run store needs batches the log retired (rebuild the replica: fusee replica rebuild)";
    }
    return "unknown replica store error";
  }
};

}  // namespace

const std::error_category& store_category() {
  static const StoreCategory category;
  return category;
}

}  // namespace fusee::replica
