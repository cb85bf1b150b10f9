#include "engine/remote_sink.hpp"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "server/protocol/frame.hpp"
#include "server/protocol/messages.hpp"
#include "wal/errc.hpp"

namespace fusee::engine {
namespace {

using server::MessageType;

int connect_to(const std::string& address, std::string& problem) {
  if (address.starts_with("unix:")) {
    auto path = address.substr(5);
    sockaddr_un where{};
    if (path.empty() || path.size() >= sizeof(where.sun_path)) {
      problem = fmt::format("'{}': the socket path is empty or too long", address);
      return -1;
    }
    where.sun_family = AF_UNIX;
    std::memcpy(where.sun_path, path.data(), path.size());
    int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&where), sizeof where) != 0) {
      problem = fmt::format("cannot connect to {}: {}", address, std::strerror(errno));
      if (fd >= 0) ::close(fd);
      return -1;
    }
    return fd;
  }
  auto colon = address.rfind(':');
  sockaddr_in where{};
  where.sin_family = AF_INET;
  std::string host = colon == std::string::npos ? "" : address.substr(0, colon);
  if (host.empty() || host == "localhost") host = "127.0.0.1";
  int port = -1;
  try {
    if (colon != std::string::npos) port = std::stoi(address.substr(colon + 1));
  } catch (const std::exception&) {
  }
  if (port <= 0 || port > 65535 || ::inet_pton(AF_INET, host.c_str(), &where.sin_addr) != 1) {
    problem = fmt::format("'{}': expected unix:PATH or IPv4-HOST:PORT", address);
    return -1;
  }
  where.sin_port = htons(static_cast<std::uint16_t>(port));
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&where), sizeof where) != 0) {
    problem = fmt::format("cannot connect to {}: {}", address, std::strerror(errno));
    if (fd >= 0) ::close(fd);
    return -1;
  }
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

class RemoteSink final : public JournalSink {
 public:
  RemoteSink(int fd, std::string address) : fd_(fd), address_(std::move(address)) {}
  ~RemoteSink() override {
    ::shutdown(fd_, SHUT_RDWR);
    if (reader_.joinable()) reader_.join();
    ::close(fd_);
  }

  // Hello, acquire, and wait for every lease.
  Result<std::uint32_t> handshake(const RemoteOptions& options, std::string& problem) {
    if (!send(MessageType::hello, 0, server::encode(server::Hello{options.token, options.worker}))) {
      problem = "the server closed the connection";
      return std::make_error_code(std::errc::io_error);
    }
    auto welcome = wait_frame(MessageType::welcome, problem);
    if (!welcome) return std::make_error_code(std::errc::io_error);
    auto decoded = server::decode_welcome(welcome->payload);
    if (!decoded || decoded->shard_count == 0) {
      problem = "a malformed welcome from the server";
      return make_error_code(wal::errc::corrupt);
    }
    shards_ = decoded->shard_count;
    epochs_.assign(shards_, 0);
    next_lsn_ = std::vector<std::atomic<Lsn>>(shards_);
    durable_ = std::vector<std::atomic<Lsn>>(shards_);
    if (!send(MessageType::acquire, 0, server::encode(server::Acquire{0}))) {
      problem = "the server closed the connection";
      return std::make_error_code(std::errc::io_error);
    }
    for (std::uint32_t leased = 0; leased < shards_;) {
      auto frame = wait_frame(MessageType::lease, problem);
      if (!frame) return std::make_error_code(std::errc::io_error);
      auto lease = server::decode_lease(frame->payload);
      if (!lease || lease->shard >= shards_ || epochs_[lease->shard] != 0) {
        problem = "a malformed lease from the server";
        return make_error_code(wal::errc::corrupt);
      }
      epochs_[lease->shard] = lease->epoch;
      next_lsn_[lease->shard] = lease->durable_lsn;
      durable_[lease->shard] = lease->durable_lsn;
      ++leased;
    }
    reader_ = std::thread([this] { read_loop(); });
    return shards_;
  }

  Result<Lsn> append(ShardId shard, std::span<const std::byte> record) override {
    if (auto poisoned = poison()) return poisoned;
    std::lock_guard lock(send_mu_);
    auto lsn = next_lsn_[shard].load() + 1;
    server::Append message{shard, epochs_[shard], lsn, {record.begin(), record.end()}};
    if (!send_locked(MessageType::append, 0, server::encode(message))) {
      set_poison(std::make_error_code(std::errc::io_error), "the connection to the server broke");
      return poison();
    }
    next_lsn_[shard] = lsn;
    records_sent_++;
    return lsn;
  }
  Lsn durable_lsn(ShardId shard) const override { return durable_[shard].load(); }
  bool durable_at_once() const override { return false; }
  void set_listener(Listener listener) override {
    std::lock_guard lock(listener_mu_);
    listener_ = std::move(listener);
  }
  std::error_code poison() const override {
    std::lock_guard lock(state_mu_);
    return poison_;
  }
  Result<void> close() override {
    {
      std::unique_lock lock(state_mu_);
      state_cv_.wait(lock, [&] {
        if (poison_) return true;
        for (std::uint32_t shard = 0; shard < shards_; ++shard) {
          if (durable_[shard].load() < next_lsn_[shard].load()) return false;
        }
        return true;
      });
      if (poison_) return poison_;
    }
    for (std::uint32_t shard = 0; shard < shards_; ++shard) {
      (void)send(MessageType::release, 0, server::encode(server::Release{shard, epochs_[shard]}));
    }
    ::shutdown(fd_, SHUT_WR);
    if (reader_.joinable()) reader_.join();
    return ok();
  }
  Result<void> read(ShardId shard, Lsn first,
                    const std::function<void(Lsn, std::span<const std::byte>)>& visit) override {
    if (auto poisoned = poison()) return poisoned;
    std::uint64_t request = 0;
    {
      std::lock_guard lock(state_mu_);
      request = ++next_request_;
      reads_[request];
    }
    if (!send(MessageType::read, request, server::encode(server::Read{shard, epochs_[shard], first}))) {
      return std::make_error_code(std::errc::io_error);
    }
    for (;;) {
      std::vector<server::RecordsChunk> chunks;
      bool done = false;
      {
        std::unique_lock lock(state_mu_);
        auto& pending = reads_[request];
        state_cv_.wait(lock, [&] { return poison_ || pending.done || !pending.chunks.empty(); });
        if (poison_) return poison_;
        chunks.swap(pending.chunks);
        done = pending.done;
        if (done) reads_.erase(request);
      }
      for (const auto& chunk : chunks) {
        for (const auto& [lsn, bytes] : chunk.records) visit(lsn, bytes);
      }
      if (done) return ok();
    }
  }
  wal::LogStats stats() const override {
    wal::LogStats stats;
    stats.records_written = records_sent_.load();
    return stats;
  }

 private:
  struct PendingRead {
    std::vector<server::RecordsChunk> chunks;
    bool done = false;
  };

  bool send(MessageType type, std::uint64_t request, const std::vector<std::byte>& payload) {
    std::lock_guard lock(send_mu_);
    return send_locked(type, request, payload);
  }
  bool send_locked(MessageType type, std::uint64_t request, const std::vector<std::byte>& payload) {
    frame_.clear();
    server::encode_frame(static_cast<std::uint8_t>(type), request, payload, frame_);
    const std::byte* data = frame_.data();
    std::size_t left = frame_.size();
    while (left > 0) {
      auto sent = ::send(fd_, data, left, MSG_NOSIGNAL);
      if (sent < 0) {
        if (errno == EINTR) continue;
        return false;
      }
      data += sent;
      left -= static_cast<std::size_t>(sent);
    }
    return true;
  }

  // Before the reader thread runs: the next frame, which must be `expected`
  // (an error frame says why not).
  std::optional<server::Frame> wait_frame(MessageType expected, std::string& problem) {
    std::vector<std::byte> buffer(1 << 16);
    for (;;) {
      if (auto frame = decoder_.next()) {
        if (static_cast<MessageType>(frame->type) == expected) return frame;
        if (static_cast<MessageType>(frame->type) == MessageType::error) {
          auto error = server::decode_error(frame->payload);
          problem = error ? fmt::format("the server refused: {}: {}", error->code, error->message)
                          : "the server refused";
          return std::nullopt;
        }
        if (static_cast<MessageType>(frame->type) == MessageType::durable) continue;
        problem = fmt::format("the server sent {} where {} was due", server::message_type_name(
                                                                           static_cast<MessageType>(frame->type)),
                              server::message_type_name(expected));
        return std::nullopt;
      }
      if (!decoder_.error().empty()) {
        problem = "a bad frame from the server: " + decoder_.error();
        return std::nullopt;
      }
      auto got = ::recv(fd_, buffer.data(), buffer.size(), 0);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        problem = "the server closed the connection";
        return std::nullopt;
      }
      decoder_.feed(std::span(buffer.data(), static_cast<std::size_t>(got)));
    }
  }

  void read_loop() {
    std::vector<std::byte> buffer(1 << 16);
    for (;;) {
      while (auto frame = decoder_.next()) handle(*frame);
      if (!decoder_.error().empty()) {
        set_poison(make_error_code(wal::errc::corrupt), "a bad frame from the server: " + decoder_.error());
        return;
      }
      auto got = ::recv(fd_, buffer.data(), buffer.size(), 0);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        set_poison(make_error_code(wal::errc::closed), "the connection to the server closed");
        return;
      }
      decoder_.feed(std::span(buffer.data(), static_cast<std::size_t>(got)));
    }
  }

  void handle(const server::Frame& frame) {
    switch (static_cast<MessageType>(frame.type)) {
      case MessageType::durable: {
        auto durable = server::decode_durable(frame.payload);
        if (!durable || durable->shard >= shards_) return;
        auto& position = durable_[durable->shard];
        Lsn current = position.load();
        while (durable->lsn > current && !position.compare_exchange_weak(current, durable->lsn)) {
        }
        {
          std::lock_guard lock(state_mu_);
          state_cv_.notify_all();
        }
        notify(durable->shard);
        return;
      }
      case MessageType::records:
      case MessageType::read_end: {
        std::lock_guard lock(state_mu_);
        auto pending = reads_.find(frame.request_id);
        if (pending == reads_.end()) return;
        if (static_cast<MessageType>(frame.type) == MessageType::read_end) {
          pending->second.done = true;
        } else if (auto chunk = server::decode_records(frame.payload)) {
          pending->second.chunks.push_back(std::move(*chunk));
        }
        state_cv_.notify_all();
        return;
      }
      case MessageType::error: {
        auto error = server::decode_error(frame.payload);
        set_poison(make_error_code(wal::errc::closed),
                   error ? fmt::format("the server refused: {}: {}", error->code, error->message) : "refused");
        return;
      }
      default:
        return;
    }
  }

  void set_poison(std::error_code error, std::string why) {
    {
      std::lock_guard lock(state_mu_);
      if (poison_) return;
      poison_ = error;
      poison_text_ = std::move(why);
      state_cv_.notify_all();
    }
    for (std::uint32_t shard = 0; shard < shards_; ++shard) notify(shard);
  }
  void notify(ShardId shard) {
    Listener listener;
    {
      std::lock_guard lock(listener_mu_);
      listener = listener_;
    }
    if (listener) listener(shard);
  }

  int fd_;
  std::string address_;
  std::uint32_t shards_ = 0;
  std::vector<std::uint64_t> epochs_;
  std::vector<std::atomic<Lsn>> next_lsn_;  // the last LSN appended (under send_mu_)
  std::vector<std::atomic<Lsn>> durable_;
  std::atomic<std::uint64_t> records_sent_{0};
  server::FrameDecoder decoder_;
  std::thread reader_;
  std::mutex send_mu_;
  std::vector<std::byte> frame_;  // under send_mu_
  mutable std::mutex state_mu_;
  std::condition_variable state_cv_;
  std::error_code poison_;
  std::string poison_text_;
  std::uint64_t next_request_ = 0;
  std::map<std::uint64_t, PendingRead> reads_;
  std::mutex listener_mu_;
  Listener listener_;
};

}  // namespace

Result<std::unique_ptr<JournalSink>> connect_remote_sink(const RemoteOptions& options, std::uint32_t* shard_count,
                                                         std::string* problem) {
  std::string why;
  int fd = connect_to(options.address, why);
  if (fd < 0) {
    if (problem) *problem = why;
    return std::make_error_code(std::errc::io_error);
  }
  auto sink = std::make_unique<RemoteSink>(fd, options.address);
  auto shards = sink->handshake(options, why);
  if (!shards) {
    if (problem) *problem = why;
    return shards.error();
  }
  if (shard_count) *shard_count = *shards;
  return std::unique_ptr<JournalSink>(std::move(sink));
}

}  // namespace fusee::engine
