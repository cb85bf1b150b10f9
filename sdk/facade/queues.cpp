// Engine's queue calls: each is a start, an update or a query of the
// queue's run ("queue:<name>", queue/queue_workflow.hpp).
#include <fmt/format.h>

#include "fusee/engine.hpp"
#include "fusee/limits.hpp"
#include "queue/queue_state.hpp"
#include "queue/queue_workflow.hpp"

namespace fusee {
namespace {

std::string run_of(const std::string& name) { return queue::kQueueRunPrefix + name; }

// A queue's run that is not running is no queue; a change it refuses is
// the queue's refusal.
template <typename F>
auto on_queue(const std::string& name, F call) {
  try {
    return call();
  } catch (const Error& error) {
    if (error.error() == errc::not_found) {
      throw Error(errc::not_found, fmt::format("no queue '{}' (Engine::queue declares it)", name));
    }
    if (error.error() == errc::rejected) {
      std::string why = error.what();
      const std::string said = "update 'queue': ";
      if (auto at = why.find(said); at != std::string::npos) why = why.substr(at + said.size());
      throw Error(errc::rejected, fmt::format("queue '{}' refused it: {}", name, why));
    }
    throw;
  }
}

}  // namespace

void Engine::queue(const std::string& name, const QueueOptions& options) {
  if (name.empty()) throw Error(errc::invalid_argument, "a queue needs a name");
  // The queue is the run "queue:<name>".
  if (auto why = run_id_problem(name, "queue name")) throw Error(errc::invalid_argument, *why);
  if (auto why = run_id_problem(run_of(name), "queue's run id")) throw Error(errc::invalid_argument, *why);
  queue::QueueState state;
  state.name = name;
  state.options = queue::options_from_json(queue::options_json(options));  // checks them
  StartOptions start;
  start.if_running = IfRunning::attach;
  start.if_finished = IfFinished::start_anew;
  auto outcome = start_json(queue::kQueueWorkflow, run_of(name), queue::state_json(state), start);
  if (outcome != StartOutcome::started) {
    // It was declared before: its options become these.
    (void)on_queue(name, [&] {
      return update_json(UpdateCall{run_of(name), queue::kQueueChange.name,
                                    boost::json::object{{"action", "configure"}, {"options", queue::options_json(options)}},
                                    {}, {}});
    });
  }
}

namespace {

// The enqueue update; checks what the caller can be told at once.
UpdateCall enqueue_call(Engine& engine, const std::string& queue_name, const std::string& workflow,
                        const std::string& id, boost::json::value input, const EnqueueOptions& options) {
  if (id.empty()) throw Error(errc::invalid_argument, "enqueue: a run id is needed");
  if (auto why = run_id_problem(id)) throw Error(errc::invalid_argument, fmt::format("enqueue: {}", *why));
  if (!engine.has_workflow(workflow)) {
    throw Error(errc::unknown_workflow,
                fmt::format("enqueue '{}' in queue '{}': no workflow named '{}' is registered", id, queue_name, workflow));
  }
  boost::json::object change{{"action", "enqueue"},     {"id", id},
                             {"workflow", workflow},    {"input", std::move(input)},
                             {"priority", options.priority}, {"partition", options.partition},
                             {"dedup_id", options.dedup_id}};
  // The update id names the run: the same enqueue sent again gets the same
  // answer.
  return UpdateCall{run_of(queue_name), queue::kQueueChange.name, std::move(change), "enqueue:" + id, {}};
}

EnqueueOutcome outcome_of(const boost::json::value& answer) {
  return answer.at("outcome") == "queued" ? EnqueueOutcome::queued : EnqueueOutcome::already_queued;
}

}  // namespace

EnqueueOutcome Engine::enqueue_json(const std::string& queue_name, const std::string& workflow, const std::string& id,
                                    boost::json::value input, const EnqueueOptions& options) {
  auto call = enqueue_call(*this, queue_name, workflow, id, std::move(input), options);
  return outcome_of(on_queue(queue_name, [&] { return update_json(std::move(call)); }));
}

std::future<EnqueueOutcome> Engine::enqueue_json_async(const std::string& queue_name, const std::string& workflow,
                                                       const std::string& id, boost::json::value input,
                                                       const EnqueueOptions& options) {
  auto answer = update_json_async(enqueue_call(*this, queue_name, workflow, id, std::move(input), options));
  return std::async(std::launch::deferred, [queue_name, answer = std::move(answer)]() mutable {
    return outcome_of(on_queue(queue_name, [&] { return answer.get(); }));
  });
}

boost::json::value Engine::describe_queue_json(const std::string& name) {
  return on_queue(name, [&] { return query_json(run_of(name), "describe", nullptr); });
}

QueueInfo Engine::describe_queue(const std::string& name) { return queue::info_from_json(describe_queue_json(name)); }

std::vector<QueueInfo> Engine::list_queues() {
  RunFilter filter;
  filter.workflow = queue::kQueueWorkflow;
  filter.status = RunStatus::running;
  std::vector<QueueInfo> queues;
  for (const auto& run : list_runs(filter)) {
    try {
      queues.push_back(queue::info_from_json(query_json(run.id, "describe", nullptr)));
    } catch (const Error& error) {
      if (error.error() != errc::not_found) throw;
    }
  }
  return queues;
}

}  // namespace fusee
