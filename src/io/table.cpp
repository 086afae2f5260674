#include "io/table.h"

#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "io/text_file.h"

namespace tfm {

int64_t Table::column(const std::string& name) const {
  for (size_t i = 0; i < columns.size(); ++i)
    if (columns[i] == name) return (int64_t)i;
  return -1;
}

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// RFC 4180 records; a trailing '\r' before '\n' is dropped outside quotes.
std::vector<std::pair<int64_t, std::vector<std::string>>> csv_records(const std::string& path, const std::string& text,
                                                                      char sep) {
  std::vector<std::pair<int64_t, std::vector<std::string>>> records;
  std::vector<std::string> fields;
  std::string field;
  bool quoted = false, any = false;
  int64_t line = 1, record_line = 1;
  size_t i = 0;
  auto end_record = [&] {
    fields.push_back(field);
    field.clear();
    if (!(fields.size() == 1 && fields[0].empty())) records.emplace_back(record_line, fields);  // blank lines skipped
    fields.clear();
    any = false;
  };
  while (i < text.size()) {
    const char ch = text[i];
    if (quoted) {
      if (ch == '"') {
        if (i + 1 < text.size() && text[i + 1] == '"') {
          field += '"';
          i += 2;
          continue;
        }
        quoted = false;
        ++i;
        continue;
      }
      if (ch == '\n') ++line;
      field += ch;
      ++i;
      continue;
    }
    if (ch == '"' && sep == ',' && field.empty()) {
      quoted = true;
      any = true;
      ++i;
      continue;
    }
    if (ch == sep) {
      fields.push_back(field);
      field.clear();
      any = true;
      ++i;
      continue;
    }
    if (ch == '\n' || (ch == '\r' && i + 1 < text.size() && text[i + 1] == '\n')) {
      end_record();
      i += ch == '\r' ? 2 : 1;
      ++line;
      record_line = line;
      continue;
    }
    field += ch;
    any = true;
    ++i;
  }
  if (quoted) throw std::runtime_error(path + ": line " + std::to_string(record_line) + ": unterminated quoted field");
  if (any || !field.empty()) end_record();
  return records;
}

}  // namespace

Table read_table(const std::string& path) {
  std::string base = ends_with(path, ".gz") ? path.substr(0, path.size() - 3) : path;
  const bool csv = ends_with(base, ".csv"), tsv = ends_with(base, ".tsv") || ends_with(base, ".tab");
  const bool jsonl = ends_with(base, ".jsonl") || ends_with(base, ".json");
  if (!csv && !tsv && !jsonl)
    throw std::runtime_error(path + ": unknown table format: name it .csv, .tsv or .jsonl");
  const std::string text = read_file_maybe_gzip(path);
  if (const auto bad = find_invalid_utf8(text))
    throw std::runtime_error(path + ": invalid UTF-8 at byte offset " + std::to_string(*bad));
  Table t;
  if (jsonl) {
    std::vector<std::map<std::string, std::string>> objs;
    std::map<std::string, int64_t> index;
    int64_t line = 0;
    size_t start = 0;
    while (start < text.size()) {
      size_t end = text.find('\n', start);
      if (end == std::string::npos) end = text.size();
      std::string s = text.substr(start, end - start);
      start = end + 1;
      ++line;
      if (s.find_first_not_of(" \t\r") == std::string::npos) continue;
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(s);
      } catch (const nlohmann::json::exception& e) {
        throw std::runtime_error(path + ": line " + std::to_string(line) + ": not JSON (" + e.what() + ")");
      }
      if (!j.is_object()) throw std::runtime_error(path + ": line " + std::to_string(line) + ": not a JSON object");
      std::map<std::string, std::string> row;
      for (auto& [k, v] : j.items()) {
        if (!index.count(k)) {
          index[k] = (int64_t)t.columns.size();
          t.columns.push_back(k);
        }
        row[k] = v.is_string() ? v.get<std::string>() : v.dump();
      }
      objs.push_back(std::move(row));
      t.line_of_row.push_back(line);
    }
    for (auto& o : objs) {
      std::vector<std::string> r(t.columns.size());
      for (auto& [k, v] : o) r[index[k]] = v;
      t.rows.push_back(std::move(r));
    }
  } else {
    auto records = csv_records(path, text, csv ? ',' : '\t');
    if (records.empty()) throw std::runtime_error(path + ": empty file (expected a header line)");
    t.columns = records[0].second;
    if (!t.columns.empty() && t.columns[0].rfind("\xEF\xBB\xBF", 0) == 0) t.columns[0] = t.columns[0].substr(3);  // BOM
    for (size_t r = 1; r < records.size(); ++r) {
      if (records[r].second.size() != t.columns.size())
        throw std::runtime_error(path + ": line " + std::to_string(records[r].first) + ": " +
                                 std::to_string(records[r].second.size()) + " fields, the header has " +
                                 std::to_string(t.columns.size()));
      t.rows.push_back(std::move(records[r].second));
      t.line_of_row.push_back(records[r].first);
    }
  }
  if (t.rows.empty()) throw std::runtime_error(path + ": no rows");
  return t;
}

}  // namespace tfm
