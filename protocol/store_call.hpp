// StoreCall and StoreAnswer: remote mode's calls on the server's run store
// (remote/remote_run_store.hpp sends them, server/store_service.hpp answers),
// one RunStore method each, as the payloads of the protocol's store_call,
// store_rows and store_reply frames (docs/server-protocol.md).
//
// A call's answer is rows (the visits of load_journals, read_journal,
// parked_by_wake, all_parked and list, sent in pieces) then one value or an
// error. Pure; thread-compatible.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "rows/run_rows.hpp"

namespace fusee::protocol {

enum class StoreOp : std::uint8_t {
  write = 1,
  finished = 2,
  list = 3,
  checkpoint = 4,
  streams = 5,
  load_journals = 6,
  read_journal = 7,
  parked = 8,
  parked_by_wake = 9,
  all_parked = 10,
  expire_finished = 11,
  id_filters = 12,  // limit: the shard count; a row per shard (IdFilter::encode)
  journal_of_finished = 13,  // id; the journal kept (engine/kept_journal.hpp) or none
};

const char* store_op_name(StoreOp op);

struct StoreCall {
  StoreOp op = StoreOp::finished;
  std::uint32_t shard = 0;
  std::string id;                           // finished, streams, journal_of_finished, read_journal, parked
  rows::JournalPlace place = rows::JournalPlace::live;  // read_journal
  std::int64_t ms = 0;                      // parked_by_wake: from; expire_finished: before
  std::uint32_t limit = 0;                  // parked_by_wake: rows at most
  rows::RunQuery query;                           // list
  // write: the lease epoch of each shard the batch names (the server fences
  // the write on them), and the batch (RunStore::Batch::encode).
  std::vector<std::pair<std::uint32_t, std::uint64_t>> epochs;
  std::vector<std::byte> batch;
};

std::vector<std::byte> encode(const StoreCall& call);
std::optional<StoreCall> decode_store_call(std::span<const std::byte> payload);

// The end of a call: its value, or why it failed.
struct StoreReply {
  // empty: done; else "corrupt", "io", "fenced", "bad_request", "read_only",
  // "no_space" (what each stands for is each end's: server/store_service.cpp
  // names the server's errors so, remote/remote_run_store.cpp reads them)
  std::string error;
  std::string message;  // what went wrong, for people
  std::vector<std::byte> value;
};
std::vector<std::byte> encode(const StoreReply& reply);
std::optional<StoreReply> decode_store_reply(std::span<const std::byte> payload);

// Rows: each one opaque here, encoded by the functions below.
std::vector<std::byte> encode_rows(const std::vector<std::vector<std::byte>>& rows);
std::optional<std::vector<std::vector<std::byte>>> decode_rows(std::span<const std::byte> payload);

// The values and rows of the calls.
std::vector<std::byte> encode_journal_row(const std::string& id, std::uint64_t lsn, std::span<const std::byte> record);
struct JournalRow {
  std::string id;
  std::uint64_t lsn = 0;
  std::vector<std::byte> record;
};
std::optional<JournalRow> decode_journal_row(std::span<const std::byte> row);
std::vector<std::byte> encode_parked(const rows::ParkedRun& run);
std::optional<rows::ParkedRun> decode_parked(std::span<const std::byte> row);
std::vector<std::byte> encode_finished(const rows::FinishedRun& run);
std::optional<rows::FinishedRun> decode_finished(std::span<const std::byte> row);
std::vector<std::byte> encode_checkpoint(const rows::Checkpoint& checkpoint);
std::optional<rows::Checkpoint> decode_checkpoint(std::span<const std::byte> value);

// A value that may be absent: a u8 (0 or 1), then the value's bytes.
std::vector<std::byte> encode_optional(const std::optional<std::vector<std::byte>>& value);
std::optional<std::optional<std::vector<std::byte>>> decode_optional(std::span<const std::byte> value);

std::vector<std::byte> encode_u64(std::uint64_t value);
std::optional<std::uint64_t> decode_u64(std::span<const std::byte> value);

}  // namespace fusee::protocol
