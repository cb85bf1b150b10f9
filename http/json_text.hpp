// What Boost.JSON's parser takes silently or names only vaguely in a
// request's body, found before it parses: bytes that are not UTF-8 (the
// parser says "syntax error"), and a key given twice in one object (the
// parser keeps the last, so two readers of one body -- a proxy that checks
// "amount", the engine that acts on it -- could each see another value).
// Pure.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace fusee::http {

// The offset of the first byte that does not belong to well-formed UTF-8
// (RFC 3629: no overlong forms, no surrogates, nothing past U+10FFFF).
std::optional<std::size_t> first_invalid_utf8(std::string_view text);

// The first key repeated within one object, anywhere in `json`, or
// nothing (also when `json` is not JSON: the parser says why, later).
std::optional<std::string> first_duplicate_key(std::string_view json);

// `text` fit to echo back in a message: valid UTF-8 is kept, every byte
// that is not (and every control character) is written \xHH, and it is cut
// at `bytes_max` with "...".
std::string printable(std::string_view text, std::size_t bytes_max = 200);

}  // namespace fusee::http
