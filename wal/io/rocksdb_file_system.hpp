// A RocksDB Env whose files live in a fusee::io::FileSystem, so RocksDB's
// reads, writes, syncs and directory entries go through the FileSystem seam
// like the log's. With the fault-injecting FaultFileSystem underneath, a crash
// image holds RocksDB's files exactly as a power loss would leave them (the
// unsynced bytes and directory entries dropped, kept or torn), and a test can
// reopen RocksDB on it.
//
// RocksDB's calls map onto the seam's durability contract
// (wal/io/file_system.hpp) as onto a POSIX disk, adding no sync of its own: a
// writable file's Sync and Fsync are sync_data, a directory's Fsync is
// sync_dir, and a new writable file is created and truncated with neither.
// So a crash test sees what RocksDB really leaves on a disk. One thing it
// leaves unsynced is the store's own directory entry: RocksDB creates the
// directory and never syncs the one holding it, so a caller that needs the
// store to survive a crash creates it and syncs its parent first
// (sdk/facade/engine.cpp does).
//
// Files are opened buffered: a request for direct I/O is served buffered, one
// for memory maps is refused. Everything that is not a file (threads, clock,
// host name) is Env::Default()'s. RocksDB's info log is discarded (NewLogger
// gives a logger that drops every line), so no LOG file takes room on the
// simulated disk; pass options.info_log to keep one elsewhere. LockFile takes
// FileSystem::lock_exclusive, a real lock on PosixFileSystem.
//
// Thread-safety: as RocksDB requires of an Env; the FileSystem must allow
// calls from several threads at once, as every io::FileSystem does.
// Lifetime: `fs` must outlive the Env and every DB opened with it.
#pragma once

#include <memory>

namespace rocksdb {
class Env;
}  // namespace rocksdb

namespace fusee::io {

class FileSystem;

std::shared_ptr<rocksdb::Env> make_rocksdb_env(FileSystem& fs);

}  // namespace fusee::io
