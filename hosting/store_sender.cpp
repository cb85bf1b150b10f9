#include "hosting/store_sender.hpp"

#include <fmt/format.h>

#include <random>

#include "backup/snapshot.hpp"
#include "base/crc32c.hpp"

namespace fusee::hosting {

using replica::TransferAnswer;
using replica::TransferOp;
using replica::TransferRequest;

namespace {

TransferAnswer error_answer(std::string why) {
  TransferAnswer answer;
  answer.error = std::move(why);
  return answer;
}

}  // namespace

StoreSender::StoreSender(io::FileSystem& fs, std::shared_ptr<engine::RunStore> store, std::string cluster)
    : fs_(fs), store_(std::move(store)), cluster_(std::move(cluster)) {
  // Sessions of this sender are told apart from a restarted one's.
  std::random_device entropy;
  next_id_ = (std::uint64_t(entropy()) << 32) | entropy();
}

std::vector<std::byte> StoreSender::answer(std::span<const std::byte> bytes) {
  auto request = replica::decode_transfer_request(bytes);
  if (!request) return replica::encode_transfer_answer(error_answer("a transfer request that does not decode"));
  std::lock_guard lock(mu_);
  switch (request->op) {
    case TransferOp::open:
      return replica::encode_transfer_answer(open(*request));
    case TransferOp::read:
      return replica::encode_transfer_answer(read(*request));
    case TransferOp::close: {
      if (session_ && session_->id == request->session) session_.reset();
      TransferAnswer closed;
      closed.closed = true;
      return replica::encode_transfer_answer(closed);
    }
  }
  return replica::encode_transfer_answer(error_answer("an unknown transfer request"));
}

std::uint64_t StoreSender::hold_below() {
  std::lock_guard lock(mu_);
  if (std::chrono::steady_clock::now() >= held_until_) return UINT64_MAX;
  return held_applied_;
}

void StoreSender::expire_idle() {
  std::lock_guard lock(mu_);
  if (session_ && std::chrono::steady_clock::now() - session_->used > kIdle) session_.reset();
}

TransferAnswer StoreSender::open(const TransferRequest& request) {
  if (request.cluster != cluster_) {
    return error_answer(fmt::format("this replica is of cluster {}, not {}", cluster_, request.cluster));
  }
  session_.reset();  // one copy at a time
  // Where the store stood, read before the copy: the copy's files hold at
  // least every write that returned before it was taken.
  auto applied = store_->replica_applied();
  if (!applied) return error_answer("cannot read where the run store stands: " + applied.error().message());
  auto copy = store_->live_copy();
  if (!copy) return error_answer("cannot copy the run store: " + copy.error().message());
  auto session = std::make_unique<Session>();
  session->id = next_id_++;
  session->copy = std::move(*copy);
  session->used = std::chrono::steady_clock::now();
  replica::TransferManifest manifest;
  manifest.cluster = cluster_;
  manifest.session = session->id;
  manifest.applied = applied->seq;
  held_applied_ = applied->seq;
  held_until_ = session->used + kHold;
  for (const engine::StoreFile& file : session->copy->files) {
    session->files[file.name] = &file;
    manifest.files.push_back({file.name, file.contents ? file.contents->size() : file.bytes});
  }
  session_ = std::move(session);
  TransferAnswer answer;
  answer.manifest = std::move(manifest);
  return answer;
}

TransferAnswer StoreSender::read(const TransferRequest& request) {
  if (!session_ || session_->id != request.session) {
    return error_answer("no such transfer (it was closed, replaced by another, or idle for a minute): start again");
  }
  session_->used = std::chrono::steady_clock::now();
  held_until_ = session_->used + kHold;
  auto found = session_->files.find(request.file);
  if (found == session_->files.end()) return error_answer("the copy has no file " + request.file);
  const engine::StoreFile& file = *found->second;
  const std::uint64_t size = file.contents ? file.contents->size() : file.bytes;
  if (request.bytes > replica::kChunkBytesMax || request.offset > size || request.bytes > size - request.offset) {
    return error_answer(fmt::format("{} holds {} bytes: {} at {} is not in it (at most {} at a time)", request.file,
                                    size, request.bytes, request.offset, replica::kChunkBytesMax));
  }
  replica::TransferChunk chunk;
  chunk.session = request.session;
  chunk.file = request.file;
  chunk.offset = request.offset;
  if (file.contents) {
    auto all = std::as_bytes(std::span(*file.contents));
    auto part = all.subspan(request.offset, request.bytes);
    chunk.data.assign(part.begin(), part.end());
  } else {
    auto read = backup::read_range(fs_, file.path, request.offset, request.bytes);
    if (!read) return error_answer(fmt::format("cannot read {}: {}", request.file, read.error().message()));
    chunk.data = std::move(*read);
  }
  chunk.crc32c = crc32c(chunk.data);
  TransferAnswer answer;
  answer.chunk = std::move(chunk);
  return answer;
}

}  // namespace fusee::hosting
