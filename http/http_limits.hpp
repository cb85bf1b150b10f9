// Every limit of the HTTP server (http/http_server.hpp), in one place, each
// with why it is what it is. The body limit is the engine's
// (Config::http_body_bytes_max); everything else is here.
#pragma once

#include <chrono>
#include <cstddef>

namespace fusee::http {

// Connections served at once. Past it a new connection is answered 503
// (busy) and closed, so a flood of clients costs a refusal each rather than
// the descriptors the engine's log and run store need. A connection waiting
// on a run costs a socket, a parser with its small buffer and a timer, not
// a thread, so the cap is about descriptors and the kernel's socket memory
// rather than threads.
inline constexpr std::size_t kConnectionsMax = 16384;

// Connections one peer address may hold at once: past it, that address's
// new connections get 503, so one client (a flood of half-sent requests,
// a leak) cannot take every slot. Clients behind one proxy share its
// address; a load test from one machine gets this many.
inline constexpr std::size_t kPeerConnectionsMax = 4096;

// The last slots below kConnectionsMax go only to peers holding fewer than
// kReservePeerConnections: when many addresses flood at once, an operator's
// health check, a scrape of /metrics and a client with a few connections
// still get in.
inline constexpr std::size_t kReserveConnections = 1024;
inline constexpr std::size_t kReservePeerConnections = 16;

// How long a request may take to arrive. A new connection must send its
// request's header within kHeaderTimeout of connecting; a kept-alive one
// may stay silent kIdleTimeout between requests, and then has
// kHeaderTimeout for the header once its first byte came. The body has
// kBodyTimeout after the header (a megabyte at 35 KB/s). Past any of them
// the connection is closed without an answer: a client that sends slowly
// on purpose holds a slot for seconds, not for ever, and before any token
// is checked that is all it can hold.
inline constexpr auto kHeaderTimeout = std::chrono::seconds(10);
inline constexpr auto kIdleTimeout = std::chrono::seconds(30);
inline constexpr auto kBodyTimeout = std::chrono::seconds(30);
// Each write of an answer (or of a stream's chunks) must be taken by the
// client within this; one that stops reading is closed.
inline constexpr auto kWriteTimeout = std::chrono::seconds(30);

// Every limit above that a server may be given other values of (tests
// shrink them to see them hold; an embedding application may too).
struct ServerLimits {
  std::size_t connections_max = kConnectionsMax;
  std::size_t peer_connections_max = kPeerConnectionsMax;
  std::size_t reserve_connections = kReserveConnections;
  std::size_t reserve_peer_connections = kReservePeerConnections;
  std::chrono::milliseconds header_timeout = kHeaderTimeout;
  std::chrono::milliseconds idle_timeout = kIdleTimeout;
  std::chrono::milliseconds body_timeout = kBodyTimeout;
  std::chrono::milliseconds write_timeout = kWriteTimeout;
};

// Descriptors the server wants beside its connections (the engine's log
// segments, the run store's files, a relay's second socket). The server
// raises the process's soft RLIMIT_NOFILE to kConnectionsMax plus this, as
// far as the hard limit allows (http/http_server.cpp).
inline constexpr std::size_t kDescriptorsSpare = 4096;

// The most a request's header may take; past it the answer is 431. Beast's
// own default is 8 KiB; bearer tokens and proxies' headers need more.
inline constexpr std::size_t kHeaderBytesMax = 16 * 1024;

// Threads that serve the sockets: the machine's cores, and at least this
// many, so that one busy handler does not hold up every connection.
inline constexpr std::size_t kIoThreadsMin = 2;

// Threads for the routes that call the engine's blocking calls (a signal
// returns once its record is durable, a list reads every run): they run
// here so that they never hold the threads serving the sockets. Each mostly
// waits for a flush, and one flush answers every signal waiting on it, so a
// few dozen keep the log's group commit full; the routes that wait on a run
// (execute) take no thread at all.
inline constexpr std::size_t kBlockingThreads = 32;

// How often a stream with nothing new looks again, and how long it stays
// silent before an SSE comment checks that the client is still there.
inline constexpr auto kStreamPoll = std::chrono::milliseconds(5);
inline constexpr auto kStreamKeepAlive = std::chrono::seconds(15);

// The most of a stream's chunks written in one go: chunks that are there
// already go out together, up to this many bytes, rather than one write each.
inline constexpr std::size_t kStreamWriteBytesMax = 64 * 1024;

// What a relay (`fusee server` passing a call to a worker) reads from the
// worker at once before writing it on to the client.
inline constexpr std::size_t kRelayBufferBytes = 16 * 1024;

// After accept fails for want of descriptors (EMFILE, ENFILE), the server
// waits this long before accepting again instead of spinning; the
// connections that end meanwhile give descriptors back.
inline constexpr auto kAcceptRetry = std::chrono::milliseconds(50);
// Connections taken from the listen backlog at once, each time one is
// accepted: one a trip through the io_context's queue left the last of
// 1,024 clients that connect together behind a thousand rounds of every
// other connection's work (http_bench execute_1024 in memory mode: p99
// 1.1 s, p50 24 ms).
inline constexpr std::size_t kAcceptBurstMax = 256;

}  // namespace fusee::http
