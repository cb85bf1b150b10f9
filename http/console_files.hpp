// The web console's files (http/console/: HTML, JavaScript, CSS), embedded
// into the binary at build time by scripts/embed_files.py, so a console
// needs nothing installed or built where it runs (docs/console.md).
#pragma once

#include <span>
#include <string_view>

namespace fusee::http {

struct EmbeddedFile {
  std::string_view name;  // served as /ui/<name>
  std::string_view content_type;
  std::string_view body;
};

std::span<const EmbeddedFile> console_files();

}  // namespace fusee::http
