#include "demo/backoffice_ledger.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "demo/backoffice.hpp"

namespace fusee::cli {
namespace {

bool is_pack(std::string_view id) { return id.starts_with("pack-"); }
bool is_audit(std::string_view id) { return id.starts_with(std::string(kAuditSchedule) + "@"); }
// The built-in runs behind the queue and the schedule.
bool is_builtin(std::string_view id) {
  return id == "queue:" + std::string(kPackingQueue) || id == "schedule:" + std::string(kAuditSchedule);
}

}  // namespace

BackofficeLedger::BackofficeLedger(std::uint32_t orders) {
  for (std::uint32_t index = 0; index < orders; ++index) packs_[pack_id(index)].index = index;
}

bool BackofficeLedger::takes(const OrderEvent& event) {
  using Kind = OrderEvent::Kind;
  switch (event.kind) {
    case Kind::enqueued:
    case Kind::pack_begin:
    case Kind::pack_end:
    case Kind::audit:
    case Kind::audit_schedule:
      return true;
    case Kind::final_result:
    case Kind::run:
    case Kind::failed:
      return is_pack(event.id) || is_audit(event.id) || is_builtin(event.id);
    default:
      return false;
  }
}

bool BackofficeLedger::feed(int life, const OrderEvent& event, std::string_view line) {
  using Kind = OrderEvent::Kind;
  if (event.kind == Kind::run && is_builtin(event.id)) return false;  // they live on
  if (event.kind == Kind::failed) {
    violations_.push_back(fmt::format("life {}: {}", life, line));
    return false;
  }
  if (event.kind == Kind::audit_schedule) {
    schedule_started_ = event.offset;
    return false;
  }
  if (is_audit(event.id)) {
    auto& audit = audits_[event.id];
    if (event.kind == Kind::audit) {
      audit.ran_ms.push_back(event.at_ms);
      return audit.ran_ms.size() == 1;
    }
    if (event.kind == Kind::run) audit.final_status = event.text;
    return false;
  }
  auto found = packs_.find(event.id);
  if (found == packs_.end()) {
    if (event.kind == Kind::run) {
      unknown_runs_.push_back(event.id);
    } else {
      violations_.push_back(fmt::format("life {}: a line about {}, which is none of the demo's runs: \"{}\"", life,
                                        event.id, line));
    }
    return false;
  }
  auto& pack = found->second;
  switch (event.kind) {
    case Kind::enqueued:
      if (pack.enqueued) return false;
      pack.enqueued = true;
      return true;
    case Kind::pack_begin:
      pack.spans.push_back(Span{event.pid, event.at_us, std::nullopt});
      return true;
    case Kind::pack_end: {
      auto open = std::find_if(pack.spans.rbegin(), pack.spans.rend(),
                               [&](const Span& span) { return span.pid == event.pid && !span.end_us; });
      if (open == pack.spans.rend()) {
        violations_.push_back(fmt::format("{}: process {} ended a pack step it never began", event.id, event.pid));
        return false;
      }
      open->end_us = event.at_us;
      return false;
    }
    case Kind::final_result:
      pack.final_result = event.value;
      return false;
    case Kind::run:
      pack.final_status = event.text;
      return false;
    default:
      return false;
  }
}

void BackofficeLedger::killed(std::int64_t pid, std::int64_t at_us) {
  // The first word counts (a process frozen before its SIGKILL ran nothing
  // after it was frozen).
  killed_us_.try_emplace(pid, at_us);
}

void BackofficeLedger::begin_restored_check() {
  for (auto& [id, pack] : packs_) {
    pack.final_result.reset();
    pack.final_status.reset();
  }
  for (auto& [id, audit] : audits_) audit.final_status.reset();
  unknown_runs_.clear();
}

std::string BackofficeLedger::child_state() const {
  std::string out;
  for (const auto& [id, pack] : packs_) {
    if (pack.enqueued) out += "enqueued " + id + "\n";
  }
  return out;
}

std::pair<std::uint64_t, std::int64_t> BackofficeLedger::most_at_once() const {
  // Each step runs from its begin to its end, or to its process's kill, or
  // (neither: the process still runs it) for ever. One that ends at the
  // moment another begins is over by then (the end was written first).
  struct Interval {
    std::int64_t begin_us, end_us;
  };
  std::vector<Interval> spans;
  for (const auto& [id, pack] : packs_) {
    for (const auto& span : pack.spans) {
      auto end = std::numeric_limits<std::int64_t>::max();
      if (span.end_us) {
        end = *span.end_us;
      } else if (auto kill = killed_us_.find(span.pid); kill != killed_us_.end()) {
        end = std::max(kill->second, span.begin_us);
      }
      spans.push_back({span.begin_us, end});
    }
  }
  std::uint64_t most = 0;
  std::int64_t when = 0;
  for (std::size_t i = 0; i < spans.size(); ++i) {
    std::uint64_t at_once = 1;
    for (std::size_t j = 0; j < spans.size(); ++j) {
      if (j != i && spans[j].begin_us <= spans[i].begin_us && spans[j].end_us > spans[i].begin_us) ++at_once;
    }
    if (at_once > most) {
      most = at_once;
      when = spans[i].begin_us;
    }
  }
  return {most, when};
}

void BackofficeLedger::check(bool with_final_state, std::vector<std::string>& out) const {
  out.insert(out.end(), violations_.begin(), violations_.end());
  for (const auto& id : unknown_runs_) out.push_back(fmt::format("list_runs shows a run {} that the demo never started", id));
  auto [most, when] = most_at_once();
  if (most > kPackingConcurrency) {
    out.push_back(fmt::format("{} pack steps ran at once (steady clock {} µs); the packing queue allows {}", most,
                              when, kPackingConcurrency));
  }
  // Audits: due times of the schedule, each once, never run early.
  for (const auto& [id, audit] : audits_) {
    auto due_ms = audit_due_ms(id);
    if (!due_ms) {
      out.push_back(fmt::format("{}: not a run id of the audit schedule", id));
      continue;
    }
    if (*due_ms % kAuditEvery.count() != 0) {
      out.push_back(fmt::format("{}: not a due time of the schedule (every {} ms)", id, kAuditEvery.count()));
    }
    for (auto ran_ms : audit.ran_ms) {
      if (ran_ms < *due_ms) out.push_back(fmt::format("{}: its step ran {} ms before its due time", id, *due_ms - ran_ms));
    }
  }
  if (!with_final_state) return;
  for (const auto& [id, pack] : packs_) {
    if (!pack.enqueued) {
      if (pack.final_status) out.push_back(fmt::format("{}: list_runs shows it, but it was never enqueued", id));
      continue;
    }
    if (pack.spans.empty()) out.push_back(fmt::format("{}: enqueued, but its step never ran", id));
    if (pack.final_status != "completed") {
      out.push_back(fmt::format("{}: enqueued, but after the final reopen it is {}", id,
                                pack.final_status ? *pack.final_status : "not listed"));
    }
    if (!pack.final_result || *pack.final_result != boost::json::value(pack.index)) {
      out.push_back(fmt::format("{}: its result is {}, not {}", id,
                                pack.final_result ? boost::json::serialize(*pack.final_result) : "missing",
                                pack.index));
    }
  }
  std::uint64_t listed = 0;
  for (const auto& [id, audit] : audits_) {
    if (audit.final_status) ++listed;
    if (!audit.ran_ms.empty() && audit.final_status != "completed") {
      out.push_back(fmt::format("{}: its step ran, but after the final reopen it is {}", id,
                                audit.final_status ? *audit.final_status : "not listed"));
    }
    if (audit.ran_ms.empty() && audit.final_status == "completed") {
      out.push_back(fmt::format("{}: completed, but its step was never seen to run", id));
    }
  }
  if (!schedule_started_) {
    out.push_back("the final life did not report the audit schedule's count of runs started");
  } else if (*schedule_started_ != listed) {
    out.push_back(fmt::format("the audit schedule says it started {} runs; list_runs shows {}", *schedule_started_,
                              listed));
  }
}

std::vector<std::string> BackofficeLedger::unfinished(std::size_t max) const {
  std::vector<std::string> out;
  std::size_t waiting = 0;
  for (const auto& [id, pack] : packs_) {
    const bool packed = std::any_of(pack.spans.begin(), pack.spans.end(), [](const Span& span) { return span.end_us.has_value(); });
    if (!pack.enqueued || packed) continue;
    if (++waiting <= max) {
      out.push_back(fmt::format("{}: enqueued, {} pack steps begun, none ended", id, pack.spans.size()));
    }
  }
  if (waiting > max) out.push_back(fmt::format("... {} pack runs in all never packed", waiting));
  return out;
}

BackofficeLedger::Totals BackofficeLedger::totals() const {
  Totals totals;
  for (const auto& [id, pack] : packs_) {
    if (pack.final_status == "completed") ++totals.packs;
    totals.pack_steps += pack.spans.size();
  }
  totals.most_in_flight = most_at_once().first;
  for (const auto& [id, audit] : audits_) totals.audits += audit.ran_ms.empty() ? 0 : 1;
  return totals;
}

}  // namespace fusee::cli
