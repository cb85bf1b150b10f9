#include "wal/io/file_system.hpp"

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <system_error>
#include <utility>
#include <vector>

namespace fusee::io {

Result<std::unique_ptr<WriteQueue>> FileSystem::open_write_queue(std::size_t /*depth*/) {
  return std::make_error_code(std::errc::function_not_supported);
}

std::string join_path(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  if (dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

std::string parent_path(const std::string& path) {
  auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

AlignedBuffer::AlignedBuffer(std::size_t size_bytes) : size_(size_bytes) {
  if (size_bytes == 0) return;
  std::size_t rounded = (size_bytes + kDirectAlignment - 1) / kDirectAlignment * kDirectAlignment;
  data_ = static_cast<std::byte*>(std::aligned_alloc(kDirectAlignment, rounded));
  if (data_ == nullptr) throw std::bad_alloc();
  std::memset(data_, 0, rounded);
}

AlignedBuffer::AlignedBuffer(AlignedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& other) noexcept {
  if (this != &other) {
    std::free(data_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

AlignedBuffer::~AlignedBuffer() { std::free(data_); }

Result<bool> FileSystem::is_memory_backed(const std::string&) { return false; }

Result<std::unique_ptr<FileSystem::Lock>> FileSystem::lock_exclusive(const std::string&) {
  return std::make_unique<Lock>();
}

Result<std::vector<std::byte>> read_file(FileSystem& fs, const std::string& path) {
  auto file = FUSEE_TRY(fs.open(path, {}));
  std::vector<std::byte> bytes(FUSEE_TRY(file->size()));
  std::size_t done = 0;
  while (done < bytes.size()) {
    const std::size_t got = FUSEE_TRY(file->read_at(done, std::span(bytes).subspan(done)));
    if (got == 0) break;
    done += got;
  }
  bytes.resize(done);
  return bytes;
}

Result<void> remove_tree(FileSystem& fs, const std::string& path) {
  if (!FUSEE_TRY(fs.exists(path))) return ok();
  auto names = fs.list(path);
  if (!names) {
    // A file, not a directory.
    FUSEE_TRY_VOID(fs.remove(path));
    return fs.sync_dir(parent_path(path));
  }
  for (const auto& name : *names) {
    auto child = join_path(path, name);
    if (fs.list(child)) {
      FUSEE_TRY_VOID(remove_tree(fs, child));
    } else {
      FUSEE_TRY_VOID(fs.remove(child));
    }
  }
  FUSEE_TRY_VOID(fs.sync_dir(path));
  FUSEE_TRY_VOID(fs.remove_dir(path));
  return fs.sync_dir(parent_path(path));
}

void keep_for_the_kernel(AlignedBuffer buffer) {
  static std::mutex mu;
  // Never destroyed: the buffers must outlive every static destructor too.
  static auto* kept = new std::vector<AlignedBuffer>();
  std::lock_guard lock(mu);
  kept->push_back(std::move(buffer));
}

}  // namespace fusee::io
