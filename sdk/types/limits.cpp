#include "fusee/limits.hpp"

#include <fmt/format.h>

namespace fusee {
namespace {

bool allowed(char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  switch (c) {
    case '-': case '_': case '.': case ':': case '@': case '~': case '+': case '=': case ',':
      return true;
    default:
      return false;
  }
}

}  // namespace

std::optional<std::string> run_id_problem(std::string_view id, std::string_view what) {
  if (id.empty()) return fmt::format("a {} must not be empty", what);
  if (id.size() > kRunIdBytesMax) {
    return fmt::format("a {} is at most {} bytes, not {}", what, kRunIdBytesMax, id.size());
  }
  if (id == "." || id == "..") return fmt::format("a {} must not be \"{}\" (a URL path would drop it)", what, id);
  for (std::size_t at = 0; at < id.size(); ++at) {
    if (allowed(id[at])) continue;
    auto byte = static_cast<unsigned char>(id[at]);
    auto shown = byte > 0x20 && byte < 0x7f ? fmt::format("'{}'", id[at]) : fmt::format("byte 0x{:02x}", byte);
    return fmt::format("a {} is made of ASCII letters, digits and - _ . : @ ~ + = , only; {} at offset {} is not", what,
                       shown, at);
  }
  return std::nullopt;
}

}  // namespace fusee
