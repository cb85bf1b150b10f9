// Doing several things at once inside one workflow (docs/tutorial.md, part
// 8, quotes this file): a trip books its flight, hotel and car as three child
// runs started together, prices them with two steps started together, then
// waits for the traveller's confirmation or a one-hour timeout, whichever
// comes first. Cancelled while it waits, it releases its bookings in a
// clean-up step and ends cancelled. Usage: parallel DATA_DIR [--silent |
// --cancel] (--silent: no confirmation is sent, so the trip ends at the
// timeout, which the program brings forward by running on a clock it moves;
// --cancel: the program cancels the trip instead of confirming it).
#include <fusee/fusee.hpp>

#include <chrono>
#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

using namespace fusee;

const WorkflowRef<std::string, std::string> kBook{"book"};
const WorkflowRef<std::string, std::string> kTrip{"trip"};
const Signal<bool> kConfirm{"confirm"};

// One booking: a step that would call the supplier, keyed for idempotency.
Task<std::string> book(Ctx& ctx, std::string item) {
  auto reserve = [item](StepContext& step) { return item + " booked (" + step.key() + ")"; };
  co_return co_await ctx.step("reserve", reserve);
}

Task<std::string> trip(Ctx& ctx, std::string traveller) {
  // Three children started together: each runs at once, on its own shard.
  // If the trip is cancelled or ends before them, they are cancelled too.
  std::vector<Future<std::string>> bookings;
  for (std::string item : {"flight", "hotel", "car"})
    bookings.push_back(
        ctx.child(kBook, ctx.run_id() + "-" + item, item).on_parent_close(ParentClose::cancel).start());

  // Two steps started together, awaited with the children.
  auto fare = [] { return 420; };
  auto nights = [] { return 3 * 90; };
  Future<int> fare_cents = ctx.step("fare", fare).start();
  Future<int> hotel_cents = ctx.step("nights", nights).start();

  std::vector<std::string> booked = co_await ctx.all(bookings);
  auto [flight_price, hotel_price] = co_await ctx.all(fare_cents, hotel_cents);

  // A timeout: whichever of the timer and the confirmation comes first.
  Future<void> patience = ctx.sleep("patience", std::chrono::hours(1)).start();
  Future<std::optional<bool>> confirmed = ctx.wait_for(kConfirm).start();
  bool in_time = false;
  std::exception_ptr cancelled;
  try {
    in_time = co_await ctx.any(patience, confirmed) == 1;
  } catch (const Error& error) {
    if (error.error() != errc::cancelled) throw;
    cancelled = std::current_exception();  // (no co_await inside a catch block)
  }
  if (cancelled) {
    // Engine::cancel: clean up with a step of its own, then end cancelled.
    auto release = [count = booked.size()] { return count; };
    (void)co_await ctx.step("release bookings", release);
    std::rethrow_exception(cancelled);
  }

  std::string summary = traveller + ": ";
  for (const auto& line : booked) summary += line + "; ";
  summary += "total " + std::to_string(flight_price + hotel_price) + ", ";
  summary += in_time ? "confirmed" : "not confirmed within the hour";
  co_return summary;
}

int main(int argc, char** argv) {
  const std::string_view option = argc == 3 ? argv[2] : "";
  if (argc < 2 || argc > 3 || (argc == 3 && option != "--silent" && option != "--cancel")) {
    std::fprintf(stderr, "usage: parallel DATA_DIR [--silent | --cancel]\n");
    return 2;
  }
  auto clock = std::make_shared<ManualClock>();
  auto config = Config::local(argv[1]);
  config.clock = clock;
  auto engine = Engine::open(config);
  engine->register_workflow(kBook, book);
  engine->register_workflow(kTrip, trip);

  (void)engine->start(kTrip, "trip-1", std::string("Ada"));
  if (option == "--silent") {
    // The hour passes (on the engine's clock) until the run has ended.
    while (engine->get_run("trip-1")->status == RunStatus::running) clock->advance(std::chrono::minutes(10));
  } else if (option == "--cancel") {
    engine->cancel("trip-1", "plans changed");
  } else {
    engine->signal("trip-1", kConfirm, true, "confirm-trip-1");
  }
  try {
    std::printf("%s\n", engine->result(kTrip, "trip-1").c_str());
  } catch (const Error& error) {
    std::printf("%s: %s\n", errc_name(error.error()), error.what());
  }
}
