// IdFilter (remote mode's "is this id in the server's store?" filter): no
// false negatives ever, false positives near the sized rate, and its bytes
// round trip while anything else is refused.
#include <doctest/doctest.h>

#include <string>

#include "engine/id_filter.hpp"
#include "engine/run_hash.hpp"

using namespace fusee::engine;

TEST_SUITE("unit") {
  TEST_CASE("an id filter never forgets an id, and says maybe for few others") {
    constexpr int kIds = 100'000;
    IdFilter filter(kIds);
    // Ids of one shard of eight, as remote mode fills a shard's filter: they
    // share run_hash modulo 8, which the filter's positions must not inherit.
    int added = 0;
    for (int n = 0; added < kIds; ++n) {
      auto id = "order-" + std::to_string(n);
      if (shard_of(id, 8) != 3) continue;
      filter.add(id);
      ++added;
    }
    int missed = 0;
    added = 0;
    for (int n = 0; added < kIds; ++n) {
      auto id = "order-" + std::to_string(n);
      if (shard_of(id, 8) != 3) continue;
      if (!filter.may_contain(id)) ++missed;
      ++added;
    }
    CHECK(missed == 0);
    int false_positives = 0;
    constexpr int kOthers = 100'000;
    for (int n = 0; n < kOthers; ++n) {
      if (filter.may_contain("refund-" + std::to_string(n))) ++false_positives;
    }
    MESSAGE(false_positives << " of " << kOthers << " ids never added were maybes");
    CHECK(false_positives < kOthers * 3 / 100);  // sized for about 1%
  }

  TEST_CASE("an id filter's bytes round trip, and other bytes are refused") {
    IdFilter filter(10);
    filter.add("a");
    filter.add("b");
    auto bytes = filter.encode();
    auto decoded = IdFilter::decode(bytes);
    REQUIRE(decoded.has_value());
    CHECK(decoded->bits() == filter.bits());
    CHECK(decoded->may_contain("a"));
    CHECK(decoded->may_contain("b"));
    CHECK(decoded->encode() == bytes);
    CHECK_FALSE(IdFilter::decode(std::span(bytes.data(), bytes.size() - 1)).has_value());
    CHECK_FALSE(IdFilter::decode(std::span(bytes.data(), 7)).has_value());
    auto wrong_count = bytes;
    wrong_count[0] = std::byte{1};  // a bit count that is not a multiple of 64
    CHECK_FALSE(IdFilter::decode(wrong_count).has_value());
  }
}
