// The primary's side of the run store's transfer (hosting/store_sender.hpp)
// against callers that misbehave: a second open replaces the first (whose
// reads are then refused, never served from another copy), another
// cluster's open evicts nothing, a read names a file or range not in the
// copy, the bytes do not decode. Over a real RocksDB store written to
// throughout: a fetch while the store changes gets a store that opens and
// holds everything written before the open, and two fetches at once each
// either get such a store or fail saying to start again -- never a mix.
#include <doctest/doctest.h>

#include <atomic>
#include <thread>

#include "engine/run_store.hpp"
#include "replica/store_transfer.hpp"
#include "hosting/store_sender.hpp"
#include "tests/support/result_checks.hpp"
#include "tests/support/temp_dir.hpp"
#include "wal/io/posix_file_system.hpp"

namespace fusee::hosting {
namespace {

using replica::TransferAnswer;
using replica::TransferOp;
using replica::TransferRequest;
using testing::ok_or_fail;
using testing::value_or_fail;

std::string run_id(int n) { return "run-" + std::to_string(n); }
std::string streams_of(int n) { return "streams of run " + std::to_string(n) + std::string(200, 's'); }

// Writes runs [from, to) as a replica's applier would: each batch with
// where the store stands.
void write_runs(engine::RunStore& store, int from, int to) {
  for (int n = from; n < to; ++n) {
    engine::RunStore::Batch batch;
    batch.put_streams(run_id(n), streams_of(n));
    batch.put_replica_applied({.seq = static_cast<std::uint64_t>(n) + 1, .records = 1, .lsn = 1});
    ok_or_fail(store.write(std::move(batch)));
  }
}

// The sender's answer to `request`, decoded.
TransferAnswer ask(StoreSender& sender, const TransferRequest& request) {
  auto answer = replica::decode_transfer_answer(sender.answer(replica::encode_transfer_request(request)));
  REQUIRE(answer.has_value());
  return *answer;
}

// A transfer call that reaches `sender` without a network.
replica::TransferCall direct_call(StoreSender& sender) {
  return [&sender](const TransferRequest& request) -> std::optional<replica::CallReply> {
    return replica::CallReply{replica::CallPart::last, sender.answer(replica::encode_transfer_request(request))};
  };
}

// A store fetched into `dir`/runs opens, and holds runs [0, runs).
void check_fetched(io::FileSystem& fs, const std::string& dir, int runs) {
  auto store = value_or_fail(engine::RunStore::open_read_only(dir, fs));
  for (int n = 0; n < runs; ++n) {
    auto streams = value_or_fail(store->streams(run_id(n)));
    REQUIRE(streams.has_value());
    CHECK(*streams == streams_of(n));
  }
}

struct SenderOverStore {
  SenderOverStore() {
    ok_or_fail(fs.create_dir(dir.sub("primary")));
    std::shared_ptr<engine::RunStore> opened = value_or_fail(engine::RunStore::open(dir.sub("primary"), nullptr, &fs));
    store = opened;
    sender = std::make_unique<StoreSender>(fs, store, "c");
  }
  testing::TempDir dir;
  io::PosixFileSystem fs;
  std::shared_ptr<engine::RunStore> store;
  std::unique_ptr<StoreSender> sender;
};

TEST_SUITE("unit") {
  TEST_CASE("store sender: a second open replaces the first; stale, foreign, outside and undecodable requests are "
            "refused") {
    SenderOverStore primary;
    write_runs(*primary.store, 0, 50);
    StoreSender& sender = *primary.sender;
    CHECK(sender.hold_below() == UINT64_MAX);

    const TransferAnswer first = ask(sender, {.op = TransferOp::open, .cluster = "c"});
    REQUIRE(first.manifest.has_value());
    CHECK(first.manifest->applied == 50);
    CHECK(sender.hold_below() == 50);  // the log keeps what this copy's replica will need
    REQUIRE_FALSE(first.manifest->files.empty());
    const replica::TransferFile file = first.manifest->files.front();

    // Another cluster's open is refused and evicts nothing.
    const TransferAnswer foreign = ask(sender, {.op = TransferOp::open, .cluster = "other"});
    CHECK(foreign.error.find("cluster c, not other") != std::string::npos);
    const auto first_read = ask(sender, {.op = TransferOp::read,
                                         .session = first.manifest->session,
                                         .file = file.name,
                                         .offset = 0,
                                         .bytes = static_cast<std::uint32_t>(std::min<std::uint64_t>(file.bytes, 100))});
    CHECK(first_read.chunk.has_value());

    // A second open replaces the first: the first's reads are refused.
    write_runs(*primary.store, 50, 60);
    const TransferAnswer second = ask(sender, {.op = TransferOp::open, .cluster = "c"});
    REQUIRE(second.manifest.has_value());
    CHECK(second.manifest->session != first.manifest->session);
    CHECK(second.manifest->applied == 60);
    const auto stale = ask(sender, {.op = TransferOp::read, .session = first.manifest->session, .file = file.name,
                                    .offset = 0, .bytes = 1});
    CHECK_FALSE(stale.chunk.has_value());
    CHECK(stale.error.find("no such transfer") != std::string::npos);

    // Reads of what the copy does not hold.
    const std::uint64_t session = second.manifest->session;
    const replica::TransferFile& named = second.manifest->files.front();
    for (const std::string& name : {std::string("../fusee.lock"), std::string("/etc/passwd"), std::string("LOCK"),
                                    named.name + "x"}) {
      CAPTURE(name);
      const auto outside = ask(sender, {.op = TransferOp::read, .session = session, .file = name, .bytes = 1});
      CHECK_FALSE(outside.chunk.has_value());
      CHECK(outside.error.find("has no file") != std::string::npos);
    }
    struct Range {
      std::uint64_t offset;
      std::uint32_t bytes;
    };
    for (const Range range : {Range{named.bytes + 1, 0}, Range{named.bytes, 1}, Range{UINT64_MAX, 2},
                              Range{0, static_cast<std::uint32_t>(replica::kChunkBytesMax + 1)}}) {
      CAPTURE(range.offset);
      CAPTURE(range.bytes);
      const auto outside = ask(sender, {.op = TransferOp::read, .session = session, .file = named.name,
                                        .offset = range.offset, .bytes = range.bytes});
      CHECK_FALSE(outside.chunk.has_value());
      CHECK(outside.error.find("is not in it") != std::string::npos);
    }
    // Bytes that are no request.
    for (const std::string& junk : {std::string(), std::string("\x07"), std::string(64, '\xff')}) {
      auto bytes = std::as_bytes(std::span(junk));
      auto answer = replica::decode_transfer_answer(sender.answer(bytes));
      REQUIRE(answer.has_value());
      CHECK(answer->error.find("does not decode") != std::string::npos);
    }
    // The session survived all of that; a close ends it.
    const auto read = ask(sender, {.op = TransferOp::read, .session = session, .file = named.name, .bytes = 1});
    CHECK(read.chunk.has_value());
    CHECK(ask(sender, {.op = TransferOp::close, .session = session}).closed);
    const auto closed = ask(sender, {.op = TransferOp::read, .session = session, .file = named.name, .bytes = 1});
    CHECK(closed.error.find("no such transfer") != std::string::npos);
  }

  TEST_CASE("store sender: fetched while the store is written to, alone or two at once, a store opens whole or the "
            "fetch fails saying to start again") {
    SenderOverStore primary;
    constexpr int kBefore = 400;
    write_runs(*primary.store, 0, kBefore);
    // Written to throughout, as a primary's store is: runs [0, written) are.
    std::atomic<int> written{kBefore};
    struct Writer {
      std::atomic<bool> stop{false};
      std::thread thread;
      void join() {
        stop = true;
        if (thread.joinable()) thread.join();
      }
      ~Writer() { join(); }
    } writer;
    writer.thread = std::thread([&] {
      while (!writer.stop) {
        const int n = written.load();
        write_runs(*primary.store, n, n + 10);
        written = n + 10;
      }
    });

    SUBCASE("one fetch") {
      std::string problem;
      const std::string into = primary.dir.sub("one");
      ok_or_fail(primary.fs.create_dir(into));
      const int before_open = written.load();
      auto fetched = replica::fetch_store(primary.fs, direct_call(*primary.sender), "c", io::join_path(into, "runs"),
                                          &problem);
      INFO(problem);
      REQUIRE(fetched.has_value());
      CHECK(fetched->applied >= static_cast<std::uint64_t>(before_open));
      writer.join();
      check_fetched(primary.fs, into, before_open);
      auto store = value_or_fail(engine::RunStore::open_read_only(into, primary.fs));
      // Where the copy stands is at least where the manifest said.
      CHECK(value_or_fail(store->replica_applied()).seq >= fetched->applied);
    }
    SUBCASE("two fetches at once, each evicting the other's copy") {
      struct Outcome {
        std::string dir;
        int before_open = 0;
        bool fetched = false;
        std::string problem;
        int tries = 0;
      };
      std::vector<Outcome> outcomes(2);
      std::vector<std::thread> fetchers;
      for (std::size_t i = 0; i < outcomes.size(); ++i) {
        outcomes[i].dir = primary.dir.sub("fetch-" + std::to_string(i));
        fetchers.emplace_back([&, i] {
          Outcome& outcome = outcomes[i];
          // Each tries a few times, as `fusee replica rebuild` does.
          for (outcome.tries = 1; outcome.tries <= 5 && !outcome.fetched; ++outcome.tries) {
            ok_or_fail(io::remove_tree(primary.fs, outcome.dir));
            ok_or_fail(primary.fs.create_dir(outcome.dir));
            outcome.before_open = written.load();
            outcome.problem.clear();
            outcome.fetched = replica::fetch_store(primary.fs, direct_call(*primary.sender), "c",
                                                   io::join_path(outcome.dir, "runs"), &outcome.problem)
                                  .has_value();
          }
        });
      }
      for (auto& fetcher : fetchers) fetcher.join();
      writer.join();
      for (const Outcome& outcome : outcomes) {
        CAPTURE(outcome.dir);
        CAPTURE(outcome.tries);
        if (outcome.fetched) {
          check_fetched(primary.fs, outcome.dir, outcome.before_open);
        } else {
          CHECK(outcome.problem.find("start again") != std::string::npos);
        }
      }
      MESSAGE("two fetches at once: " << outcomes[0].fetched + outcomes[1].fetched << " of 2 fetched");
    }
  }
}

}  // namespace
}  // namespace fusee::hosting
