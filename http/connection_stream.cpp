// Connection's streams: GET /v1/runs/{id}/streams/{name} as chunked NDJSON
// or server-sent events. The chunks there are written together; with none,
// a timer on the connection's strand looks again after kStreamPoll, so an
// open stream holds no thread. An SSE stream silent for kStreamKeepAlive
// gets a comment, which finds a client that went away. The stream ends the
// connection: at its end, when the client goes, or when the engine shuts
// down (the client sees the stream cut and resumes with ?from= or
// Last-Event-ID).
#include <fmt/format.h>

#include <boost/beast/core/buffers_cat.hpp>
#include <boost/json.hpp>

#include "http/connection.hpp"

namespace fusee::http {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace beast_http = beast::http;
using boost::system::error_code;
using Clock = std::chrono::steady_clock;

}  // namespace

Connection::Stream::Stream(StreamRequest request_in, StreamReader reader_in, const net::any_io_executor& executor,
                           unsigned version)
    : request(std::move(request_in)), reader(std::move(reader_in)), head{beast_http::status::ok, version},
      poll(executor) {}

void Connection::start_stream(const StreamRequest& stream, StreamReader reader) {
  stream_ = std::make_unique<Stream>(stream, std::move(reader), strand_, version_);
  auto& head = stream_->head;
  head.set(beast_http::field::content_type, stream.sse ? "text/event-stream" : "application/x-ndjson");
  head.set(beast_http::field::cache_control, "no-cache");
  head.chunked(true);
  head.keep_alive(false);
  arm(hub_.limits.write_timeout);
  beast_http::async_write_header(socket_, stream_->serializer, [self = shared_from_this()](error_code error, std::size_t) {
    self->disarm();
    if (error) return self->close();
    self->stream_->quiet_since = Clock::now();
    self->stream_next();
  });
}

void Connection::stream_next() {
  auto& stream = *stream_;
  stream.text.clear();
  bool ended = false;
  try {
    while (stream.text.size() < kStreamWriteBytesMax) {
      auto chunk = stream.reader.try_next();
      if (!chunk) break;
      auto value = boost::json::serialize(chunk->value);
      if (stream.request.sse) {
        fmt::format_to(std::back_inserter(stream.text), "id: {}\ndata: {}\n\n", chunk->offset, value);
      } else {
        fmt::format_to(std::back_inserter(stream.text), "{{\"offset\":{},\"value\":{}}}\n", chunk->offset, value);
      }
    }
    ended = stream.text.empty() && stream.reader.ended();
  } catch (const Error&) {
    stream.failed = true;  // the engine shut down or its log failed
  }
  auto written = [self = shared_from_this()](error_code error, std::size_t) { self->stream_written(error); };
  // Each write must be taken within the write timeout (disarmed in
  // stream_written); the wait for chunks below has none.
  arm(hub_.limits.write_timeout);
  if (!stream.text.empty()) {
    stream.quiet_since = Clock::now();
    net::async_write(socket_, beast_http::make_chunk(net::buffer(stream.text)), std::move(written));
    return;
  }
  if (stream.failed) return close();
  if (ended) {
    stream.ending = true;
    if (stream.request.sse) {
      stream.text = "event: end\ndata: {}\n\n";
      net::async_write(socket_, beast::buffers_cat(beast_http::make_chunk(net::buffer(stream.text)), beast_http::make_chunk_last()),
                       std::move(written));
    } else {
      net::async_write(socket_, beast_http::make_chunk_last(), std::move(written));
    }
    return;
  }
  if (stream.request.sse && Clock::now() - stream.quiet_since > kStreamKeepAlive) {
    stream.text = ": keep-alive\n\n";
    stream.quiet_since = Clock::now();
    net::async_write(socket_, beast_http::make_chunk(net::buffer(stream.text)), std::move(written));
    return;
  }
  disarm();
  stream.poll.expires_after(kStreamPoll);
  stream.poll.async_wait([self = shared_from_this()](error_code error) {
    if (!error) self->stream_next();  // cancelled: the connection closed
  });
}

void Connection::stream_written(error_code error) {
  disarm();
  if (error || stream_->ending || stream_->failed) return close();
  stream_next();
}

}  // namespace fusee::http
