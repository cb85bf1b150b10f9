#include "wal/io/read_only_file_system.hpp"

#include <system_error>

namespace fusee::io {
namespace {

std::error_code refused() { return std::make_error_code(std::errc::read_only_file_system); }

// A file opened for reading: writes and syncs are refused here too, in case
// a caller writes through a File it opened read-only.
class ReadOnlyFile final : public File {
 public:
  explicit ReadOnlyFile(std::unique_ptr<File> inner) : inner_(std::move(inner)) {}
  Result<std::size_t> write_at(std::uint64_t, std::span<const std::byte>, WriteFlags) override { return refused(); }
  Result<std::size_t> read_at(std::uint64_t offset, std::span<std::byte> out) override {
    return inner_->read_at(offset, out);
  }
  Result<void> sync_data() override { return refused(); }
  Result<void> truncate(std::uint64_t) override { return refused(); }
  Result<void> allocate(std::uint64_t, std::uint64_t) override { return refused(); }
  Result<std::uint64_t> size() override { return inner_->size(); }
  bool direct() const override { return inner_->direct(); }
  // Changes nothing on disk, so a read-only view may drop its cache.
  Result<void> drop_cache() override { return inner_->drop_cache(); }

 private:
  std::unique_ptr<File> inner_;
};

}  // namespace

Result<std::unique_ptr<File>> ReadOnlyFileSystem::open(const std::string& path, OpenOptions options) {
  if (options.write || options.create) return refused();
  auto file = FUSEE_TRY(inner_.open(path, options));
  return std::unique_ptr<File>(std::make_unique<ReadOnlyFile>(std::move(file)));
}

Result<void> ReadOnlyFileSystem::rename(const std::string&, const std::string&) { return refused(); }
Result<void> ReadOnlyFileSystem::remove(const std::string&) { return refused(); }
Result<void> ReadOnlyFileSystem::create_dir(const std::string&) { return refused(); }
Result<void> ReadOnlyFileSystem::remove_dir(const std::string&) { return refused(); }
Result<std::vector<std::string>> ReadOnlyFileSystem::list(const std::string& path) { return inner_.list(path); }
Result<bool> ReadOnlyFileSystem::exists(const std::string& path) { return inner_.exists(path); }
Result<void> ReadOnlyFileSystem::sync_dir(const std::string&) { return refused(); }
Result<std::unique_ptr<FileSystem::Lock>> ReadOnlyFileSystem::lock_exclusive(const std::string&) {
  return refused();
}

}  // namespace fusee::io
