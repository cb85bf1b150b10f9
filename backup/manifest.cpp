#include "backup/manifest.hpp"

#include <boost/json.hpp>
#include <fmt/format.h>

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
    chunks.push_back(std::move(entry));
  }
  json::array batches;
  for (const auto& batch : manifest.batches) {
    batches.push_back(json::array{batch.sequence, batch.segment, batch.offset, batch.bytes, batch.flags, batch.at_ms});
  }
  return json::serialize(json::object{{"format", kManifestFormat},
                                      {"directory", manifest.directory},
                                      {"chunks", std::move(chunks)},
                                      {"batches", std::move(batches)}});
}

std::optional<Manifest> parse_manifest(std::span<const std::byte> bytes) {
  auto object = object_of(bytes);
  Manifest manifest;
  std::uint32_t format = 0;
  if (!object || !number(*object, "format", format) || format != kManifestFormat ||
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

std::string manifest_name(std::uint64_t last_sequence) {
  return fmt::format("{}{:020}", kManifestPrefix, last_sequence);
}

std::string chunk_name(std::uint64_t segment, std::uint64_t offset) {
  return fmt::format("{}{:010}-{:012}", kChunkPrefix, segment, offset);
}

}  // namespace fusee::backup
