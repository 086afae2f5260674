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

// A score as printed after --scores: 6 decimals, enough to rank hypotheses ("-inf" kept as such).
std::string format_score(double s) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6f", s);
  return buf;
}

}  // namespace

void add_translate_command(CLI::App& app) {
  struct Opts {
    std::string model, attention_png;
    std::vector<std::string> sentences;
    int64_t beam = 0;
    bool suppress_unk = false;
    float length_penalty = 0.0f;
    int64_t num_hypotheses = 1, max_new_tokens = 0, min_length = -1;
    bool scores = false;
    std::string target_lang, source_lang, early_stopping;
    bool quiet = false;
    int threads = 0;
    std::string dtype = "fp32";
    bool quantize_output = false;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "translate", "Translate sentences with a model folder from 'tfm train' (or the d2l reference), or a Hugging "
                   "Face Marian (OPUS-MT), M2M100 or NLLB folder; one translation a line. Reads sentences from "
                   "stdin, one a line, when none are given");
  cmd->add_option("--model", o->model,
                  "Folder with config.json, model.safetensors and its vocabularies (src_vocab.txt / tgt_vocab.txt, "
                  "spm.model; Marian: source.spm, target.spm, vocab.json; M2M100 / NLLB: sentencepiece.bpe.model)")
      ->required();
  cmd->add_option("sentences", o->sentences, "Sentences to translate");
  cmd->add_option("--beam", o->beam,
                  "Beam size (1 = greedy); default: generation_config.json's num_beams for Hugging Face folders, "
                  "else 1")
      ->check(whole_range(1, 64));
  cmd->add_option("--length-penalty", o->length_penalty,
                  "Beam search length penalty. Our models: GNMT alpha >= 0, logp / ((5 + length) / 6)^alpha. Hugging "
                  "Face folders: transformers' length_penalty, logp / length^LP with the end token counted (default "
                  "from generation_config.json, else 1.0)")
      ->check(in_range(-5.0, 5.0));
  cmd->add_option("--num-hypotheses", o->num_hypotheses,
                  "Print the N best hypotheses of the beam, one a line, best first (N lines per sentence)")
      ->capture_default_str()->check(whole_range(1, 64));
  cmd->add_flag("--scores", o->scores, "After each translation a TAB and its score (the beam's ranking score)");
  cmd->add_option("--max-new-tokens", o->max_new_tokens,
                  "At most this many generated tokens, the end token counted (default: the model's: num_steps, or "
                  "generation_config.json's max_new_tokens / max_length - 1)")
      ->check(whole_range(1, 1 << 16));
  cmd->add_option("--target-lang", o->target_lang,
                  "Hugging Face folders: the target language (M2M100 'fr', NLLB 'fra_Latn': forced as the first "
                  "token; Marian multi-target 'fra': '>>fra<<' before each source)");
  cmd->add_option("--source-lang", o->source_lang,
                  "M2M100 / NLLB: the source language (default: tokenizer_config.json's src_lang)");
  cmd->add_option("--early-stopping", o->early_stopping,
                  "Hugging Face folders: transformers' early_stopping for beam search (default: generation_config.json's)")
      ->check(CLI::IsMember({"true", "false", "never"}));
  cmd->add_option("--min-length", o->min_length,
                  "Hugging Face folders: no end token before this length (the decoder start token counted)")
      ->check(whole_range(0, 1 << 16));
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
    const bool hf = translator.model_type() != "transformer_seq2seq";
    if (!hf) {
      if (cmd->count("--length-penalty") && o->beam <= 1)
        throw CLI::ValidationError("--length-penalty applies to beam search only; give --beam N (N > 1) as well");
      if (o->length_penalty < 0) throw CLI::ValidationError("--length-penalty: the GNMT alpha must be >= 0");
      for (const char* f : {"--target-lang", "--source-lang", "--early-stopping", "--min-length"})
        if (cmd->count(f))
          throw CLI::ValidationError(std::string(f) + " applies to Hugging Face folders (Marian, M2M100, NLLB) only");
    }
    TranslateOptions opt;
    opt.beam_size = o->beam;
    if (cmd->count("--length-penalty") || !hf) opt.length_penalty = o->length_penalty;
    opt.disable_unk = o->suppress_unk;
    opt.num_hypotheses = o->num_hypotheses;
    opt.return_scores = o->scores;
    opt.max_steps = o->max_new_tokens;
    opt.target_lang = o->target_lang;
    opt.source_lang = o->source_lang;
    opt.early_stopping = o->early_stopping;
    opt.min_length = o->min_length;
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
          e = translator.encode_source(sentences[i], opt);
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
      // One line per hypothesis (num_hypotheses per sentence), each with a TAB and its score under --scores.
      std::vector<std::vector<const Translation*>> out(sentences.size());
      for (size_t k = 0; k < todo.size(); ++k) {
        if (res[k].hypotheses.empty())
          out[todo[k]].push_back(&res[k]);
        else
          for (const Translation& h : res[k].hypotheses) out[todo[k]].push_back(&h);
      }
      static const Translation empty;
      for (auto& lines : out) {
        if (lines.empty()) lines.assign((size_t)o->num_hypotheses, &empty);
        for (const Translation* t : lines) {
          std::cout << t->text;
          if (o->scores) std::cout << "\t" << format_score(t->score);
          std::cout << "\n";
        }
      }
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
