#include "cli/disk_check.hpp"

#include <fmt/format.h>

#include <cmath>
#include <optional>

#include "bench/bench_json.hpp"
#include "bench/raw_flush.hpp"
#include "wal/io/posix_file_system.hpp"

namespace fusee::cli {
namespace {

std::string_view path_label(bench::FlushMethod method) {
  return method == bench::FlushMethod::direct_dsync ? "direct + RWF_DSYNC" : "buffered + fdatasync";
}

double rounded(double value_us) { return std::round(value_us * 10.0) / 10.0; }

}  // namespace

int run_disk_check(const DiskCheckOptions& options) {
  io::PosixFileSystem fs;
  bench::RawFlushOptions raw;
  raw.iterations = options.iterations;
  auto measured = bench::measure_raw_flush_all(fs, options.dir, raw);
  if (!measured) {
    fmt::print(stderr, "fusee disk-check: cannot measure the disk under {}: {}\n", options.dir,
               measured.error().message());
    return 1;
  }
  // The floor is the path the log takes: direct where the file system
  // allows it, else buffered.
  std::optional<bench::RawFlushResult> floor;
  for (const auto& result : *measured) {
    if (!result.supported) continue;
    if (!floor || result.method == bench::FlushMethod::direct_dsync) floor = result;
  }
  if (options.json) {
    for (const auto& result : *measured) {
      bench::JsonLine line("disk_check");
      line.field("path", bench::flush_method_name(result.method))
          .field("dir", options.dir)
          .field("block_bytes", bench::kRawFlushBlockBytes)
          .field("iterations", options.iterations)
          .field("supported", result.supported);
      if (result.supported) {
        line.field("p50_us", rounded(result.latency.p50_us))
            .field("p99_us", rounded(result.latency.p99_us))
            .field("p999_us", rounded(result.latency.p999_us))
            .field("mean_us", rounded(result.latency.mean_us))
            .field("floor", floor && floor->method == result.method);
      } else {
        line.field("unsupported_reason", result.unsupported_reason);
      }
      line.print();
    }
    return floor ? 0 : 1;
  }
  fmt::print("durable {} B writes in {} ({} per path)\n", bench::kRawFlushBlockBytes, options.dir,
             options.iterations);
  fmt::print("{:<22} {:>9} {:>9} {:>9} {:>9}\n", "write path", "p50 us", "p99 us", "p99.9 us", "mean us");
  for (const auto& result : *measured) {
    if (!result.supported) {
      fmt::print("{:<22} unsupported: {}\n", path_label(result.method), result.unsupported_reason);
      continue;
    }
    const auto& latency = result.latency;
    fmt::print("{:<22} {:>9.1f} {:>9.1f} {:>9.1f} {:>9.1f}\n", path_label(result.method), latency.p50_us,
               latency.p99_us, latency.p999_us, latency.mean_us);
  }
  if (!floor) {
    fmt::print(stderr, "fusee disk-check: no write path works in {}\n", options.dir);
    return 1;
  }
  fmt::print("floor for a sequential durable step: {:.1f} us (p50, {}, the path the log would take)\n",
             floor->latency.p50_us, path_label(floor->method));
  return 0;
}

}  // namespace fusee::cli
