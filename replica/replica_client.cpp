#include "replica/replica_client.hpp"

#include <boost/asio.hpp>
#include <thread>

#include "protocol/address.hpp"
#include "protocol/frame.hpp"
#include "replica/frame_writer.hpp"

namespace fusee::replica {

namespace asio = boost::asio;
using asio::ip::tcp;
using Clock = std::chrono::steady_clock;

struct ReplicaClient::Impl {
  struct Link {
    explicit Link(asio::io_context& io) : socket(io) {}
    tcp::socket socket;
    bool connected = false;
    protocol::FrameDecoder decoder = frame_decoder();
  };

  explicit Impl(std::vector<std::string> texts) {
    for (const std::string& text : texts) {
      endpoints.push_back(protocol::parse_address(text, "replica address", false).tcp);
      links.push_back(std::make_unique<Link>(io));
    }
  }

  // Runs the io context until `done` or the deadline; on the deadline the
  // link is closed (its operations end aborted) and false returned.
  template <typename Done>
  bool run_until(Link& link, Clock::time_point deadline, Done done) {
    io.restart();
    while (!done()) {
      if (io.run_one_until(deadline) == 0) {
        drop(link);
        return false;
      }
    }
    return true;
  }

  void drop(Link& link) {
    boost::system::error_code ignored;
    link.socket.close(ignored);
    link.connected = false;
    link.decoder = frame_decoder();
    io.restart();
    io.poll();  // the aborted handlers
  }

  // One request and its reply, or nothing (no answer in time, a broken or
  // refused stream).
  std::optional<protocol::Frame> call(replication::ReplicaId id, FrameType type, std::span<const std::byte> payload,
                                      Clock::time_point deadline) {
    Link& link = *links[id];
    bool failed = false;
    sent = false;
    if (!link.connected) {
      bool finished = false;
      link.socket.async_connect(endpoints[id], [&](boost::system::error_code error) {
        finished = true;
        failed = bool(error);
      });
      if (!run_until(link, deadline, [&] { return finished; })) return std::nullopt;
      if (failed) {
        drop(link);
        return std::nullopt;
      }
      boost::system::error_code ignored;
      link.socket.set_option(tcp::no_delay(true), ignored);
      link.connected = true;
    }
    const std::uint64_t request_id = ++next_request_id;
    const std::vector<std::byte> frame = frame_of(type, request_id, payload);
    bool written = false;
    sent = true;  // from here on, the request may have reached the replica
    asio::async_write(link.socket, asio::buffer(frame), [&](boost::system::error_code error, std::size_t) {
      written = true;
      failed = bool(error);
    });
    if (!run_until(link, deadline, [&] { return written; })) return std::nullopt;
    if (failed) {
      drop(link);
      return std::nullopt;
    }
    for (;;) {
      while (auto reply = link.decoder.next()) {
        if (reply->request_id == request_id) return reply;  // earlier ones were given up on
      }
      if (!link.decoder.error().empty()) {
        drop(link);
        return std::nullopt;
      }
      bool read = false;
      std::size_t got = 0;
      link.socket.async_read_some(asio::buffer(buffer), [&](boost::system::error_code error, std::size_t n) {
        read = true;
        failed = bool(error);
        got = n;
      });
      if (!run_until(link, deadline, [&] { return read; })) return std::nullopt;
      if (failed) {
        drop(link);
        return std::nullopt;
      }
      link.decoder.feed(std::span(buffer.data(), got));
    }
  }

  asio::io_context io;
  std::vector<tcp::endpoint> endpoints;
  std::vector<std::unique_ptr<Link>> links;
  std::uint64_t next_request_id = 0;
  bool sent = false;  // the last call's request may have reached its replica
  replication::ReplicaId guess = 0;
  std::array<std::byte, 64 * 1024> buffer{};
};

std::optional<replication::ReplicaId> newest_primary(const std::vector<std::optional<ReplicaStatus>>& statuses) {
  std::optional<replication::ReplicaId> primary;
  for (replication::ReplicaId id = 0; id < statuses.size(); ++id) {
    const auto& status = statuses[id];
    if (status && status->role == replication::Role::primary &&
        (!primary || status->lead > statuses[*primary]->lead)) {
      primary = id;
    }
  }
  return primary;
}

ReplicaClient::ReplicaClient(std::vector<std::string> addresses) : impl_(std::make_unique<Impl>(std::move(addresses))) {}
ReplicaClient::~ReplicaClient() = default;

AppendOutcome ReplicaClient::append(const std::string& payload, std::chrono::milliseconds deadline,
                                    std::chrono::milliseconds per_try) {
  Impl& m = *impl_;
  const auto give_up_at = Clock::now() + deadline;
  const auto bytes = std::as_bytes(std::span(payload));
  for (std::size_t tries = 0; Clock::now() < give_up_at; ++tries) {
    const replication::ReplicaId id = m.guess;
    auto reply_frame = m.call(id, FrameType::append, bytes, std::min(give_up_at, Clock::now() + per_try));
    std::optional<AppendReply> reply;
    if (reply_frame && reply_frame->type == static_cast<std::uint8_t>(FrameType::append_reply)) {
      reply = decode_append_reply(reply_frame->payload);
    }
    if (reply && reply->status != AppendStatus::not_primary) return {reply->status, reply->seq, id, reply->lsn};
    m.guess = static_cast<replication::ReplicaId>((id + 1) % m.links.size());
    // Sent and no answer: the append may be in that replica's log. Unknown,
    // as a client of any replicated system must treat it.
    if (!reply && m.sent) return {AppendStatus::unknown, 0, replication::kNoReplica};
    // A round of refusals: no replica serves yet (an election is under way).
    if ((tries + 1) % m.links.size() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return {AppendStatus::unknown, 0, replication::kNoReplica};
}

AppendOutcome ReplicaClient::append_to(replication::ReplicaId id, const std::string& payload,
                                       std::chrono::milliseconds timeout) {
  auto frame = impl_->call(id, FrameType::append, std::as_bytes(std::span(payload)), Clock::now() + timeout);
  std::optional<AppendReply> reply;
  if (frame && frame->type == static_cast<std::uint8_t>(FrameType::append_reply)) reply = decode_append_reply(frame->payload);
  if (!reply) return {impl_->sent ? AppendStatus::unknown : AppendStatus::not_primary, 0, replication::kNoReplica};
  return {reply->status, reply->seq, id, reply->lsn};
}

std::optional<ReplicaStatus> ReplicaClient::status(replication::ReplicaId id, std::chrono::milliseconds timeout) {
  auto frame = impl_->call(id, FrameType::status, {}, Clock::now() + timeout);
  if (!frame || frame->type != static_cast<std::uint8_t>(FrameType::status_reply)) return std::nullopt;
  return decode_status(frame->payload);
}

std::optional<CallReply> ReplicaClient::call(replication::ReplicaId id, const ForwardedCall& call,
                                             std::chrono::milliseconds timeout) {
  auto frame = impl_->call(id, FrameType::call, encode_call(call), Clock::now() + timeout);
  if (!frame || frame->type != static_cast<std::uint8_t>(FrameType::call_reply)) return std::nullopt;
  return decode_call_reply(frame->payload);
}

}  // namespace fusee::replica
