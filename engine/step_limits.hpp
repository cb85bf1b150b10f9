// StepLimits: where a step attempt gets the permit its limit asks for
// (ctx.step(...).limit(name), Engine::limit). The engine's own Limiter
// (engine/limiter.hpp) grants them in memory and local mode; in server mode
// the server grants them to every worker (remote/remote_limits.hpp), so a
// limit holds across workers. A permit goes back when its last reference
// drops; waiters are served in the order they asked.
//
// Thread-safe: any thread may ask, release and read the figures; a grant
// runs on some thread of the implementation's, outside its locks.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "fusee/engine.hpp"

namespace fusee::engine {

class StepLimits {
 public:
  // A granted permit: given back when the last reference drops.
  class Permit {
   public:
    explicit Permit(std::function<void()> give_back) : give_back_(std::move(give_back)) {}
    ~Permit() {
      if (give_back_) give_back_();
    }
    Permit(const Permit&) = delete;
    Permit& operator=(const Permit&) = delete;

   private:
    std::function<void()> give_back_;
  };
  using Grant = std::function<void(std::shared_ptr<Permit>)>;

  virtual ~StepLimits() = default;
  virtual void set(const std::string& name, const StepLimit& limit) = 0;
  // Queues the ask; `grant` runs once a permit is free (maybe at once, on
  // this thread). A limit not set yet grants nothing until it is (a
  // recovered run may ask before the application has set its limits);
  // false then, for the caller to warn about.
  virtual bool acquire(const std::string& name, Grant grant) = 0;
  // Grants nothing more (the engine shuts down); drops the waiters.
  virtual void close() = 0;
  // What this engine holds and waits for, by limit.
  virtual std::vector<LimitStats> stats() const = 0;
};

}  // namespace fusee::engine
