// Programmer errors crash. FUSEE_ASSERT is always on and prints the file,
// line and a message before aborting; FUSEE_DASSERT is the debug-only form for
// checks too expensive for release builds. Operating errors are Result values,
// never assertions.
#pragma once

#include <cstdio>
#include <cstdlib>

namespace fusee::detail {
[[noreturn]] inline void assert_failed(const char* file, int line, const char* condition,
                                       const char* message) {
  std::fprintf(stderr, "fusee: assertion failed at %s:%d: %s (%s)\n", file, line, message,
               condition);
  std::fflush(stderr);
  std::abort();
}
}  // namespace fusee::detail

#define FUSEE_ASSERT(condition, message)                                            \
  do {                                                                              \
    if (!(condition)) [[unlikely]]                                                  \
      ::fusee::detail::assert_failed(__FILE__, __LINE__, #condition, (message));    \
  } while (0)

#ifdef NDEBUG
#define FUSEE_DASSERT(condition, message) \
  do {                                    \
  } while (0)
#else
#define FUSEE_DASSERT(condition, message) FUSEE_ASSERT(condition, message)
#endif
