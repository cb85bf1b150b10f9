// What the engine takes as a run id, a duration and a time, in every call
// and every mode (docs/engine.md, "Ids and bounds"). Values past these are
// refused with errc::invalid_argument (HTTP 400 naming the field) and
// nothing is recorded, rather than taken and then misread: a deadline of
// 2^63-1 ms overflows the clock and fails the run at once, a 300 KB id
// bloats every record of its run, and an id "..", once started, cannot
// be named in a URL again.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace fusee {

// A run id (and so a queue's name or a schedule's id, which name runs) is
// 1 to kRunIdBytesMax bytes of ASCII letters, digits and - _ . : @ ~ + = ,
// and is neither "." nor "..". So an id goes into a URL path, a step's
// idempotency key ("id/generation/position/step", split at '/'), a log
// line and a shell word as it is, and the console can open every run it
// lists.
inline constexpr std::size_t kRunIdBytesMax = 255;

// The longest duration taken (a run's deadline; a schedule's interval,
// offset and jitter): 100 years. Added to any time before kTimeMsMax it
// stays well inside TimePoint (nanoseconds: up to the year 2262).
inline constexpr std::chrono::milliseconds kDurationMax{3'155'760'000'000};

// The latest time taken, in ms since the Unix epoch (a schedule's end, a
// backfill's bounds): 2200-01-01T00:00:00Z. Times before the epoch are
// refused too.
inline constexpr std::int64_t kTimeMsMax = 7'258'118'400'000;

// Why `id` is not a run id (naming `what`: "run id", "queue name"), or
// nothing when it is one.
std::optional<std::string> run_id_problem(std::string_view id, std::string_view what = "run id");

}  // namespace fusee
