// Streams in memory and local mode: offsets, reads from earliest, latest and an exact offset, the join of history and live chunks at every boundary, readers ended by close and by the run's end, unknown runs, and chunks across a reopen.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "engine/stream_feed.hpp"
#include "tests/engine/engine_harness.hpp"

using namespace fusee;
using namespace fusee::testing;

namespace {

const Signal<std::string> kNext{"next"};
const Signal<std::string> kGo{"go"};

// Writes one chunk per "next" signal (the signal's value) to stream "out",
// `count` times, then closes it; returns the offsets write() gave.
const WorkflowRef<int, std::vector<std::uint64_t>> kPublisher{"publisher"};

void register_publisher(Engine& engine) {
  engine.register_workflow(kPublisher, [](Ctx& ctx, int count) -> Task<std::vector<std::uint64_t>> {
    std::vector<std::uint64_t> offsets;
    for (int i = 0; i < count; ++i) {
      std::optional<std::string> value = co_await ctx.wait_for(kNext);
      offsets.push_back(co_await ctx.stream("out").write(value.value_or("<none>")));
    }
    co_await ctx.stream("out").close();
    co_return offsets;
  });
}

std::string chunk_value(std::uint64_t offset) { return "chunk-" + std::to_string(offset); }

void send_chunks(Engine& engine, const std::string& id, std::uint64_t from, std::uint64_t to) {
  for (std::uint64_t offset = from; offset < to; ++offset) engine.signal(id, kNext, chunk_value(offset));
}

std::vector<std::uint64_t> offsets_from(std::uint64_t from, std::uint64_t to) {
  std::vector<std::uint64_t> offsets;
  for (std::uint64_t offset = from; offset < to; ++offset) offsets.push_back(offset);
  return offsets;
}

// Reads to the end; at most `limit` chunks so a reader that never ends fails.
std::vector<StreamChunk> drain(const std::shared_ptr<StreamReader>& reader, std::size_t limit = 1000) {
  std::vector<StreamChunk> chunks;
  while (std::optional<StreamChunk> chunk = next_of(reader)) {
    chunks.push_back(std::move(*chunk));
    REQUIRE(chunks.size() <= limit);
  }
  CHECK(reader->ended());
  return chunks;
}

std::vector<std::uint64_t> offsets_of(const std::vector<StreamChunk>& chunks) {
  std::vector<std::uint64_t> offsets;
  for (const StreamChunk& chunk : chunks) offsets.push_back(chunk.offset);
  return offsets;
}

// Every chunk carries the value written at its offset.
void check_values(const std::vector<StreamChunk>& chunks) {
  for (const StreamChunk& chunk : chunks) {
    CAPTURE(chunk.offset);
    CHECK(chunk.value == boost::json::value(chunk_value(chunk.offset)));
  }
}

}  // namespace

TEST_SUITE("unit") {
TEST_CASE_TEMPLATE("write returns consecutive offsets and a reader from earliest gets every chunk, then the end", M,
                   InMemory, OnDisk, Remote) {
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  register_publisher(*engine);

  (void)engine->start(kPublisher, "p-1", 5);
  send_chunks(*engine, "p-1", 0, 5);
  CHECK(result_of(engine, kPublisher, "p-1") == offsets_from(0, 5));

  auto reader = open_reader(*engine, "p-1", "out", StreamFrom::earliest());
  std::vector<StreamChunk> chunks = drain(reader);
  CHECK(offsets_of(chunks) == offsets_from(0, 5));
  check_values(chunks);
  CHECK_FALSE(reader->try_next().has_value());
}

TEST_CASE_TEMPLATE("a reader at an exact offset starts there", M, InMemory, OnDisk, Remote) {
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  register_publisher(*engine);

  (void)engine->start(kPublisher, "p-1", 5);
  send_chunks(*engine, "p-1", 0, 5);
  (void)result_of(engine, kPublisher, "p-1");

  for (std::uint64_t from = 0; from <= 5; ++from) {
    CAPTURE(from);
    std::vector<StreamChunk> chunks = drain(open_reader(*engine, "p-1", "out", StreamFrom::at(from)));
    CHECK(offsets_of(chunks) == offsets_from(from, 5));
    check_values(chunks);
  }
}

TEST_CASE_TEMPLATE("a reader from latest gets only the chunks written after it opened", M, InMemory, OnDisk, Remote) {
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  register_publisher(*engine);

  (void)engine->start(kPublisher, "p-1", 4);
  auto tracker = open_reader(*engine, "p-1", "out", StreamFrom::earliest());
  send_chunks(*engine, "p-1", 0, 2);
  REQUIRE(next_of(tracker).value().offset == 0);
  REQUIRE(next_of(tracker).value().offset == 1);  // chunks 0 and 1 are there; chunk 2 waits for a signal

  auto latest = open_reader(*engine, "p-1", "out", StreamFrom::latest());
  CHECK_FALSE(latest->try_next().has_value());
  send_chunks(*engine, "p-1", 2, 4);
  std::vector<StreamChunk> chunks = drain(latest);
  CHECK(offsets_of(chunks) == offsets_from(2, 4));
  check_values(chunks);
}

TEST_CASE_TEMPLATE("readers opened at every offset and every point of the writing get their offsets exactly once", M,
                   InMemory, OnDisk, Remote) {
  // A stream of N chunks written one per signal. At each point k (chunks
  // 0..k-1 readable, chunk k not yet written) and again while chunk k is on
  // its way, readers open at every offset 0..N, at earliest and at latest.
  // Some read their history at once and then wait at the live edge, others
  // read nothing until the end. Each must get exactly from..N-1.
  constexpr std::uint64_t N = 6;
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  register_publisher(*engine);

  struct Opened {
    std::string label;
    std::uint64_t from = 0;        // the first offset it must get
    bool from_or_next = false;     // latest opened while a chunk was on its way: from or from + 1
    std::shared_ptr<StreamReader> reader;
    std::vector<StreamChunk> got;
  };
  std::vector<Opened> readers;
  auto open_all = [&](std::uint64_t point, bool pinned) {
    const std::string when = (pinned ? "at point " : "racing chunk ") + std::to_string(point);
    for (std::uint64_t from = 0; from <= N; ++from) {
      Opened opened{"at(" + std::to_string(from) + ") " + when, from, false,
                    open_reader(*engine, "p-1", "out", StreamFrom::at(from)), {}};
      if (pinned && from % 2 == 0) {
        // Read the history now (chunks from..point-1 are readable), then sit at the live edge.
        for (std::uint64_t offset = from; offset < point; ++offset) {
          std::optional<StreamChunk> chunk = next_of(opened.reader);
          REQUIRE_MESSAGE(chunk.has_value(), opened.label << " ended early");
          opened.got.push_back(std::move(*chunk));
        }
      }
      readers.push_back(std::move(opened));
    }
    readers.push_back({"earliest " + when, 0, false, open_reader(*engine, "p-1", "out", StreamFrom::earliest()), {}});
    readers.push_back(
        {"latest " + when, point, !pinned, open_reader(*engine, "p-1", "out", StreamFrom::latest()), {}});
  };

  (void)engine->start(kPublisher, "p-1", static_cast<int>(N));
  auto tracker = open_reader(*engine, "p-1", "out", StreamFrom::earliest());
  for (std::uint64_t point = 0;; ++point) {
    open_all(point, true);
    if (point == N) break;
    engine->signal("p-1", kNext, chunk_value(point));
    open_all(point, false);
    std::optional<StreamChunk> chunk = next_of(tracker);
    REQUIRE(chunk.has_value());
    REQUIRE(chunk->offset == point);
  }
  CHECK(result_of(engine, kPublisher, "p-1") == offsets_from(0, N));
  CHECK_FALSE(next_of(tracker).has_value());

  for (Opened& opened : readers) {
    CAPTURE(opened.label);
    for (StreamChunk& chunk : drain(opened.reader)) opened.got.push_back(std::move(chunk));
    std::uint64_t from = opened.from;
    if (opened.from_or_next && (opened.got.empty() || opened.got.front().offset != from)) ++from;
    CHECK(offsets_of(opened.got) == offsets_from(from, N));
    check_values(opened.got);
  }
}

TEST_CASE_TEMPLATE("closing a stream ends a reader waiting for the next chunk while the run goes on", M, InMemory,
                   OnDisk, Remote) {
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  const WorkflowRef<int, std::string> ref{"close-then-wait"};
  engine->register_workflow(ref, [](Ctx& ctx, int) -> Task<std::string> {
    co_await ctx.stream("out").write(std::string("only"));
    (void)co_await ctx.wait_for(kGo);
    co_await ctx.stream("out").close();
    (void)co_await ctx.wait_for(kGo);
    co_return "done";
  });

  (void)engine->start(ref, "c-1", 0);
  auto reader = open_reader(*engine, "c-1", "out", StreamFrom::earliest());
  std::optional<StreamChunk> first = next_of(reader);
  REQUIRE(first.has_value());
  CHECK(first->value == boost::json::value("only"));

  Background<std::optional<StreamChunk>> waiting([reader] { return reader->next(); });
  CHECK_FALSE(waiting.ready(50ms));  // nothing more was written
  engine->signal("c-1", kGo, std::string("close it"));
  CHECK_FALSE(waiting.get().has_value());
  CHECK(reader->ended());
  CHECK(engine->list_runs().at(0).status == RunStatus::running);

  engine->signal("c-1", kGo, std::string("finish"));
  CHECK(result_of(engine, ref, "c-1") == "done");
}

TEST_CASE_TEMPLATE("a run that finishes ends the readers of a stream it never closed", M, InMemory, OnDisk, Remote) {
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  const WorkflowRef<int, int> ref{"write-and-return"};
  engine->register_workflow(ref, [](Ctx& ctx, int) -> Task<int> {
    co_await ctx.stream("out").write(std::string("chunk-0"));
    (void)co_await ctx.wait_for(kGo);
    co_return 1;
  });

  (void)engine->start(ref, "w-1", 0);
  auto reader = open_reader(*engine, "w-1", "out", StreamFrom::earliest());
  REQUIRE(next_of(reader).value().offset == 0);
  Background<std::optional<StreamChunk>> waiting([reader] { return reader->next(); });
  engine->signal("w-1", kGo, std::string("finish"));
  CHECK(result_of(engine, ref, "w-1") == 1);
  CHECK_FALSE(waiting.get().has_value());
  CHECK(offsets_of(drain(open_reader(*engine, "w-1", "out", StreamFrom::earliest()))) == offsets_from(0, 1));
}

TEST_CASE_TEMPLATE("each named stream of a run has its own offsets", M, InMemory, OnDisk, Remote) {
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  const WorkflowRef<int, std::vector<std::uint64_t>> ref{"two-streams"};
  engine->register_workflow(ref, [](Ctx& ctx, int) -> Task<std::vector<std::uint64_t>> {
    std::vector<std::uint64_t> offsets;
    offsets.push_back(co_await ctx.stream("a").write(std::string("chunk-0")));
    offsets.push_back(co_await ctx.stream("b").write(std::string("chunk-0")));
    offsets.push_back(co_await ctx.stream("a").write(std::string("chunk-1")));
    co_await ctx.stream("a").close();
    co_await ctx.stream("b").close();
    co_return offsets;
  });

  (void)engine->start(ref, "s-1", 0);
  CHECK(result_of(engine, ref, "s-1") == std::vector<std::uint64_t>{0, 0, 1});
  std::vector<StreamChunk> a = drain(open_reader(*engine, "s-1", "a", StreamFrom::earliest()));
  std::vector<StreamChunk> b = drain(open_reader(*engine, "s-1", "b", StreamFrom::earliest()));
  CHECK(offsets_of(a) == offsets_from(0, 2));
  CHECK(offsets_of(b) == offsets_from(0, 1));
  check_values(a);
  check_values(b);
}

TEST_CASE_TEMPLATE("a reader waiting when the engine shuts down is released with shut_down", M, InMemory, OnDisk, Remote) {
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  register_publisher(*engine);

  (void)engine->start(kPublisher, "p-1", 3);
  auto reader = open_reader(*engine, "p-1", "out", StreamFrom::earliest());
  Background<std::optional<StreamChunk>> waiting([reader] { return reader->next(); });
  CHECK_FALSE(waiting.ready(20ms));
  engine->shutdown();
  error_message(errc::shut_down, [&] { (void)waiting.get(); });
}

TEST_CASE_TEMPLATE("reading a stream of an unknown run throws not_found", M, InMemory, OnDisk, Remote) {
  EngineHarness harness(M::mode);
  auto engine = harness.open();
  // Either read_stream or the first next() may say so.
  error_message(errc::not_found, [&] { (void)next_of(open_reader(*engine, "nobody-17", "out", StreamFrom::earliest())); });
}

TEST_CASE("local mode: chunks survive a reopen and the replayed run appends after them without duplicates") {
  EngineHarness harness(Mode::local);
  {
    auto engine = harness.open();
    register_publisher(*engine);
    (void)engine->start(kPublisher, "p-1", 4);
    auto tracker = open_reader(*engine, "p-1", "out", StreamFrom::earliest());
    send_chunks(*engine, "p-1", 0, 2);
    REQUIRE(next_of(tracker).value().offset == 0);
    REQUIRE(next_of(tracker).value().offset == 1);
    engine->shutdown();
  }
  auto engine = harness.open();
  register_publisher(*engine);
  auto reader = open_reader(*engine, "p-1", "out", StreamFrom::earliest());
  REQUIRE(next_of(reader).value().offset == 0);
  REQUIRE(next_of(reader).value().offset == 1);
  send_chunks(*engine, "p-1", 2, 4);
  CHECK(result_of(engine, kPublisher, "p-1") == offsets_from(0, 4));
  std::vector<StreamChunk> rest = drain(reader);
  CHECK(offsets_of(rest) == offsets_from(2, 4));
  check_values(rest);
  std::vector<StreamChunk> all = drain(open_reader(*engine, "p-1", "out", StreamFrom::earliest()));
  CHECK(offsets_of(all) == offsets_from(0, 4));
  check_values(all);
}
TEST_CASE("a stream read that ends on an error says which: a retry (shut_down, unavailable) or a loss (storage)") {
  // unavailable: the replica stopped leading (replicated mode), and the
  // read may go on through the new primary; a reader that saw storage
  // would take the data for lost.
  struct Ending {
    std::error_code error;
    errc expected;
  };
  for (const Ending& ending : {Ending{make_error_code(errc::unavailable), errc::unavailable},
                               Ending{make_error_code(errc::shut_down), errc::shut_down},
                               Ending{std::make_error_code(std::errc::io_error), errc::storage}}) {
    CAPTURE(ending.error.message());
    auto feed = std::make_shared<detail::StreamFeed>();
    feed->push(StreamChunk{0, boost::json::value(1)});
    feed->end(ending.error);
    StreamReader reader(feed);
    REQUIRE(reader.next().has_value());  // what came before the end is read first
    try {
      (void)reader.next();
      FAIL("the read did not fail");
    } catch (const Error& error) {
      CHECK(error.error() == ending.expected);
    }
  }
}
}
