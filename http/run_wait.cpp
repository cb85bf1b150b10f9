#include "http/run_wait.hpp"

namespace fusee::http {

RunWait::RunWait(boost::asio::any_io_executor executor, std::shared_ptr<ServerGate> gate)
    : executor_(std::move(executor)), gate_(std::move(gate)), deadline_(executor_) {}

RunWait::~RunWait() = default;

void RunWait::arm(std::chrono::steady_clock::duration timeout, HttpResponse at_deadline, Done done) {
  done_ = std::move(done);
  rearm(timeout, std::move(at_deadline));
}

void RunWait::rearm(std::chrono::steady_clock::duration timeout, HttpResponse at_deadline) {
  at_deadline_ = std::move(at_deadline);
  deadline_.expires_after(timeout);  // cancels the pending wait, if any
  // The handler's reference is what keeps the wait alive while the engine
  // works: the engine's callbacks hold only weak ones. Not the error code:
  // a deadline that expired just as the answer or rearm came is queued with
  // success after they cancelled nothing.
  deadline_.async_wait([self = shared_from_this(), armed = ++armed_](const boost::system::error_code&) {
    if (armed == self->armed_ && !self->over()) self->answer(std::move(self->at_deadline_));
  });
}

void RunWait::answer(Answer answer) {
  if (over()) return;
  auto done = std::move(done_);
  done_ = nullptr;
  deadline_.cancel();
  done(std::move(answer));
}

}  // namespace fusee::http
