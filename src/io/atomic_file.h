// Crash-safe file writes: the new contents go to a temp file beside the target, are flushed to disk and
// renamed over the target, so a reader (or a crash at any point) sees either the old file or the complete new
// one, never a torn write. Used for checkpoints, safetensors, npy and configs.
#pragma once
#include <cstdio>
#include <functional>
#include <string>
#include <string_view>

namespace tfm {

// Writes `path` atomically. `writer` streams the contents into the FILE* of the temp file
// `path + ".tmp.<pid>"` (same folder, so rename() stays within one filesystem); then fflush, fsync, rename
// over `path` and fsync of the folder so the rename itself is durable.
// Throws std::runtime_error naming the path and strerror when the temp file cannot be created (missing or
// unwritable folder) or any write/flush/fsync/close/rename fails (ENOSPC, EFBIG, EIO). Exceptions thrown by
// `writer` propagate unchanged. On any failure the temp file is removed and the previous file at `path`, if
// any, is untouched. A symlink is followed (the file it points to is replaced, the link kept); an existing file
// keeps its permission bits; an existing device or FIFO (/dev/stdout, a named pipe) is written through, not
// atomically; a folder is refused.
void write_file_atomic(const std::string& path, const std::function<void(std::FILE*)>& writer);
// Same, writing `bytes` verbatim.
void write_file_atomic(const std::string& path, std::string_view bytes);

// Reads a whole regular file (or FIFO/device) of at most `max_bytes`. Throws std::runtime_error naming `path`:
// cannot open (strerror), "is a folder", read error, or "larger than N MiB" (a config or vocabulary symlinked
// to /dev/zero must not eat the memory).
std::string read_whole_file(const std::string& path, size_t max_bytes = size_t(256) << 20);

// mkdir -p: creates `dir` and any missing parents (0777 & ~umask); no-op if it already is a directory.
// Throws std::runtime_error naming the folder that could not be created and why.
void make_dirs(const std::string& dir);

}  // namespace tfm
