// The demo's application: an `order` workflow. It quotes a price, charges
// the customer (keyed by the step's idempotency key) through a payment
// provider that confirms the payment later by completing the run's
// awakeable, publishes its progress on the stream "progress", waits for a
// human approval signal with a timeout -- taking "add_items" updates
// (validated: 1 to 3 items, and only before the decision) meanwhile --,
// ships only an approved order, and returns a Receipt.
//
// Everything here is deterministic: the orders and what the approval desk
// will do with each come from (seed, index), and the receipt and the progress
// stream follow from the order, the approval outcome and the charge key. The
// demo's checker recomputes them from the same functions. No I/O, clock or
// thread: the workflow reports each step's execution through OrderServices,
// which the demo's child process implements.
#pragma once

#include <boost/json.hpp>
#include <chrono>
#include <coroutine>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fusee/ctx.hpp"
#include "fusee/refs.hpp"
#include "fusee/task.hpp"

namespace fusee::cli {

struct Order {
  std::string id;
  std::string customer;
  std::uint32_t items = 0;
  std::int64_t unit_cents = 0;
};

// The value of the "approval" signal.
struct Approval {
  bool approved = false;
  std::string by;  // who decided
};

struct Receipt {
  std::string order;
  std::int64_t total_cents = 0;
  std::string payment;   // the charge step's idempotency key
  std::string outcome;   // outcome_name(): shipped, rejected or expired
  std::string tracking;  // only when shipped
  std::uint32_t items = 0;  // to ship: the order's, plus every accepted add_items
};

void tag_invoke(const boost::json::value_from_tag&, boost::json::value& json, const Order& order);
Order tag_invoke(const boost::json::value_to_tag<Order>&, const boost::json::value& json);
void tag_invoke(const boost::json::value_from_tag&, boost::json::value& json, const Approval& approval);
Approval tag_invoke(const boost::json::value_to_tag<Approval>&, const boost::json::value& json);
void tag_invoke(const boost::json::value_from_tag&, boost::json::value& json, const Receipt& receipt);
Receipt tag_invoke(const boost::json::value_to_tag<Receipt>&, const boost::json::value& json);

inline const WorkflowRef<Order, Receipt> kOrderWorkflow{"order"};
inline const Signal<Approval> kApprovalSignal{"approval"};
// Adds items to an order awaiting its approval; answers the new count.
inline const Update<std::uint32_t, std::uint32_t> kAddItemsUpdate{"add_items"};
inline constexpr std::uint32_t kAddItemsMax = 3;
// The payment provider's confirmation: completed with the charge's key.
inline constexpr std::string_view kPaymentAwakeable = "payment";
inline constexpr std::string_view kProgressStream = "progress";
// How long an order waits for its approval. A few seconds, so that a wait
// spans several of the demo's lives and the demo still ends in seconds.
inline constexpr std::chrono::milliseconds kApprovalTimeout{2000};

// The steps, in the order a run executes them.
inline constexpr std::string_view kQuoteStep = "quote";
// Holds the order's stock; runs at the same time as the quote.
inline constexpr std::string_view kReserveStep = "reserve";
inline constexpr std::string_view kChargeStep = "charge";
inline constexpr std::string_view kShipStep = "ship";
// The second phase's code change: a fraud check after the charge, under
// ctx.patched(kFraudPatch), so orders whose journal the first code wrote past
// that point keep the old path.
inline constexpr std::string_view kFraudStep = "fraud_check";
inline constexpr std::string_view kFraudPatch = "fraud-check";

// What the approval desk does with an order.
enum class Plan { approve, reject, stay_silent };
// How an order ended.
enum class Outcome { shipped, rejected, expired };
const char* plan_name(Plan plan) noexcept;
const char* outcome_name(Outcome outcome) noexcept;
std::optional<Outcome> outcome_from_name(std::string_view name);
// The outcome a plan leads to when the approval arrives in time.
Outcome planned_outcome(Plan plan) noexcept;

std::string order_id(std::uint32_t index);
Order make_order(std::uint64_t seed, std::uint32_t index);
Plan make_plan(std::uint64_t seed, std::uint32_t index);
// The approval the desk sends for a plan (approve or reject).
Approval make_approval(Plan plan, std::uint32_t index);
// The items the desk adds while an order awaits approval, if any: 1 to
// kAddItemsMax, or (for some orders) a count the validator refuses.
std::optional<std::uint32_t> make_item_change(std::uint64_t seed, std::uint32_t index);
// Why the validator refuses adding `extra` items; empty when it accepts.
std::string item_change_refusal(std::uint32_t extra);

// What the quote step computes.
std::int64_t quote_total_cents(const Order& order);
// What the ship step returns.
std::string tracking_number(const std::string& order_id);

// The receipt and the progress stream an order must end with.
Receipt expected_receipt(const Order& order, Outcome outcome, const std::string& payment_key, std::uint32_t items);
std::vector<boost::json::value> expected_progress(const Order& order, Outcome outcome, const std::string& payment_key);
// The steps whose results a progress chunk follows in the journal: its
// delivery proves them durable. Empty for a chunk this workflow never writes.
std::vector<std::string_view> steps_before_chunk(const boost::json::value& chunk);

// The outside world the workflow's steps call: the payment service and the
// warehouse answer after a while, on their own thread. Implementations are
// called on shard threads, concurrently, and must outlive the engine.
class OrderServices {
 public:
  virtual ~OrderServices() = default;
  // Called by a step function right before it does its work.
  virtual void step_running(const std::string& order_id, std::string_view step, const StepContext& context) = 0;
  // The service called by `step` answers later: resumes `waiter` then, on
  // any thread but the caller's.
  virtual void answer_later(const std::string& order_id, std::string_view step, std::coroutine_handle<> waiter) = 0;
  // The charge step hands the payment provider the run's awakeable token;
  // the provider completes it with the charge's key later, from outside
  // the run (and again, after a crash, until acknowledged).
  virtual void request_payment(const std::string& order_id, const std::string& token, const std::string& key) = 0;
};

// co_await ServiceCall(...) in a coroutine step: waits for the service's
// answer without holding up the shard's thread.
class ServiceCall {
 public:
  ServiceCall(OrderServices& services, const std::string& order_id, std::string_view step)
      : services_(services), order_id_(order_id), step_(step) {}
  bool await_ready() const noexcept { return false; }
  // The waiter may resume on the other thread before this returns: nothing
  // here is touched after the hand-off.
  void await_suspend(std::coroutine_handle<> waiter) { services_.answer_later(order_id_, step_, waiter); }
  void await_resume() const noexcept {}

 private:
  OrderServices& services_;
  const std::string& order_id_;
  std::string_view step_;
};

// The workflow itself. services must outlive the run.
// patched: the second phase's code (docs/cli.md, `fusee demo`).
Task<Receipt> order_workflow(Ctx& ctx, Order order, OrderServices& services, bool patched);

}  // namespace fusee::cli
