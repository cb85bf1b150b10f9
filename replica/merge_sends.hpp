// One turn's messages to the peers, merged: appends proposed by many
// clients in one turn of a replica's loop go to each backup as one message,
// and its acknowledgements come back as one (replica_node.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "replication/replica_messages.hpp"

namespace fusee::replica {

// Merges each message into the last one to the same replica when together
// they say what both said: appends whose batches follow on (the later one's
// published sequence, end, history and retirement bound hold for both), of
// at most `append_bytes_max` payload together, and successful
// acknowledgements in one view (the later one covers the earlier).
void merge_sends(std::vector<replication::Message>& sends, std::uint64_t append_bytes_max);

}  // namespace fusee::replica
