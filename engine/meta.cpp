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
  return std::optional<Meta>(meta);
}

Result<void> write_meta(io::FileSystem& fs, const std::string& dir, const Meta& meta) {
  boost::json::object object;
  object["format"] = meta.format;
  object["shards"] = meta.shards;
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

}  // namespace fusee::engine
