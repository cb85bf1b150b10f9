// A `fusee server` log service (server/log_service.hpp) in the test's
// process, on a Unix socket in a directory of its own, for remote engines
// to connect to; stopped and started again on the same directory as a test
// needs. Not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "server/log_service.hpp"
#include "tests/support/temp_dir.hpp"
#include "wal/io/posix_file_system.hpp"

namespace fusee::testing {

struct LogServer {
  explicit LogServer(std::uint32_t shards) : shards(shards) {}
  std::uint32_t shards;
  TempDir dir;
  io::PosixFileSystem fs;
  std::unique_ptr<server::LogService> service;

  // `socket`: another name than the usual one keeps workers that know the
  // usual address from reconnecting until it is used again.
  std::string address(const std::string& socket = "sock") const { return "unix:" + dir.sub(socket); }
  void start(const std::string& socket = "sock") {
    server::LogServiceOptions options;
    options.dir = dir.sub("data");
    options.listen = address(socket);
    options.shards = shards;
    options.direct_io = false;
    options.log = [](const std::string&) {};
    service = server::LogService::open(fs, options);
  }
  void stop() {
    service->stop();
    service.reset();
  }
  void restart() {
    stop();
    start();
  }
};

}  // namespace fusee::testing
