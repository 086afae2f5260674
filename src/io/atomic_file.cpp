#include "io/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
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

// A device or FIFO (/dev/stdout, /dev/null, a named pipe) has no contents to protect, and renaming over it
// would replace the node itself, so it is written through.
void write_through(const std::string& path, const std::function<void(std::FILE*)>& writer) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw sys_error("cannot write '" + path + "'", errno);
  try {
    writer(f);
  } catch (...) {
    std::fclose(f);
    throw;
  }
  int write_errno = errno;
  bool ok = !std::ferror(f);
  int err = ok ? 0 : (write_errno ? write_errno : EIO);
  if (ok && std::fflush(f) != 0) ok = false, err = errno;
  if (std::fclose(f) != 0 && ok) ok = false, err = errno;
  if (!ok) throw sys_error("cannot write '" + path + "'", err);
}

}  // namespace

void write_file_atomic(const std::string& path_in, const std::function<void(std::FILE*)>& writer) {
  if (path_in.empty()) throw std::runtime_error("write_file_atomic: empty path");
  // Write where a symlink points (the link stays), keep an existing file's permissions, and never rename over
  // something that is not a regular file.
  std::string path = path_in;
  struct stat st;
  bool exists = ::lstat(path.c_str(), &st) == 0;
  if (exists && S_ISLNK(st.st_mode)) {
    if (char* real = ::realpath(path.c_str(), nullptr)) {
      path = real;
      std::free(real);
      exists = ::stat(path.c_str(), &st) == 0;
    } else {
      exists = false;  // dangling link: replaced by the file
    }
  }
  if (exists && S_ISDIR(st.st_mode)) throw std::runtime_error("cannot write '" + path_in + "': it is a folder");
  if (exists && !S_ISREG(st.st_mode)) return write_through(path, writer);
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) throw sys_error("cannot write '" + path + "' (creating its temporary file '" + tmp + "')", errno);
  if (exists) (void)::fchmod(fd, st.st_mode & 07777);
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

std::string read_whole_file(const std::string& path, size_t max_bytes) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw sys_error(path + ": cannot open", errno);
  struct stat st;
  if (::fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
    ::close(fd);
    throw std::runtime_error(path + ": is a folder, expected a file");
  }
  std::string bytes;
  if (S_ISREG(st.st_mode) && (size_t)st.st_size <= max_bytes) bytes.reserve((size_t)st.st_size);
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      throw sys_error(path + ": read error", err);
    }
    if (n == 0) break;
    if (bytes.size() + (size_t)n > max_bytes) {
      ::close(fd);
      throw std::runtime_error(path + ": larger than " + std::to_string(max_bytes >> 20) + " MiB; not a file " +
                               "this tool reads");
    }
    bytes.append(buf, (size_t)n);
  }
  ::close(fd);
  return bytes;
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
