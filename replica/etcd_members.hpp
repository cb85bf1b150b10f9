// etcd's members as an operator names them -- "HOST:PORT" or a
// comma-separated list of a cluster's members (Config::etcd, `fusee replica
// run --etcd`) -- into the coordinator's options: the first is asked
// first, the others in turn when a member cannot be reached
// (replication/etcd_coordinator.hpp).
#pragma once

#include <sstream>
#include <string>

#include "fusee/error.hpp"
#include "protocol/address.hpp"
#include "replication/etcd_coordinator.hpp"

namespace fusee::replica {

// Throws Error (invalid_argument, naming `what`) for a list with an empty
// or malformed member.
inline void set_etcd_members(const std::string& list, const std::string& what, replication::EtcdOptions& options) {
  std::stringstream members(list);
  bool first = true;
  options.more.clear();
  for (std::string member; std::getline(members, member, ',');) {
    const auto address = protocol::parse_address(member, what, false);
    if (first) {
      options.host = address.tcp.address().to_string();
      options.port = address.tcp.port();
      first = false;
    } else {
      options.more.emplace_back(address.tcp.address().to_string(), address.tcp.port());
    }
  }
  if (first || (!list.empty() && list.back() == ',')) {
    throw Error(errc::invalid_argument, what + ": '" + list + "' names no etcd member (HOST:PORT[,HOST:PORT...])");
  }
}

}  // namespace fusee::replica
