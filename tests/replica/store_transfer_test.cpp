// The run store's transfer to a replica being rebuilt
// (replica/store_transfer.hpp), against a sender that lies: every answer
// that is not exactly the store asked for -- another cluster's, a name with
// a path, a chunk damaged, short, long, doubled or of another file, a store
// cut short, an error -- is refused with a reason, and nothing half-written
// is taken for a store. Putting the fetched store in place is crashed at
// every file-system operation: either store is in place after, never a mix.
#include <doctest/doctest.h>

#include <functional>
#include <map>
#include <set>
#include <string>

#include "base/crc32c.hpp"
#include "replica/store_transfer.hpp"
#include "tests/support/fault_file_system.hpp"
#include "tests/support/result_checks.hpp"

namespace fusee::replica {
namespace {

using testing::CrashOutcome;
using testing::FaultFileSystem;
using testing::ok_or_fail;
using testing::value_or_fail;

std::vector<std::byte> bytes_of_text(const std::string& text) {
  auto bytes = std::as_bytes(std::span(text));
  return {bytes.begin(), bytes.end()};
}

void put_file(io::FileSystem& fs, const std::string& path, const std::string& text) {
  auto file = value_or_fail(fs.open(path, {.write = true, .create = true}));
  CHECK(value_or_fail(file->write_at(0, bytes_of_text(text), io::WriteFlags::none)) == text.size());
  ok_or_fail(file->sync_data());
}

std::string text_of_file(io::FileSystem& fs, const std::string& path) {
  auto bytes = value_or_fail(io::read_file(fs, path));
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

// A sender of `files` for cluster "c"; `tamper` may change each answer.
struct FakeSender {
  std::map<std::string, std::string> files;
  std::string cluster = "c";
  std::function<void(const TransferRequest&, TransferAnswer&)> tamper;
  int reads = 0;
  bool closed = false;

  TransferCall call() {
    return [this](const TransferRequest& request) -> std::optional<CallReply> {
      TransferAnswer answer;
      if (request.op == TransferOp::open) {
        TransferManifest manifest{cluster, 7, 42, {}};
        for (const auto& [name, text] : files) manifest.files.push_back({name, text.size()});
        answer.manifest = manifest;
      } else if (request.op == TransferOp::read) {
        ++reads;
        const std::string& text = files.at(request.file);
        TransferChunk chunk{request.session, request.file, request.offset, 0,
                            bytes_of_text(text.substr(request.offset, request.bytes))};
        chunk.crc32c = crc32c(chunk.data);
        answer.chunk = chunk;
      } else {
        closed = true;
        answer.closed = true;
      }
      if (tamper) tamper(request, answer);
      return CallReply{CallPart::last, encode_transfer_answer(answer)};
    };
  }
};

// What fetch_store says of `sender`'s store (empty: it took it).
std::string refusal(FakeSender& sender) {
  FaultFileSystem fs;
  ok_or_fail(fs.create_dir("/r"));
  std::string problem;
  auto fetched = fetch_store(fs, sender.call(), "c", "/r/runs", &problem);
  if (fetched) return "";
  CHECK_FALSE(problem.empty());
  return problem;
}

FakeSender two_files() {
  FakeSender sender;
  sender.files["CURRENT"] = "MANIFEST-000005\n";
  sender.files["000009.sst"] = std::string(kChunkBytesMax + 12345, 'x');
  return sender;
}

TEST_SUITE("unit") {
  TEST_CASE("store transfer: requests and answers survive the wire; cut or trailing bytes do not decode") {
    const TransferRequest read{TransferOp::read, "", 99, "000009.sst", 1u << 20, 4096};
    const auto decoded = decode_transfer_request(encode_transfer_request(read));
    REQUIRE(decoded.has_value());
    const TransferRequest& request = *decoded;
    CHECK(request.op == TransferOp::read);
    CHECK(request.session == 99);
    CHECK(request.file == "000009.sst");
    CHECK(request.offset == (1u << 20));
    CHECK(request.bytes == 4096);
    TransferAnswer answer;
    answer.manifest = TransferManifest{"c", 7, 42, {{"CURRENT", 16}, {"000009.sst", 1000}}};
    auto bytes = encode_transfer_answer(answer);
    const auto back = decode_transfer_answer(bytes);
    REQUIRE(back.has_value());
    REQUIRE(back->manifest.has_value());
    CHECK(back->manifest->applied == 42);
    CHECK(back->manifest->files.size() == 2);
    CHECK(back->manifest->files[1].name == "000009.sst");
    for (std::size_t cut = 0; cut < bytes.size(); ++cut) {
      CHECK_FALSE(decode_transfer_answer(std::span(bytes).first(cut)).has_value());
    }
    bytes.push_back(std::byte{0});
    CHECK_FALSE(decode_transfer_answer(bytes).has_value());
    CHECK_FALSE(decode_transfer_request(std::vector<std::byte>{std::byte{9}}).has_value());
    CHECK_FALSE(decode_transfer_answer(std::vector<std::byte>{std::byte{'Z'}}).has_value());
  }

  TEST_CASE("store transfer: a store is fetched byte for byte, in chunks, each file synced") {
    FakeSender sender = two_files();
    FaultFileSystem fs;
    ok_or_fail(fs.create_dir("/r"));
    ok_or_fail(fs.sync_dir("/"));
    std::string problem;
    const auto fetched = value_or_fail(fetch_store(fs, sender.call(), "c", "/r/runs", &problem));
    CHECK(fetched.applied == 42);
    CHECK(fetched.files == 2);
    CHECK(sender.reads == 3);  // the large file in two chunks
    CHECK(sender.closed);
    // Durable: a crash that keeps nothing unsynced keeps the store.
    auto image = fs.crash_image(CrashOutcome::drop_all());
    for (const auto& [name, text] : sender.files) CHECK(text_of_file(*image, "/r/runs/" + name) == text);
    // A leftover is not fetched into.
    CHECK_FALSE(fetch_store(fs, sender.call(), "c", "/r/runs", &problem).has_value());
    CHECK(problem.find("exists already") != std::string::npos);
  }

  TEST_CASE("store transfer: a sender that lies is refused, saying how") {
    SUBCASE("another cluster's store") {
      FakeSender sender = two_files();
      sender.cluster = "other";
      CHECK(refusal(sender).find("cluster other's, not c's") != std::string::npos);
    }
    SUBCASE("a file name with a path in it") {
      FakeSender sender = two_files();
      sender.files["../../etc/passwd"] = "x";
      CHECK(refusal(sender).find("names a file '../../etc/passwd'") != std::string::npos);
    }
    SUBCASE("one file named twice") {
      FakeSender sender = two_files();
      sender.tamper = [](const TransferRequest&, TransferAnswer& answer) {
        if (answer.manifest) answer.manifest->files.push_back(answer.manifest->files.front());
      };
      CHECK(refusal(sender).find("one file twice") != std::string::npos);
    }
    SUBCASE("a chunk damaged on the way") {
      FakeSender sender = two_files();
      sender.tamper = [](const TransferRequest&, TransferAnswer& answer) {
        if (answer.chunk && answer.chunk->offset > 0) answer.chunk->data[5] ^= std::byte{1};
      };
      CHECK(refusal(sender).find("is damaged") != std::string::npos);
    }
    SUBCASE("a store cut short: a file shorter than its manifest says") {
      FakeSender sender = two_files();
      sender.tamper = [](const TransferRequest&, TransferAnswer& answer) {
        if (answer.manifest) answer.manifest->files.back().bytes += 100;  // the file holds less
      };
      // The last chunk comes back short of what the manifest implies.
      CHECK(refusal(sender).find("its manifest implies") != std::string::npos);
    }
    SUBCASE("a chunk longer than asked") {
      FakeSender sender = two_files();
      sender.tamper = [](const TransferRequest&, TransferAnswer& answer) {
        if (answer.chunk) {
          answer.chunk->data.push_back(std::byte{'!'});
          answer.chunk->crc32c = crc32c(answer.chunk->data);
        }
      };
      CHECK(refusal(sender).find("sent 1048577 bytes of 000009.sst at 0, not the 1048576 its manifest implies") !=
            std::string::npos);
    }
    SUBCASE("a doubled chunk: the first one sent again for the second") {
      FakeSender sender = two_files();
      sender.tamper = [](const TransferRequest& request, TransferAnswer& answer) {
        if (answer.chunk && request.offset > 0) {
          answer.chunk->offset = 0;
        }
      };
      CHECK(refusal(sender).find("with 000009.sst at 0") != std::string::npos);
    }
    SUBCASE("a chunk of another file") {
      FakeSender sender = two_files();
      sender.tamper = [](const TransferRequest&, TransferAnswer& answer) {
        if (answer.chunk) answer.chunk->file = "CURRENT";
      };
      CHECK(refusal(sender).find("with CURRENT") != std::string::npos);
    }
    SUBCASE("an error answer") {
      FakeSender sender = two_files();
      sender.tamper = [](const TransferRequest& request, TransferAnswer& answer) {
        if (request.op == TransferOp::read) answer = TransferAnswer{std::nullopt, std::nullopt, false, "disk on fire"};
      };
      CHECK(refusal(sender).find("the sender says: disk on fire") != std::string::npos);
    }
    SUBCASE("no answer, or one that does not decode") {
      FaultFileSystem fs;
      ok_or_fail(fs.create_dir("/r"));
      std::string problem;
      CHECK_FALSE(fetch_store(fs, [](const TransferRequest&) { return std::optional<CallReply>(); }, "c", "/r/a",
                              &problem)
                      .has_value());
      CHECK(problem.find("did not answer") != std::string::npos);
      CHECK_FALSE(fetch_store(
          fs, [](const TransferRequest&) { return std::optional<CallReply>(CallReply{CallPart::last, {std::byte{1}}}); },
          "c", "/r/b", &problem)
                      .has_value());
      CHECK(problem.find("does not decode") != std::string::npos);
      CHECK_FALSE(fetch_store(
          fs,
          [](const TransferRequest&) {
            return std::optional<CallReply>(CallReply{CallPart::not_here, bytes_of_text("not the primary")});
          },
          "c", "/r/c", &problem)
                      .has_value());
      CHECK(problem.find("not the primary") != std::string::npos);
    }
  }

  TEST_CASE("store transfer: putting the fetched store in place, crashed at every operation, leaves one store whole") {
    // The old store and the fetched one, each a directory of two files.
    auto make = [](FaultFileSystem& fs) {
      ok_or_fail(fs.create_dir("/r"));
      for (const std::string dir : {"/r/runs", "/r/rebuild", "/r/rebuild/runs"}) ok_or_fail(fs.create_dir(dir));
      for (const std::string name : {"CURRENT", "000001.log"}) {
        put_file(fs, "/r/runs/" + name, "old " + name);
        put_file(fs, "/r/rebuild/runs/" + name, "new " + name);
      }
      for (const std::string dir : {"/r/runs", "/r/rebuild/runs", "/r/rebuild", "/r", "/"}) ok_or_fail(fs.sync_dir(dir));
    };
    // Which store <dir>/runs holds: "old", "new", or "" (none).
    auto which = [](io::FileSystem& fs) -> std::string {
      if (!value_or_fail(fs.exists("/r/runs"))) return "";
      const std::string current = text_of_file(fs, "/r/runs/CURRENT");
      const std::string kind = current.substr(0, 3);
      CHECK(text_of_file(fs, "/r/runs/000001.log") == kind + " 000001.log");  // never a mix
      return kind;
    };
    std::uint64_t operations = 0;
    {
      FaultFileSystem fs;
      make(fs);
      const auto before = fs.operation_count();
      ok_or_fail(install_fetched_store(fs, "/r"));
      operations = fs.operation_count() - before;
      CHECK(which(*fs.crash_image(CrashOutcome::drop_all())) == "new");
      CHECK_FALSE(value_or_fail(fs.exists("/r/rebuild")));
      CHECK_FALSE(value_or_fail(fs.exists("/r/runs.old")));
    }
    REQUIRE(operations > 4);
    std::set<std::string> seen;
    for (std::uint64_t stop = 0; stop <= operations; ++stop) {
      CAPTURE(stop);
      FaultFileSystem fs;
      make(fs);
      fs.set_crash_after_ops(fs.operation_count() + stop);
      (void)install_fetched_store(fs, "/r");
      for (const CrashOutcome& outcome : {CrashOutcome::drop_all(), CrashOutcome::keep_all(),
                                          CrashOutcome::drop_all(CrashOutcome::Names::keep)}) {
        CAPTURE(outcome.describe());
        auto image = fs.crash_image(outcome);
        const std::string kind = which(*image);
        seen.insert(kind);
        // Where none is in place, the fetched one is still whole, or the
        // old one is: a rebuild run again puts the fetched one in place.
        if (kind.empty()) {
          CHECK((value_or_fail(image->exists("/r/rebuild/runs/CURRENT")) ||
                 value_or_fail(image->exists("/r/runs.old/CURRENT"))));
        }
        if (kind != "new" && value_or_fail(image->exists("/r/rebuild/runs/CURRENT"))) {
          ok_or_fail(install_fetched_store(*image, "/r"));
          CHECK(which(*image) == "new");
        }
      }
    }
    CHECK(seen.contains("old"));
    CHECK(seen.contains("new"));
  }
}

}  // namespace
}  // namespace fusee::replica
