#include "io/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace tfm {

namespace {

std::runtime_error sys_error(const std::string& what, int err) {
  return std::runtime_error(what + ": " + std::strerror(err));
}

// Folder holding `path`, for the directory fsync that makes the rename durable.
std::string parent_dir(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

void fsync_dir(const std::string& dir, const std::string& path) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw sys_error("cannot write: '" + path + "' written, but cannot open folder '" + dir + "' to sync it", errno);
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  // Some filesystems do not support fsync on a folder (EINVAL); the rename is then as durable as they allow.
  if (rc != 0 && err != EINVAL)
    throw sys_error("cannot write: '" + path + "' written, but syncing folder '" + dir + "' failed", err);
}

}  // namespace

void write_file_atomic(const std::string& path, const std::function<void(std::FILE*)>& writer) {
  if (path.empty()) throw std::runtime_error("write_file_atomic: empty path");
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) throw sys_error("cannot write '" + path + "' (creating its temporary file '" + tmp + "')", errno);
  std::FILE* f = ::fdopen(fd, "wb");
  if (!f) {
    int err = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    throw sys_error("cannot write: cannot open stream on '" + tmp + "' for '" + path + "'", err);
  }
  // Every exit path below closes `f` exactly once and removes the temp file unless the rename succeeded.
  auto fail = [&](const std::string& step, int err) {
    if (f) std::fclose(f);
    f = nullptr;
    ::unlink(tmp.c_str());
    throw sys_error("cannot write: " + step + " '" + path + "' (temp file '" + tmp + "')", err);
  };
  try {
    writer(f);
  } catch (...) {
    std::fclose(f);
    ::unlink(tmp.c_str());
    throw;
  }
  // errno right after the writer is the best record of a failed fwrite (stdio keeps only the error flag).
  int write_errno = errno;
  if (std::ferror(f)) fail("writing", write_errno ? write_errno : EIO);
  if (std::fflush(f) != 0) fail("flushing", errno);
  if (::fsync(::fileno(f)) != 0) fail("syncing", errno);
  std::FILE* closing = f;
  f = nullptr;
  if (std::fclose(closing) != 0) fail("closing", errno);
  if (::rename(tmp.c_str(), path.c_str()) != 0) fail("renaming temp file onto", errno);
  fsync_dir(parent_dir(path), path);
}

void write_file_atomic(const std::string& path, std::string_view bytes) {
  write_file_atomic(path, [&](std::FILE* f) {
    if (!bytes.empty()) std::fwrite(bytes.data(), 1, bytes.size(), f);
  });
}

void make_dirs(const std::string& dir) {
  if (dir.empty()) throw std::runtime_error("make_dirs: empty path");
  // Create each prefix ending at a '/', then the full path.
  for (size_t pos = dir.find('/', 1);; pos = dir.find('/', pos + 1)) {
    std::string prefix = pos == std::string::npos ? dir : dir.substr(0, pos);
    if (!prefix.empty() && ::mkdir(prefix.c_str(), 0777) != 0) {
      int err = errno;
      struct stat st;
      if (err != EEXIST)
        throw sys_error("cannot create folder '" + prefix + "' (creating '" + dir + "')", err);
      if (::stat(prefix.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
        throw std::runtime_error("cannot create folder: '" + prefix + "' exists and is not a folder (creating '" + dir + "')");
    }
    if (pos == std::string::npos) break;
  }
}

}  // namespace tfm
