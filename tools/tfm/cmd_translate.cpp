// tfm translate: greedy or beam-search translation with a trained transformer_seq2seq folder.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>

#include "cli_util.h"
#include "commands.h"
#include "io/json_util.h"
#include "io/plot.h"
#include "tfm/translator.h"

namespace tfm::cli {

namespace {
// std::getline that refuses a line over 1 MiB (a binary file or /dev/zero on stdin would otherwise be read
// whole into memory). Returns false at end of input.
bool read_line_capped(std::istream& in, std::string& line, size_t line_no) {
  constexpr size_t kMaxLine = size_t(1) << 20;
  line.clear();
  std::streambuf* buf = in.rdbuf();
  for (int ch; (ch = buf->sbumpc()) != std::char_traits<char>::eof();) {
    if (ch == '\n') return true;
    if (line.size() == kMaxLine)
      throw std::invalid_argument("stdin line " + std::to_string(line_no) + " is longer than 1 MiB");
    line.push_back((char)ch);
  }
  return !line.empty();
}

}  // namespace

void add_translate_command(CLI::App& app) {
  struct Opts {
    std::string model, attention_png;
    std::vector<std::string> sentences;
    int64_t beam = 1;
    bool suppress_unk = false;
    float length_penalty = 0.0f;
    bool quiet = false;
    int threads = 0;
    std::string dtype = "fp32";
    bool quantize_output = false;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "translate", "Translate sentences with a model folder from 'tfm train' (or the d2l reference); one "
                   "translation a line. Reads sentences from stdin, one a line, when none are given");
  cmd->add_option("--model", o->model, "Folder with config.json, model.safetensors, src_vocab.txt, tgt_vocab.txt")
      ->required();
  cmd->add_option("sentences", o->sentences, "Sentences to translate");
  cmd->add_option("--beam", o->beam, "Beam size (1 = greedy)")->capture_default_str()->check(whole_range(1, 64));
  cmd->add_option("--length-penalty", o->length_penalty, "GNMT length penalty alpha for beam search")
      ->capture_default_str()->check(in_range(0.0, 5.0));
  cmd->add_flag("--suppress-unk", o->suppress_unk,
                "Never generate <unk> (CTranslate2's disable_unk): greedy and beam search pick the best other token");
  cmd->add_option("--attention-png", o->attention_png,
                  "Save the first sentence's attention weights as a PNG (or .svg), tokens on both axes: top row "
                  "encoder self-attention (last layer), bottom row decoder cross-attention (last layer) of the "
                  "printed translation (with --beam: the best beam's), one titled panel per head, a colour bar");
  cmd->add_flag("--quiet,-q", o->quiet,
                "No warnings (unknown words, truncated sentences); without it the first 10 are shown, then a count");
  add_threads_option(cmd, o->threads);
  cmd->add_option("--dtype", o->dtype,
                  "Compute type of the Linear layers: fp32, bf16 or int8 (dynamic quantisation); embeddings, "
                  "LayerNorm, softmax and the output projection stay fp32")
      ->check(CLI::IsMember({"fp32", "bf16", "int8"}));
  cmd->add_flag("--quantize-output-projection", o->quantize_output,
                "With --dtype bf16 or int8: run the decoder's output projection (to the vocabulary) in that type too "
                "(faster; on the Multi30k recipe's models it moved test BLEU by less than 0.2)");
  cmd->callback([o, cmd] {
    if (o->quantize_output && o->dtype == "fp32")
      throw CLI::ValidationError("--quantize-output-projection runs the output projection in the --dtype type; "
                                 "give --dtype bf16 or int8 as well (with fp32 it changes nothing)");
    if (cmd->count("--length-penalty") && o->beam == 1)
      throw CLI::ValidationError("--length-penalty applies to beam search only; give --beam N (N > 1) as well");
    const std::string config_path = o->model + "/config.json";
    const nlohmann::json config_json = load_json_file(config_path);
    if (const std::string t = json_string_or(config_json, "model_type", "", config_path);
        t == "bert" || t == "transformer_encoder")
      throw std::invalid_argument(config_path + ": this is a " + t + " folder (an encoder), not a translation model; "
                                  "use 'tfm encode --model " + o->model + "'");
    TranslatorOptions to;
    to.threads = o->threads;
    to.dtype = o->dtype;
    to.quantize_output_projection = o->quantize_output;
    const Translator translator(o->model, to);  // the one loader of a translation folder (src/api/translator.cpp)
    TranslateOptions opt;
    opt.beam_size = o->beam;
    opt.length_penalty = o->length_penalty;
    opt.disable_unk = o->suppress_unk;
    const bool subword = translator.subword();
    const int64_t limit = translator.max_source_tokens();  // <eos> included
    bool attention_written = false;

    // Warnings about the input: the first kMaxWarnings in full, then only counted (one summary line at the end), so
    // that a large file cannot flood stderr; none with --quiet.
    constexpr size_t kMaxWarnings = 10;
    size_t warnings = 0;
    auto warn = [&](const std::string& msg) {
      if (o->quiet) return;
      if (++warnings <= kMaxWarnings) std::fprintf(stderr, "warning: %s\n", msg.c_str());
    };
    auto trimmed_empty = [](const std::string& t) { return t.find_first_not_of("\r \t") == std::string::npos; };

    // Translates `sentences` (numbered from first_no in messages) and prints one line each, in order. An empty
    // sentence gives an empty line, so outputs stay aligned with inputs.
    auto translate = [&](const std::vector<std::string>& sentences, size_t first_no) {
      // Source ids (with <eos>) of every non-empty sentence.
      std::vector<std::vector<int64_t>> src(sentences.size());
      std::vector<size_t> todo;
      for (size_t i = 0; i < sentences.size(); ++i) {
        const size_t no = first_no + i;
        if (trimmed_empty(sentences[i])) continue;
        todo.push_back(i);
        SourceEncoding e;
        try {
          e = translator.encode_source(sentences[i]);
        } catch (const std::invalid_argument& ex) {  // "sentence: invalid UTF-8 at byte offset N"
          std::string what = ex.what();
          if (what.rfind("sentence", 0) == 0) what.insert(8, " " + std::to_string(no));
          throw std::invalid_argument(what);
        }
        src[i] = std::move(e.ids);
        if (subword) {
          if (e.full_length > limit)
            warn("sentence " + std::to_string(no) + ": " + std::to_string(e.full_length - 1) +
                 " subwords, truncated to " + std::to_string(limit - 1));
          continue;
        }
        std::string unknown;
        for (const std::string& w : e.unknown_words) unknown += (unknown.empty() ? "" : ", ") + w;
        if (!unknown.empty()) warn("sentence " + std::to_string(no) + ": not in the source vocabulary (read as <unk>): " + unknown);
        // d2l's truncate_pad: the model reads num_steps tokens of words + <eos>; the rest is dropped.
        if (e.full_length > limit)
          warn("sentence " + std::to_string(no) + ": " + std::to_string(e.full_length - 1) + " tokens + <eos> are more than the " +
               "model's num_steps (" + std::to_string(limit) + "); only the first " + std::to_string(limit) +
               " are read");
      }
      // The PNG shows sentence 1; an empty one has no attention to plot (another sentence's would mislead).
      if (!o->attention_png.empty() && !attention_written && first_no == 1 && !sentences.empty() &&
          trimmed_empty(sentences[0]))
        throw std::invalid_argument("--attention-png plots sentence 1, which is empty; nothing written");
      if (!o->attention_png.empty() && !attention_written && !todo.empty()) {
        attention_written = true;
        // The last layer's weights behind the printed translation (with --beam: the best beam's).
        const TranslationAttention att = translator.attention(src[todo[0]], opt);
        const FloatArray& enc = att.encoder_self.back();  // [heads, vl, vl]
        const FloatArray& cross = att.cross.back();       // [heads, steps, vl]
        const int64_t heads = att.num_heads, vl = enc.size(1), steps = cross.size(1);
        // Token labels: source pieces (with <eos>) on the keys; the token each decoder step produced on the queries.
        const std::vector<std::string>& keys = att.source_tokens;
        std::vector<std::string> queries = att.target_tokens;
        if (queries.empty()) queries.push_back("<eos>");
        HeatmapFigure fig;
        fig.title = "Attention weights (last layer)";
        fig.panels_per_row = (int)heads;
        for (int64_t h = 0; h < heads; ++h) {
          Tensor t = Tensor::empty({vl, vl});
          std::copy_n(enc.data() + h * vl * vl, vl * vl, t.f32());
          fig.panels.push_back({t, "Encoder self, head " + std::to_string(h + 1), keys, keys});
        }
        for (int64_t h = 0; h < heads; ++h) {
          Tensor t = Tensor::zeros({std::max<int64_t>(steps, 1), vl});
          std::copy_n(cross.data() + h * steps * vl, steps * vl, t.f32());
          fig.panels.push_back({t, "Cross, head " + std::to_string(h + 1), queries, keys});
        }
        write_heatmaps(o->attention_png, fig);
        std::fprintf(stderr, "wrote %s\n", o->attention_png.c_str());
      }
      std::vector<std::vector<int64_t>> sources;
      for (size_t i : todo) sources.push_back(src[i]);
      std::vector<Translation> res = translator.translate_ids(sources, opt);
      std::vector<std::string> out(sentences.size());
      for (size_t k = 0; k < todo.size(); ++k) out[todo[k]] = std::move(res[k].text);
      for (const std::string& line : out) std::cout << line << "\n";
      flush_stdout();  // a failed write stops a long input here, not at the end
    };
    auto finish = [&] {
      if (!o->attention_png.empty() && !attention_written)
        throw std::invalid_argument("--attention-png: no sentence to plot; nothing written");
      if (warnings > kMaxWarnings)
        std::fprintf(stderr, "warning: %zu more warnings not shown (--quiet hides all)\n", warnings - kMaxWarnings);
    };

    if (!o->sentences.empty()) {
      translate(o->sentences, 1);
      return finish();
    }
    // stdin: line by line at a terminal (each translation appears at once), else all lines batched by length.
    const bool interactive = ::isatty(0);
    std::vector<std::string> lines;
    std::string line;
    size_t no = 0;
    while (read_line_capped(std::cin, line, no + 1)) {
      ++no;
      if (interactive)
        translate({line}, no);
      else
        lines.push_back(line);
    }
    // An empty input gives an empty output, as for any filter.
    if (!interactive && !lines.empty()) translate(lines, 1);
    finish();
  });
}

}  // namespace tfm::cli
