#include "engine/meta.hpp"

#include <boost/json.hpp>

#include "wal/segment_file.hpp"
#include "wal/errc.hpp"

namespace fusee::engine {

Result<std::optional<Meta>> read_meta(io::FileSystem& fs, const std::string& dir) {
  auto path = io::join_path(dir, kMetaFileName);
  auto exists = FUSEE_TRY(fs.exists(path));
  if (!exists) return std::optional<Meta>();
  auto file = FUSEE_TRY(fs.open(path, {}));
  auto size = FUSEE_TRY(file->size());
  if (size > 4096) return make_error_code(wal::errc::corrupt);
  std::string text(size, '\0');
  auto read = FUSEE_TRY(file->read_at(0, std::as_writable_bytes(std::span(text))));
  text.resize(read);
  boost::system::error_code error;
  auto value = boost::json::parse(text, error);
  if (error || !value.is_object()) return make_error_code(wal::errc::corrupt);
  const auto& object = value.get_object();
  auto* format = object.if_contains("format");
  auto* shards = object.if_contains("shards");
  if (!format || !shards || !format->is_int64() || !shards->is_int64()) return make_error_code(wal::errc::corrupt);
  if (format->get_int64() != kMetaFormat || shards->get_int64() < 1 || shards->get_int64() > 4096) {
    return make_error_code(wal::errc::corrupt);
  }
  Meta meta;
  meta.format = static_cast<std::uint32_t>(format->get_int64());
  meta.shards = static_cast<std::uint32_t>(shards->get_int64());
  if (auto* layout = object.if_contains("layout")) {
    if (!layout->is_int64() || layout->get_int64() < 0 || layout->get_int64() > UINT32_MAX) {
      return make_error_code(wal::errc::corrupt);
    }
    meta.layout = static_cast<std::uint32_t>(layout->get_int64());
  }
  return std::optional<Meta>(meta);
}

Result<void> write_meta(io::FileSystem& fs, const std::string& dir, const Meta& meta) {
  boost::json::object object;
  object["format"] = meta.format;
  object["shards"] = meta.shards;
  if (meta.layout != 0) object["layout"] = meta.layout;
  auto text = boost::json::serialize(object) + "\n";
  auto temporary = io::join_path(dir, std::string(kMetaFileName) + ".tmp");
  {
    auto file = FUSEE_TRY(fs.open(temporary, {.write = true, .create = true}));
    FUSEE_TRY_VOID(file->truncate(0));
    FUSEE_TRY_VOID(wal::write_fully(*file, 0, std::as_bytes(std::span(text)), io::WriteFlags::none));
    FUSEE_TRY_VOID(file->sync_data());
  }
  FUSEE_TRY_VOID(fs.rename(temporary, io::join_path(dir, kMetaFileName)));
  return fs.sync_dir(dir);
}

std::string layout_dir_name(std::uint32_t layout) {
  return layout == 0 ? std::string() : "layout-" + std::to_string(layout);
}

std::string layout_root(const std::string& dir, std::uint32_t layout) {
  return layout == 0 ? dir : io::join_path(dir, layout_dir_name(layout));
}

Result<std::vector<std::string>> leftover_layouts(io::FileSystem& fs, const std::string& dir, const Meta& meta) {
  std::vector<std::string> leftovers;
  auto names = FUSEE_TRY(fs.list(dir));
  for (const auto& name : names) {
    bool other_layout = name.starts_with("layout-") && name != layout_dir_name(meta.layout);
    bool layout_zero = meta.layout != 0 && (name == "wal" || name == "runs");
    if (other_layout || layout_zero) leftovers.push_back(io::join_path(dir, name));
  }
  return leftovers;
}


Result<bool> is_replica_dir(io::FileSystem& fs, const std::string& dir) {
  return fs.exists(io::join_path(dir, kReplicaMarker));
}

}  // namespace fusee::engine
