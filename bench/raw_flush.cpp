#include "bench/raw_flush.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <system_error>

#include "base/assert.hpp"

namespace fusee::bench {
namespace {

using Clock = std::chrono::steady_clock;

// Writes all of data, continuing after a short write as the File contract
// requires of callers.
Result<void> write_fully(io::File& file, std::uint64_t offset, std::span<const std::byte> data,
                         io::WriteFlags flags) {
  while (!data.empty()) {
    std::size_t written = FUSEE_TRY(file.write_at(offset, data, flags));
    // A zero-byte write of a non-empty buffer would spin forever.
    if (written == 0) return std::make_error_code(std::errc::io_error);
    offset += written;
    data = data.subspan(written);
  }
  return ok();
}

// Removes the scratch file however the measurement ends; a leftover file is
// harmless, so a failed remove is not reported.
class ScratchFile {
 public:
  ScratchFile(io::FileSystem& fs, std::string path) : fs_(fs), path_(std::move(path)) {}
  ScratchFile(const ScratchFile&) = delete;
  ScratchFile& operator=(const ScratchFile&) = delete;
  ~ScratchFile() { (void)fs_.remove(path_); }
  const std::string& path() const { return path_; }

 private:
  io::FileSystem& fs_;
  std::string path_;
};

std::size_t nearest_rank(std::size_t count, double fraction) {
  auto rank = static_cast<std::size_t>(std::ceil(fraction * static_cast<double>(count)));
  return std::clamp<std::size_t>(rank, 1, count) - 1;
}

// Changes the block's contents each write so that no layer (a deduplicating
// SSD, a compressing filesystem) can skip a write it has already seen.
void stamp(io::AlignedBuffer& block, std::uint64_t iteration) {
  std::memcpy(block.data(), &iteration, sizeof iteration);
}

bool is_direct_refusal(const std::error_code& error) {
  return error == std::errc::invalid_argument;
}

}  // namespace

std::string_view flush_method_name(FlushMethod method) {
  switch (method) {
    case FlushMethod::buffered_fdatasync: return "buffered_fdatasync";
    case FlushMethod::direct_dsync: return "direct_dsync";
  }
  return "unknown";
}

LatencySummary summarize_latencies(std::vector<double> samples_us) {
  LatencySummary summary;
  if (samples_us.empty()) return summary;
  std::sort(samples_us.begin(), samples_us.end());
  std::size_t count = samples_us.size();
  summary.samples = count;
  summary.min_us = samples_us.front();
  summary.max_us = samples_us.back();
  summary.p50_us = samples_us[nearest_rank(count, 0.50)];
  summary.p99_us = samples_us[nearest_rank(count, 0.99)];
  summary.p999_us = samples_us[nearest_rank(count, 0.999)];
  summary.mean_us =
      std::accumulate(samples_us.begin(), samples_us.end(), 0.0) / static_cast<double>(count);
  return summary;
}

Result<RawFlushResult> measure_raw_flush(io::FileSystem& fs, const std::string& dir,
                                         FlushMethod method, const RawFlushOptions& options) {
  FUSEE_ASSERT(options.file_bytes >= kRawFlushBlockBytes, "scratch file smaller than one block");
  FUSEE_ASSERT(options.file_bytes % kRawFlushBlockBytes == 0, "scratch file not whole blocks");

  RawFlushResult result;
  result.method = method;
  const bool direct = method == FlushMethod::direct_dsync;

  // The pid keeps concurrent runs (two benchmarks, two engineers) apart.
  ScratchFile scratch(fs, io::join_path(dir, ".fusee-raw-flush-" + std::to_string(::getpid()) +
                                                 "-" + std::string(flush_method_name(method))));
  io::OpenOptions open_options{.write = true, .create = true, .direct = direct};
  auto opened = fs.open(scratch.path(), open_options);
  if (!opened && direct && is_direct_refusal(opened.error())) {
    result.supported = false;
    result.unsupported_reason = "O_DIRECT refused by the filesystem at open (EINVAL)";
    return result;
  }
  if (!opened) return opened.error();
  std::unique_ptr<io::File> file = std::move(opened).value();

  const std::uint64_t block_count = options.file_bytes / kRawFlushBlockBytes;
  FUSEE_TRY_VOID(file->allocate(0, options.file_bytes));
  io::AlignedBuffer block(kRawFlushBlockBytes);
  std::memset(block.data(), 0xa5, block.size());

  // Fill every block once and make it durable, so the timed writes never pay
  // for turning preallocated (unwritten) extents into written ones.
  for (std::uint64_t index = 0; index < block_count; ++index) {
    stamp(block, index);
    auto filled = write_fully(*file, index * kRawFlushBlockBytes, block.span(), io::WriteFlags::none);
    // Some filesystems accept O_DIRECT at open and refuse it on the write.
    if (!filled && direct && index == 0 && is_direct_refusal(filled.error())) {
      result.supported = false;
      result.unsupported_reason = "O_DIRECT refused by the filesystem at write (EINVAL)";
      return result;
    }
    FUSEE_TRY_VOID(filled);
  }
  FUSEE_TRY_VOID(file->sync_data());

  const io::WriteFlags flags = direct ? io::WriteFlags::dsync : io::WriteFlags::none;
  std::vector<double> samples_us;
  samples_us.reserve(options.iterations);
  const std::size_t total = options.warmup_iterations + options.iterations;
  for (std::size_t iteration = 0; iteration < total; ++iteration) {
    std::uint64_t offset = (iteration % block_count) * kRawFlushBlockBytes;
    stamp(block, block_count + iteration);
    auto start = Clock::now();
    FUSEE_TRY_VOID(write_fully(*file, offset, block.span(), flags));
    if (!direct) FUSEE_TRY_VOID(file->sync_data());
    auto elapsed = Clock::now() - start;
    if (iteration >= options.warmup_iterations) {
      samples_us.push_back(std::chrono::duration<double, std::micro>(elapsed).count());
    }
  }
  result.latency = summarize_latencies(std::move(samples_us));
  return result;
}

Result<std::vector<RawFlushResult>> measure_raw_flush_all(io::FileSystem& fs,
                                                          const std::string& dir,
                                                          const RawFlushOptions& options) {
  std::vector<RawFlushResult> results;
  for (FlushMethod method : {FlushMethod::buffered_fdatasync, FlushMethod::direct_dsync}) {
    results.push_back(FUSEE_TRY(measure_raw_flush(fs, dir, method, options)));
  }
  return results;
}

}  // namespace fusee::bench
