// A text table for the `fusee` command's human output: columns sized to
// their widest cell, numbers right-aligned, text left-aligned.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

namespace fusee::cli {

class Table {
 public:
  enum class Align { left, right };
  struct Column {
    std::string title;
    Align align = Align::left;
  };
  explicit Table(std::vector<Column> columns) : columns_(std::move(columns)) {}

  void add(std::vector<std::string> row) {
    row.resize(columns_.size());
    rows_.push_back(std::move(row));
  }
  bool empty() const { return rows_.empty(); }

  // Each line starts with `indent`; no trailing spaces.
  void print(std::FILE* out, const std::string& indent = "  ") const {
    std::vector<std::size_t> widths;
    for (const auto& column : columns_) widths.push_back(column.title.size());
    for (const auto& row : rows_) {
      for (std::size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], row[c].size());
    }
    auto line = [&](const std::vector<std::string>& cells) {
      std::string text = indent;
      for (std::size_t c = 0; c < cells.size(); ++c) {
        if (c > 0) text += "  ";
        bool last = c + 1 == cells.size();
        if (columns_[c].align == Align::right) {
          text += fmt::format("{:>{}}", cells[c], widths[c]);
        } else {
          text += last ? cells[c] : fmt::format("{:<{}}", cells[c], widths[c]);
        }
      }
      while (!text.empty() && text.back() == ' ') text.pop_back();
      fmt::print(out, "{}\n", text);
    };
    std::vector<std::string> titles;
    for (const auto& column : columns_) titles.push_back(column.title);
    line(titles);
    for (const auto& row : rows_) line(row);
  }

 private:
  std::vector<Column> columns_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace fusee::cli
