// Settle<T>: where a shard's (or a forwarded call's) answer goes -- a
// std::promise for the blocking and std::future calls, or a callback for the
// *_then calls an asynchronous server uses (Engine::Then). The request code
// is written once against set_value / set_exception and serves both.
#pragma once

#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <variant>

#include "fusee/engine.hpp"

namespace fusee::detail {

template <typename T>
class Settle {
 public:
  using Value = std::conditional_t<std::is_void_v<T>, std::monostate, T>;

  explicit Settle(std::promise<T> promise) : promise_(std::move(promise)) {}
  explicit Settle(std::function<void(std::variant<Value, Error>)> then) : then_(std::move(then)) {}

  template <typename... V>
  void set_value(V&&... value) {
    if (then_) {
      if constexpr (std::is_void_v<T>) {
        then_(std::variant<Value, Error>(std::in_place_index<0>));
      } else {
        then_(std::variant<Value, Error>(std::in_place_index<0>, std::forward<V>(value)...));
      }
      return;
    }
    promise_.set_value(std::forward<V>(value)...);
  }

  void set_exception(std::exception_ptr failure) {
    if (!then_) {
      promise_.set_exception(std::move(failure));
      return;
    }
    try {
      std::rethrow_exception(failure);
    } catch (const Error& error) {
      then_(std::variant<Value, Error>(std::in_place_index<1>, error));
    } catch (const std::exception& other) {
      then_(std::variant<Value, Error>(std::in_place_index<1>, Error(errc::storage, other.what())));
    }
  }

 private:
  std::promise<T> promise_;
  std::function<void(std::variant<Value, Error>)> then_;
};

}  // namespace fusee::detail
