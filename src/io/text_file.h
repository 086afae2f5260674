// Line-oriented text corpus files (Multi30k's train.en.gz, one sentence per line) and a strict UTF-8 check.
#pragma once

#include <cstddef>
#include <optional>
#include <stdexcept>
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
//   "<path>: is a folder, expected a file"              (check_not_folder)
//   "<path>: read error: <zlib message>"               (e.g. a truncated .gz)
//   "<path>: empty file"                                (0 bytes after decompression; empty_file_error) unless
//                                                       allow_empty, which returns no lines (the commands that
//                                                       map lines to outputs: empty input, empty output)
//   "<path>: line 12: invalid UTF-8 at byte offset 4 (byte 0xff)"   (0-based byte offset in the line, the unit
//                                                                    of every "invalid UTF-8" message)
std::vector<std::string> read_lines(const std::string& path, bool allow_empty = false);

// The whole file as bytes, gzip-decompressed when it starts with the gzip magic (zlib passes other files
// through). Throws std::runtime_error "<path>: cannot open: ...", "<path>: is a folder, expected a file",
// "<path>: read error: ..." or "<path>: larger than 1 GiB (decompressed)...".
std::string read_file_maybe_gzip(const std::string& path);
// A file named *.gz must be gzip: throws std::runtime_error "<path>: not a gzip file (it does not start with gzip's
// magic bytes 1f 8b), though its name ends in .gz" otherwise (zlib would pass it through as plain text). fd: the open
// file (read with pread at offset 0), or < 0 to open `path`. Nothing for other names or an empty file.
void check_gzip_name(const std::string& path, int fd = -1);

// The one wording of the input-file errors every command that reads text gives (read_lines, and `tfm embed`'s
// streaming reader): throws std::runtime_error "<path>: is a folder, expected a file" when the open file `fd`
// (or, with fd < 0, `path`) is a folder; and the std::runtime_error "<path>: empty file" for a file of 0 bytes
// where one is an error (corpora, bleu). The commands that give one output per input line (embed, classify,
// rerank, fill-mask) answer an empty file with an empty output and exit 0.
void check_not_folder(const std::string& path, int fd = -1);
std::runtime_error empty_file_error(const std::string& path);

}  // namespace tfm
