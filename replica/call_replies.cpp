#include "replica/call_replies.hpp"

#include <fmt/format.h>

#include "protocol/frame.hpp"
#include "replica/frame_writer.hpp"

namespace fusee::replica {

std::vector<std::byte> bytes_of(const std::string& text) {
  const auto* data = reinterpret_cast<const std::byte*>(text.data());
  return {data, data + text.size()};
}

std::function<void(CallPart, std::vector<std::byte>)> call_reply(
    std::shared_ptr<CallReplies> replies, std::uint64_t request,
    std::function<void(std::vector<std::byte> frame)> send) {
  return [replies = std::move(replies), request, send = std::move(send)](CallPart part, std::vector<std::byte> body) {
    if (body.size() + protocol::kFrameHeaderBytes + 16 > protocol::kFrameBytesMax) {
      part = CallPart::last;
      body = bytes_of(fmt::format(
          R"({{"error":"invalid_argument","message":"the answer ({} bytes) is larger than a replica's frame"}})",
          body.size()));
    }
    auto frame = frame_of(FrameType::call_reply, request, encode_call_reply({part, std::move(body)}));
    std::lock_guard lock(replies->mu);
    if (replies->io == nullptr) return;
    boost::asio::post(*replies->io, [send, frame = std::move(frame)]() mutable { send(std::move(frame)); });
  };
}

}  // namespace fusee::replica
