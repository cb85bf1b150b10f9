// Ctx: what a workflow sees of the engine. Every call is a journaled
// command at the next position of the run's journal; on replay a recorded
// command returns its recorded outcome without running again. A command is
// awaited at once (co_await ctx.step(...)) or started with .start(), which
// gives a Future to await later; several started commands run at once, and
// Ctx::all and Ctx::any wait for them together. Ctx belongs to one run and
// is used only from that run's coroutine (its shard's thread).
//
// Durability: code runs ahead of the disk. A step's result is appended and
// the workflow continues at once; the next step's function runs only once
// every earlier record of the run is durable, so an outside call is never
// made on a result a crash could take back.
//
// Cancellation (Engine::cancel): every command the run waits for at that
// moment throws Error(errc::cancelled), once; the code may catch it and run
// clean-up commands, which work as usual. A run whose code lets that error
// escape ends `cancelled`.
#pragma once

#include <boost/json.hpp>
#include <chrono>
#include <coroutine>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <stop_token>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "fusee/clock.hpp"
#include "fusee/compiler.hpp"
#include "fusee/error.hpp"
#include "fusee/refs.hpp"
#include "fusee/task.hpp"

namespace fusee {

// How a failing step is tried again. Without .retry() a step has one
// attempt (as in DBOS). Backoff before attempt n+1: initial * multiplier^(n-1),
// capped at maximum_backoff. Each failed attempt and its retry time are
// journaled, so a restart keeps the count and the schedule.
// Thrown by Ctx::continue_as_new: ends this generation of the run and
// starts the next with `input` (Engine catches it). Deliberately not a
// std::exception: let it pass through catch (const std::exception&).
struct ContinueAsNew {
  boost::json::value input;
};

struct RetryPolicy {
  std::uint32_t attempts = 1;  // total attempts, first included
  std::chrono::milliseconds initial_backoff{100};
  std::chrono::milliseconds maximum_backoff{10'000};
  double multiplier = 2.0;
  // true: this error is final, no more attempts (TerminalError always is).
  std::function<bool(const std::exception&)> non_retryable;
  // How long one attempt of a coroutine step may take (0: no limit). Past
  // it the step's stop token asks it to stop, the attempt counts as failed
  // (errc::timed_out) and the policy decides whether to try again; whatever
  // the abandoned attempt returns later is dropped. A plain step cannot be
  // interrupted, so it has no attempt timeout.
  std::chrono::milliseconds attempt_timeout{0};
  // How long the step may take across all its attempts, from its first
  // attempt (0: no limit): no attempt starts or runs past it, and the step
  // fails with errc::step_failed saying its deadline passed.
  std::chrono::milliseconds deadline{0};
};

// What a step's function sees.
class StepContext {
 public:
  StepContext(std::string key, std::uint32_t attempt, std::stop_token stop = {})
      : key_(std::move(key)), attempt_(attempt), stop_(std::move(stop)) {}
  // A deterministic idempotency key for outside services: the same for every
  // attempt and every replay of this step, different for every other step.
  const std::string& key() const { return key_; }
  // 1 for the first attempt.
  std::uint32_t attempt() const { return attempt_; }
  // Stop requested: the attempt passed its timeout or the step its deadline
  // (RetryPolicy); a coroutine step should give up soon, as its result will
  // be dropped.
  std::stop_token stop_token() const { return stop_; }

 private:
  std::string key_;
  std::uint32_t attempt_;
  std::stop_token stop_;
};

// What happens to a child run still running when its parent ends (or, for
// a child the parent awaits, when the parent is cancelled), chosen at
// ctx.child(...).on_parent_close(...). Journaled with the child's start.
enum class ParentClose : std::uint8_t {
  abandon = 0,    // the child goes on as a run of its own (the default)
  cancel = 1,     // the child is cancelled (Engine::cancel): it may clean up
  terminate = 2,  // the child is terminated (Engine::terminate)
};

namespace detail {

// One command of a run. The engine fills it in on the run's shard thread and
// resumes `waiter` (the command awaited at once) or `waiters` (a started
// command's Future, awaited later, maybe more than once).
struct Completion {
  std::coroutine_handle<> waiter;
  boost::json::value value;
  std::exception_ptr error;
  bool empty = false;  // wait_for: timed out
  // Set by the engine: the command's journal position; whether it completed,
  // and its place among the run's completions (1 for the first).
  std::uint32_t position = 0;
  bool done = false;
  std::uint64_t done_order = 0;
  std::vector<std::coroutine_handle<>> waiters;
  // A started command's own state (its Future's), kept alive by the engine
  // until the command completes or the run stops.
  std::shared_ptr<void> keep_alive;
  // Ctx::awakeable: its token, set when the command starts.
  std::string token;
};

// A query handler, type-erased: the argument and the answer as JSON.
using QueryHandler = std::function<boost::json::value(const boost::json::value&)>;
// An update's validator, type-erased: why it refuses the argument, or "" to
// accept it. Also checks that the argument fits the update's type.
using UpdateValidator = std::function<std::string(const boost::json::value&)>;

struct StepBody {
  std::function<boost::json::value(StepContext&)> plain;
  std::function<Task<boost::json::value>(StepContext&)> coroutine;
  std::string limit;  // StepAwaitable::limit: each attempt holds a permit of this limit
};

// The engine side of a run. Each call starts a command; it returns true when
// the command completed at once (no suspension) and false when the engine
// will resume completion.waiter later (or never, if the run stops).
class RunPort {
 public:
  virtual ~RunPort() = default;
  virtual bool step(std::string_view name, const RetryPolicy& policy, StepBody body, Completion& completion) = 0;
  virtual bool sleep(std::string_view name, std::chrono::milliseconds duration, Completion& completion) = 0;
  virtual bool sleep_until(std::string_view name, TimePoint due, Completion& completion) = 0;
  virtual bool wait_for(std::string_view signal, std::optional<std::chrono::milliseconds> timeout,
                        Completion& completion) = 0;
  virtual bool stream_write(std::string_view stream, boost::json::value chunk, Completion& completion) = 0;
  virtual bool stream_close(std::string_view stream, Completion& completion) = 0;
  virtual bool now(Completion& completion) = 0;
  virtual bool random(Completion& completion) = 0;
  virtual bool child(std::string_view workflow, std::string_view id, boost::json::value input,
                     ParentClose on_parent_close, Completion& completion) = 0;
  // Ctx::any: completion.value becomes the index (into candidates) of the
  // command that completed first, as the journal records it.
  virtual bool select(std::span<Completion* const> candidates, Completion& completion) = 0;
  // Ctx::patched (deprecated: Ctx::deprecate_patch): whether the run takes
  // patch `id`'s code path. Synchronous; never suspends.
  virtual bool patched(std::string_view id, bool deprecated) = 0;
  // Ctx::on_query: replaces any handler of that name.
  virtual void on_query(std::string name, QueryHandler handler) = 0;
  // Ctx::on_update: the run takes update `name` from now on (replaces any
  // validator of that name).
  virtual void on_update(std::string name, UpdateValidator validator) = 0;
  // Ctx::next_update: completion.value becomes {"id": ..., "arg": ...}.
  virtual bool next_update(std::string_view name, Completion& completion) = 0;
  // Ctx::reply / reply_error: answers update `update_id`; completes at once.
  virtual bool reply_update(std::string_view name, std::string_view update_id, bool succeeded,
                            boost::json::value value, Completion& completion) = 0;
  // Ctx::awakeable: completion.token is set at once; the command completes
  // with the value (or the failure) someone sends with the token.
  virtual bool awakeable(std::string_view name, Completion& completion) = 0;
  // Ctx::cancel_run / terminate_run: completes once the request is durable
  // on the other run's shard (or that run had ended, or never was).
  virtual bool close_run(std::string_view id, std::string_view reason, bool terminate, Completion& completion) = 0;
  virtual const std::string& run_id() const = 0;
};

template <typename T>
struct FutureHolder {
  virtual ~FutureHolder() = default;
  virtual Completion& completion() = 0;
  virtual T result() = 0;
  virtual RunPort& port() = 0;
};

template <typename A, typename T>
struct FutureHolderOf final : FutureHolder<T> {
  explicit FutureHolderOf(A&& given) : awaitable(std::move(given)) {}
  Completion& completion() override { return awaitable.completion(); }
  T result() override { return awaitable.await_resume(); }
  RunPort& port() override { return awaitable.port(); }
  A awaitable;
};

}  // namespace detail

// A started command's result: co_await it (any number of times, from the
// workflow's coroutine), or wait for several with Ctx::all and Ctx::any. The
// command runs whether or not the Future is awaited; a run that ends first
// leaves it behind (a child run goes on as a run of its own). Copies share
// the one command. Not thread-safe: the run's coroutine only.
template <typename T>
class [[nodiscard]] Future {
 public:
  explicit Future(std::shared_ptr<detail::FutureHolder<T>> holder) : holder_(std::move(holder)) {}
  bool done() const { return holder_->completion().done; }
  bool await_ready() const { return done(); }
  void await_suspend(std::coroutine_handle<> waiter) { holder_->completion().waiters.push_back(waiter); }
  T await_resume() { return holder_->result(); }
  detail::Completion& completion() const { return holder_->completion(); }
  // Waits at most `limit` for the command (through a journaled timer and
  // Ctx::any): its result, or nothing when the time ran out first (for a
  // command without a result, whether it completed). The command itself
  // goes on; await the future again for its later result.
  auto timeout(std::chrono::milliseconds limit) const;
  detail::RunPort& port() const { return holder_->port(); }

 private:
  std::shared_ptr<detail::FutureHolder<T>> holder_;
};

namespace detail {

// Shared by every command awaitable: suspend, let the engine decide.
template <typename Derived>
class CommandAwaitable {
 public:
  bool await_ready() const noexcept { return false; }
  bool await_suspend(std::coroutine_handle<> waiter) {
    completion_.waiter = waiter;
    return !static_cast<Derived*>(this)->issue(completion_);
  }
  // Starts the command now, at the next position of the run's journal, and
  // gives a Future for its result instead of waiting for it.
  auto start() && {
    using T = decltype(std::declval<Derived&>().await_resume());
    auto holder = std::make_shared<FutureHolderOf<Derived, T>>(std::move(static_cast<Derived&>(*this)));
    Completion& completion = holder->completion();
    completion.keep_alive = holder;
    try {
      (void)holder->awaitable.issue(completion);
    } catch (...) {
      // Refused before it started (a query handler may not start commands):
      // nothing will complete it, so nothing may keep it.
      completion.keep_alive.reset();
      throw;
    }
    return Future<T>(std::move(holder));
  }
  Completion& completion() { return completion_; }
  RunPort& port() { return *port_; }

 protected:
  explicit CommandAwaitable(RunPort& port) : port_(&port) {}
  void rethrow_if_failed() const {
    if (completion_.error) std::rethrow_exception(completion_.error);
  }
  RunPort* port_;
  Completion completion_;
};

// GCC destroys twice an object aggregate-initialized as a temporary inside a
// co_await expression -- a lambda's closure, a struct written Order{...} --
// when it has a destructor to run (fusee/compiler.hpp). These say whether an
// argument, as passed, may be such a temporary; the calls that take one
// refuse it at compile time on GCC.
template <typename F>
inline constexpr bool kGccMiscompilesTemporaryFunction =
    FUSEE_REFUSE_BRACED_TEMPORARIES && !std::is_lvalue_reference_v<F> && !std::is_trivially_copyable_v<std::decay_t<F>>;
template <typename T>
inline constexpr bool kGccMiscompilesTemporaryValue =
    FUSEE_REFUSE_BRACED_TEMPORARIES && !std::is_lvalue_reference_v<T> && std::is_aggregate_v<std::remove_cvref_t<T>> &&
    !std::is_trivially_destructible_v<std::remove_cvref_t<T>>;

}  // namespace detail

// Hands a step function that cannot be copied to Ctx::step, which moves
// from it at once: co_await ctx.step("charge", fusee::moved(charge)). A
// pointer, trivially copyable, so GCC's rule (fusee/compiler.hpp) lets it
// be written inside co_await.
template <typename F>
struct Moved {
  F* target;
};
template <typename F>
Moved<F> moved(F& fn) {
  return Moved<F>{&fn};
}

namespace detail {

template <typename F>
struct MovedTarget {
  using type = F;
  static constexpr bool moved = false;
};
template <typename F>
struct MovedTarget<Moved<F>> {
  using type = F;
  static constexpr bool moved = true;
};

// Whether values of T travel as JSON (Boost.JSON's value_from and
// value_to both apply). Asserted where a type enters the journal, so the
// compiler names the call instead of Boost's "No suitable tag_invoke
// overload" deep inside it.
template <typename T>
inline constexpr bool kJsonConvertible =
    std::is_void_v<T> || (boost::json::has_value_from<T>::value && boost::json::has_value_to<T>::value);
#define FUSEE_NEEDS_JSON(what)                                                                                   \
  "fusee: " what " must convert to and from JSON: give the type tag_invoke overloads for Boost.JSON "          \
  "(value_from_tag and value_to_tag, in the type's namespace) or describe it with BOOST_DESCRIBE_STRUCT; see " \
  "docs/tutorial.md, \"Your own types\""

template <typename F>
auto call_step(F& fn, StepContext& step) {
  if constexpr (std::is_invocable_v<F&, StepContext&>) {
    return fn(step);
  } else {
    return fn();
  }
}

template <typename F>
using StepResultOf = decltype(call_step(std::declval<F&>(), std::declval<StepContext&>()));

template <typename T>
struct TaskValue {
  using type = T;
};
template <typename T>
struct TaskValue<Task<T>> {
  using type = T;
};

template <typename T>
boost::json::value to_json(T&& value) {
  return boost::json::value_from(std::forward<T>(value));
}

template <typename T>
T from_json(const boost::json::value& value) {
  if constexpr (std::is_void_v<T>) {
    return;
  } else {
    return boost::json::value_to<T>(value);
  }
}

// The frame holds the step's function (shared, so a move-only one works)
// for as long as the attempt runs.
template <typename F>
Task<boost::json::value> run_coroutine_step(std::shared_ptr<F> fn, StepContext& step) {
  using Value = typename TaskValue<StepResultOf<F>>::type;
  if constexpr (std::is_void_v<Value>) {
    co_await call_step(*fn, step);
    co_return boost::json::value{};
  } else {
    co_return to_json(co_await call_step(*fn, step));
  }
}

}  // namespace detail

template <typename T>
class [[nodiscard]] StepAwaitable : public detail::CommandAwaitable<StepAwaitable<T>> {
 public:
  StepAwaitable(detail::RunPort& port, std::string name, detail::StepBody body)
      : detail::CommandAwaitable<StepAwaitable<T>>(port), name_(std::move(name)), body_(std::move(body)) {}
  // Throws Error(invalid_argument) for an attempt_timeout on a plain step,
  // which could not interrupt it.
  [[nodiscard]] StepAwaitable&& retry(RetryPolicy policy) && {
    if (policy.attempt_timeout.count() > 0 && body_.plain) {
      throw Error(errc::invalid_argument,
                  "step '" + name_ +
                      "': RetryPolicy::attempt_timeout needs a coroutine step (one that returns a Task and watches "
                      "StepContext::stop_token()); a plain step's function cannot be interrupted. Make the step a "
                      "coroutine, or bound the whole step with RetryPolicy::deadline");
    }
    policy_ = std::move(policy);
    return std::move(*this);
  }
  // Each attempt runs holding a permit of the named limit (Engine::limit):
  // it waits for one first, which is not an attempt (nothing is journaled
  // for the wait; the engine's metrics count it). A limit not set on the
  // engine yet grants nothing until it is (Config::warn says so).
  [[nodiscard]] StepAwaitable&& limit(std::string name) && {
    body_.limit = std::move(name);
    return std::move(*this);
  }
  bool issue(detail::Completion& completion) {
    return this->port_->step(name_, policy_, std::move(body_), completion);
  }
  T await_resume() {
    this->rethrow_if_failed();
    return detail::from_json<T>(this->completion_.value);
  }

 private:
  std::string name_;
  detail::StepBody body_;
  RetryPolicy policy_;
};

class [[nodiscard]] SleepAwaitable : public detail::CommandAwaitable<SleepAwaitable> {
 public:
  SleepAwaitable(detail::RunPort& port, std::string name, std::chrono::milliseconds duration)
      : CommandAwaitable(port), name_(std::move(name)), duration_(duration) {}
  SleepAwaitable(detail::RunPort& port, std::string name, TimePoint due)
      : CommandAwaitable(port), name_(std::move(name)), due_(due) {}
  bool issue(detail::Completion& completion) {
    return due_ ? port_->sleep_until(name_, *due_, completion) : port_->sleep(name_, duration_, completion);
  }
  void await_resume() { rethrow_if_failed(); }

 private:
  std::string name_;
  std::chrono::milliseconds duration_{0};
  std::optional<TimePoint> due_;
};

class [[nodiscard]] CloseRunAwaitable : public detail::CommandAwaitable<CloseRunAwaitable> {
 public:
  CloseRunAwaitable(detail::RunPort& port, std::string id, std::string reason, bool terminate)
      : CommandAwaitable(port), id_(std::move(id)), reason_(std::move(reason)), terminate_(terminate) {}
  bool issue(detail::Completion& completion) { return port_->close_run(id_, reason_, terminate_, completion); }
  void await_resume() { rethrow_if_failed(); }

 private:
  std::string id_;
  std::string reason_;
  bool terminate_;
};

// co_await ctx.wait_for(signal) gives the next value sent to this run under
// the signal's name; with .timeout(d), nothing if none came within d.
template <typename T>
class [[nodiscard]] WaitAwaitable : public detail::CommandAwaitable<WaitAwaitable<T>> {
 public:
  WaitAwaitable(detail::RunPort& port, std::string name)
      : detail::CommandAwaitable<WaitAwaitable<T>>(port), name_(std::move(name)) {}
  WaitAwaitable&& timeout(std::chrono::milliseconds timeout) && {
    timeout_ = timeout;
    return std::move(*this);
  }
  bool issue(detail::Completion& completion) { return this->port_->wait_for(name_, timeout_, completion); }
  // A value that does not fit T throws Error(invalid_argument), which the
  // workflow may catch (the signal is used up). Declaring the workflow's
  // signals at registration refuses such a value before it is recorded.
  std::optional<T> await_resume() {
    this->rethrow_if_failed();
    if (this->completion_.empty) return std::nullopt;
    auto converted = boost::json::try_value_to<T>(this->completion_.value);
    if (!converted) {
      throw Error(errc::invalid_argument, "signal '" + name_ + "': the value " +
                                              boost::json::serialize(this->completion_.value) +
                                              " does not fit the type the workflow waits for: " +
                                              converted.error().message());
    }
    return std::move(*converted);
  }

 private:
  std::string name_;
  std::optional<std::chrono::milliseconds> timeout_;
};

// A journaled value (now, random): recorded the first time, replayed after.
template <typename T>
class [[nodiscard]] ValueAwaitable : public detail::CommandAwaitable<ValueAwaitable<T>> {
 public:
  using Start = bool (detail::RunPort::*)(detail::Completion&);
  ValueAwaitable(detail::RunPort& port, Start start) : detail::CommandAwaitable<ValueAwaitable<T>>(port), start_(start) {}
  bool issue(detail::Completion& completion) { return (this->port_->*start_)(completion); }
  T await_resume() {
    this->rethrow_if_failed();
    if constexpr (std::is_same_v<T, TimePoint>) {
      return TimePoint{std::chrono::milliseconds(boost::json::value_to<std::int64_t>(this->completion_.value))};
    } else {
      return boost::json::value_to<T>(this->completion_.value);
    }
  }

 private:
  Start start_;
};

// A stream command: a chunk (write) or the end (close). Never waits for the
// disk: readers get the chunk once it is durable.
class [[nodiscard]] StreamAwaitable : public detail::CommandAwaitable<StreamAwaitable> {
 public:
  StreamAwaitable(detail::RunPort& port, std::string name, std::optional<boost::json::value> chunk)
      : CommandAwaitable(port), name_(std::move(name)), chunk_(std::move(chunk)) {}
  bool issue(detail::Completion& completion) {
    if (chunk_) return port_->stream_write(name_, std::move(*chunk_), completion);
    return port_->stream_close(name_, completion);
  }
  // The chunk's offset in its stream (0 for close).
  std::uint64_t await_resume() {
    rethrow_if_failed();
    if (completion_.value.is_null()) return 0;
    return boost::json::value_to<std::uint64_t>(completion_.value);
  }

 private:
  std::string name_;
  std::optional<boost::json::value> chunk_;
};

// A named stream of a run: offsets start at 0 and have no gaps.
class Stream {
 public:
  Stream(detail::RunPort& port, std::string name) : port_(&port), name_(std::move(name)) {}
  template <typename T>
  StreamAwaitable write(T&& chunk) {
    static_assert(!detail::kGccMiscompilesTemporaryValue<T>, FUSEE_NAME_IT_FIRST("a stream chunk"));
    return StreamAwaitable(*port_, name_, detail::to_json(chunk));
  }
  StreamAwaitable close() { return StreamAwaitable(*port_, name_, std::nullopt); }

 private:
  detail::RunPort* port_;
  std::string name_;
};

// A child run, awaited to its result; a child's failure surfaces as
// errc::failed naming the child. .on_parent_close() says what becomes of
// the child if the parent ends or is cancelled first (ParentClose).
template <typename Out>
class [[nodiscard]] ChildAwaitable : public detail::CommandAwaitable<ChildAwaitable<Out>> {
 public:
  ChildAwaitable(detail::RunPort& port, std::string workflow, std::string id, boost::json::value input)
      : detail::CommandAwaitable<ChildAwaitable<Out>>(port),
        workflow_(std::move(workflow)),
        id_(std::move(id)),
        input_(std::move(input)) {}
  ChildAwaitable&& on_parent_close(ParentClose policy) && {
    on_parent_close_ = policy;
    return std::move(*this);
  }
  bool issue(detail::Completion& completion) {
    return this->port_->child(workflow_, id_, std::move(input_), on_parent_close_, completion);
  }
  Out await_resume() {
    this->rethrow_if_failed();
    return detail::from_json<Out>(this->completion_.value);
  }

 private:
  std::string workflow_;
  std::string id_;
  boost::json::value input_;
  ParentClose on_parent_close_ = ParentClose::abandon;
};

// Ctx::any: which of several started commands completed first (its index).
// A command of its own: the journal records the winner, so a replay gives the
// same one.
class [[nodiscard]] AnyAwaitable : public detail::CommandAwaitable<AnyAwaitable> {
 public:
  AnyAwaitable(detail::RunPort& port, std::vector<detail::Completion*> candidates)
      : CommandAwaitable(port), candidates_(std::move(candidates)) {}
  bool issue(detail::Completion& completion) { return port_->select(candidates_, completion); }
  std::size_t await_resume() {
    rethrow_if_failed();
    return boost::json::value_to<std::size_t>(completion_.value);
  }

 private:
  std::vector<detail::Completion*> candidates_;
};

// An accepted update the code took (Ctx::next_update): answer it with
// Ctx::reply or Ctx::reply_error. Its id is the caller's (or one the engine
// gave it); the same id sent again gets the same answer.
template <typename Arg, typename Out>
struct UpdateRequest {
  std::string name;
  std::string id;
  Arg arg;
};

template <typename Arg, typename Out>
class [[nodiscard]] NextUpdateAwaitable : public detail::CommandAwaitable<NextUpdateAwaitable<Arg, Out>> {
 public:
  NextUpdateAwaitable(detail::RunPort& port, std::string name)
      : detail::CommandAwaitable<NextUpdateAwaitable<Arg, Out>>(port), name_(std::move(name)) {}
  bool issue(detail::Completion& completion) { return this->port_->next_update(name_, completion); }
  // The argument was checked against Arg when the update was accepted (its
  // validator converts it), so a mismatch here means the workflow's code
  // changed the type: Error(invalid_argument), which the code may catch.
  UpdateRequest<Arg, Out> await_resume() {
    this->rethrow_if_failed();
    const auto& taken = this->completion_.value.as_object();
    auto converted = boost::json::try_value_to<Arg>(taken.at("arg"));
    if (!converted) {
      throw Error(errc::invalid_argument, "update '" + name_ + "': the argument " +
                                              boost::json::serialize(taken.at("arg")) +
                                              " does not fit its type: " + converted.error().message());
    }
    return UpdateRequest<Arg, Out>{name_, boost::json::value_to<std::string>(taken.at("id")), std::move(*converted)};
  }

 private:
  std::string name_;
};

class [[nodiscard]] ReplyAwaitable : public detail::CommandAwaitable<ReplyAwaitable> {
 public:
  ReplyAwaitable(detail::RunPort& port, std::string name, std::string update_id, bool succeeded,
                 boost::json::value value)
      : CommandAwaitable(port),
        name_(std::move(name)),
        update_id_(std::move(update_id)),
        succeeded_(succeeded),
        value_(std::move(value)) {}
  bool issue(detail::Completion& completion) {
    return port_->reply_update(name_, update_id_, succeeded_, std::move(value_), completion);
  }
  void await_resume() { rethrow_if_failed(); }

 private:
  std::string name_;
  std::string update_id_;
  bool succeeded_;
  boost::json::value value_;
};

// Ctx::awakeable's command: completes with what is sent with the token.
template <typename T>
class [[nodiscard]] AwakeableAwaitable : public detail::CommandAwaitable<AwakeableAwaitable<T>> {
 public:
  AwakeableAwaitable(detail::RunPort& port, std::string name)
      : detail::CommandAwaitable<AwakeableAwaitable<T>>(port), name_(std::move(name)) {}
  bool issue(detail::Completion& completion) { return this->port_->awakeable(name_, completion); }
  // A value that does not fit T throws Error(invalid_argument); a failure
  // sent with the token throws Error(failed) with its message.
  T await_resume() {
    this->rethrow_if_failed();
    if constexpr (std::is_void_v<T>) {
      return;
    } else {
      auto converted = boost::json::try_value_to<T>(this->completion_.value);
      if (!converted) {
        throw Error(errc::invalid_argument, "awakeable '" + name_ + "': the value " +
                                                boost::json::serialize(this->completion_.value) +
                                                " does not fit its type: " + converted.error().message());
      }
      return std::move(*converted);
    }
  }

 private:
  std::string name_;
};

// Ctx::awakeable's answer: the token to hand to whoever completes it, and
// the Future of what they send.
template <typename T>
struct [[nodiscard]] Awakeable {
  std::string token;
  Future<T> future;
};

namespace detail {

// Future::timeout: a "timeout" sleep started now, then Ctx::any of the two.
template <typename T>
Task<std::conditional_t<std::is_void_v<T>, bool, std::optional<T>>> with_timeout(Future<T> future,
                                                                                  std::chrono::milliseconds limit) {
  Future<void> timer = SleepAwaitable(future.port(), "timeout", limit).start();
  std::size_t first = co_await AnyAwaitable(future.port(), {&future.completion(), &timer.completion()});
  if constexpr (std::is_void_v<T>) {
    if (first == 0) co_await future;
    co_return first == 0;
  } else {
    if (first != 0) co_return std::nullopt;
    co_return co_await future;
  }
}

}  // namespace detail

template <typename T>
auto Future<T>::timeout(std::chrono::milliseconds limit) const {
  return detail::with_timeout(*this, limit);
}

namespace detail {

// Suspends until a started command has completed; never throws.
struct SettledAwaitable {
  Completion* completion;
  bool await_ready() const noexcept { return completion->done; }
  void await_suspend(std::coroutine_handle<> waiter) { completion->waiters.push_back(waiter); }
  void await_resume() const noexcept {}
};

// A Future's result for Ctx::all: std::monostate for a command without one.
template <typename T>
using AllValue = std::conditional_t<std::is_void_v<T>, std::monostate, T>;
template <typename T>
AllValue<T> all_value(Future<T>& future) {
  if constexpr (std::is_void_v<T>) {
    future.await_resume();
    return {};
  } else {
    return future.await_resume();
  }
}

template <typename... T>
Task<std::tuple<AllValue<T>...>> all_of(Future<T>... futures) {
  for (Completion* completion : {&futures.completion()...}) {
    if (!completion->done) co_await SettledAwaitable{completion};
  }
  // Braced: evaluated left to right, so the first failure in argument order
  // is the one thrown.
  co_return std::tuple<AllValue<T>...>{all_value(futures)...};
}

template <typename T>
Task<std::vector<AllValue<T>>> all_of_range(std::vector<Future<T>> futures) {
  for (auto& future : futures) {
    if (!future.done()) co_await SettledAwaitable{&future.completion()};
  }
  std::vector<AllValue<T>> values;
  values.reserve(futures.size());
  for (auto& future : futures) values.push_back(all_value(future));
  co_return values;
}

}  // namespace detail

class Ctx {
 public:
  explicit Ctx(detail::RunPort& port) : port_(&port) {}
  Ctx(const Ctx&) = delete;
  Ctx& operator=(const Ctx&) = delete;

  const std::string& run_id() const { return port_->run_id(); }

  // Runs fn once (plus retries) and journals its result. fn takes a
  // StepContext& or nothing, and returns a value (JSON-convertible) or a
  // Task of one. It runs on the shard's thread: a long blocking call holds
  // up the shard's other runs, so make such a step a coroutine.
  //
  // With GCC, fn written inside the co_await must not own anything with a
  // destructor (fusee/compiler.hpp): name such a function first.
  //
  // A function that cannot be copied (it owns a std::unique_ptr, say) is
  // handed over with fusee::moved(fn) -- any compiler -- or std::move(fn)
  // (clang; GCC's rule above refuses every rvalue).
  template <typename F>
  auto step(std::string name, F&& fn_given) {
    using Fn = typename detail::MovedTarget<std::decay_t<F>>::type;
    static_assert(!detail::kGccMiscompilesTemporaryFunction<F>,
                  "fusee: with GCC, a step function written inside co_await must not capture anything with a "
                  "destructor (a std::string, say): GCC destroys that temporary twice and corrupts the heap. "
                  "Name it first -- auto charge = [price] { ... }; co_await ctx.step(\"charge\", charge); -- "
                  "or build with clang++ 14 or later (a function that cannot be copied: hand it over with "
                  "fusee::moved(charge)). See docs/compilers.md.");
    static_assert(std::is_invocable_v<Fn&, StepContext&> || std::is_invocable_v<Fn&>,
                  "fusee: a step's function takes a StepContext& or nothing");
    static_assert(detail::MovedTarget<std::decay_t<F>>::moved || !std::is_lvalue_reference_v<F> ||
                      std::is_copy_constructible_v<Fn>,
                  "fusee: this step function cannot be copied (it owns something move-only, a std::unique_ptr "
                  "say): hand it over with co_await ctx.step(name, fusee::moved(fn)), which moves from fn");
    // Shared, so a move-only function works: std::function needs a
    // copyable one.
    std::shared_ptr<Fn> fn;
    if constexpr (detail::MovedTarget<std::decay_t<F>>::moved) {
      fn = std::make_shared<Fn>(std::move(*fn_given.target));
    } else {
      fn = std::make_shared<Fn>(std::forward<F>(fn_given));
    }
    using Result = detail::StepResultOf<Fn>;
    using Value = typename detail::TaskValue<Result>::type;
    static_assert(detail::kJsonConvertible<Value>, FUSEE_NEEDS_JSON("a step's result type"));
    detail::StepBody body;
    if constexpr (detail::IsTask<Result>::value) {
      body.coroutine = [fn](StepContext& step) { return detail::run_coroutine_step(fn, step); };
    } else if constexpr (std::is_void_v<Value>) {
      body.plain = [fn](StepContext& step) {
        detail::call_step(*fn, step);
        return boost::json::value{};
      };
    } else {
      body.plain = [fn](StepContext& step) { return detail::to_json(detail::call_step(*fn, step)); };
    }
    return StepAwaitable<Value>(*port_, std::move(name), std::move(body));
  }

  // A durable timer: fires after duration, across restarts.
  SleepAwaitable sleep(std::string name, std::chrono::milliseconds duration) {
    return SleepAwaitable(*port_, std::move(name), duration);
  }
  // A durable timer that fires at `due` by the engine's clock (at once if
  // that has passed): for a time worked out from a journaled ctx.now(),
  // which a sleep's duration would count from when the sleep starts instead.
  SleepAwaitable sleep_until(std::string name, TimePoint due) {
    return SleepAwaitable(*port_, std::move(name), due);
  }

  // Cancels another run (Engine::cancel: its waits throw errc::cancelled
  // with `reason`), or terminates it (it ends at once), as a journaled
  // command: it is sent once what the run journaled before is durable, and
  // sent again by a replay after a crash, which changes nothing (a cancel
  // sent twice this way never escalates to terminate). Completes once the
  // request is durable on the other run's shard; a run that has ended, or
  // never was, is no error. Journaled as a step named "cancel run <id>"
  // ("terminate run <id>").
  CloseRunAwaitable cancel_run(std::string id, std::string reason) {
    return CloseRunAwaitable(*port_, std::move(id), std::move(reason), false);
  }
  CloseRunAwaitable terminate_run(std::string id, std::string reason) {
    return CloseRunAwaitable(*port_, std::move(id), std::move(reason), true);
  }

  template <typename T>
  WaitAwaitable<T> wait_for(const Signal<T>& signal) {
    static_assert(detail::kJsonConvertible<T>, FUSEE_NEEDS_JSON("a signal's value type"));
    return WaitAwaitable<T>(*port_, signal.name);
  }

  Stream stream(std::string name) { return Stream(*port_, std::move(name)); }

  template <typename In, typename Out, typename Input>
  ChildAwaitable<Out> child(const WorkflowRef<In, Out>& ref, std::string id, Input&& input) {
    static_assert(!detail::kGccMiscompilesTemporaryValue<Input>, FUSEE_NAME_IT_FIRST("a child's input"));
    static_assert(detail::kJsonConvertible<In>, FUSEE_NEEDS_JSON("a workflow's input type"));
    static_assert(detail::kJsonConvertible<Out>, FUSEE_NEEDS_JSON("a workflow's result type"));
    const In& converted = input;
    return ChildAwaitable<Out>(*port_, ref.name, std::move(id), detail::to_json(converted));
  }

  // Waits until every future has completed, then gives their results in
  // argument order (std::monostate for a command without a result), or
  // throws the failure of the first future, in argument order, that failed.
  // It waits for all rather than throwing at the first failure: which fails
  // first may differ on replay, the order of the arguments does not, and
  // nothing the workflow started is left unobserved. It journals nothing.
  template <typename... T>
  Task<std::tuple<detail::AllValue<T>...>> all(const Future<T>&... futures) {
    return detail::all_of(futures...);
  }
  template <typename T>
  Task<std::vector<detail::AllValue<T>>> all(const std::vector<Future<T>>& futures) {
    return detail::all_of_range(futures);
  }

  // Waits until one of the futures has completed and gives its index (in
  // argument order); the others go on. A command of its own: its journal
  // record names the winner, so a replay, also after a crash between two
  // completions, chooses the same one.
  template <typename... T>
  AnyAwaitable any(const Future<T>&... futures) {
    return AnyAwaitable(*port_, {&futures.completion()...});
  }
  template <typename T>
  AnyAwaitable any(const std::vector<Future<T>>& futures) {
    std::vector<detail::Completion*> candidates;
    candidates.reserve(futures.size());
    for (const auto& future : futures) candidates.push_back(&future.completion());
    return AnyAwaitable(*port_, std::move(candidates));
  }

  // Whether this run takes the new code path of change `id` (Temporal's
  // patched): true for a run that reaches this point with the new code,
  // false for one whose journal the old code wrote past it. The answer is
  // journaled (a patch_marked record when true), so it never flips on
  // replay. Put the new path under if (ctx.patched("id")) and keep the old
  // one in the else until no run started before the change is left.
  bool patched(std::string_view id) { return port_->patched(id, false); }
  // The second step of retiring a patch, once every run without its marker
  // has finished: the code keeps only the new path, and runs that took it
  // still find their marker here. Records nothing. Remove the call once no
  // run with the marker is left (docs/engine.md, "Changing a workflow's
  // code").
  void deprecate_patch(std::string_view id) { (void)port_->patched(id, true); }

  // Ends this generation of the run and starts the next, under the same
  // id, with `input` and the newest registered code of the workflow
  // (Temporal's continue-as-new): the journal starts afresh, so a run that
  // loops for ever (a schedule, an entity) stays small. Throws
  // ContinueAsNew, which the engine catches: let it pass (do not catch (...)
  // around it). Children with a ParentClose other than abandon are closed
  // as when the run ends. Signals and updates the code has not taken yet
  // pass to the next generation, atomically with its start; an update taken
  // and not answered fails for its caller. Whoever waits for the run's
  // result waits for the last generation's.
  template <typename In>
  [[noreturn]] void continue_as_new(const In& input) {
    throw ContinueAsNew{boost::json::value_from(input)};
  }
  [[noreturn]] void continue_as_new_json(boost::json::value input) { throw ContinueAsNew{std::move(input)}; }

  // Registers a read-only query handler (Engine::query, HTTP
  // POST /v1/runs/{id}/queries/{name}): fn() or fn(Arg) returns a
  // JSON-convertible answer, computed from the run's state when asked,
  // between its commands, on its shard's thread; nothing is journaled. It
  // usually captures the coroutine's locals by reference, which live as
  // long as the handler may be called. A handler cannot start commands (a
  // query that tries fails with errc::invalid_argument). Registered again
  // on replay, so a parked or reopened run answers too.
  template <typename Arg = void, typename F>
  void on_query(std::string name, F fn_given) {
    static_assert(detail::kJsonConvertible<Arg>, FUSEE_NEEDS_JSON("a query's argument type"));
    auto fn = std::make_shared<F>(std::move(fn_given));  // a move-only handler works too
    port_->on_query(std::move(name), [fn](const boost::json::value& arg) -> boost::json::value {
      if constexpr (std::is_void_v<Arg>) {
        (void)arg;
        using Answer = std::decay_t<decltype((*fn)())>;
        static_assert(detail::kJsonConvertible<Answer>, FUSEE_NEEDS_JSON("a query's answer type"));
        return detail::to_json((*fn)());
      } else {
        auto converted = boost::json::try_value_to<Arg>(arg);
        if (!converted) {
          throw Error(errc::invalid_argument, "the query's argument " + boost::json::serialize(arg) +
                                                  " does not fit its type: " + converted.error().message());
        }
        using Answer = std::decay_t<decltype((*fn)(std::move(*converted)))>;
        static_assert(detail::kJsonConvertible<Answer>, FUSEE_NEEDS_JSON("a query's answer type"));
        return detail::to_json((*fn)(std::move(*converted)));
      }
    });
  }

  // Declares that the run takes update `ref` from now on (Engine::update,
  // HTTP POST /v1/runs/{id}/updates/{name}); an update the run has not
  // declared is refused. The validator, when given -- validator(const Arg&)
  // returning a std::string, empty to accept -- runs when an update comes,
  // on the run's current state, like a query: it may not start commands, and
  // an update it refuses fails with errc::rejected, nothing recorded. An
  // accepted update is journaled and waits for the code to take it
  // (next_update), so the code decides where in its order of commands
  // updates are handled. Registered again on replay, like queries.
  template <typename Arg, typename Out>
  void on_update(const Update<Arg, Out>& ref) {
    on_update(ref, [](const Arg&) { return std::string(); });
  }
  template <typename Arg, typename Out, typename F>
  void on_update(const Update<Arg, Out>& ref, F validator_given) {
    static_assert(detail::kJsonConvertible<Arg>, FUSEE_NEEDS_JSON("an update's argument type"));
    static_assert(detail::kJsonConvertible<Out>, FUSEE_NEEDS_JSON("an update's answer type"));
    auto validator = std::make_shared<F>(std::move(validator_given));  // a move-only validator works too
    port_->on_update(ref.name, [validator](const boost::json::value& arg) {
      auto converted = boost::json::try_value_to<Arg>(arg);
      if (!converted) {
        throw Error(errc::invalid_argument, "the argument " + boost::json::serialize(arg) +
                                                " does not fit its type: " + converted.error().message());
      }
      return std::string((*validator)(*converted));
    });
  }
  // The next accepted update of `ref` (in the order they were accepted): a
  // command like wait_for; .start() it to wait together with other work
  // (Ctx::any).
  template <typename Arg, typename Out>
  NextUpdateAwaitable<Arg, Out> next_update(const Update<Arg, Out>& ref) {
    return NextUpdateAwaitable<Arg, Out>(*port_, ref.name);
  }
  // Answers an update taken with next_update: journaled, and the caller gets
  // the answer once that record is durable. Each update is answered once
  // (a second answer throws Error(invalid_argument)). An update still
  // unanswered when the run ends fails with errc::failed.
  template <typename Arg, typename Out, typename V>
  ReplyAwaitable reply(const UpdateRequest<Arg, Out>& request, const V& value) {
    static_assert(!std::is_void_v<Out>, "this update answers nothing: call reply(request)");
    const Out& converted = value;
    return ReplyAwaitable(*port_, request.name, request.id, true, detail::to_json(converted));
  }
  template <typename Arg, typename Out>
  ReplyAwaitable reply(const UpdateRequest<Arg, Out>& request) {
    static_assert(std::is_void_v<Out>, "this update answers a value: call reply(request, value)");
    return ReplyAwaitable(*port_, request.name, request.id, true, nullptr);
  }
  // The update failed: its caller gets Error(errc::failed) with the message.
  template <typename Arg, typename Out>
  ReplyAwaitable reply_error(const UpdateRequest<Arg, Out>& request, std::string message) {
    return ReplyAwaitable(*port_, request.name, request.id, false, boost::json::value(message));
  }

  // A completion from outside (Restate's awakeable): a token to hand to
  // another system, and a Future of the value it sends back with it
  // (Engine::complete_awakeable, or HTTP POST /v1/awakeables/{token}/complete)
  // or of its failure (fail_awakeable: Error(errc::failed)). A command: the
  // token is journaled, so it is the same after a crash, and it survives
  // parking and resharding. The token carries a random part the engine
  // checks, and completes the awakeable once.
  template <typename T>
  Awakeable<T> awakeable(std::string name) {
    static_assert(detail::kJsonConvertible<T>, FUSEE_NEEDS_JSON("an awakeable's value type"));
    Future<T> future = AwakeableAwaitable<T>(*port_, std::move(name)).start();
    return Awakeable<T>{future.completion().token, std::move(future)};
  }

  // The engine clock's time, journaled (the same value on replay).
  ValueAwaitable<TimePoint> now() { return ValueAwaitable<TimePoint>(*port_, &detail::RunPort::now); }
  // 64 random bits from the engine's source, journaled.
  ValueAwaitable<std::uint64_t> random() {
    return ValueAwaitable<std::uint64_t>(*port_, &detail::RunPort::random);
  }

 private:
  detail::RunPort* port_;
};

}  // namespace fusee
