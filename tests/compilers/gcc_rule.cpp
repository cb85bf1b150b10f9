// The forms GCC 12 miscompiles, and their named equivalents, for
// tests/compilers.sh. FORM selects one:
//   0  every argument named: must compile with g++ and run correctly;
//   1  a step function owning a std::string, written inside co_await;
//   2  a braced struct temporary (owning a std::string) as a child's input;
//   3  the same as a stream chunk.
// Forms 1-3 are refused by the public headers on GCC (fusee/compiler.hpp) and
// compile with clang++.
#include <fusee/fusee.hpp>

#include <cstdio>
#include <string>

#ifndef FORM
#define FORM 0
#endif

struct Parcel {
  std::string label;  // long enough to live on the heap
  int weight = 0;
};
void tag_invoke(const boost::json::value_from_tag&, boost::json::value& json, const Parcel& parcel) {
  json = {{"label", parcel.label}, {"weight", parcel.weight}};
}
Parcel tag_invoke(const boost::json::value_to_tag<Parcel>&, const boost::json::value& json) {
  return Parcel{boost::json::value_to<std::string>(json.at("label")), boost::json::value_to<int>(json.at("weight"))};
}

const fusee::WorkflowRef<Parcel, int> kWeigh{"weigh"};
const fusee::WorkflowRef<int, std::string> kShip{"ship"};
const fusee::Signal<std::string> kCarrier{"carrier"};

fusee::Task<int> weigh(fusee::Ctx& ctx, Parcel parcel) {
  auto twice = [weight = parcel.weight] { return 2 * weight; };
  co_return co_await ctx.step("twice", twice);
}

fusee::Task<std::string> ship(fusee::Ctx& ctx, int weight) {
  std::string label(100, 'L');
#if FORM == 1
  std::string stamped = co_await ctx.step("stamp", [label] { return label + "-stamped"; });
#else
  auto stamp = [label] { return label + "-stamped"; };
  std::string stamped = co_await ctx.step("stamp", stamp);
#endif
#if FORM == 2
  int doubled = co_await ctx.child(kWeigh, "weigh-1", Parcel{stamped, weight});
#else
  Parcel parcel{stamped, weight};
  int doubled = co_await ctx.child(kWeigh, "weigh-1", parcel);
#endif
  auto carrier = co_await ctx.wait_for(kCarrier);
  auto log = ctx.stream("log");
#if FORM == 3
  co_await log.write(Parcel{std::string(80, 'C') + carrier.value_or("?"), doubled});
#else
  Parcel logged{std::string(80, 'C') + carrier.value_or("?"), doubled};
  co_await log.write(logged);
#endif
  co_await log.close();
  co_return stamped.substr(95) + " " + std::to_string(doubled) + " " + carrier.value_or("?");
}

int main() {
  auto engine = fusee::Engine::open(fusee::Config::memory());
  engine->register_workflow(kWeigh, weigh);
  engine->register_workflow(kShip, ship);
  engine->start(kShip, "ship-1", 21);
  engine->signal("ship-1", kCarrier, std::string(60, 'c'), "carrier-1");
  std::string result = engine->result(kShip, "ship-1");
  auto reader = engine->read_stream("ship-1", "log");
  int chunks = 0;
  while (auto chunk = reader.next()) chunks += boost::json::value_to<Parcel>(chunk->value).weight == 42 ? 1 : 100;
  std::printf("result: %s, chunks: %d\n", result.c_str(), chunks);
  return result == "LLLLL-stamped 42 " + std::string(60, 'c') && chunks == 1 ? 0 : 1;
}
