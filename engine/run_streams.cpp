// Streams: a chunk or a close journaled, and readers told once durable.
#include "engine/run.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <cmath>

#include "base/assert.hpp"
#include "engine/awakeable_token.hpp"
#include "engine/run_internal.hpp"
#include "engine/shard.hpp"
#include "wal/errc.hpp"
#include "fusee/limits.hpp"

namespace fusee::engine {

using namespace run_text;

bool Run::stream_write(std::string_view name, boost::json::value chunk, detail::Completion& completion) {
  auto position = begin_command(completion, "stream(...).write");
  const RecordedCommand* recorded = nullptr;
  switch (replay(position, "stream write", name, completion, recorded)) {
    case Replay::settled:
      return end_command();
    case Replay::matched:
      completion.value = recorded->records.front().number;
      complete(completion);
      return end_command();
    case Replay::none:
      break;
  }
  auto& stream = streams[std::string(name)];
  if (stream.close_written) {
    completion.error = std::make_exception_ptr(
        Error(errc::invalid_argument, fmt::format("run '{}': stream '{}' is closed", id_, name)));
    complete(completion);
    return end_command();
  }
  std::uint64_t offset = stream.chunks.size();
  stream.chunks.push_back(chunk);
  auto record = make_record(RecordKind::stream_chunk, position, name);
  record.number = offset;
  record.value = std::move(chunk);
  append(std::move(record), [self = shared_from_this(), name = std::string(name), offset] {
    self->on_stream_durable(name, offset + 1);
  });
  completion.value = offset;
  complete(completion);
  return end_command();
}

bool Run::stream_close(std::string_view name, detail::Completion& completion) {
  auto position = begin_command(completion, "stream(...).close");
  const RecordedCommand* recorded = nullptr;
  switch (replay(position, "stream close", name, completion, recorded)) {
    case Replay::settled:
      return end_command();
    case Replay::matched:
      complete(completion);
      return end_command();
    case Replay::none:
      break;
  }
  auto& stream = streams[std::string(name)];
  if (!stream.close_written) {
    stream.close_written = true;
    append(make_record(RecordKind::stream_closed, position, name),
           [self = shared_from_this(), name = std::string(name)] { self->on_stream_closed_durable(name); });
  } else {
    // Closing twice is harmless but still takes its position, so replay
    // sees the same sequence.
    append(make_record(RecordKind::stream_closed, position, name));
  }
  complete(completion);
  return end_command();
}

void Run::on_stream_durable(const std::string& name, std::uint64_t count) {
  auto& stream = streams[name];
  if (count <= stream.durable_count) return;
  stream.durable_count = count;
  for (auto& reader : stream.readers) {
    while (reader.next_offset < stream.durable_count) {
      reader.feed->push(StreamChunk{reader.next_offset, stream.chunks[reader.next_offset]});
      reader.next_offset++;
    }
  }
}

void Run::on_stream_closed_durable(const std::string& name) {
  auto& stream = streams[name];
  stream.closed = true;
  for (auto& reader : stream.readers) reader.feed->end();
  stream.readers.clear();
}

}  // namespace fusee::engine
