// The step limits' messages (protocol/messages.hpp) round trip, and a
// payload that is short, has bytes left over, or carries a flag that is
// neither 0 nor 1 does not decode.
#include <doctest/doctest.h>

#include <cmath>

#include "protocol/messages.hpp"
#include "protocol/store_call.hpp"

using namespace fusee::protocol;

TEST_SUITE("unit") {
  TEST_CASE("protocol: limit and permit_ask round trip, and malformed payloads do not decode") {
    auto limit = decode_limit(encode(Limit{"payments", 2, 5.5}));
    REQUIRE(limit.has_value());
    CHECK(limit->name == "payments");
    CHECK(limit->concurrent == 2);
    CHECK(limit->per_second == 5.5);
    auto nan = decode_limit(encode(Limit{"x", 0, std::nan("")}));
    REQUIRE(nan.has_value());  // decodes; the server refuses it as a value
    CHECK(std::isnan(nan->per_second));

    auto ask = decode_permit_ask(encode(PermitAsk{"payments", true}));
    REQUIRE(ask.has_value());
    CHECK(ask->name == "payments");
    CHECK(ask->held);
    CHECK_FALSE(decode_permit_ask(encode(PermitAsk{"p", false}))->held);

    auto bytes = encode(Limit{"payments", 2, 5.5});
    bytes.pop_back();
    CHECK_FALSE(decode_limit(bytes).has_value());
    bytes = encode(PermitAsk{"p", false});
    bytes.push_back(std::byte{0});
    CHECK_FALSE(decode_permit_ask(bytes).has_value());
    bytes = encode(PermitAsk{"p", false});
    bytes.back() = std::byte{2};
    CHECK_FALSE(decode_permit_ask(bytes).has_value());
    CHECK(std::string(message_type_name(MessageType::permit_release)) == "permit_release");
    CHECK(std::string(message_type_name(MessageType::pong)) == "pong");
  }
  TEST_CASE("protocol: a parked run's row carries its version and what it waits on; a damaged one does not decode") {
    fusee::rows::ParkedRun run{"w", "order", 2, 10, 5'000};
    run.version = 3;
    run.waiting.push_back(fusee::PendingCommand{4, "sleep", "nap", fusee::TimePoint(std::chrono::milliseconds(5'000))});
    run.waiting.push_back(fusee::PendingCommand{5, "awakeable", "paid", std::nullopt});
    auto bytes = encode_parked(run);
    auto decoded = decode_parked(bytes);
    REQUIRE(decoded.has_value());
    CHECK(*decoded == run);
    bytes.pop_back();
    CHECK(!decode_parked(bytes).has_value());
    // Waiting that is not the array it should be.
    fusee::rows::ParkedRun plain{"p", "order", 1, 10, std::nullopt};
    auto good = encode_parked(plain);
    auto text_at = std::string(reinterpret_cast<const char*>(good.data()), good.size()).rfind("[]");
    REQUIRE(text_at != std::string::npos);
    good[text_at] = std::byte{'{'};
    CHECK(!decode_parked(good).has_value());
  }
}
