// GET /v1/cluster's body (docs/http-api.md): every replica as it answered,
// for an engine's API (http_api.cpp) and `fusee server --replicated`'s front
// (server/http_front.cpp) alike. Outside replicated mode: none.
#pragma once

#include <boost/json.hpp>
#include <cstdint>
#include <optional>
#include <vector>

#include "fusee/engine.hpp"

namespace fusee::http {

// `self`: this replica's id, when it is one.
inline boost::json::object cluster_json(const std::vector<ClusterReplica>& cluster, std::optional<std::uint32_t> self) {
  namespace json = boost::json;
  json::array replicas;
  for (const auto& replica : cluster) {
    replicas.push_back(json::object{{"id", replica.id},
                                    {"address", replica.address},
                                    {"self", self && replica.id == *self},
                                    {"answered", replica.answered},
                                    {"role", replica.answered ? json::value(replica.role) : json::value(nullptr)},
                                    {"view", replica.view},
                                    {"commit", replica.commit},
                                    {"log_end", replica.log_end},
                                    {"durable_end", replica.durable_end},
                                    {"suspect", replica.suspect},
                                    {"retired_through", replica.retired_through},
                                    {"lag_batches", replica.lag_batches ? json::value(*replica.lag_batches)
                                                                        : json::value(nullptr)},
                                    {"lag_bytes", replica.lag_bytes ? json::value(*replica.lag_bytes)
                                                                    : json::value(nullptr)},
                                    {"lag_us", replica.lag_us ? json::value(*replica.lag_us) : json::value(nullptr)}});
  }
  return json::object{{"replicated", self.has_value()}, {"replicas", std::move(replicas)}};
}

}  // namespace fusee::http
