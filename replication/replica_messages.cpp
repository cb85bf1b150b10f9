#include "replication/replica_messages.hpp"

namespace fusee::replication {

std::vector<Entry*> elided_entries(Message& message) {
  std::vector<Entry*> elided;
  auto collect = [&](std::vector<Entry>& entries) {
    for (Entry& entry : entries) {
      if (entry.elided) elided.push_back(&entry);
    }
  };
  if (auto* append = std::get_if<AppendRequest>(&message.body)) collect(append->entries);
  if (auto* fetched = std::get_if<FetchReply>(&message.body)) collect(fetched->entries);
  return elided;
}

}  // namespace fusee::replication
