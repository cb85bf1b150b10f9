// Talking to a running workflow (docs/tutorial.md, part 10, quotes this
// file). A booking answers a query with its seats, takes seat changes as
// updates -- validated, journaled, answered once durable -- and waits for a
// payment provider, which completes the booking's awakeable with the token
// it was given.
// Usage: talking DATA_DIR
#include <fusee/fusee.hpp>

#include <cstdio>
#include <string>

using namespace fusee;

const WorkflowRef<int, std::string> kBooking{"booking"};
const Update<int, int> kChangeSeats{"change_seats"};

Task<std::string> booking(Ctx& ctx, int seats) {
  ctx.on_query("seats", [&seats] { return seats; });
  ctx.on_update(kChangeSeats, [](const int& wanted) -> std::string {
    return wanted >= 1 && wanted <= 8 ? "" : "book 1 to 8 seats";
  });
  // The payment provider gets this token and completes it when paid.
  Awakeable<std::string> paid = ctx.awakeable<std::string>("payment");
  ctx.on_query("payment_token", [token = paid.token] { return token; });

  Future<UpdateRequest<int, int>> change = ctx.next_update(kChangeSeats).start();
  while (co_await ctx.any(change, paid.future) == 0) {
    UpdateRequest<int, int> request = co_await change;
    seats = request.arg;
    co_await ctx.reply(request, seats);  // the caller gets it once durable
    change = ctx.next_update(kChangeSeats).start();
  }
  std::string payment = co_await paid.future;
  co_return std::to_string(seats) + " seats, paid with " + payment;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: talking DATA_DIR\n");
    return 2;
  }
  auto engine = Engine::open(Config::local(argv[1]));
  engine->register_workflow(kBooking, booking);
  (void)engine->start(kBooking, "booking-1", 2);

  int seats = engine->update("booking-1", kChangeSeats, 4, "change-1");
  std::printf("seats: %d\n", seats);
  // The same update id again: the same answer, and nothing runs twice.
  std::printf("again: %d\n", engine->update("booking-1", kChangeSeats, 5, "change-1"));
  try {
    (void)engine->update("booking-1", kChangeSeats, 20);
  } catch (const Error& refused) {
    std::printf("refused: %s\n", refused.what());
  }
  std::printf("asked: %d seats\n", engine->query<int>("booking-1", "seats"));

  // The payment provider, somewhere else, completes the awakeable.
  auto token = engine->query<std::string>("booking-1", "payment_token");
  engine->complete_awakeable(token, std::string("card-4242"));
  std::printf("booking-1: %s\n", engine->result(kBooking, "booking-1").c_str());
  engine->shutdown();
  return 0;
}
