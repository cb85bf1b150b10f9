// Result<T>: how operating errors travel in Fusee. A value or a
// std::error_code, never an exception below the public SDK. [[nodiscard]]
// through Boost.System's result, so a dropped error fails the -Werror build.
#pragma once

#include <boost/system/result.hpp>
#include <system_error>

namespace fusee {

template <typename T>
using Result = boost::system::result<T, std::error_code>;

// The success value for Result<void>.
inline Result<void> ok() { return {}; }

}  // namespace fusee

// Propagates an error from an expression yielding a Result, or yields its
// value. Statement-expression (GCC/Clang; __extension__ keeps -Wpedantic quiet)
// so call sites stay one line.
#define FUSEE_TRY(expr)                                   \
  __extension__({                                         \
    auto fusee_try_result_ = (expr);                      \
    if (!fusee_try_result_) return fusee_try_result_.error(); \
    std::move(fusee_try_result_).value();                 \
  })

// The same for Result<void> (no value to yield).
#define FUSEE_TRY_VOID(expr)                              \
  do {                                                    \
    auto fusee_try_result_ = (expr);                      \
    if (!fusee_try_result_) return fusee_try_result_.error(); \
  } while (0)
