// Typed names: a WorkflowRef names a workflow with its input and output
// types, a Signal names a signal with its value type, an Update an update
// with its argument's and answer's. Values travel as JSON
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

// An update a workflow takes (Ctx::on_update, Ctx::next_update): its
// argument's type and its answer's (void: no value, only acceptance).
template <typename Arg, typename Out>
struct Update {
  using arg_type = Arg;
  using output_type = Out;
  Update(std::string update_name) : name(std::move(update_name)) {}
  std::string name;
};

}  // namespace fusee
