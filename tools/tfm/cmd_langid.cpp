// tfm langid: train a character n-gram language identifier on the user's corpora (tfm serve --langid takes it for
// LibreTranslate's /detect and source "auto"), and detect the language of texts with it.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <stdexcept>

#include "cli_util.h"
#include "commands.h"
#include "io/text_file.h"
#include "tfm/language_id.h"

namespace tfm::cli {

namespace {

// "en=FILE" or "en:2=FILE" (the language's text is the file's 2nd TAB-separated column, as fra.txt's French).
struct CorpusSpec {
  std::string language, path;
  int column = 0;  // 1-based; 0: the whole line
};

CorpusSpec parse_corpus(const std::string& s) {
  const size_t eq = s.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == s.size())
    throw CLI::ValidationError("--corpus expects CODE=FILE or CODE:COLUMN=FILE (en=train.en, fr:2=fra.txt), got '" +
                               s + "'");
  CorpusSpec c;
  c.language = s.substr(0, eq);
  c.path = s.substr(eq + 1);
  if (const size_t colon = c.language.find(':'); colon != std::string::npos) {
    const std::string col = c.language.substr(colon + 1);
    c.language = c.language.substr(0, colon);
    if (col.empty() || col.size() > 3 || col.find_first_not_of("0123456789") != std::string::npos || std::stoi(col) < 1)
      throw CLI::ValidationError("--corpus " + s + ": the column must be a number from 1 (CODE:COLUMN=FILE)");
    c.column = std::stoi(col);
  }
  if (c.language.empty()) throw CLI::ValidationError("--corpus " + s + ": empty language code");
  return c;
}

// The corpus's sentences: whole lines, or one TAB-separated column of each; empty ones skipped.
std::vector<std::string> corpus_lines(const CorpusSpec& c, int64_t max_lines) {
  std::vector<std::string> lines = read_lines(c.path);  // "<path>: cannot open: ..." / "<path>: empty file" / UTF-8
  std::vector<std::string> out;
  if (c.column == 0) {  // a file of TAB-separated columns (fra.txt) read whole would mix its languages
    size_t seen = 0, tabbed = 0;
    for (size_t i = 0; i < lines.size() && seen < 10; ++i)
      if (!lines[i].empty()) ++seen, tabbed += lines[i].find('\t') != std::string::npos;
    if (seen > 0 && tabbed == seen)
      throw std::invalid_argument(c.path + ": its lines have TAB-separated columns: name the column of '" +
                                  c.language + "', e.g. --corpus " + c.language + ":1=" + c.path);
  }
  for (size_t i = 0; i < lines.size() && (max_lines == 0 || (int64_t)out.size() < max_lines); ++i) {
    std::string& line = lines[i];
    if (c.column == 0) {
      if (!line.empty()) out.push_back(std::move(line));
      continue;
    }
    size_t start = 0;
    for (int k = 1; k < c.column; ++k) {
      start = line.find('\t', start);
      if (start == std::string::npos)
        throw std::invalid_argument(c.path + ": line " + std::to_string(i + 1) + " has no column " +
                                    std::to_string(c.column) + " (TAB-separated)");
      ++start;
    }
    const size_t end = line.find('\t', start);
    std::string field = line.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (!field.empty()) out.push_back(std::move(field));
  }
  return out;
}

std::vector<std::string> split_codes(const std::string& s) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i <= s.size()) {
    size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    if (j > i) out.push_back(s.substr(i, j - i));
    i = j + 1;
  }
  return out;
}

}  // namespace

void add_langid_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "langid", "Language identification by character n-grams, trained on your own corpora (no pretrained model): "
                "`tfm serve --langid FILE` answers LibreTranslate's /detect and source \"auto\" with it");
  cmd->require_subcommand(1);

  struct TrainOpts {
    std::vector<std::string> corpora;
    std::string out;
    int64_t max_lines = 0;
    LanguageIdOptions id;
    int threads = 0;
  };
  auto t = std::make_shared<TrainOpts>();
  CLI::App* train = cmd->add_subcommand(
      "train", "Count the character n-grams of each language's corpus and write the identifier (JSON) to --out");
  train
      ->add_option("--corpus", t->corpora,
                   "CODE=FILE: one sentence a line in language CODE (plain or .gz); CODE:N=FILE takes the N-th "
                   "TAB-separated column (fra.txt: en:1=fra.txt, fr:2=fra.txt). Repeat for each language (two or "
                   "more); the codes are those the served models use (en, fr, de)")
      ->required();
  train->add_option("--out", t->out, "The identifier file to write (JSON)")->required();
  train->add_option("--max-lines", t->max_lines, "Read at most this many sentences of each corpus (0 = all)")
      ->capture_default_str()
      ->check(whole_range(0, int64_t{1} << 40));
  train->add_option("--max-order", t->id.max_order, "Longest character n-gram")
      ->capture_default_str()
      ->check(whole_range(1, 8));
  train->add_option("--max-ngrams", t->id.max_ngrams, "N-grams kept per language (its most frequent)")
      ->capture_default_str()
      ->check(whole_range(1, 10000000));
  add_threads_option(train, t->threads, "Accepted as by every command; training runs on one thread");
  train->callback([t] {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<LanguageSample> samples;
    int64_t lines = 0;
    for (const std::string& s : t->corpora) {
      const CorpusSpec c = parse_corpus(s);
      LanguageSample sample{c.language, corpus_lines(c, t->max_lines)};
      if (sample.lines.empty()) throw std::invalid_argument(c.path + ": no sentence for '" + c.language + "'");
      lines += (int64_t)sample.lines.size();
      samples.push_back(std::move(sample));
    }
    const LanguageIdentifier id = LanguageIdentifier::train(samples, t->id);
    id.save(t->out);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::string langs;
    for (const std::string& l : id.languages()) langs += (langs.empty() ? "" : ", ") + l;
    std::printf("trained a language identifier of %s on %lld sentences in %.1f s; wrote %s\n", langs.c_str(),
                (long long)lines, secs, t->out.c_str());
  });

  struct DetectOpts {
    std::string model, among, input;
    std::vector<std::string> texts;
    bool all = false;
    int threads = 0;
  };
  auto d = std::make_shared<DetectOpts>();
  CLI::App* detect = cmd->add_subcommand(
      "detect", "Print the language of each text (or of each line of --input / standard input): CODE<TAB>confidence");
  detect->add_option("--model", d->model, "An identifier written by tfm langid train")->required();
  detect->add_option("texts", d->texts, "Texts (none: read --input, else standard input, one text a line)");
  detect->add_option("--input", d->input, "A file of texts, one a line");
  detect->add_option("--among", d->among, "Only these languages, comma-separated (en,fr)");
  detect->add_flag("--all", d->all, "Print every language with its confidence, best first, on the text's line");
  add_threads_option(detect, d->threads, "Accepted as by every command; detection runs on one thread");
  detect->callback([d] {
    if (!d->texts.empty() && !d->input.empty())
      throw CLI::ValidationError("give texts or --input, not both");
    const LanguageIdentifier id = LanguageIdentifier::load(d->model);
    const std::vector<std::string> among = split_codes(d->among);
    if (!among.empty() && id.detect("", among).empty()) {
      std::string known;
      for (const std::string& l : id.languages()) known += (known.empty() ? "" : ", ") + l;
      throw CLI::ValidationError("--among " + d->among + ": " + d->model + " knows none of these (it knows " + known +
                                 ")");
    }
    auto answer = [&](const std::string& text) {
      if (auto bad = find_invalid_utf8(text))
        throw std::invalid_argument("text is not valid UTF-8 (byte offset " + std::to_string(*bad) + ")");
      const std::vector<DetectedLanguage> g = id.detect(text, among);
      if (!d->all) {
        std::printf("%s\t%.4f\n", g[0].language.c_str(), g[0].confidence);
        return;
      }
      for (size_t i = 0; i < g.size(); ++i)
        std::printf("%s%s\t%.4f", i ? "\t" : "", g[i].language.c_str(), g[i].confidence);
      std::printf("\n");
    };
    if (!d->texts.empty()) {
      for (const std::string& s : d->texts) answer(s);
    } else if (!d->input.empty()) {
      for (const std::string& s : read_lines(d->input, true)) answer(s);
    } else {
      std::string line;
      while (std::getline(std::cin, line)) {
        if (!line.empty() && line.back() == '\r') line.pop_back();
        answer(line);
        std::fflush(stdout);  // a co-process waits for each answer
      }
    }
  });
}

}  // namespace tfm::cli
