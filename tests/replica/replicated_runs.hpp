// What the replicated-mode engine tests share: the runs' ids, the replica
// whose Engine runs workflows, and taking a run to its wait with its first
// step durable.
#pragma once

#include <doctest/doctest.h>

#include <chrono>
#include <fusee/fusee.hpp>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace fusee::testing {

inline std::string run_name(int n) { return "order-" + std::to_string(n); }

// The replica whose Engine runs workflows (other than `not_this`), within
// `within`; nothing when none does by then.
inline std::optional<std::uint32_t> primary_of(const std::vector<std::unique_ptr<Engine>>& engines,
                                               std::chrono::seconds within,
                                               std::optional<std::uint32_t> not_this = std::nullopt) {
  const auto give_up = std::chrono::steady_clock::now() + within;
  while (std::chrono::steady_clock::now() < give_up) {
    for (std::uint32_t id = 0; id < engines.size(); ++id) {
      if (id != not_this && engines[id] && engines[id]->stats().shards_held > 0) return id;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return std::nullopt;
}

// Waits (up to `within`) until run `n` waits for its signal, then sends it
// the signal "noise", which it ignores: acknowledged only once durable with
// every earlier record of its shard, so its first step is durable too.
inline void take_to_wait_id(Engine& engine, const std::string& id, std::chrono::seconds within) {
  const auto give_up = std::chrono::steady_clock::now() + within;
  for (;;) {
    auto info = engine.get_run(id);
    if (info && !info->waiting_on.empty()) break;
    REQUIRE(std::chrono::steady_clock::now() < give_up);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  engine.signal(id, Signal<int>{"noise"}, 0, "noise-" + id);
}
inline void take_to_wait(Engine& engine, int n, std::chrono::seconds within) {
  take_to_wait_id(engine, run_name(n), within);
}

}  // namespace fusee::testing
