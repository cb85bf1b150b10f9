// Journaled values: Ctx::now, Ctx::random and Ctx::patched, decided once
// and replayed from the journal after.
#include "engine/run.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <cmath>

#include "base/assert.hpp"
#include "engine/awakeable_token.hpp"
#include "engine/run_internal.hpp"
#include "engine/shard.hpp"
#include "wal/errc.hpp"
#include "fusee/limits.hpp"

namespace fusee::engine {

using namespace run_text;

bool Run::now(detail::Completion& completion) {
  return record_value("now", [this] { return boost::json::value(to_ms(shard_.now())); }, completion);
}

bool Run::random(detail::Completion& completion) {
  return record_value("random", [this] { return boost::json::value(shard_.core().random()); }, completion);
}

bool Run::record_value(std::string_view name, const std::function<boost::json::value()>& produce,
                       detail::Completion& completion) {
  auto position = begin_command(completion, "now/random");
  const RecordedCommand* recorded = nullptr;
  switch (replay(position, "value", name, completion, recorded)) {
    case Replay::settled:
      return end_command();
    case Replay::matched:
      completion.value = recorded->records.front().value;
      complete(completion);
      return end_command();
    case Replay::none:
      break;
  }
  auto record = make_record(RecordKind::value_recorded, position, name);
  record.value = produce();
  completion.value = record.value;
  append(std::move(record));
  complete(completion);
  return end_command();
}

bool Run::patched(std::string_view id, bool deprecated) {
  if (in_query_) {
    throw Error(errc::invalid_argument,
                fmt::format("run '{}': a query handler cannot ask ctx.patched (it would journal)", id_));
  }
  refuse_outside_code("patched");
  const auto* here = cursor_.recorded(cursor_.next());
  const bool marker_here = here != nullptr && here->records.front().kind == RecordKind::patch_marked &&
                           here->records.front().name == id;
  // One answer per patch id per run (Temporal Go's GetVersion): the first
  // call decides, every later one -- in a loop, say -- repeats it, so a run
  // never mixes the old path and the new one. (A journal an older engine
  // wrote has a marker at every call that took the new path: read past it.)
  if (auto known = patches_.find(std::string(id)); known != patches_.end()) {
    if (known->second && marker_here) cursor_.skip();
    return known->second;
  }
  bool answer = true;
  if (marker_here) {
    cursor_.skip();  // the run took the new path here before
  } else if (cursor_.journal_goes_on()) {
    // The journal goes on past here without the marker: the old code went
    // past this point (every command journals its start, so one in flight
    // counts), and the run keeps to the old path (nothing is recorded).
    answer = false;
  } else if (!deprecated) {
    // Live: the run reaches the change with the new code. A deprecated
    // patch records nothing (its marker is only read, for runs that have it).
    append(make_record(RecordKind::patch_marked, cursor_.next(), id));
    cursor_.skip();
  }
  patches_.emplace(std::string(id), answer);
  return answer;
}

}  // namespace fusee::engine
