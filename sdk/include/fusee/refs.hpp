// Typed names: a WorkflowRef names a workflow with its input and output
// types, a Signal names a signal with its value type. Values travel as JSON
// (Boost.JSON); user types convert through its tag_invoke customisation
// (value_from / value_to).
#pragma once

#include <string>

namespace fusee {

template <typename In, typename Out>
struct WorkflowRef {
  using input_type = In;
  using output_type = Out;
  std::string name;
};

template <typename T>
struct Signal {
  using value_type = T;
  std::string name;
};

}  // namespace fusee
