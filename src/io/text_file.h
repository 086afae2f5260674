// Line-oriented text corpus files (Multi30k's train.en.gz, one sentence per line) and a strict UTF-8 check.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tfm {

// Byte offset of the first byte that does not start a well-formed UTF-8 sequence (Unicode 15, table 3-7: no
// overlong forms, no surrogates U+D800..U+DFFF, nothing above U+10FFFF, no truncated sequence); nullopt if all of
// `text` is well-formed.
std::optional<size_t> find_invalid_utf8(std::string_view text);

// Lines of a text file, plain or gzip-compressed (zlib recognises the gzip magic bytes 1f 8b and decompresses;
// any other file is read as is). Lines are split on '\n'; a final '\n' does not start another line; one trailing
// '\r' per line is removed (CRLF files); empty lines are kept so that element i is line i + 1 of the file.
// Throws std::runtime_error whose message starts with the path:
//   "<path>: cannot open: No such file or directory"
//   "<path>: read error: <zlib message>"               (e.g. a truncated .gz)
//   "<path>: empty file"                                (0 bytes after decompression)
//   "<path>: line 12: invalid UTF-8 (byte 0xff at column 5)"   (column counts bytes, 1-based)
std::vector<std::string> read_lines(const std::string& path);

// The whole file as bytes, gzip-decompressed when it starts with the gzip magic (zlib passes other files
// through). Throws std::runtime_error "<path>: cannot open: ...", "<path>: read error: ..." or "<path>: larger
// than 1 GiB (decompressed)...".
std::string read_file_maybe_gzip(const std::string& path);

}  // namespace tfm
