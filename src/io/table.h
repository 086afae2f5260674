// Tables of named columns from CSV, TSV or JSON-lines files: the training data of `tfm finetune` (the formats the
// Hugging Face datasets library loads with load_dataset("csv" / "json", ...)).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace tfm {

struct Table {
  std::vector<std::string> columns;            // header names, in file order
  std::vector<std::vector<std::string>> rows;  // [rows][columns]; a JSON value that is not a string is its JSON text
  std::vector<int64_t> line_of_row;            // the 1-based line each row starts on (for messages)
  // Index of column `name`, or -1.
  int64_t column(const std::string& name) const;
};

// Reads `path` by its extension: ".csv" (RFC 4180: comma-separated, double-quoted fields may hold commas, quotes
// doubled, newlines), ".tsv" / ".tab" (tab-separated, no quoting), ".jsonl" / ".json" (one JSON object a line,
// the union of their keys as columns, missing keys empty). The first line of CSV/TSV is the header. Gzip files
// (".csv.gz") are decompressed. Throws std::runtime_error naming the file and line: cannot open, an unknown
// extension, invalid UTF-8, a row with another number of fields than the header, an unterminated quote, a JSON
// line that is not an object, no rows.
Table read_table(const std::string& path);

}  // namespace tfm
