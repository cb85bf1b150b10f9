// JsonLine: builds one flat JSON object and prints it on one line, the
// machine-readable output of every benchmark ({"bench":"raw_flush",
// "case":"direct_dsync","p50_us":41.2,...}). One line per result so a script
// can pick them out with grep '^{' and parse each alone.
//
// Thread-safety: a JsonLine is a plain value; use each from one thread.
// print() writes the whole line with one fwrite, so lines from different
// threads do not interleave mid-line.
#pragma once

#include <fmt/format.h>

#include <cmath>
#include <concepts>
#include <cstdio>
#include <iterator>
#include <string>
#include <string_view>

#include "bench/figures.hpp"

namespace fusee::bench {

class JsonLine {
 public:
  explicit JsonLine(std::string_view bench) { field("bench", bench); }

  JsonLine& field(std::string_view key, std::string_view value) {
    begin_field(key);
    append_string(value);
    return *this;
  }
  // Without this overload a string literal would pick the bool one (a
  // pointer-to-bool conversion beats a conversion to string_view).
  JsonLine& field(std::string_view key, const char* value) {
    return field(key, std::string_view(value));
  }
  JsonLine& field(std::string_view key, const std::string& value) {
    return field(key, std::string_view(value));
  }
  JsonLine& field(std::string_view key, bool value) {
    begin_field(key);
    text_ += value ? "true" : "false";
    return *this;
  }
  template <std::integral T>
    requires(!std::same_as<T, bool>)
  JsonLine& field(std::string_view key, T value) {
    begin_field(key);
    fmt::format_to(std::back_inserter(text_), "{}", value);
    return *this;
  }
  template <std::floating_point T>
  JsonLine& field(std::string_view key, T value) {
    begin_field(key);
    // JSON has no NaN or infinity; null keeps the line parseable.
    if (!std::isfinite(value)) {
      text_ += "null";
    } else {
      fmt::format_to(std::back_inserter(text_), "{}", value);
    }
    return *this;
  }

  // The object, without a trailing newline.
  std::string str() const { return text_ + "}"; }

  void print(std::FILE* out = stdout) const {
    std::string line = str() + "\n";
    std::fwrite(line.data(), 1, line.size(), out);
    std::fflush(out);
  }

 private:
  void begin_field(std::string_view key) {
    text_ += text_.empty() ? "{" : ",";
    append_string(key);
    text_ += ':';
  }

  void append_string(std::string_view value) {
    text_ += '"';
    for (char c : value) {
      switch (c) {
        case '"': text_ += "\\\""; break;
        case '\\': text_ += "\\\\"; break;
        case '\n': text_ += "\\n"; break;
        case '\r': text_ += "\\r"; break;
        case '\t': text_ += "\\t"; break;
        default:
          if (static_cast<unsigned char>(c) < 0x20) {
            fmt::format_to(std::back_inserter(text_), "\\u{:04x}", static_cast<unsigned>(c));
          } else {
            text_ += c;
          }
      }
    }
    text_ += '"';
  }

  std::string text_;
};

// One aim as every benchmark prints it, and scripts/bench-aims gathers it
// into make bench's summary: {"bench":"<name>_aims", "case", "value" (3
// significant digits), "aim_max" or "aim_min"}.
inline void print_aim_line(std::string_view aims_bench, std::string_view name, double value, bool at_most,
                           double bound) {
  JsonLine line(aims_bench);
  line.field("case", name).field("value", round_to_digits(value, 3));
  line.field(at_most ? "aim_max" : "aim_min", bound);
  line.print();
}

}  // namespace fusee::bench
