// partition_proxy: named TcpProxy links in a process of their own, for shell
// tests that partition separate processes (tests/replicated_engine_kill_test.sh
// puts one on every replica-to-replica link and on each replica's way to
// etcd).
//
// Usage: partition_proxy NAME=IP:PORT...
// For each link it prints "NAME PORT" (the port it listens on), then "ready".
// Then it reads commands from stdin, one per line, and answers each with
// "ok" once it applies (or "error: ..."), so a test knows a cut is in place
// before it goes on:
//   cut NAME...     both directions of each link
//   heal NAME...    (heal all: every link)
//   reset NAME...   ends the link's connections, as a TCP timeout that
//                   gives up would
// It exits when stdin closes.
#include <fmt/format.h>

#include <cstdio>

#include <exception>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/tcp_proxy.hpp"

using fusee::testing::TcpProxy;

int main(int argc, char** argv) {
  std::map<std::string, std::unique_ptr<TcpProxy>> links;
  for (int i = 1; i < argc; ++i) {
    const std::string spec = argv[i];
    const auto equals = spec.find('=');
    const auto colon = spec.rfind(':');
    if (equals == std::string::npos || colon == std::string::npos || colon < equals || equals == 0) {
      fmt::print(stderr, "partition_proxy: '{}' is not NAME=HOST:PORT\n", spec);
      return 2;
    }
    const std::string name = spec.substr(0, equals);
    const std::string host = spec.substr(equals + 1, colon - equals - 1);
    const std::string digits = spec.substr(colon + 1);
    unsigned long port = 0;
    if (!digits.empty() && digits.size() <= 5 && digits.find_first_not_of("0123456789") == std::string::npos) {
      port = std::stoul(digits);
    }
    if (port == 0 || port > 65535 || links.contains(name)) {
      fmt::print(stderr, "partition_proxy: '{}': a bad port or a name given twice\n", spec);
      return 2;
    }
    try {
      links.emplace(name, std::make_unique<TcpProxy>(host, static_cast<std::uint16_t>(port)));
    } catch (const std::exception& error) {  // a host that is no IP address, or no port to listen on
      fmt::print(stderr, "partition_proxy: '{}': {}\n", spec, error.what());
      return 2;
    }
  }
  for (const auto& [name, link] : links) fmt::print("{} {}\n", name, link->port());
  fmt::print("ready\n");
  std::fflush(stdout);

  for (std::string line; std::getline(std::cin, line);) {
    std::istringstream words(line);
    std::string command;
    if (!(words >> command)) continue;
    std::vector<TcpProxy*> named;
    std::string unknown;
    for (std::string name; words >> name;) {
      if (name == "all") {
        for (auto& [_, link] : links) named.push_back(link.get());
      } else if (auto found = links.find(name); found != links.end()) {
        named.push_back(found->second.get());
      } else {
        unknown = name;
      }
    }
    if (!unknown.empty()) {
      fmt::print("error: no link named '{}'\n", unknown);
    } else if (command == "cut") {
      for (TcpProxy* link : named) link->cut(true, true);
      fmt::print("ok\n");
    } else if (command == "heal") {
      for (TcpProxy* link : named) link->heal();
      fmt::print("ok\n");
    } else if (command == "reset") {
      for (TcpProxy* link : named) link->reset();
      fmt::print("ok\n");
    } else {
      fmt::print("error: '{}' is not cut, heal or reset\n", command);
    }
    std::fflush(stdout);
  }
  return 0;
}
