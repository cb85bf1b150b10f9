#include "demo/order_workflow.hpp"

#include <fmt/format.h>

#include <stdexcept>
#include <utility>

namespace fusee::cli {
namespace json = boost::json;

namespace {

// SplitMix64: a small, well-mixed hash, so (seed, index) gives independent
// looking orders and plans.
std::uint64_t mix(std::uint64_t value) {
  value += 0x9e3779b97f4a7c15ULL;
  value = (value ^ (value >> 30)) * 0xbf58476d1ce4e5b9ULL;
  value = (value ^ (value >> 27)) * 0x94d049bb133111ebULL;
  return value ^ (value >> 31);
}

std::uint64_t order_hash(std::uint64_t seed, std::uint32_t index, std::uint64_t purpose) {
  return mix(mix(seed ^ purpose) + index);
}

json::value quoted_chunk(std::int64_t total_cents) { return json::object{{"phase", "quoted"}, {"total_cents", total_cents}}; }
json::value charged_chunk(const std::string& payment) { return json::object{{"phase", "charged"}, {"payment", payment}}; }
json::value awaiting_chunk() {
  return json::object{{"phase", "awaiting_approval"}, {"timeout_ms", kApprovalTimeout.count()}};
}
json::value decided_chunk(Outcome outcome) {
  const char* phase = outcome == Outcome::shipped ? "approved" : outcome == Outcome::rejected ? "rejected" : "expired";
  return json::object{{"phase", phase}};
}
json::value shipped_chunk(const std::string& tracking) { return json::object{{"phase", "shipped"}, {"tracking", tracking}}; }

}  // namespace

void tag_invoke(const json::value_from_tag&, json::value& value, const Order& order) {
  value = json::object{
      {"id", order.id}, {"customer", order.customer}, {"items", order.items}, {"unit_cents", order.unit_cents}};
}

Order tag_invoke(const json::value_to_tag<Order>&, const json::value& value) {
  const auto& object = value.as_object();
  return Order{json::value_to<std::string>(object.at("id")), json::value_to<std::string>(object.at("customer")),
               json::value_to<std::uint32_t>(object.at("items")), json::value_to<std::int64_t>(object.at("unit_cents"))};
}

void tag_invoke(const json::value_from_tag&, json::value& value, const Approval& approval) {
  value = json::object{{"approved", approval.approved}, {"by", approval.by}};
}

Approval tag_invoke(const json::value_to_tag<Approval>&, const json::value& value) {
  const auto& object = value.as_object();
  return Approval{object.at("approved").as_bool(), json::value_to<std::string>(object.at("by"))};
}

void tag_invoke(const json::value_from_tag&, json::value& value, const Receipt& receipt) {
  value = json::object{{"order", receipt.order},
                       {"total_cents", receipt.total_cents},
                       {"payment", receipt.payment},
                       {"outcome", receipt.outcome},
                       {"tracking", receipt.tracking},
                       {"items", receipt.items}};
}

Receipt tag_invoke(const json::value_to_tag<Receipt>&, const json::value& value) {
  const auto& object = value.as_object();
  return Receipt{json::value_to<std::string>(object.at("order")), json::value_to<std::int64_t>(object.at("total_cents")),
                 json::value_to<std::string>(object.at("payment")), json::value_to<std::string>(object.at("outcome")),
                 json::value_to<std::string>(object.at("tracking")), json::value_to<std::uint32_t>(object.at("items"))};
}

const char* plan_name(Plan plan) noexcept {
  switch (plan) {
    case Plan::approve: return "approve";
    case Plan::reject: return "reject";
    case Plan::stay_silent: return "stay silent";
  }
  return "?";
}

const char* outcome_name(Outcome outcome) noexcept {
  switch (outcome) {
    case Outcome::shipped: return "shipped";
    case Outcome::rejected: return "rejected";
    case Outcome::expired: return "expired";
  }
  return "?";
}

std::optional<Outcome> outcome_from_name(std::string_view name) {
  for (auto outcome : {Outcome::shipped, Outcome::rejected, Outcome::expired})
    if (name == outcome_name(outcome)) return outcome;
  return std::nullopt;
}

Outcome planned_outcome(Plan plan) noexcept {
  switch (plan) {
    case Plan::approve: return Outcome::shipped;
    case Plan::reject: return Outcome::rejected;
    case Plan::stay_silent: return Outcome::expired;
  }
  return Outcome::expired;
}

std::string order_id(std::uint32_t index) { return fmt::format("order-{:05}", index); }

Order make_order(std::uint64_t seed, std::uint32_t index) {
  auto hash = order_hash(seed, index, 1);
  return Order{order_id(index), fmt::format("customer-{:03}", hash % 97), static_cast<std::uint32_t>(1 + (hash >> 8) % 8),
               static_cast<std::int64_t>(250 + (hash >> 16) % 4750)};
}

Plan make_plan(std::uint64_t seed, std::uint32_t index) {
  // Half approved, three in ten rejected, one in five never answered (the
  // wait times out).
  auto draw = order_hash(seed, index, 2) % 10;
  return draw < 5 ? Plan::approve : draw < 8 ? Plan::reject : Plan::stay_silent;
}

Approval make_approval(Plan plan, std::uint32_t index) {
  return Approval{plan == Plan::approve, fmt::format("desk-{}", index % 3)};
}

std::optional<std::uint32_t> make_item_change(std::uint64_t seed, std::uint32_t index) {
  // Three in ten orders get 1 to 3 more items, one in ten a count the
  // validator refuses, the rest none.
  auto draw = order_hash(seed, index, 3);
  if (draw % 10 < 3) return static_cast<std::uint32_t>(1 + (draw >> 8) % kAddItemsMax);
  if (draw % 10 == 3) return kAddItemsMax + 2;
  return std::nullopt;
}

std::string item_change_refusal(std::uint32_t extra) {
  if (extra >= 1 && extra <= kAddItemsMax) return {};
  return fmt::format("add 1 to {} items at a time", kAddItemsMax);
}

std::int64_t quote_total_cents(const Order& order) {
  auto total = static_cast<std::int64_t>(order.items) * order.unit_cents;
  if (order.items >= 5) total -= total / 10;  // volume discount
  if (total < 5000) total += 499;             // shipping
  return total;
}

std::string tracking_number(const std::string& order_id) {
  std::uint64_t hash = 0xcbf29ce484222325ULL;  // FNV-1a
  for (unsigned char c : order_id) hash = (hash ^ c) * 0x100000001b3ULL;
  return fmt::format("TRK{:012X}", hash & 0xffffffffffffULL);
}

Receipt expected_receipt(const Order& order, Outcome outcome, const std::string& payment_key, std::uint32_t items) {
  return Receipt{order.id, quote_total_cents(order), payment_key, outcome_name(outcome),
                 outcome == Outcome::shipped ? tracking_number(order.id) : std::string(), items};
}

std::vector<json::value> expected_progress(const Order& order, Outcome outcome, const std::string& payment_key) {
  std::vector<json::value> chunks{quoted_chunk(quote_total_cents(order)), charged_chunk(payment_key), awaiting_chunk(),
                                  decided_chunk(outcome)};
  if (outcome == Outcome::shipped) chunks.push_back(shipped_chunk(tracking_number(order.id)));
  return chunks;
}

std::vector<std::string_view> steps_before_chunk(const json::value& chunk) {
  const auto* object = chunk.if_object();
  const auto* phase = object ? object->if_contains("phase") : nullptr;
  if (!phase || !phase->is_string()) return {};
  const auto& name = phase->get_string();
  if (name == "quoted") return {kQuoteStep, kReserveStep};
  if (name == "charged") return {kQuoteStep, kReserveStep, kChargeStep};
  // The fraud check, when the order took it, is journaled before these.
  if (name == "awaiting_approval" || name == "approved" || name == "rejected" || name == "expired")
    return {kQuoteStep, kReserveStep, kChargeStep, kFraudStep};
  if (name == "shipped") return {kQuoteStep, kReserveStep, kChargeStep, kFraudStep, kShipStep};
  return {};
}

Task<Receipt> order_workflow(Ctx& ctx, Order order, OrderServices& services, bool patched) {
  Stream progress = ctx.stream(std::string(kProgressStream));

  // Each step function is a named local, not a lambda written inside the
  // co_await: GCC 12 relocates such a closure bytewise, so a captured
  // std::string points into the old copy and is freed from there (see
  // docs/engine.md). Named, it works with every compiler.
  const auto quote = [order, &services](StepContext& step) {
    services.step_running(order.id, kQuoteStep, step);
    return quote_total_cents(order);
  };
  // The stock is held while the price is worked out: both steps are started
  // before either is awaited, and Ctx::all waits for the two.
  const auto reserve = [id = order.id, &services](StepContext& step) -> Task<std::string> {
    services.step_running(id, kReserveStep, step);
    co_await ServiceCall(services, id, kReserveStep);
    co_return "hold-" + id;
  };
  Future<std::int64_t> quoted = ctx.step(std::string(kQuoteStep), quote).start();
  Future<std::string> held = ctx.step(std::string(kReserveStep), reserve).start();
  const auto [total_cents, hold] = co_await ctx.all(quoted, held);
  (void)hold;
  co_await progress.write(quoted_chunk(total_cents));

  // The payment service deduplicates charges by this key, so a charge
  // repeated after a crash (before its result was durable) bills once. It
  // confirms the payment later, from outside, by completing the awakeable
  // with the key: its token is journaled before the charge runs, so a
  // repeated charge hands over the same token.
  Awakeable<std::string> paid = ctx.awakeable<std::string>(std::string(kPaymentAwakeable));
  const auto charge = [id = order.id, token = paid.token, &services](StepContext& step) -> Task<std::string> {
    services.step_running(id, kChargeStep, step);
    services.request_payment(id, token, step.key());
    co_await ServiceCall(services, id, kChargeStep);
    co_return step.key();
  };
  const std::string key = co_await ctx.step(std::string(kChargeStep), charge);
  const std::string payment = co_await paid.future;
  if (payment != key) throw std::runtime_error("the payment provider confirmed another charge: " + payment);
  co_await progress.write(charged_chunk(payment));

  // The second phase's change. It writes no chunk and changes no result, so
  // the ledger's other checks hold for either path; its own check is that
  // an order whose journal went past this point under the old code never
  // runs it.
  if (patched && ctx.patched(kFraudPatch)) {
    const auto check = [id = order.id, &services](StepContext& step) {
      services.step_running(id, kFraudStep, step);
      return true;
    };
    (void)co_await ctx.step(std::string(kFraudStep), check);
  }

  co_await progress.write(awaiting_chunk());
  // While the order awaits its approval, items may be added; the answer is
  // the new count. After the decision the validator refuses.
  std::uint32_t items = order.items;
  bool decided = false;
  ctx.on_update(kAddItemsUpdate, [&decided](const std::uint32_t& extra) {
    return decided ? std::string("the order is decided") : item_change_refusal(extra);
  });
  Future<std::optional<Approval>> decision = ctx.wait_for(kApprovalSignal).timeout(kApprovalTimeout).start();
  Future<UpdateRequest<std::uint32_t, std::uint32_t>> change = ctx.next_update(kAddItemsUpdate).start();
  while (co_await ctx.any(decision, change) == 1) {
    auto request = co_await change;
    items += request.arg;
    co_await ctx.reply(request, items);
    change = ctx.next_update(kAddItemsUpdate).start();
  }
  decided = true;
  const std::optional<Approval> approval = co_await decision;
  const Outcome outcome = !approval ? Outcome::expired : approval->approved ? Outcome::shipped : Outcome::rejected;
  co_await progress.write(decided_chunk(outcome));

  std::string tracking;
  if (outcome == Outcome::shipped) {
    const auto ship = [id = order.id, &services](StepContext& step) -> Task<std::string> {
      services.step_running(id, kShipStep, step);
      co_await ServiceCall(services, id, kShipStep);
      co_return tracking_number(id);
    };
    tracking = co_await ctx.step(std::string(kShipStep), ship);
    co_await progress.write(shipped_chunk(tracking));
  }
  co_await progress.close();
  co_return Receipt{order.id, total_cents, payment, outcome_name(outcome), tracking, items};
}

}  // namespace fusee::cli
