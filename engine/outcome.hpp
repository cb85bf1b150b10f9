// How a run ended, as result() reports it.
#pragma once

#include <boost/json.hpp>
#include <string>

#include "fusee/engine.hpp"
#include "fusee/error.hpp"

namespace fusee::engine {

struct Outcome {
  RunStatus status = RunStatus::running;
  boost::json::value value;  // completed: the result
  errc code = errc::failed;  // otherwise: why
  std::string message;

  // The result, or throws the failure as fusee::Error.
  boost::json::value value_or_throw() const {
    if (status == RunStatus::completed) return value;
    throw Error(code, message);
  }
};

// The code errc_name() gave `name`; errc::failed for a name it never gives.
errc errc_from_name(const std::string& name);

}  // namespace fusee::engine
