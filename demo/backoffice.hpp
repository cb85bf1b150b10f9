// The demo's back office, beside its orders: a `pack` run per order, put in
// the durable queue "packing" (at most kPackingConcurrency running at once),
// and an `audit` run at each due time of the schedule "audit" (every
// kAuditEvery). The order demo's ledger (backoffice_ledger.hpp) holds them
// to the queue's bound and the schedule's due times across the kills.
//
// Deterministic and free of I/O, as order_workflow.hpp: the steps report
// through BackofficeServices, which the demo's child implements.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "demo/order_workflow.hpp"
#include "fusee/ctx.hpp"
#include "fusee/refs.hpp"
#include "fusee/task.hpp"

namespace fusee::cli {

// Packs order `input` (its index); returns the index.
inline const WorkflowRef<std::uint32_t, std::uint32_t> kPackWorkflow{"pack"};
inline constexpr std::string_view kPackingQueue = "packing";
inline constexpr std::uint32_t kPackingConcurrency = 2;
inline constexpr std::string_view kPackStep = "pack";

// Audits the books once per due time; returns 0.
inline const WorkflowRef<int, int> kAuditWorkflow{"audit"};
inline constexpr std::string_view kAuditSchedule = "audit";
inline constexpr std::chrono::milliseconds kAuditEvery{250};

// "pack-<order id>".
std::string pack_id(std::uint32_t index);
// A schedule run's due time from its id ("audit@2026-12-02T03:10:00.250Z"),
// in ms since the epoch; nothing if the id is not one of kAuditSchedule's.
std::optional<std::int64_t> audit_due_ms(std::string_view run_id);

class BackofficeServices {
 public:
  virtual ~BackofficeServices() = default;
  // The pack step starts its work, and has finished it (the step returns
  // next).
  virtual void packing(const std::string& pack_id, bool done) = 0;
  // The audit step of run `run_id` runs.
  virtual void audited(const std::string& run_id) = 0;
};

// The pack workflow: one step that calls the warehouse (answered later, as
// the order's steps are). Both services must outlive the run.
Task<std::uint32_t> pack_workflow(Ctx& ctx, std::uint32_t index, OrderServices& calls, BackofficeServices& report);
Task<int> audit_workflow(Ctx& ctx, BackofficeServices& report);

}  // namespace fusee::cli
