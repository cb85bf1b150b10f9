#include "sdk/facade/primary_router.hpp"

#include <fmt/format.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <array>

#include "protocol/address.hpp"
#include "protocol/frame.hpp"
#include "protocol/wire.hpp"
#include "remote/forwarded_call.hpp"
#include "replica/frame_writer.hpp"
#include "replica/replica_wire.hpp"

namespace fusee::facade {

namespace asio = boost::asio;
using asio::ip::tcp;
using Part = remote::ShardRouter::Part;

namespace {

std::vector<std::byte> bytes_of(const std::string& text) {
  const auto* data = reinterpret_cast<const std::byte*>(text.data());
  return {data, data + text.size()};
}

// Calls queued for one connection: its writer's bound is the caller's
// memory, as a split worker's calls to the server are.
constexpr std::size_t kQueuedBytesMax = 256u << 20;

}  // namespace

struct PrimaryRouter::Link : std::enable_shared_from_this<Link> {
  Link(asio::io_context& io, replication::ReplicaId target, std::string address)
      : target(target), address(std::move(address)), socket(io), writer(socket) {}
  replication::ReplicaId target;
  std::string address;
  tcp::socket socket;
  replica::FrameWriter writer;
  protocol::FrameDecoder decoder = replica::frame_decoder();
  std::array<std::byte, 64 * 1024> buffer{};
  bool connected = false;
  bool closed = false;
  std::map<std::uint64_t, OnReply> calls;  // queued or sent, by request id
};

PrimaryRouter::PrimaryRouter(std::vector<std::string> addresses, std::chrono::milliseconds without_primary_max)
    : addresses_(std::move(addresses)), without_primary_max_(without_primary_max), work_(asio::make_work_guard(io_)) {
  thread_ = std::thread([this] { io_.run(); });
}

PrimaryRouter::~PrimaryRouter() { stop(); }

void PrimaryRouter::stop() {
  {
    std::lock_guard lock(mu_);
    if (!stopping_) {
      stopping_ = true;
      // After every call already handed over: those fail here.
      asio::post(io_, [this] {
        stopped_ = true;
        no_primary_.cancel();
        drop_link(Part::failed, "the engine is shut down");
      });
    }
  }
  work_.reset();
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

void PrimaryRouter::primary_is(replication::ReplicaId primary) {
  std::lock_guard lock(mu_);
  if (stopping_) return;
  asio::post(io_, [this, primary] {
    if (stopped_ || primary == primary_) return;
    primary_ = primary;
    // A call out to a deposed primary is not awaited: a stopped machine
    // never answers, and one partitioned away answers only once it learns
    // of its step-down. kNoReplica (a failover under way) keeps them: the
    // same primary may be elected again.
    if (primary != replication::kNoReplica && link_ && link_->target != primary) {
      drop_link(link_->connected ? Part::lost : Part::no_holder,
                fmt::format("replica {} is no longer the primary", link_->target));
    }
    if (primary != replication::kNoReplica) {
      no_primary_.cancel();
      return;
    }
    // Cut off, this replica may never hear the next primary, nor the last
    // one answer: its calls out are lost after a while, not held for ever.
    no_primary_.expires_after(without_primary_max_);
    no_primary_.async_wait([this](boost::system::error_code error) {
      if (error || stopped_ || primary_ != replication::kNoReplica) return;
      drop_link(Part::lost, fmt::format("no primary known for {} ms", without_primary_max_.count()));
    });
  });
}

void PrimaryRouter::forward(wal::ShardId shard, std::vector<std::byte> body, OnReply on_reply) {
  std::unique_lock lock(mu_);
  if (stopping_) {
    lock.unlock();
    on_reply(Part::failed, bytes_of("the engine is shut down"));
    return;
  }
  asio::post(io_, [this, shard, body = std::move(body), on_reply = std::move(on_reply)]() mutable {
    if (stopped_) return on_reply(Part::failed, bytes_of("the engine is shut down"));
    if (primary_ == replication::kNoReplica || primary_ >= addresses_.size()) {
      return on_reply(Part::no_holder, bytes_of("no primary is known yet (a failover is under way)"));
    }
    if (!link_) open_link();
    const std::uint64_t request = next_request_++;
    auto frame = replica::frame_of(replica::FrameType::call, request, replica::encode_call({shard, std::move(body)}));
    if (!link_->writer.push(std::move(frame), kQueuedBytesMax)) {
      return on_reply(Part::no_holder, bytes_of("too many calls wait to be sent to the primary"));
    }
    link_->calls.emplace(request, std::move(on_reply));
    if (link_->connected) pump(link_);
  });
}

void PrimaryRouter::open_link() {
  auto link = std::make_shared<Link>(io_, primary_, addresses_[primary_]);
  link_ = link;
  tcp::endpoint endpoint;
  try {
    endpoint = protocol::parse_address(link->address, "Config::replicas", false).tcp;
  } catch (const std::exception& error) {
    // Checked when the engine opened: not reached.
    asio::post(io_, [this, link, why = std::string(error.what())] { fail(link, Part::no_holder, why); });
    return;
  }
  link->socket.async_connect(endpoint, [this, link](boost::system::error_code error) {
    if (link->closed) return;
    if (error) {
      return fail(link, Part::no_holder,
                  fmt::format("cannot reach the primary, replica {} ({}): {}", link->target, link->address,
                              error.message()));
    }
    boost::system::error_code ignored;
    link->socket.set_option(tcp::no_delay(true), ignored);
    // A connection a middlebox dropped while idle is found within about
    // 8 s (5 s idle, then 3 probes a second apart), rather than holding a
    // result's call for ever.
    link->socket.set_option(asio::socket_base::keep_alive(true), ignored);
    const int idle_s = 5, interval_s = 1, probes = 3;
    ::setsockopt(link->socket.native_handle(), IPPROTO_TCP, TCP_KEEPIDLE, &idle_s, sizeof idle_s);
    ::setsockopt(link->socket.native_handle(), IPPROTO_TCP, TCP_KEEPINTVL, &interval_s, sizeof interval_s);
    ::setsockopt(link->socket.native_handle(), IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof probes);
    link->connected = true;
    read(link);
    pump(link);
  });
}

void PrimaryRouter::pump(const std::shared_ptr<Link>& link) {
  link->writer.pump(link, [this, link](boost::system::error_code error) {
    fail(link, Part::lost, fmt::format("the connection to the primary, replica {}, failed: {}", link->target,
                                       error.message()));
  });
}

void PrimaryRouter::read(const std::shared_ptr<Link>& link) {
  link->socket.async_read_some(asio::buffer(link->buffer), [this, link](boost::system::error_code error, std::size_t n) {
    if (link->closed) return;
    if (error) {
      return fail(link, Part::lost,
                  fmt::format("the primary, replica {}, closed the connection before answering", link->target));
    }
    link->decoder.feed(std::span(link->buffer.data(), n));
    while (auto frame = link->decoder.next()) {
      auto reply = frame->type == static_cast<std::uint8_t>(replica::FrameType::call_reply)
                       ? replica::decode_call_reply(frame->payload)
                       : std::nullopt;
      auto call = link->calls.find(frame->request_id);
      if (!reply || call == link->calls.end()) {
        return fail(link, Part::lost, fmt::format("the primary, replica {}, sent a reply that is not one",
                                                  link->target));
      }
      switch (reply->part) {
        case replica::CallPart::more:
          call->second(Part::more, std::move(reply->body));
          continue;
        case replica::CallPart::not_here: {
          auto on_reply = std::move(call->second);
          link->calls.erase(call);
          on_reply(Part::no_holder, std::move(reply->body));
          continue;
        }
        case replica::CallPart::last: {
          auto on_reply = std::move(call->second);
          link->calls.erase(call);
          // The primary stepped down before it knew the outcome: the next
          // primary's to tell (Engine::Impl::serve_forwarded).
          if (auto answer = remote::forwarded::from_bytes(reply->body)) {
            if (const auto* why = answer->if_contains("unknown"); why != nullptr && why->is_string()) {
              on_reply(Part::lost, bytes_of(fmt::format("the primary, replica {}, stepped down before answering: {}",
                                                        link->target, std::string_view(why->as_string()))));
              continue;
            }
          }
          on_reply(Part::last, std::move(reply->body));
          continue;
        }
      }
    }
    if (!link->decoder.error().empty()) {
      return fail(link, Part::lost,
                  fmt::format("the primary, replica {}, sent a bad frame: {}", link->target, link->decoder.error()));
    }
    read(link);
  });
}

void PrimaryRouter::fail(std::shared_ptr<Link> link, Part part, const std::string& why) {
  // `link` by value: it may be link_ itself, which is reset below.
  if (link->closed) return;
  link->closed = true;
  boost::system::error_code ignored;
  link->socket.close(ignored);
  link->writer.clear();
  if (link_ == link) link_.reset();
  // A call never sent is safe to send again, whatever happened to the link.
  auto calls = std::move(link->calls);
  link->calls.clear();
  for (auto& [request, on_reply] : calls) {
    on_reply(part == Part::lost && !link->connected ? Part::no_holder : part, bytes_of(why));
  }
}

void PrimaryRouter::drop_link(Part part, const std::string& why) {
  if (link_) fail(link_, part, why);
}

void ServeEveryShard::forward(wal::ShardId, std::vector<std::byte>, OnReply on_reply) {
  const std::string why = "a view's engine holds every shard: it forwards nothing";
  on_reply(Part::failed, std::vector<std::byte>(reinterpret_cast<const std::byte*>(why.data()),
                                                reinterpret_cast<const std::byte*>(why.data()) + why.size()));
}

}  // namespace fusee::facade
