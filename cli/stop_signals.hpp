// SIGINT and SIGTERM for a long-running command (`fusee server`, `fusee
// replica run`): blocked before any thread starts, so that only the
// command's sigwait takes them; SIGPIPE ignored (a peer that went away is a
// write error, not a death).
#pragma once

#include <pthread.h>

#include <csignal>

namespace fusee::cli {

inline sigset_t block_stop_signals() {
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  return stop_signals;
}

}  // namespace fusee::cli
