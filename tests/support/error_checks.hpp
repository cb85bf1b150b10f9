// doctest helper for the SDK's errors: the errc a call throws (errc{} when
// it throws none). Header-only; include from test files only.
#pragma once

#include <functional>

#include "fusee/error.hpp"

namespace fusee::testing {

inline errc error_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const Error& error) {
    return error.error();
  }
  return errc{};
}

}  // namespace fusee::testing
