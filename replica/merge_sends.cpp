#include "replica/merge_sends.hpp"

#include <algorithm>
#include <iterator>
#include <map>
#include <variant>

namespace fusee::replica {

using replication::AppendRequest;
using replication::Entry;
using replication::Message;
using replication::ReplicaId;

namespace {

std::uint64_t payload_bytes(const AppendRequest& request) {
  std::uint64_t bytes = 0;
  for (const Entry& entry : request.entries) bytes += entry.payload.size();
  return bytes;
}

}  // namespace

void merge_sends(std::vector<Message>& sends, std::uint64_t append_bytes_max) {
  std::vector<Message> merged;
  std::map<ReplicaId, std::size_t> last_to;
  for (Message& message : sends) {
    auto last = last_to.find(message.to);
    if (last != last_to.end()) {
      Message& before = merged[last->second];
      if (before.view == message.view) {
        auto* a = std::get_if<AppendRequest>(&before.body);
        auto* b = std::get_if<AppendRequest>(&message.body);
        if (a && b && b->prev_seq == a->prev_seq + a->entries.size() && !a->entries.empty() &&
            b->prev_view == a->entries.back().view && a->to_incarnation == b->to_incarnation &&
            payload_bytes(*a) + payload_bytes(*b) <= append_bytes_max) {
          // The earlier one's anchor, if any, stays: it is where the merged
          // batches start.
          a->entries.insert(a->entries.end(), std::make_move_iterator(b->entries.begin()),
                            std::make_move_iterator(b->entries.end()));
          a->commit = std::max(a->commit, b->commit);
          a->primary_end = b->primary_end;
          a->starts = std::move(b->starts);
          a->retire_below = std::max(a->retire_below, b->retire_below);
          continue;
        }
        auto* ra = std::get_if<replication::AppendReply>(&before.body);
        auto* rb = std::get_if<replication::AppendReply>(&message.body);
        if (ra && rb && ra->ok && rb->ok && ra->incarnation == rb->incarnation && ra->promised == rb->promised &&
            rb->match_end >= ra->match_end) {
          *ra = *rb;
          continue;
        }
      }
    }
    last_to[message.to] = merged.size();
    merged.push_back(std::move(message));
  }
  sends = std::move(merged);
}

}  // namespace fusee::replica
