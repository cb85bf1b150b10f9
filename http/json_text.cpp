#include "http/json_text.hpp"

#include <fmt/format.h>

#include <boost/json/basic_parser_impl.hpp>
#include <set>
#include <vector>

namespace fusee::http {
namespace {

// The length of the well-formed UTF-8 sequence at text[at], or 0.
std::size_t utf8_length(std::string_view text, std::size_t at) {
  auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[at + k]); };
  auto c = byte(0);
  if (c < 0x80) return 1;
  std::size_t length = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
  if (length == 0 || at + length > text.size()) return 0;
  for (std::size_t k = 1; k < length; ++k) {
    if ((byte(k) & 0xC0) != 0x80) return 0;
  }
  // The second byte's range rules out overlong forms, surrogates and
  // code points past U+10FFFF.
  if (c == 0xE0 && byte(1) < 0xA0) return 0;
  if (c == 0xED && byte(1) > 0x9F) return 0;
  if (c == 0xF0 && byte(1) < 0x90) return 0;
  if (c == 0xF4 && byte(1) > 0x8F) return 0;
  return length;
}

// A handler for Boost.JSON's basic_parser that keeps, for each object
// open, the keys seen so far, and stops at the first one seen twice.
struct DuplicateFinder {
  static constexpr std::size_t max_object_size = std::size_t(-1);
  static constexpr std::size_t max_array_size = std::size_t(-1);
  static constexpr std::size_t max_key_size = std::size_t(-1);
  static constexpr std::size_t max_string_size = std::size_t(-1);
  using error_code = boost::system::error_code;
  using string_view = boost::json::string_view;

  std::vector<std::optional<std::set<std::string>>> open;  // per level: an object's keys, or an array
  std::string key;
  std::optional<std::string> duplicate;

  bool on_document_begin(error_code&) { return true; }
  bool on_document_end(error_code&) { return true; }
  bool on_array_begin(error_code&) {
    open.emplace_back();
    return true;
  }
  bool on_array_end(std::size_t, error_code&) {
    open.pop_back();
    return true;
  }
  bool on_object_begin(error_code&) {
    open.emplace_back(std::set<std::string>());
    return true;
  }
  bool on_object_end(std::size_t, error_code&) {
    open.pop_back();
    return true;
  }
  bool on_string_part(string_view, std::size_t, error_code&) { return true; }
  bool on_string(string_view, std::size_t, error_code&) { return true; }
  bool on_key_part(string_view part, std::size_t, error_code&) {
    key.append(part.data(), part.size());
    return true;
  }
  bool on_key(string_view last, std::size_t, error_code& error) {
    key.append(last.data(), last.size());
    if (!open.back()->insert(key).second) {
      duplicate = key;
      error = make_error_code(boost::json::error::syntax);  // stops the parser
      return false;
    }
    key.clear();
    return true;
  }
  bool on_number_part(string_view, error_code&) { return true; }
  bool on_int64(std::int64_t, string_view, error_code&) { return true; }
  bool on_uint64(std::uint64_t, string_view, error_code&) { return true; }
  bool on_double(double, string_view, error_code&) { return true; }
  bool on_bool(bool, error_code&) { return true; }
  bool on_null(error_code&) { return true; }
  bool on_comment_part(string_view, error_code&) { return true; }
  bool on_comment(string_view, error_code&) { return true; }
};

}  // namespace

std::optional<std::size_t> first_invalid_utf8(std::string_view text) {
  for (std::size_t at = 0; at < text.size();) {
    auto length = utf8_length(text, at);
    if (length == 0) return at;
    at += length;
  }
  return std::nullopt;
}

std::optional<std::string> first_duplicate_key(std::string_view json) {
  boost::json::basic_parser<DuplicateFinder> parser(boost::json::parse_options{});
  boost::system::error_code error;
  (void)parser.write_some(false, json.data(), json.size(), error);
  return parser.handler().duplicate;
}

std::string printable(std::string_view text, std::size_t bytes_max) {
  std::string out;
  for (std::size_t at = 0; at < text.size();) {
    if (out.size() >= bytes_max) {
      out += "...";
      break;
    }
    auto length = utf8_length(text, at);
    auto c = static_cast<unsigned char>(text[at]);
    if (length == 0 || c < 0x20 || c == 0x7F) {
      out += fmt::format("\\x{:02x}", c);
      ++at;
      continue;
    }
    out.append(text.substr(at, length));
    at += length;
  }
  return out;
}

}  // namespace fusee::http
