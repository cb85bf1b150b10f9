// A queue of protocol frames (protocol/frame.hpp) written in order to one
// socket, one async_write at a time, bounded by its caller: the replica's
// links and connections (replica_node.cpp) and a backup's calls to its
// primary (sdk/facade/primary_router.hpp). Not thread-safe: the socket's
// io_context thread only.
#pragma once

#include <boost/asio.hpp>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <vector>

#include "protocol/frame.hpp"
#include "replica/replica_wire.hpp"

namespace fusee::replica {

// The replicas' wire: frames of its own version (protocol::kReplicaWireVersion),
// written by frame_of and read by a frame_decoder().
inline std::vector<std::byte> frame_of(FrameType type, std::uint64_t request_id, std::span<const std::byte> payload) {
  std::vector<std::byte> out;
  protocol::encode_frame(static_cast<std::uint8_t>(type), request_id, payload, out, protocol::kReplicaWireVersion);
  return out;
}
inline protocol::FrameDecoder frame_decoder() {
  return protocol::FrameDecoder(protocol::kFrameBytesMax, protocol::kReplicaWireVersion);
}

class FrameWriter {
 public:
  explicit FrameWriter(boost::asio::ip::tcp::socket& socket) : socket_(socket) {}
  // Returns false when dropped (over the bound).
  bool push(std::vector<std::byte> frame, std::size_t bytes_max) {
    if (queued_bytes_ + frame.size() > bytes_max) return false;
    queued_bytes_ += frame.size();
    queue_.push_back(std::move(frame));
    return true;
  }
  // Writes what is queued; `keep` holds the socket's owner alive meanwhile.
  template <typename OnError>
  void pump(std::shared_ptr<void> keep, OnError on_error) {
    if (writing_ || queue_.empty()) return;
    writing_ = true;
    boost::asio::async_write(socket_, boost::asio::buffer(queue_.front()),
                             [this, keep, on_error, generation = generation_](boost::system::error_code error,
                                                                              std::size_t) {
                               // Cleared meanwhile (its socket closed): the
                               // queue is not the one this write began on.
                               if (generation != generation_) return;
                               writing_ = false;
                               if (error) {
                                 on_error(error);
                                 return;
                               }
                               queued_bytes_ -= queue_.front().size();
                               queue_.pop_front();
                               pump(keep, on_error);
                             });
  }
  // After its socket was closed: a write still out completes into nothing.
  void clear() {
    queue_.clear();
    queued_bytes_ = 0;
    writing_ = false;
    ++generation_;
  }
  bool empty() const { return queue_.empty(); }

 private:
  boost::asio::ip::tcp::socket& socket_;
  std::deque<std::vector<std::byte>> queue_;
  std::size_t queued_bytes_ = 0;
  bool writing_ = false;
  std::uint64_t generation_ = 0;  // bumped by clear()
};

}  // namespace fusee::replica
