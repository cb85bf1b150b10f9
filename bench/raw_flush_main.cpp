// raw_flush_bench [dir] [iterations]: prints the disk's raw durable 4 KiB
// write latency under dir (default ".") as a table for people, then one JSON
// line per case for scripts (grep '^{').
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "bench/bench_json.hpp"
#include "bench/raw_flush.hpp"
#include "wal/io/posix_file_system.hpp"

namespace {

// The clock reads in nanoseconds; more digits than that are float noise.
double to_ns_precision(double value_us) { return std::round(value_us * 1000.0) / 1000.0; }

}  // namespace

int main(int argc, char** argv) {
  std::string dir = argc > 1 ? argv[1] : ".";
  fusee::bench::RawFlushOptions options;
  if (argc > 2) {
    char* end = nullptr;
    unsigned long long iterations = std::strtoull(argv[2], &end, 10);
    if (end == argv[2] || *end != '\0' || iterations == 0) {
      fmt::print(stderr, "usage: {} [dir] [iterations > 0]\n", argv[0]);
      return 2;
    }
    options.iterations = static_cast<std::size_t>(iterations);
  }

  fusee::io::PosixFileSystem fs;
  auto measured = fusee::bench::measure_raw_flush_all(fs, dir, options);
  if (!measured) {
    fmt::print(stderr, "raw_flush_bench: {}: {}\n", dir, measured.error().message());
    return 1;
  }

  fmt::print("raw durable {} B write latency in {} ({} iterations, us)\n",
             fusee::bench::kRawFlushBlockBytes, dir, options.iterations);
  fmt::print("{:<20} {:>9} {:>9} {:>9} {:>9} {:>9}\n", "case", "p50", "p99", "p99.9", "mean",
             "max");
  for (const auto& result : measured.value()) {
    auto name = fusee::bench::flush_method_name(result.method);
    if (!result.supported) {
      fmt::print("{:<20} unsupported: {}\n", name, result.unsupported_reason);
      continue;
    }
    const auto& latency = result.latency;
    fmt::print("{:<20} {:>9.1f} {:>9.1f} {:>9.1f} {:>9.1f} {:>9.1f}\n", name, latency.p50_us,
               latency.p99_us, latency.p999_us, latency.mean_us, latency.max_us);
  }
  std::fflush(stdout);

  for (const auto& result : measured.value()) {
    fusee::bench::JsonLine line("raw_flush");
    line.field("case", fusee::bench::flush_method_name(result.method))
        .field("dir", dir)
        .field("block_bytes", fusee::bench::kRawFlushBlockBytes)
        .field("supported", result.supported);
    if (result.supported) {
      const auto& latency = result.latency;
      line.field("p50_us", to_ns_precision(latency.p50_us))
          .field("p99_us", to_ns_precision(latency.p99_us))
          .field("p999_us", to_ns_precision(latency.p999_us))
          .field("mean_us", to_ns_precision(latency.mean_us))
          .field("max_us", to_ns_precision(latency.max_us))
          .field("iterations", latency.samples);
    } else {
      line.field("reason", result.unsupported_reason).field("iterations", 0);
    }
    line.print();
  }
  return 0;
}
