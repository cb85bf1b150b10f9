// The one place the engine reads the system clock: the default Clock.
#include "fusee/clock.hpp"

namespace fusee {
namespace {

class SystemClock final : public Clock {
 public:
  TimePoint now() const override { return std::chrono::system_clock::now(); }
};

}  // namespace

std::shared_ptr<Clock> system_clock() { return std::make_shared<SystemClock>(); }

}  // namespace fusee
