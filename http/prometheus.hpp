// Prometheus text exposition: one metric with its HELP and TYPE lines, and
// histograms (cumulative `_bucket{le=...}` lines, `_sum`, `_count`), shared
// by an engine's /metrics and `fusee server`'s.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "fusee/engine.hpp"

namespace fusee::http {

template <typename T>
void append_metric(std::string& text, const char* name, const char* type, const char* help, T value) {
  text += fmt::format("# HELP {} {}\n# TYPE {} {}\n{} {}\n", name, help, name, type, name, value);
}

// A latency histogram measured in microseconds, exposed in seconds as
// Prometheus wants base units (`..._duration_seconds`; promtool flags
// abbreviated units): bounds in µs, counts with one more entry than bounds
// (the values past the last bound), the sum in µs.
inline void append_seconds_histogram(std::string& text, const char* name, const char* help,
                                     std::span<const std::uint64_t> bounds_us, std::span<const std::uint64_t> counts,
                                     std::uint64_t sum_us) {
  text += fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i < bounds_us.size(); ++i) {
    cumulative += counts[i];
    text += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, static_cast<double>(bounds_us[i]) / 1e6, cumulative);
  }
  cumulative += counts[bounds_us.size()];
  text += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, cumulative, name,
                      static_cast<double>(sum_us) / 1e6, name, cumulative);
}

// Step limits (Engine::limit), a sample per limit in each family; nothing
// when there are none.
inline void append_limit_metrics(std::string& text, const std::vector<LimitStats>& limits) {
  if (limits.empty()) return;
  auto label = [](const std::string& name) {
    std::string escaped;
    for (char c : name) {
      if (c == '\\' || c == '"') escaped += '\\';
      if (c == '\n') {
        escaped += "\\n";
        continue;
      }
      escaped += c;
    }
    return escaped;
  };
  auto family = [&](const char* name, const char* type, const char* help, auto value_of) {
    text += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
    for (const auto& limit : limits) text += fmt::format("{}{{limit=\"{}\"}} {}\n", name, label(limit.name), value_of(limit));
  };
  family("fusee_limit_permits_in_use", "gauge", "Permits of a step limit held now.",
         [](const LimitStats& limit) { return limit.in_use; });
  family("fusee_limit_waiting", "gauge", "Step attempts waiting for a permit of the limit now.",
         [](const LimitStats& limit) { return limit.waiting; });
  family("fusee_limit_permits_granted_total", "counter", "Permits of the limit granted.",
         [](const LimitStats& limit) { return limit.granted; });
  family("fusee_limit_wait_seconds_total", "counter", "Time step attempts spent waiting for a permit of the limit.",
         [](const LimitStats& limit) { return static_cast<double>(limit.waited_us) / 1e6; });
}

// Replicated mode (docs/replication.md, "Operating it"): this replica's
// part in its cluster.
inline void append_replica_metrics(std::string& text, const ReplicaStats& replica) {
  static constexpr const char* kRoles[] = {"booting", "wiped", "backup", "candidate", "primary"};
  text += "# HELP fusee_replica_role 1 for this replica's role now.\n# TYPE fusee_replica_role gauge\n";
  for (const char* role : kRoles) {
    text += fmt::format("fusee_replica_role{{role=\"{}\"}} {}\n", role, replica.role == role ? 1 : 0);
  }
  append_metric(text, "fusee_replica_id", "gauge", "This replica's id in its cluster.", replica.replica_id);
  append_metric(text, "fusee_replica_view", "gauge", "The view this replica promised.", replica.view);
  append_metric(text, "fusee_replica_primary", "gauge",
                "The id of that view's primary, as this replica knows it (-1: none known).",
                replica.primary ? static_cast<std::int64_t>(*replica.primary) : std::int64_t{-1});
  append_metric(text, "fusee_replica_commit_batches", "gauge", "Batches of the log this replica knows committed.",
                replica.commit);
  append_metric(text, "fusee_replica_log_end_batches", "gauge", "Batches in this replica's log.", replica.log_end);
  append_metric(text, "fusee_replica_durable_end_batches", "gauge", "Of those, batches durable on its disk.",
                replica.durable_end);
  append_metric(text, "fusee_replica_store_applied_batches", "gauge",
                "Committed batches its run store has applied through.", replica.store_applied);
  append_metric(text, "fusee_replica_suspect", "gauge",
                "1 while this replica lost a write it had acknowledged and vouches for nothing.",
                replica.suspect ? 1 : 0);
  append_metric(text, "fusee_replica_view_changes_total", "counter", "Views this replica moved to.",
                replica.view_changes);
  append_metric(text, "fusee_replica_leads_total", "counter", "Views this replica led.", replica.leads);
  append_metric(text, "fusee_replica_last_open_seconds", "gauge",
                "The last view this replica led: from its log's opening to its engine's.",
                static_cast<double>(replica.last_open_us) / 1e6);
  if (!replica.lag_batches.empty()) {
    text += "# HELP fusee_replica_lag_batches A primary's view of each replica: batches behind its log's end.\n"
            "# TYPE fusee_replica_lag_batches gauge\n";
    for (std::size_t id = 0; id < replica.lag_batches.size(); ++id) {
      text += fmt::format("fusee_replica_lag_batches{{replica=\"{}\"}} {}\n", id, replica.lag_batches[id]);
    }
  }
  if (!replica.lag_bytes.empty()) {
    text += "# HELP fusee_replica_lag_bytes A primary's view of each replica: payload bytes behind its log's end.\n"
            "# TYPE fusee_replica_lag_bytes gauge\n";
    for (std::size_t id = 0; id < replica.lag_bytes.size(); ++id) {
      text += fmt::format("fusee_replica_lag_bytes{{replica=\"{}\"}} {}\n", id, replica.lag_bytes[id]);
    }
  }
  if (!replica.lag_us.empty()) {
    text += "# HELP fusee_replica_lag_seconds A primary's view of each replica: how long ago the oldest batch it "
            "lacks was proposed.\n"
            "# TYPE fusee_replica_lag_seconds gauge\n";
    for (std::size_t id = 0; id < replica.lag_us.size(); ++id) {
      text += fmt::format("fusee_replica_lag_seconds{{replica=\"{}\"}} {}\n", id,
                          static_cast<double>(replica.lag_us[id]) / 1e6);
    }
  }
  append_metric(text, "fusee_replica_retired_batches", "gauge",
                "The last batch this replica's log retired (its log holds the batches after it).",
                replica.retired_through);
  append_seconds_histogram(text, "fusee_replica_publish_duration_seconds",
                           "A primary's batches from proposal to publication (a quorum holds them durably).",
                           kFlushLatencyBoundsUs, replica.publish_latency_counts, replica.publish_latency_sum_us);
}

}  // namespace fusee::http
