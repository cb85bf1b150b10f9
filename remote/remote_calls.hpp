// RemoteCalls: remote mode with the shards split among workers. Serves the
// calls other workers forward for the shards this engine holds, and sends
// this engine's calls for the others to their holders through the server
// (remote/shard_router.hpp), asking again while nobody holds the shard
// (a takeover under way) or, for calls that may be repeated, when the
// holder went mid-call. Bodies: remote/forwarded_call.hpp. Thread-safe.
#pragma once

#include <boost/json.hpp>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <variant>
#include <vector>

#include "engine/run_store.hpp"
#include "engine/shard.hpp"
#include "fusee/engine.hpp"
#include "remote/shard_router.hpp"

namespace fusee::remote {

// How long an API call waits for a shard's holder (a standby taking over
// takes well under this); a child run's parent waits as long as it takes.
inline constexpr std::chrono::seconds kHolderPatience{30};

// How a call may be sent again after its holder went before answering.
enum class Repeat { never, yes };

class RemoteCalls {
 public:
  using Answer = std::variant<boost::json::object, Error>;
  // shards: the engine's, by id; only those the router says this engine
  // holds are touched. from_finished: RunInfo of a finished run.
  // `longest_pause`: the most a call waits before it is sent again (the
  // pauses double from 20 ms up to it).
  RemoteCalls(ShardRouter& router, std::vector<std::unique_ptr<engine::Shard>>& shards,
              RunInfo (*from_finished)(const engine::FinishedRun&),
              std::chrono::milliseconds longest_pause = std::chrono::milliseconds(500));
  ~RemoteCalls();  // stop()

  // Holder side: a call another worker forwarded (runs on the router's
  // reading thread; hands the work to the shard).
  void serve(ShardRouter::Call call);

  // Caller side. on_part gets each part before the answer (a stream's
  // chunks) and may change the call sent if it has to be sent again;
  // on_answer gets the answer, or the Error. Neither may block.
  void call(std::uint32_t shard, boost::json::object call, Repeat repeat, std::chrono::steady_clock::duration patience,
            std::function<void(const boost::json::object& part, boost::json::object& call)> on_part,
            std::function<void(Answer)> on_answer);
  // The answer, or throws its Error.
  std::future<boost::json::object> call(std::uint32_t shard, boost::json::object call, Repeat repeat,
                                        std::chrono::steady_clock::duration patience = kHolderPatience);

  // Calls waiting to be sent again fail with errc::shut_down; so do later ones.
  void stop();

 private:
  struct Pending;
  void send(const std::shared_ptr<Pending>& pending);
  void again(const std::shared_ptr<Pending>& pending, const std::string& why);
  void retry_loop();

  ShardRouter& router_;
  std::vector<std::unique_ptr<engine::Shard>>& shards_;
  RunInfo (*from_finished_)(const engine::FinishedRun&);
  std::chrono::milliseconds longest_pause_;

  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::multimap<std::chrono::steady_clock::time_point, std::shared_ptr<Pending>> waiting_;  // to send again
  std::thread retry_thread_;
};

}  // namespace fusee::remote
