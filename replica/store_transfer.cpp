#include "replica/store_transfer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <memory>

#include "base/crc32c.hpp"
#include "protocol/wire.hpp"
#include "replica/replica_client.hpp"
#include "wal/segment_file.hpp"

namespace fusee::replica {

namespace {

using protocol::Reader;
using protocol::Writer;

// An answer's first byte: which one it is.
enum class AnswerKind : std::uint8_t { manifest = 'M', chunk = 'C', closed = 'K', error = 'E' };

std::error_code refuse(std::string* problem, std::string why) {
  if (problem) *problem = std::move(why);
  return std::make_error_code(std::errc::invalid_argument);
}

// The call's answer as a transfer answer, or why there is none.
std::optional<TransferAnswer> ask(const TransferCall& call, const TransferRequest& request, std::string* problem) {
  auto reply = call(request);
  if (!reply) {
    if (problem) *problem = "the sender did not answer in time (or the connection was lost)";
    return std::nullopt;
  }
  if (reply->part == CallPart::not_here) {
    if (problem) {
      *problem = fmt::format("the sender cannot send its run store now: {}", protocol::text_of(reply->body));
    }
    return std::nullopt;
  }
  auto answer = decode_transfer_answer(reply->body);
  if (!answer) {
    if (problem) *problem = "the sender's answer does not decode";
    return std::nullopt;
  }
  if (!answer->error.empty()) {
    if (problem) *problem = "the sender says: " + answer->error;
    return std::nullopt;
  }
  return answer;
}

}  // namespace

bool plain_file_name(const std::string& name) {
  return !name.empty() && name.size() <= 255 && name != "." && name != ".." && name.front() != '.' &&
         name.find('/') == std::string::npos && name.find('\0') == std::string::npos;
}

std::vector<std::byte> encode_transfer_request(const TransferRequest& request) {
  Writer w;
  w.u8(static_cast<std::uint8_t>(request.op));
  switch (request.op) {
    case TransferOp::open:
      w.text(request.cluster);
      break;
    case TransferOp::read:
      w.u64(request.session).text(request.file).u64(request.offset).u32(request.bytes);
      break;
    case TransferOp::close:
      w.u64(request.session);
      break;
  }
  return w.take();
}

std::optional<TransferRequest> decode_transfer_request(std::span<const std::byte> bytes) {
  Reader r(bytes);
  TransferRequest request;
  std::uint8_t op = 0;
  if (!r.u8(op)) return std::nullopt;
  request.op = static_cast<TransferOp>(op);
  bool read = false;
  switch (request.op) {
    case TransferOp::open:
      read = r.text(request.cluster);
      break;
    case TransferOp::read:
      read = r.u64(request.session) && r.text(request.file) && r.u64(request.offset) && r.u32(request.bytes);
      break;
    case TransferOp::close:
      read = r.u64(request.session);
      break;
    default:
      return std::nullopt;
  }
  if (!read || !r.done()) return std::nullopt;
  return request;
}

std::vector<std::byte> encode_transfer_answer(const TransferAnswer& answer) {
  Writer w;
  if (answer.manifest) {
    const TransferManifest& m = *answer.manifest;
    w.u8(static_cast<std::uint8_t>(AnswerKind::manifest)).text(m.cluster).u64(m.session).u64(m.applied);
    w.u32(static_cast<std::uint32_t>(m.files.size()));
    for (const TransferFile& file : m.files) w.text(file.name).u64(file.bytes);
  } else if (answer.chunk) {
    const TransferChunk& c = *answer.chunk;
    w.u8(static_cast<std::uint8_t>(AnswerKind::chunk)).u64(c.session).text(c.file).u64(c.offset).u32(c.crc32c);
    w.bytes(c.data);
  } else if (answer.closed) {
    w.u8(static_cast<std::uint8_t>(AnswerKind::closed));
  } else {
    w.u8(static_cast<std::uint8_t>(AnswerKind::error)).text(answer.error);
  }
  return w.take();
}

std::optional<TransferAnswer> decode_transfer_answer(std::span<const std::byte> bytes) {
  Reader r(bytes);
  TransferAnswer answer;
  std::uint8_t kind = 0;
  if (!r.u8(kind)) return std::nullopt;
  bool read = false;
  switch (static_cast<AnswerKind>(kind)) {
    case AnswerKind::manifest: {
      TransferManifest m;
      std::uint32_t count = 0;
      read = r.text(m.cluster) && r.u64(m.session) && r.u64(m.applied) && r.u32(count) && count <= kTransferFilesMax;
      for (std::uint32_t i = 0; read && i < count; ++i) {
        TransferFile file;
        read = r.text(file.name) && r.u64(file.bytes);
        m.files.push_back(std::move(file));
      }
      answer.manifest = std::move(m);
      break;
    }
    case AnswerKind::chunk: {
      TransferChunk c;
      read = r.u64(c.session) && r.text(c.file) && r.u64(c.offset) && r.u32(c.crc32c) && r.bytes(c.data);
      answer.chunk = std::move(c);
      break;
    }
    case AnswerKind::closed:
      answer.closed = true;
      read = true;
      break;
    case AnswerKind::error:
      read = r.text(answer.error);
      if (answer.error.empty()) answer.error = "(no reason given)";
      break;
    default:
      return std::nullopt;
  }
  if (!read || !r.done()) return std::nullopt;
  return answer;
}

Result<FetchedStore> fetch_store(io::FileSystem& fs, const TransferCall& call, const std::string& cluster,
                                 const std::string& into_dir, std::string* problem,
                                 const std::function<void(const std::string&)>& progress) {
  if (FUSEE_TRY(fs.exists(into_dir))) return refuse(problem, into_dir + " exists already (a leftover: remove it)");
  auto opened = ask(call, {.op = TransferOp::open, .cluster = cluster}, problem);
  if (!opened) return std::make_error_code(std::errc::protocol_error);
  if (!opened->manifest) return refuse(problem, "the sender answered an open with something else than a manifest");
  const TransferManifest manifest = std::move(*opened->manifest);
  if (manifest.cluster != cluster) {
    return refuse(problem, fmt::format("the sender's run store is cluster {}'s, not {}'s", manifest.cluster, cluster));
  }
  std::vector<std::string> names;
  for (const TransferFile& file : manifest.files) {
    if (!plain_file_name(file.name)) return refuse(problem, fmt::format("the sender names a file '{}'", file.name));
    names.push_back(file.name);
  }
  std::sort(names.begin(), names.end());
  if (std::adjacent_find(names.begin(), names.end()) != names.end()) {
    return refuse(problem, "the sender names one file twice");
  }
  if (manifest.files.empty()) return refuse(problem, "the sender's run store has no files");
  FUSEE_TRY_VOID(fs.create_dir(into_dir));
  FUSEE_TRY_VOID(fs.sync_dir(io::parent_path(into_dir)));
  FetchedStore fetched;
  fetched.applied = manifest.applied;
  for (const TransferFile& file : manifest.files) {
    auto out = FUSEE_TRY(fs.open(io::join_path(into_dir, file.name), {.write = true, .create = true, .exclusive = true}));
    std::uint64_t offset = 0;
    while (offset < file.bytes) {
      const auto want = static_cast<std::uint32_t>(std::min<std::uint64_t>(kChunkBytesMax, file.bytes - offset));
      auto answer = ask(call,
                        {.op = TransferOp::read,
                         .session = manifest.session,
                         .file = file.name,
                         .offset = offset,
                         .bytes = want},
                        problem);
      if (!answer) return std::make_error_code(std::errc::protocol_error);
      if (!answer->chunk) return refuse(problem, "the sender answered a read with something else than a chunk");
      const TransferChunk& chunk = *answer->chunk;
      if (chunk.session != manifest.session || chunk.file != file.name || chunk.offset != offset) {
        return refuse(problem, fmt::format("the sender answered {} at {} with {} at {}", file.name, offset, chunk.file,
                                           chunk.offset));
      }
      if (chunk.data.size() != want) {
        return refuse(problem, fmt::format("the sender sent {} bytes of {} at {}, not the {} its manifest implies",
                                           chunk.data.size(), file.name, offset, want));
      }
      if (crc32c(chunk.data) != chunk.crc32c) {
        return refuse(problem, fmt::format("{} at {} is damaged: its CRC-32C is {:08x}, the sender says {:08x}",
                                           file.name, offset, crc32c(chunk.data), chunk.crc32c));
      }
      FUSEE_TRY_VOID(wal::write_fully(*out, offset, chunk.data, io::WriteFlags::none));
      offset += chunk.data.size();
    }
    FUSEE_TRY_VOID(out->sync_data());
    if (FUSEE_TRY(out->size()) != file.bytes) return refuse(problem, file.name + " is not the size it was sent at");
    ++fetched.files;
    fetched.bytes += file.bytes;
    if (progress) progress(fmt::format("fetched {} ({} bytes)", file.name, file.bytes));
  }
  FUSEE_TRY_VOID(fs.sync_dir(into_dir));
  // The sender's copy is let go; a close that is not answered is no loss
  // (the sender lets an idle copy go on its own).
  (void)call({.op = TransferOp::close, .session = manifest.session});
  return fetched;
}

TransferCall transfer_call_to(const std::vector<std::string>& addresses, replication::ReplicaId id,
                              std::chrono::milliseconds timeout) {
  auto client = std::make_shared<ReplicaClient>(addresses);
  return [client, id, timeout](const TransferRequest& request) {
    return client->call(id, {kStoreTransferShard, encode_transfer_request(request)}, timeout);
  };
}

Result<void> install_fetched_store(io::FileSystem& fs, const std::string& dir) {
  const std::string runs = io::join_path(dir, "runs");
  const std::string rebuild = io::join_path(dir, kRebuildDir);
  const std::string fetched = io::join_path(rebuild, "runs");
  const std::string old = io::join_path(dir, kOldStoreDir);
  FUSEE_TRY_VOID(io::remove_tree(fs, old));
  if (FUSEE_TRY(fs.exists(runs))) {
    FUSEE_TRY_VOID(fs.rename(runs, old));
    FUSEE_TRY_VOID(fs.sync_dir(dir));
  }
  FUSEE_TRY_VOID(fs.rename(fetched, runs));
  FUSEE_TRY_VOID(fs.sync_dir(rebuild));
  FUSEE_TRY_VOID(fs.sync_dir(dir));
  FUSEE_TRY_VOID(io::remove_tree(fs, old));
  FUSEE_TRY_VOID(io::remove_tree(fs, rebuild));
  return fs.sync_dir(dir);
}

}  // namespace fusee::replica
