// The answers to calls a backup's application forwards to this replica's
// engine (replica_wire.hpp, frames 6 and 7; docs/replication.md, "Calls on a
// backup"): each part is sent from whatever thread the engine answers on,
// posted through the replica's loop, until the replica stops; an answer too
// large for a frame becomes an error the caller gets once, rather than a
// connection dropped (and the call asked again, for ever).
#pragma once

#include <boost/asio.hpp>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "replica/replica_wire.hpp"

namespace fusee::replica {

// Where replies are posted; `io` is cleared (under `mu`) as the replica stops.
struct CallReplies {
  explicit CallReplies(boost::asio::io_context* loop) : io(loop) {}
  std::mutex mu;
  boost::asio::io_context* io;
};

std::vector<std::byte> bytes_of(const std::string& text);

// The reply function for call `request`: `send(frame)` runs on the loop,
// given the call_reply frame.
std::function<void(CallPart, std::vector<std::byte>)> call_reply(
    std::shared_ptr<CallReplies> replies, std::uint64_t request,
    std::function<void(std::vector<std::byte> frame)> send);

}  // namespace fusee::replica
