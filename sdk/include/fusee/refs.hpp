// Typed names: a WorkflowRef names a workflow with its input and output
// types, a Signal names a signal with its value type. Values travel as JSON
// (Boost.JSON); user types convert through its tag_invoke customisation
// (value_from / value_to).
#pragma once

#include <string>
#include <utility>

namespace fusee {

// Both have a constructor, not aggregate initialization: GCC mishandles an
// aggregate temporary inside a co_await expression (fusee/compiler.hpp), and
// `ctx.wait_for(Signal<bool>{"approval"})` is one way to write one.
template <typename In, typename Out>
struct WorkflowRef {
  using input_type = In;
  using output_type = Out;
  WorkflowRef(std::string workflow_name) : name(std::move(workflow_name)) {}
  std::string name;
};

template <typename T>
struct Signal {
  using value_type = T;
  Signal(std::string signal_name) : name(std::move(signal_name)) {}
  std::string name;
};

}  // namespace fusee
