#include "backup/manifest.hpp"

#include <boost/json.hpp>
#include <fmt/format.h>

#include "base/crc32c.hpp"

namespace fusee::backup {
namespace {

namespace json = boost::json;

std::optional<json::object> object_of(std::span<const std::byte> bytes) {
  boost::system::error_code error;
  auto value = json::parse(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), error);
  if (error || !value.is_object()) return std::nullopt;
  return value.as_object();
}

template <typename T>
bool number(const json::object& object, const char* key, T& out) {
  const auto* found = object.if_contains(key);
  if (!found) return false;
  boost::system::error_code error;
  auto value = found->to_number<T>(error);
  if (error) return false;
  out = value;
  return true;
}

bool text(const json::object& object, const char* key, std::string& out) {
  const auto* found = object.if_contains(key);
  if (!found || !found->is_string()) return false;
  out = std::string(found->as_string());
  return true;
}

// A manifest's or a snapshot description's own CRC-32C ("crc32c", last):
// over the text serialized without it. One byte changed on the target
// then makes the object not read, naming it, instead of pointing a
// restore at a wrong chunk, offset or name.
std::string sealed(json::object object) {
  const auto text = json::serialize(object);
  object["crc32c"] = crc32c(std::span(reinterpret_cast<const std::byte*>(text.data()), text.size()));
  return json::serialize(object);
}

// Whether the object's seal, if it has one (older ones have none), holds;
// takes the seal out.
bool seal_holds(json::object& object) {
  const auto* seal = object.if_contains("crc32c");
  if (seal == nullptr) return true;
  boost::system::error_code error;
  const auto crc = seal->to_number<std::uint32_t>(error);
  if (error) return false;
  object.erase("crc32c");
  const auto text = json::serialize(object);
  return crc32c(std::span(reinterpret_cast<const std::byte*>(text.data()), text.size())) == crc;
}

}  // namespace

std::string identity_json(const Identity& identity) {
  return json::serialize(json::object{{"format", kManifestFormat},
                                      {"directory", identity.directory},
                                      {"shards", identity.shards}});
}

std::optional<Identity> parse_identity(std::span<const std::byte> bytes) {
  auto object = object_of(bytes);
  Identity identity;
  std::uint32_t format = 0;
  if (!object || !number(*object, "format", format) || format != kManifestFormat ||
      !text(*object, "directory", identity.directory) || !number(*object, "shards", identity.shards)) {
    return std::nullopt;
  }
  return identity;
}

std::string manifest_json(const Manifest& manifest) {
  json::array chunks;
  for (const auto& chunk : manifest.chunks) {
    json::object entry{
        {"name", chunk.name}, {"segment", chunk.segment}, {"offset", chunk.offset}, {"bytes", chunk.bytes}};
    if (!chunk.blob_pack.empty()) entry["blob_pack"] = chunk.blob_pack;
    if (chunk.crc32c) entry["crc32c"] = *chunk.crc32c;
    chunks.push_back(std::move(entry));
  }
  json::array batches;
  for (const auto& batch : manifest.batches) {
    batches.push_back(json::array{batch.sequence, batch.segment, batch.offset, batch.bytes, batch.flags, batch.at_ms});
  }
  return sealed(json::object{{"format", kManifestFormat},
                              {"directory", manifest.directory},
                              {"chunks", std::move(chunks)},
                              {"batches", std::move(batches)}});
}

std::optional<Manifest> parse_manifest(std::span<const std::byte> bytes) {
  auto object = object_of(bytes);
  Manifest manifest;
  std::uint32_t format = 0;
  if (!object || !seal_holds(*object) || !number(*object, "format", format) || format != kManifestFormat ||
      !text(*object, "directory", manifest.directory)) {
    return std::nullopt;
  }
  const auto* chunks = object->if_contains("chunks");
  const auto* batches = object->if_contains("batches");
  if (!chunks || !chunks->is_array() || !batches || !batches->is_array()) return std::nullopt;
  for (const auto& value : chunks->as_array()) {
    if (!value.is_object()) return std::nullopt;
    ChunkRef chunk;
    const auto& entry = value.as_object();
    if (!text(entry, "name", chunk.name) || !number(entry, "segment", chunk.segment) ||
        !number(entry, "offset", chunk.offset) || !number(entry, "bytes", chunk.bytes)) {
      return std::nullopt;
    }
    if (entry.contains("blob_pack") && !text(entry, "blob_pack", chunk.blob_pack)) return std::nullopt;
    if (entry.contains("crc32c")) {
      std::uint32_t crc = 0;
      if (!number(entry, "crc32c", crc)) return std::nullopt;
      chunk.crc32c = crc;
    }
    manifest.chunks.push_back(std::move(chunk));
  }
  for (const auto& value : batches->as_array()) {
    if (!value.is_array() || value.as_array().size() != 6) return std::nullopt;
    const auto& entry = value.as_array();
    BatchRef batch;
    boost::system::error_code error;
    batch.sequence = entry[0].to_number<std::uint64_t>(error);
    if (!error) batch.segment = entry[1].to_number<std::uint64_t>(error);
    if (!error) batch.offset = entry[2].to_number<std::uint64_t>(error);
    if (!error) batch.bytes = entry[3].to_number<std::uint32_t>(error);
    if (!error) batch.flags = entry[4].to_number<std::uint32_t>(error);
    if (!error) batch.at_ms = entry[5].to_number<std::int64_t>(error);
    if (error) return std::nullopt;
    if (!manifest.batches.empty() && batch.sequence != manifest.batches.back().sequence + 1) return std::nullopt;
    manifest.batches.push_back(batch);
  }
  if (manifest.batches.empty()) return std::nullopt;
  return manifest;
}

std::string snapshot_json(const Snapshot& snapshot) {
  json::array files;
  for (const auto& file : snapshot.files) {
    json::object entry{{"name", file.name}, {"object", file.object}, {"bytes", file.bytes}};
    if (file.crc32c) entry["crc32c"] = *file.crc32c;
    files.push_back(std::move(entry));
  }
  return sealed(json::object{{"format", kManifestFormat},
                              {"directory", snapshot.directory},
                              {"covers_sequence", snapshot.covers_sequence},
                              {"covers_at_ms", snapshot.covers_at_ms},
                              {"from_sequence", snapshot.from_sequence},
                              {"files", std::move(files)}});
}

std::optional<Snapshot> parse_snapshot(std::span<const std::byte> bytes) {
  auto object = object_of(bytes);
  Snapshot snapshot;
  std::uint32_t format = 0;
  if (!object || !seal_holds(*object) || !number(*object, "format", format) || format != kManifestFormat ||
      !text(*object, "directory", snapshot.directory) ||
      !number(*object, "covers_sequence", snapshot.covers_sequence) ||
      !number(*object, "covers_at_ms", snapshot.covers_at_ms) ||
      !number(*object, "from_sequence", snapshot.from_sequence)) {
    return std::nullopt;
  }
  const auto* files = object->if_contains("files");
  if (!files || !files->is_array()) return std::nullopt;
  for (const auto& value : files->as_array()) {
    if (!value.is_object()) return std::nullopt;
    SnapshotFile file;
    const auto& entry = value.as_object();
    if (!text(entry, "name", file.name) || !text(entry, "object", file.object) || !number(entry, "bytes", file.bytes)) {
      return std::nullopt;
    }
    if (entry.contains("crc32c")) {
      std::uint32_t crc = 0;
      if (!number(entry, "crc32c", crc)) return std::nullopt;
      file.crc32c = crc;
    }
    // A file of the store's own directory, never a path out of it.
    if (file.name.empty() || file.name.find('/') != std::string::npos || file.name.starts_with('.')) {
      return std::nullopt;
    }
    snapshot.files.push_back(std::move(file));
  }
  if (snapshot.covers_sequence == 0 || snapshot.from_sequence == 0 ||
      snapshot.from_sequence > snapshot.covers_sequence || snapshot.files.empty()) {
    return std::nullopt;
  }
  return snapshot;
}

std::string manifest_name(std::uint64_t last_sequence) {
  return fmt::format("{}{:020}", kManifestPrefix, last_sequence);
}

std::string chunk_name(std::uint64_t segment, std::uint64_t offset) {
  return fmt::format("{}{:010}-{:012}", kChunkPrefix, segment, offset);
}

std::string snapshot_name(std::uint64_t covers_sequence) {
  return fmt::format("{}{:020}", kSnapshotPrefix, covers_sequence);
}

std::string store_table_name(const std::string& store_id, std::uint64_t file_number, std::uint64_t bytes) {
  // Object names hold letters, digits, '-' and '.' only.
  std::string id;
  for (char c : store_id) {
    const bool plain = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-';
    id += plain ? c : '-';
  }
  return fmt::format("{}{}-{:012}-{}.sst", kStoreTablePrefix, id, file_number, bytes);
}

std::string snapshot_file_name(std::uint64_t covers_sequence, const std::string& file) {
  return fmt::format("{}{:020}-{}", kSnapshotFilePrefix, covers_sequence, file);
}

std::optional<std::uint64_t> number_of_name(const std::string& name, const char* prefix) {
  std::string_view rest(name);
  if (!rest.starts_with(prefix)) return std::nullopt;
  rest.remove_prefix(std::string_view(prefix).size());
  if (rest.empty() || rest.size() > 20) return std::nullopt;
  std::uint64_t value = 0;
  for (char c : rest) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + static_cast<std::uint64_t>(c - '0');
  }
  return value;
}

}  // namespace fusee::backup
