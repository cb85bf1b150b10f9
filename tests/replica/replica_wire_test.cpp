// What replicas and clients send over TCP (replica/replica_wire.hpp): every
// message decodes to what was encoded, and bytes that are short, long,
// out of range or hostile decode to nothing.
#include <doctest/doctest.h>

#include "protocol/wire.hpp"
#include "replica/replica_wire.hpp"

namespace fusee::replica {
namespace {

using namespace replication;

std::vector<Message> every_kind() {
  const std::vector<Entry> entries = {{4, 2, 3, "four"}, {5, 3, 3, std::string("\0five\xff", 6)}};
  const ViewStarts starts = {{1, 1}, {2, 4}, {3, 5}};
  return {
      {0, 1, 7, SealRequest{starts}},
      {1, 0, 7, SealReply{9, 3, 6, true}},
      {2, 1, 7, FetchRequest{3, 2, 9}},
      {1, 2, 7, FetchReply{true, 0, entries}},
      {1, 2, 7, FetchReply{false, 3, {}}},
      {0, 2, 8, AppendRequest{3, 2, entries, 4, 5, starts, 0x1234567890abcdefULL}},
      {0, 2, 8,
       AppendRequest{3, 2, entries, 4, 5, starts, 7, 3, replication::LogAnchor{3, 2, 0x1122334455ULL, 0xdeadbeefu}}},
      {2, 0, 8, replication::AppendReply{true, 5, 0, 8, 42}},
      {2, 0, 8, replication::AppendReply{false, 0, 2, 9, 43}},
      {1, 0, 9, ProbeRequest{}},
      {0, 1, 9, ProbeReply{true}},
      {1, 2, 7, FetchReply{true, 0, entries, replication::LogAnchor{3, 2, 9, 0xabcu}}},
  };
}

bool same(const Message& a, const Message& b) {
  return encode_message(a) == encode_message(b) && a.from == b.from && a.to == b.to && a.view == b.view &&
         a.body.index() == b.body.index();
}

TEST_SUITE("unit") {
  TEST_CASE("replica wire: every message comes back as it was sent") {
    for (const Message& message : every_kind()) {
      CAPTURE(message.body.index());
      auto decoded = decode_message(encode_message(message));
      REQUIRE(decoded.has_value());
      CHECK(same(*decoded, message));
    }
    const auto messages = every_kind();
    const auto* append = std::get_if<AppendRequest>(&messages[5].body);
    REQUIRE(append != nullptr);
    auto decoded = decode_message(encode_message(messages[5]));
    const auto& got = std::get<AppendRequest>(decoded->body);
    CHECK(got.entries == append->entries);
    CHECK(got.starts == append->starts);
    CHECK(got.to_incarnation == append->to_incarnation);
    CHECK_FALSE(got.anchor.has_value());
    // An append anchored at the primary's start, and what it may retire.
    const auto& anchored = std::get<AppendRequest>(messages[6].body);
    const auto decoded_anchored = decode_message(encode_message(messages[6]));
    REQUIRE(decoded_anchored.has_value());
    const auto& back = std::get<AppendRequest>(decoded_anchored->body);
    CHECK(back.retire_below == 3);
    REQUIRE(back.anchor.has_value());
    CHECK(*back.anchor == *anchored.anchor);
    const auto fetched = decode_message(encode_message(messages.back()));
    REQUIRE(fetched.has_value());
    CHECK(std::get<FetchReply>(fetched->body).anchor == std::get<FetchReply>(messages.back().body).anchor);
  }

  TEST_CASE("replica wire: a message cut short or with bytes left over decodes to nothing") {
    for (const Message& message : every_kind()) {
      const auto bytes = encode_message(message);
      for (std::size_t cut = 0; cut < bytes.size(); ++cut) {
        CHECK_FALSE(decode_message(std::span(bytes).first(cut)).has_value());
      }
      auto longer = bytes;
      longer.push_back(std::byte{0});
      CHECK_FALSE(decode_message(longer).has_value());
    }
  }

  TEST_CASE("replica wire: an unknown kind, a bool that is not 0 or 1, a hostile count") {
    protocol::Writer unknown;
    unknown.u32(0).u32(1).u64(1).u8(200);
    CHECK_FALSE(decode_message(unknown.take()).has_value());
    protocol::Writer bad_bool;
    bad_bool.u32(0).u32(1).u64(1).u8(7).u8(2);  // ProbeReply{granted = 2}
    CHECK_FALSE(decode_message(bad_bool.take()).has_value());
    protocol::Writer huge;  // a FetchReply claiming four billion entries
    huge.u32(0).u32(1).u64(1).u8(3).u8(1).u64(0).u32(0xffffffffu);
    CHECK_FALSE(decode_message(huge.take()).has_value());
  }

  TEST_CASE("replica wire: append replies and statuses") {
    for (AppendStatus status : {AppendStatus::published, AppendStatus::not_primary, AppendStatus::unknown}) {
      auto decoded = decode_append_reply(encode_append_reply({status, 17, 2, 5000000000}));
      REQUIRE(decoded.has_value());
      CHECK(decoded->lsn == 5000000000);
      CHECK(decoded->status == status);
      CHECK(decoded->seq == 17);
      CHECK(decoded->primary == 2);
    }
    auto bytes = encode_append_reply({AppendStatus::published, 1, 0});
    bytes[0] = std::byte{3};
    CHECK_FALSE(decode_append_reply(bytes).has_value());

    ReplicaStatus status{2, Role::primary, 5, 5, 100, 104, 103, true, 40, 77, {90, 104, 103}, {5000, 0, 1},
                         {1500000, 0, 20}, 33};
    auto decoded = decode_status(encode_status(status));
    REQUIRE(decoded.has_value());
    CHECK(decoded->holds == std::vector<replication::Seq>{90, 104, 103});
    CHECK(decoded->held_from == 40);
    CHECK(decoded->batches_read_back == 77);
    CHECK(decoded->role == Role::primary);
    CHECK(decoded->commit == 100);
    CHECK(decoded->log_end == 104);
    CHECK(decoded->durable_end == 103);
    CHECK(decoded->suspect);
    CHECK(decoded->lag_bytes == std::vector<std::uint64_t>{5000, 0, 1});
    CHECK(decoded->lag_us == std::vector<std::uint64_t>{1500000, 0, 20});
    CHECK(decoded->retired_through == 33);
    auto bad_role = encode_status(status);
    bad_role[4] = std::byte{9};
    CHECK_FALSE(decode_status(bad_role).has_value());
    // A status cut anywhere, or claiming more holdings than it carries (or
    // than any cluster has), is no status.
    const auto whole = encode_status(status);
    for (std::size_t cut = 0; cut < whole.size(); ++cut) {
      CHECK_FALSE(decode_status(std::span(whole).first(cut)).has_value());
    }
    // (The holdings' count comes before two more counts and the retired batch.)
    constexpr std::size_t kHoldsCountFromEnd = 4 + 4 + 4 + 8;
    auto too_many = encode_status(ReplicaStatus{});
    too_many[too_many.size() - kHoldsCountFromEnd] = std::byte{0xff};
    too_many[too_many.size() - kHoldsCountFromEnd + 1] = std::byte{0xff};
    CHECK_FALSE(decode_status(too_many).has_value());
    auto claims_one = encode_status(ReplicaStatus{});
    claims_one[claims_one.size() - kHoldsCountFromEnd] = std::byte{1};
    CHECK_FALSE(decode_status(claims_one).has_value());
  }

  TEST_CASE("replica wire: forwarded calls and their replies, whole, cut short or with a bad part") {
    const std::string text = R"({"op":"get","id":"x"})";
    ForwardedCall call{7, std::vector<std::byte>(reinterpret_cast<const std::byte*>(text.data()),
                                                 reinterpret_cast<const std::byte*>(text.data()) + text.size())};
    auto bytes = encode_call(call);
    auto back = decode_call(bytes);
    REQUIRE(back.has_value());
    CHECK(back->shard == 7);
    CHECK(back->body == call.body);
    for (std::size_t cut = 0; cut < bytes.size(); ++cut) {
      CHECK_FALSE(decode_call(std::span(bytes.data(), cut)).has_value());
    }
    bytes.push_back(std::byte{0});
    CHECK_FALSE(decode_call(bytes).has_value());
    for (auto part : {CallPart::more, CallPart::last, CallPart::not_here}) {
      auto reply = decode_call_reply(encode_call_reply({part, call.body}));
      REQUIRE(reply.has_value());
      CHECK(reply->part == part);
      CHECK(reply->body == call.body);
    }
    auto reply = encode_call_reply({CallPart::last, call.body});
    reply[0] = std::byte{3};  // no such part
    CHECK_FALSE(decode_call_reply(reply).has_value());
    // A length past the bytes there: nothing, and nothing reserved for it.
    std::vector<std::byte> hostile{std::byte{0}, std::byte{0}, std::byte{0}, std::byte{0},
                                   std::byte{0xff}, std::byte{0xff}, std::byte{0xff}, std::byte{0x7f}};
    CHECK_FALSE(decode_call(hostile).has_value());
  }
}

}  // namespace
}  // namespace fusee::replica
