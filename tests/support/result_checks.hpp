// doctest helpers for Result values: unwrap or fail the test with the error's
// message. Header-only; include from test files only.
#pragma once

#include <doctest/doctest.h>

#include <span>
#include <string_view>
#include <utility>

#include "base/result.hpp"

namespace fusee::testing {

template <typename T>
T value_or_fail(Result<T> result) {
  if (!result) FAIL("unexpected error: " << result.error().message());
  return std::move(result).value();
}

inline void ok_or_fail(Result<void> result) {
  if (!result) FAIL("unexpected error: " << result.error().message());
}

inline std::span<const std::byte> as_bytes(std::string_view text) {
  return std::as_bytes(std::span(text.data(), text.size()));
}

}  // namespace fusee::testing
