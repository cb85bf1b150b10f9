#include "demo/order_ledger.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <array>
#include <climits>
#include <exception>
#include <set>
#include <utility>

namespace fusee::cli {
namespace json = boost::json;

namespace {

// Two clocks read in two processes: a margin for their granularity, so that
// only a clear ordering counts as evidence.
constexpr std::int64_t kClockSlackMs = 20;

constexpr std::array<std::string_view, 5> kSteps{kQuoteStep, kReserveStep, kChargeStep, kFraudStep, kShipStep};
// When each step starts in the workflow: steps of one rank run at the same
// time (quote and reserve), so only a step of a later rank running shows that
// an earlier one's result was durable.
constexpr std::array<int, 5> kStepRanks{0, 0, 1, 2, 3};

std::size_t step_position(std::string_view step) {
  return static_cast<std::size_t>(std::find(kSteps.begin(), kSteps.end(), step) - kSteps.begin());
}

std::string shorten(const json::value& value) {
  auto text = json::serialize(value);
  if (text.size() > 160) text = text.substr(0, 157) + "...";
  return text;
}

}  // namespace

OrderLedger::OrderLedger(std::uint64_t seed, std::uint32_t orders, std::chrono::milliseconds approval_timeout)
    : approval_timeout_(approval_timeout), backoffice_(orders) {
  runs_.resize(orders);
  for (std::uint32_t index = 0; index < orders; ++index) {
    runs_[index].order = make_order(seed, index);
    runs_[index].plan = make_plan(seed, index);
    runs_[index].item_change = make_item_change(seed, index);
    index_.emplace(runs_[index].order.id, index);
  }
}

void OrderLedger::violation(std::string message) { feed_violations_.push_back(std::move(message)); }

OrderLedger::RunRecord* OrderLedger::find(const std::string& id, std::string_view line) {
  auto found = index_.find(id);
  if (found == index_.end()) {
    violation(fmt::format("the child reported on {}, which is not one of the demo's orders: \"{}\"", id, line));
    return nullptr;
  }
  return &runs_[found->second];
}

bool OrderLedger::feed(int life, std::string_view line, std::int64_t received_ms) {
  using Kind = OrderEvent::Kind;
  if (life < 0) return false;
  if (life_counts_.size() <= static_cast<std::size_t>(life)) life_counts_.resize(static_cast<std::size_t>(life) + 1);
  auto& counts = life_counts_[static_cast<std::size_t>(life)];
  auto event = parse_order_event(line);
  if (!event) {
    violation(fmt::format("life {}: the child wrote a line the demo does not understand: \"{}\"", life, line));
    return false;
  }
  if (event->kind == Kind::complete) {
    complete_ = true;
    return false;
  }
  if (BackofficeLedger::takes(*event)) return backoffice_.feed(life, *event, line);
  if (event->kind == Kind::run) {
    auto found = index_.find(event->id);
    if (found == index_.end()) {
      unknown_runs_.push_back(event->id);
      return false;
    }
    runs_[found->second].final_status = event->text;
    return false;
  }
  auto* run = find(event->id, line);
  if (!run) return false;
  switch (event->kind) {
    case Kind::started:
      ++counts.starts;
      if (run->started_life) return false;
      run->started_life = life;
      return true;
    case Kind::ran:
      ++counts.steps;
      if (step_position(event->step) == kSteps.size()) {
        violation(fmt::format("{}: life {} ran a step named {}, which the workflow does not have", run->order.id, life,
                              event->step));
        break;
      }
      run->steps[event->step].push_back(StepRun{life, event->at_ms, event->text});
      return true;
    case Kind::signalled: {
      ++counts.signals;
      bool fresh = !run->signal_life;
      if (fresh) {
        run->signal_life = life;
        run->signal_received_ms = received_ms;
      }
      if (run->plan == Plan::stay_silent) {
        violation(fmt::format("{}: life {} signalled an order whose plan is to stay silent", run->order.id, life));
      } else if (event->value != json::value_from(make_approval(run->plan, static_cast<std::uint32_t>(run - runs_.data())))) {
        violation(fmt::format("{}: life {} sent the approval {}, not the planned one", run->order.id, life,
                              shorten(event->value)));
      }
      return fresh;
    }
    case Kind::pay:
      if (run->payment_token.empty()) {
        run->payment_token = event->token;
        run->payment_key = event->text;
        return true;
      }
      if (run->payment_token != event->token || run->payment_key != event->text) {
        violation(fmt::format("{}: life {} handed the payment provider token {} for {}, after {} for {}: a charge "
                              "repeated with another token",
                              run->order.id, life, event->token, event->text, run->payment_token, run->payment_key));
      }
      return false;
    case Kind::paid:
      if (event->text != run->payment_key) {
        violation(fmt::format("{}: life {} confirmed the payment {}, but the charge asked for {}", run->order.id, life,
                              event->text, run->payment_key));
      }
      if (run->paid_life) return false;
      run->paid_life = life;
      return true;
    case Kind::updated: {
      const auto& answer = event->value.as_object();
      const auto* status = answer.if_contains("status");
      if (!run->item_change) {
        violation(fmt::format("{}: life {} sent add_items to an order the desk changes nothing of", run->order.id, life));
      } else if (status == nullptr || !status->is_string()) {
        violation(fmt::format("{}: life {} reported the update answer {}", run->order.id, life, shorten(event->value)));
      } else if (status->get_string() == "completed") {
        auto want = run->order.items + *run->item_change;
        const auto* items = answer.if_contains("items");
        if (!item_change_refusal(*run->item_change).empty()) {
          violation(fmt::format("{}: life {}: add_items {} was accepted, but its validator refuses it", run->order.id,
                                life, *run->item_change));
        } else if (items == nullptr || !items->is_number() || items->to_number<std::uint32_t>() != want) {
          violation(fmt::format("{}: life {}: add_items answered {}, not {} items (it took effect more than once, or "
                                "not on the order's count)",
                                run->order.id, life, shorten(event->value), want));
        }
      } else if (status->get_string() != "rejected" && status->get_string() != "not_found" &&
                 status->get_string() != "failed") {
        violation(fmt::format("{}: life {} reported the update answer {}", run->order.id, life, shorten(event->value)));
      }
      bool fresh = run->update_answers.empty();
      run->update_answers.push_back(event->value);
      return fresh;
    }
    case Kind::chunk:
      ++counts.chunks;
      return on_chunk(*run, life, *event, received_ms);
    case Kind::result:
      ++counts.results;
      return on_result(*run, life, event->value, received_ms, "a result");
    case Kind::failed:
      violation(fmt::format("{}: life {}: {}", run->order.id, life, event->text));
      break;
    case Kind::final_chunk:
      if (run->final_ended || event->offset != run->final_chunks.size()) {
        violation(fmt::format("{}: the final re-read delivered offset {} after {} chunk(s){}", run->order.id,
                              event->offset, run->final_chunks.size(), run->final_ended ? " and the end" : ""));
      }
      run->final_chunks.push_back(event->value);
      break;
    case Kind::final_end:
      run->final_ended = true;
      break;
    case Kind::final_result:
      on_result(*run, life, event->value, received_ms, "the final result after reopening");
      run->final_result = event->value;
      break;
    case Kind::run:
    case Kind::complete:
      break;
    case Kind::enqueued:  // the back office's (taken above)
    case Kind::pack_begin:
    case Kind::pack_end:
    case Kind::audit:
    case Kind::audit_schedule:
      break;
  }
  return false;
}

OrderLedger::BackupPrefix OrderLedger::check_backup_prefix(const std::map<std::string, bool>& restored,
                                                          std::int64_t covered_at_ms) const {
  BackupPrefix out;
  for (const auto& run : runs_) {
    auto found = restored.find(run.order.id);
    if (run.signal_life && run.signal_received_ms <= covered_at_ms) {
      ++out.approvals;
      if (found == restored.end()) {
        out.missing.push_back(fmt::format("{}: its approval was acknowledged before the backup's newest batch, and "
                                          "the restore has no such run",
                                          run.order.id));
      }
    }
    if (run.result && run.result->received_ms <= covered_at_ms) {
      ++out.results;
      if (found == restored.end() || !found->second) {
        out.missing.push_back(fmt::format("{}: its result was acknowledged before the backup's newest batch, and the "
                                          "restore has it {}",
                                          run.order.id, found == restored.end() ? "missing" : "still running"));
      }
    }
  }
  return out;
}

bool OrderLedger::on_chunk(RunRecord& run, int life, const OrderEvent& event, std::int64_t received_ms) {
  // A reader starts at the earliest offset in every life and must then see
  // every offset once, in order.
  if (run.reading_life != life) {
    run.reading_life = life;
    run.next_offset = 0;
  }
  if (event.offset != run.next_offset) {
    violation(fmt::format("{}: life {}'s reader delivered offset {} where offset {} was due (a gap or a duplicate)",
                          run.order.id, life, event.offset, run.next_offset));
  }
  run.next_offset = event.offset + 1;
  if (event.offset < run.chunks.size()) {
    const auto& earlier = run.chunks[event.offset];
    if (earlier.value != event.value) {
      violation(fmt::format("{}: chunk {} was {} when delivered in life {} but {} in life {}", run.order.id,
                            event.offset, shorten(earlier.value), earlier.life, shorten(event.value), life));
    }
  } else if (event.offset == run.chunks.size()) {
    run.chunks.push_back(Delivery{event.value, life, received_ms});
    return true;
  }
  return false;
}

bool OrderLedger::on_result(RunRecord& run, int life, const json::value& value, std::int64_t received_ms,
                            std::string_view where) {
  if (!run.result) {
    run.result = Delivery{value, life, received_ms};
    return true;
  }
  if (run.result->value != value) {
    violation(fmt::format("{}: the result changed: {} in life {}, then {} as {} in life {}", run.order.id,
                          shorten(run.result->value), run.result->life, shorten(value), where, life));
  }
  return false;
}

void OrderLedger::begin_restored_check() {
  for (auto& run : runs_) {
    run.final_chunks.clear();
    run.final_ended = false;
    run.final_result.reset();
    run.final_status.reset();
  }
  unknown_runs_.clear();
  complete_ = false;
  backoffice_.begin_restored_check();
}

std::string OrderLedger::child_state() const {
  std::string state;
  for (const auto& run : runs_) {
    if (run.started_life) state += fmt::format("started {}\n", run.order.id);
    if (run.signal_life) state += fmt::format("signalled {}\n", run.order.id);
    if (run.result) state += fmt::format("finished {}\n", run.order.id);
    if (!run.update_answers.empty()) state += fmt::format("updated {}\n", run.order.id);
    if (!run.payment_token.empty() && !run.paid_life && !run.result) {
      state += fmt::format("pay {} {} {}\n", run.order.id, run.payment_token, run.payment_key);
    }
  }
  return state + backoffice_.child_state();
}

OrderLedger::Counts OrderLedger::life_counts(int life) const {
  if (life < 0 || static_cast<std::size_t>(life) >= life_counts_.size()) return {};
  return life_counts_[static_cast<std::size_t>(life)];
}

OrderLedger::Totals OrderLedger::totals() const {
  Totals totals;
  for (const auto& run : runs_) {
    if (run.started_life) ++totals.starts;
    if (run.signal_life) ++totals.signals;
    if (!run.update_answers.empty()) ++totals.updates;
    if (std::any_of(run.update_answers.begin(), run.update_answers.end(), [](const json::value& answer) {
          return answer.at("status") == "completed";
        }))
      ++totals.updates_applied;
    if (run.paid_life) ++totals.payments;
    totals.chunks += run.chunks.size();
    for (const auto& [step, executions] : run.steps) {
      totals.step_runs += executions.size();
      totals.step_reruns += executions.size() - 1;
    }
    if (!run.final_result) continue;
    ++totals.finished;
    const auto* object = run.final_result->if_object();
    const auto* outcome = object ? object->if_contains("outcome") : nullptr;
    if (!outcome || !outcome->is_string()) continue;
    auto parsed = outcome_from_name(outcome->get_string());
    if (parsed == Outcome::shipped) ++totals.shipped;
    if (parsed == Outcome::rejected) ++totals.rejected;
    if (parsed == Outcome::expired) ++totals.expired;
  }
  for (const auto& counts : life_counts_) totals.chunk_deliveries += counts.chunks;
  return totals;
}

std::optional<std::int64_t> OrderLedger::earliest_timeout_ms(const RunRecord& run) const {
  auto charge = run.steps.find(kChargeStep);
  if (charge == run.steps.end() || charge->second.empty()) return std::nullopt;
  std::int64_t first = INT64_MAX;
  for (const auto& execution : charge->second) first = std::min(first, execution.at_ms);
  return first + approval_timeout_.count();
}

std::uint64_t OrderLedger::took_patch() const {
  return static_cast<std::uint64_t>(std::count_if(runs_.begin(), runs_.end(), [](const RunRecord& run) {
    auto found = run.steps.find(kFraudStep);
    return found != run.steps.end() && !found->second.empty();
  }));
}

void OrderLedger::check_steps(const RunRecord& run, std::vector<std::string>& out) const {
  const auto& id = run.order.id;
  if (auto fraud = run.steps.find(kFraudStep); fraud != run.steps.end() && !fraud->second.empty()) {
    // The patch's answer never flips: the old code's journal past the patch
    // point keeps the order on the old path.
    for (std::size_t offset = 0; offset < run.chunks.size(); ++offset) {
      const auto* object = run.chunks[offset].value.if_object();
      const auto* phase = object ? object->if_contains("phase") : nullptr;
      if (phase && phase->is_string() && phase->get_string() == "awaiting_approval" &&
          run.chunks[offset].life < patched_from_) {
        out.push_back(fmt::format("{}: ran the {} patch's step in life {}, but life {}, before the patch, had "
                                  "delivered its awaiting_approval chunk: the old code had written its journal past "
                                  "the patch point",
                                  id, kFraudPatch, fraud->second.front().life, run.chunks[offset].life));
      }
    }
    for (const auto& execution : fraud->second) {
      if (execution.life < patched_from_)
        out.push_back(fmt::format("{}: the {} step ran in life {}, whose code has no such step", id, kFraudStep,
                                  execution.life));
    }
  }
  std::set<std::string> keys_seen;
  for (const auto& [step, executions] : run.steps) {
    // One attempt per step (no retry policy), so at most one execution a life.
    std::set<int> lives;
    for (const auto& execution : executions) {
      if (!lives.insert(execution.life).second)
        out.push_back(fmt::format("{}: step {} ran more than once in life {}", id, step, execution.life));
      if (execution.key != executions.front().key) {
        out.push_back(fmt::format("{}: step {} ran with idempotency key \"{}\" in life {} but \"{}\" in life {}", id,
                                  step, executions.front().key, executions.front().life, execution.key,
                                  execution.life));
      }
    }
    if (!keys_seen.insert(executions.front().key).second)
      out.push_back(fmt::format("{}: step {} has the same idempotency key as another step", id, step));

    // The first life by which this step's result was provably durable.
    int durable_life = INT_MAX;
    std::string evidence;
    auto note = [&](int life, std::string why) {
      if (life < durable_life) {
        durable_life = life;
        evidence = std::move(why);
      }
    };
    for (auto later = step_position(step) + 1; later < kSteps.size(); ++later) {
      if (kStepRanks[later] <= kStepRanks[step_position(step)]) continue;
      auto found = run.steps.find(kSteps[later]);
      if (found == run.steps.end()) continue;
      for (const auto& execution : found->second)
        note(execution.life, fmt::format("step {} ran then, which a step does only once the run's earlier records "
                                         "are durable",
                                         kSteps[later]));
    }
    for (std::size_t offset = 0; offset < run.chunks.size(); ++offset) {
      auto before = steps_before_chunk(run.chunks[offset].value);
      if (std::find(before.begin(), before.end(), step) != before.end())
        note(run.chunks[offset].life,
             fmt::format("chunk {}, written after it, was delivered then, which happens only once it is durable", offset));
    }
    if (run.result) note(run.result->life, "the run's result was reported then");
    for (const auto& execution : executions) {
      if (execution.life > durable_life) {
        out.push_back(fmt::format("{}: step {} ran again in life {}, but its result had to be durable in life {}: {}",
                                  id, step, execution.life, durable_life, evidence));
      }
    }
  }
}

void OrderLedger::check_outcome(const RunRecord& run, Outcome outcome, std::vector<std::string>& out) const {
  const auto& id = run.order.id;
  auto planned = planned_outcome(run.plan);
  if (outcome != planned && outcome != Outcome::expired) {
    out.push_back(fmt::format("{}: ended {} but the approval desk's plan was to {}", id, outcome_name(outcome),
                              plan_name(run.plan)));
    return;
  }
  auto deadline = earliest_timeout_ms(run);
  if (outcome == Outcome::expired && run.plan != Plan::stay_silent && run.signal_life && deadline &&
      run.signal_received_ms + kClockSlackMs < *deadline) {
    out.push_back(fmt::format(
        "{}: timed out although its approval was acknowledged (life {}) {} ms before its wait could time out", id,
        *run.signal_life, *deadline - run.signal_received_ms));
  }
  if (outcome == Outcome::expired && deadline) {
    // The first sign that the wait timed out: its "expired" chunk or the result.
    std::int64_t seen_ms = run.result ? run.result->received_ms : INT64_MAX;
    if (run.chunks.size() > 3) seen_ms = std::min(seen_ms, run.chunks[3].received_ms);
    if (seen_ms + kClockSlackMs < *deadline) {
      out.push_back(fmt::format("{}: its approval wait timed out at least {} ms early", id, *deadline - seen_ms));
    }
  }
}

void OrderLedger::check_final(const RunRecord& run, std::vector<std::string>& out) const {
  const auto& id = run.order.id;
  if (!run.final_status) {
    out.push_back(fmt::format("{}: not listed by list_runs after reopening", id));
  } else if (*run.final_status != "completed") {
    out.push_back(fmt::format("{}: list_runs says {} after reopening, not completed", id, *run.final_status));
  }
  if (!run.final_result) {
    if (run.started_life)
      out.push_back(fmt::format("{}: its start was acknowledged in life {} but it has no final result", id,
                                *run.started_life));
    else
      out.push_back(fmt::format("{}: never finished", id));
    return;
  }
  Receipt receipt;
  try {
    receipt = json::value_to<Receipt>(*run.final_result);
  } catch (const std::exception& error) {
    out.push_back(fmt::format("{}: the result {} is not a receipt: {}", id, shorten(*run.final_result), error.what()));
    return;
  }
  auto outcome = outcome_from_name(receipt.outcome);
  if (!outcome) {
    out.push_back(fmt::format("{}: the receipt's outcome \"{}\" is none the workflow returns", id, receipt.outcome));
    return;
  }
  check_outcome(run, *outcome, out);

  auto ran = [&](std::string_view step) {
    auto found = run.steps.find(step);
    return found == run.steps.end() ? std::size_t{0} : found->second.size();
  };
  for (auto step : {kQuoteStep, kReserveStep, kChargeStep}) {
    if (ran(step) == 0) out.push_back(fmt::format("{}: finished, but its {} step never ran", id, step));
  }
  if (*outcome == Outcome::shipped && ran(kShipStep) == 0)
    out.push_back(fmt::format("{}: shipped, but its ship step never ran", id));
  if (*outcome != Outcome::shipped && ran(kShipStep) != 0)
    out.push_back(fmt::format("{}: ended {}, yet its ship step ran", id, outcome_name(*outcome)));

  auto charge = run.steps.find(kChargeStep);
  const std::string payment_key = charge == run.steps.end() ? receipt.payment : charge->second.front().key;
  if (run.paid_life && receipt.payment != run.payment_key) {
    out.push_back(fmt::format("{}: its payment {} was confirmed in life {}, but the receipt says {}", id,
                              run.payment_key, *run.paid_life, receipt.payment));
  }
  // The items: an add_items the engine answered completed took effect once;
  // one it refused, not at all; one never answered, once or not at all.
  std::uint32_t items = run.order.items;
  if (run.item_change) {
    bool completed = false, refused = false;
    for (const auto& answer : run.update_answers) {
      (answer.at("status") == "completed" ? completed : refused) = true;
    }
    const auto changed = run.order.items + *run.item_change;
    if (!item_change_refusal(*run.item_change).empty()) {
      items = run.order.items;
    } else if (completed) {
      items = changed;
    } else if (!refused && receipt.items == changed) {
      items = changed;  // answered to no life (a kill took it), but accepted
    }
  }
  auto want = json::value_from(expected_receipt(run.order, *outcome, payment_key, items));
  if (want != *run.final_result) {
    out.push_back(fmt::format("{}: the result is {}, expected {}", id, shorten(*run.final_result), shorten(want)));
  }

  auto progress = expected_progress(run.order, *outcome, payment_key);
  if (!run.final_ended) out.push_back(fmt::format("{}: the final re-read of its stream never reached the end", id));
  if (run.final_chunks != progress) {
    out.push_back(fmt::format("{}: the final stream has {} chunk(s), not the {} expected{}", id,
                              run.final_chunks.size(), progress.size(),
                              run.final_chunks.size() == progress.size() ? " (a value differs)" : ""));
  }
  for (std::size_t offset = 0; offset < run.chunks.size(); ++offset) {
    if (offset >= run.final_chunks.size()) {
      out.push_back(fmt::format("{}: chunk {} was delivered in life {} but is not in the final stream", id, offset,
                                run.chunks[offset].life));
    } else if (run.final_chunks[offset] != run.chunks[offset].value) {
      out.push_back(fmt::format("{}: chunk {} was {} when delivered in life {} but is {} in the final stream", id,
                                offset, shorten(run.chunks[offset].value), run.chunks[offset].life,
                                shorten(run.final_chunks[offset])));
    }
  }
}

std::vector<std::string> OrderLedger::unfinished(std::size_t max) const {
  std::vector<std::string> out;
  std::size_t waiting = 0;
  for (const auto& run : runs_) {
    if (!run.started_life || run.result) continue;
    if (++waiting > max) continue;
    std::string line = fmt::format("{}: started in life {}", run.order.id, *run.started_life);
    if (run.signal_life) line += fmt::format(", approval acknowledged in life {}", *run.signal_life);
    if (!run.payment_token.empty()) {
      line += run.paid_life ? fmt::format(", payment confirmed in life {}", *run.paid_life)
                            : std::string(", payment requested and never confirmed");
    }
    std::vector<std::string> steps;
    for (const auto& [step, executions] : run.steps) steps.push_back(fmt::format("{} x{}", step, executions.size()));
    line += fmt::format(", steps run: {}, chunks: {}", steps.empty() ? "none" : fmt::format("{}", fmt::join(steps, ", ")),
                        run.chunks.size());
    out.push_back(std::move(line));
  }
  if (waiting > max) out.push_back(fmt::format("... {} orders in all reported no result", waiting));
  for (auto& line : backoffice_.unfinished(max)) out.push_back(std::move(line));
  return out;
}

std::vector<std::string> OrderLedger::check(bool with_final_state) const {
  std::vector<std::string> out = feed_violations_;
  for (const auto& id : unknown_runs_)
    out.push_back(fmt::format("list_runs shows a run {} that the demo never started", id));
  for (const auto& run : runs_) {
    check_steps(run, out);
    if (with_final_state) check_final(run, out);
  }
  backoffice_.check(with_final_state, out);
  return out;
}

}  // namespace fusee::cli
