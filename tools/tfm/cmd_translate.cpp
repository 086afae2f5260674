// tfm translate: greedy or beam-search translation with a trained transformer_seq2seq folder; sentences from the
// command line, stdin or --input (streamed: read in chunks, batched by length, written in input order). Under
// mpirun every rank translates a contiguous run of chunks of --input; rank 0 writes the output (line_shards.h).
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <numeric>

#include "cli_util.h"
#include "commands.h"
#include "io/atomic_file.h"
#include "io/json_util.h"
#include "io/plot.h"
#include "line_shards.h"
#include "tfm/model_info.h"
#include "tfm/pipeline.h"
#include "tfm/process_group.h"
#include "tfm/translator.h"

namespace tfm::cli {

namespace {
// std::getline that refuses a line over 1 MiB (a binary file or /dev/zero on stdin would otherwise be read
// whole into memory). Returns false at end of input.
bool read_line_capped(std::istream& in, std::string& line, size_t line_no, const char* what = "stdin") {
  constexpr size_t kMaxLine = size_t(1) << 20;
  line.clear();
  std::streambuf* buf = in.rdbuf();
  for (int ch; (ch = buf->sbumpc()) != std::char_traits<char>::eof();) {
    if (ch == '\n') return true;
    if (line.size() == kMaxLine)
      throw std::invalid_argument(std::string(what) + " line " + std::to_string(line_no) + " is longer than 1 MiB");
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
// Progress on stderr: sentences done, sentences/s and, when the input size is known, the share read and an ETA.
// At a terminal one line redrawn in place (at most 4 times a second); otherwise (--progress into a file) a line
// per update, at most one a second.
class Progress {
 public:
  Progress(bool on, int64_t total_bytes) : on_(on), tty_(::isatty(2)), total_(total_bytes) {}
  void update(size_t sentences, int64_t bytes_read, int64_t target_tokens, bool last = false) {
    if (!on_) return;
    const auto now = std::chrono::steady_clock::now();
    const double since = std::chrono::duration<double>(now - shown_).count();
    if (!last && since < (tty_ ? 0.25 : 1.0)) return;
    if (last && printed_ && sentences == shown_sentences_) {  // already shown: at a terminal end the line
      if (tty_) std::fputc('\n', stderr);
      return;
    }
    shown_ = now;
    shown_sentences_ = sentences;
    printed_ = true;
    const double el = std::chrono::duration<double>(now - start_).count();
    char line[160];
    int n = std::snprintf(line, sizeof line, "%zu sentences, %.1f sentences/s", sentences,
                          el > 0 ? (double)sentences / el : 0.0);
    if (target_tokens >= 0)  // under mpirun the other ranks' are not known: left out
      n += std::snprintf(line + n, sizeof line - n, ", %lld target tokens", (long long)target_tokens);
    if (total_ > 0 && bytes_read > 0) {
      const double frac = std::min(1.0, (double)bytes_read / (double)total_);
      const double eta = frac > 0 ? el * (1 - frac) / frac : 0;
      std::snprintf(line + n, sizeof line - n, ", %3.0f%%, ETA %02d:%02d", 100 * frac, (int)eta / 60, (int)eta % 60);
    }
    std::fprintf(stderr, tty_ ? "\r\033[K%s%s" : "%s%s", line, tty_ && !last ? "" : "\n");
    std::fflush(stderr);
  }

 private:
  bool on_, tty_, printed_ = false;
  int64_t total_;
  size_t shown_sentences_ = 0;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now(), shown_{};
};

}  // namespace

void add_translate_command(CLI::App& app) {
  struct Opts {
    std::string model, attention_png;
    std::vector<std::string> sentences;
    int64_t beam = 0;
    bool suppress_unk = false;
    float length_penalty = 0.0f;
    int64_t num_hypotheses = 1;
    std::string target_lang, source_lang, early_stopping, forced_eos;
    bool quiet = false;
    int threads = 0;
    std::string dtype = "fp32";
    bool quantize_output = false;
    std::string input, output, target_prefix;
    int64_t max_batch_tokens = 4096, max_steps = 0;
    bool progress = false, scores = false, output_shards = false;
    float repetition_penalty = 1.0f, sampling_topp = 1.0f, sampling_temperature = 1.0f;
    int64_t no_repeat_ngram_size = 0, min_length = 0, sampling_topk = 1;
    uint64_t seed = 0;
    bool seed_per_sentence = false;
    std::vector<std::string> bad_words;
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
                  "Print the N best hypotheses of the beam, one a line, best first (N lines per sentence); with "
                  "--sampling-topk: N independent samples of each sentence, highest log-probability first")
      ->capture_default_str()->check(whole_range(1, 64));
  cmd->add_option("--target-lang", o->target_lang,
                  "Hugging Face folders: the target language (M2M100 'fr', NLLB 'fra_Latn': forced as the first "
                  "token; Marian multi-target 'fra': '>>fra<<' before each source)");
  cmd->add_option("--source-lang", o->source_lang,
                  "M2M100 / NLLB: the source language (default: tokenizer_config.json's src_lang)");
  cmd->add_option("--early-stopping", o->early_stopping,
                  "Hugging Face folders: transformers' early_stopping for beam search (default: generation_config.json's)")
      ->check(CLI::IsMember({"true", "false", "never"}));
  cmd->add_option("--forced-eos", o->forced_eos,
                  "Hugging Face folders: force </s> at the last step (transformers' forced_eos_token_id; default: "
                  "generation_config.json's)")
      ->check(CLI::IsMember({"true", "false"}));
  cmd->add_flag("--suppress-unk", o->suppress_unk,
                "Never generate <unk> (CTranslate2's disable_unk): greedy and beam search pick the best other token");
  cmd->add_option("--attention-png", o->attention_png,
                  "Save the first sentence's attention weights as a PNG (or .svg), tokens on both axes: top row "
                  "encoder self-attention (last layer), bottom row decoder cross-attention (last layer) of the "
                  "printed translation (with --beam: the best beam's), one titled panel per head, a colour bar")
      ->check(file_suffix({".png", ".svg"}));
  cmd->add_flag("--quiet,-q", o->quiet,
                "No warnings (unknown words, truncated sentences); without it the first 10 are shown, then a count");
  add_threads_option(cmd, o->threads);
  cmd->add_option("--input,-i", o->input,
                  "Read sentences from this file, one a line ('-' = stdin), instead of the command line or stdin; "
                  "read in chunks and written in input order as they finish (any size: memory stays bounded)");
  cmd->add_option("--output,-o", o->output,
                  "Write the translations to this file (written atomically: complete or not at all) instead of stdout");
  cmd->add_flag("--output-shards", o->output_shards,
                "Under mpirun: each rank writes the translations of its own contiguous lines to "
                "OUT-0000R-of-0000N.EXT (1-based rank, the Hugging Face shard naming) instead of rank 0 writing one "
                "OUT in input order; kept only if every rank wrote its shard");
  cmd->add_option("--max-batch-tokens", o->max_batch_tokens,
                  "Sentences of similar length are batched together up to this many source tokens (sentences x "
                  "longest) per batch")
      ->capture_default_str()->check(whole_range(1, 1 << 20));
  cmd->add_option("--max-steps", o->max_steps,
                  "At most this many generated tokens per sentence, <eos> included (0 = the model's default: "
                  "num_steps, or generation_config.json's max_new_tokens / max_length - 1)")
      ->capture_default_str()->check(whole_range(0, 1 << 20));
  cmd->add_flag("--progress", o->progress,
                "Show progress on stderr (sentences, sentences/s, ETA for a file) even when stderr is not a terminal; "
                "--input shows it at a terminal anyway");
  cmd->add_flag("--scores", o->scores, "After each translation a TAB and its score (log-probability / length penalty)");
  cmd->add_option("--target-prefix", o->target_prefix,
                  "Every translation starts with this target text (autocompletion; CTranslate2's target_prefix)");
  cmd->add_option("--repetition-penalty", o->repetition_penalty,
                  "Hugging Face repetition_penalty: scores of tokens already in the output divided (> 0) or multiplied "
                  "(< 0) by it; 1 = off")
      ->capture_default_str()->check(positive_up_to(100));
  cmd->add_option("--no-repeat-ngram-size", o->no_repeat_ngram_size,
                  "No n-gram of this many tokens appears twice in a translation (Hugging Face); 0 = off")
      ->capture_default_str()->check(whole_range(0, 1000));
  cmd->add_option("--min-length", o->min_length,
                  "Hugging Face min_length: <eos> is banned until the decoder input (start token + output) has this "
                  "many tokens; 0 = off")
      ->capture_default_str()->check(whole_range(0, 100000));
  cmd->add_option("--bad-words", o->bad_words,
                  "Target text never generated (its token sequence is banned; repeat the option for several)")
      ->allow_extra_args(false);  // --bad-words A "go .": "go ." is a sentence, not a second bad word
  cmd->add_option("--sampling-topk", o->sampling_topk,
                  "Random sampling from the K most likely tokens (0 = all, 1 = greedy decoding); with --beam 1")
      ->capture_default_str()->check(whole_range(0, 1 << 20));
  cmd->add_option("--sampling-topp", o->sampling_topp, "With sampling: keep the smallest set of tokens of probability "
                  "> 1 - P (nucleus sampling); 1 = off")
      ->capture_default_str()->check(positive_up_to(1));
  cmd->add_option("--sampling-temperature", o->sampling_temperature, "With sampling: logits divided by it")
      ->capture_default_str()->check(positive_up_to(1000));
  cmd->add_option("--seed", o->seed, "Sampling seed (each sample draws from its own stream, seeded by the seed and "
                  "the sentence: reproducible whatever the batch; repeated sentences draw independently)")
      ->capture_default_str()->check(seed_value());
  cmd->add_flag("--seed-per-sentence", o->seed_per_sentence,
                "Sampling: a sentence's stream depends on the seed and the sentence alone, so repeated sentences "
                "get the same sample");
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
    std::error_code ec;
    if (!std::filesystem::exists(config_path, ec) &&
        std::filesystem::is_regular_file(o->model + "/checkpoint.safetensors", ec))
      throw std::invalid_argument(o->model + " holds a training checkpoint but no model yet (a run stopped before the "
                                  "end of its first epoch); continue it with 'tfm train --resume " + o->model + "'");
    if (const ModelInfo info = inspect_model(o->model); !info.translation)  // an unsupported folder is refused there
      throw std::invalid_argument(config_path + ": this is a " + info.model_type + " folder (an encoder), not a "
                                  "translation model; use 'tfm encode --model " + o->model + "'");
    TranslatorOptions to;
    to.threads = o->threads;
    to.dtype = o->dtype;
    to.quantize_output_projection = o->quantize_output;
    const Translator translator(o->model, to);  // the one loader of a translation folder (src/api/translator.cpp)
    const bool hf = translator.model_type() != "transformer_seq2seq";
    try {  // the library's rule (Translator::check_length_penalty), in the CLI's names
      if (cmd->count("--length-penalty")) translator.check_length_penalty(o->length_penalty, o->beam, o->scores, true);
    } catch (const std::invalid_argument& e) {
      throw CLI::ValidationError(e.what());
    }
    if (!hf) {
      for (const char* f : {"--target-lang", "--source-lang", "--early-stopping", "--forced-eos"})
        if (cmd->count(f))
          throw CLI::ValidationError(std::string(f) + " applies to Hugging Face folders (Marian, M2M100, NLLB) only");
    }
    TranslateOptions opt;
    opt.beam_size = o->beam;
    if (cmd->count("--length-penalty") || !hf) opt.length_penalty = o->length_penalty;
    opt.disable_unk = o->suppress_unk;
    opt.num_hypotheses = o->num_hypotheses;
    opt.target_lang = o->target_lang;
    opt.source_lang = o->source_lang;
    opt.early_stopping = o->early_stopping;
    if (!o->forced_eos.empty()) opt.forced_eos = o->forced_eos == "true" ? 1 : 0;
    opt.return_scores = o->scores;
    opt.max_steps = o->max_steps;
    opt.repetition_penalty = o->repetition_penalty;
    opt.no_repeat_ngram_size = o->no_repeat_ngram_size;
    opt.min_length = o->min_length;
    require_utf8("--target-prefix", o->target_prefix);
    for (const std::string& w : o->bad_words) require_utf8("--bad-words", w);
    for (const std::string& w : o->bad_words) {
      std::vector<int64_t> ids = translator.encode_target(w);
      if (ids.empty()) throw std::invalid_argument("--bad-words '" + w + "' has no target token");
      opt.bad_words_ids.push_back(std::move(ids));
    }
    opt.sampling_topk = o->sampling_topk;
    opt.sampling_topp = o->sampling_topp;
    opt.sampling_temperature = o->sampling_temperature;
    opt.seed = o->seed;
    opt.seed_per_sentence = o->seed_per_sentence;
    for (const char* f : {"--sampling-topp", "--sampling-temperature"})
      if (cmd->count(f) && o->sampling_topk == 1)
        throw CLI::ValidationError(std::string(f) + " shapes random sampling, and --sampling-topk 1 (the default) "
                                   "is greedy decoding; give --sampling-topk K as well (0 = all tokens)");
    if (o->sampling_topk != 1 && o->beam > 1)
      throw std::invalid_argument("--sampling-topk " + std::to_string(o->sampling_topk) +
                                  " samples one token a step; it needs --beam 1, got --beam " + std::to_string(o->beam));
    const bool subword = translator.subword();
    const int64_t limit = translator.max_source_tokens();  // <eos> included
    bool attention_written = false;
    int64_t target_tokens = 0;  // generated, <eos> not counted (the progress line)

    // Warnings about the input: the first kMaxWarnings in full, then only counted (one summary line at the end), so
    // that a large file cannot flood stderr; none with --quiet.
    constexpr size_t kMaxWarnings = 10;
    size_t warnings = 0;
    auto warn = [&](const std::string& msg) {
      if (o->quiet) return;
      if (++warnings <= kMaxWarnings) std::fprintf(stderr, "warning: %s\n", msg.c_str());
    };
    {  // the prefix's unknown words, as the sources' are warned
      std::string unknown;
      for (const std::string& w : translator.unknown_target_words(o->target_prefix))
        unknown += (unknown.empty() ? "" : ", ") + w;
      if (!unknown.empty()) warn("--target-prefix: not in the target vocabulary (read as <unk>): " + unknown);
    }
    auto trimmed_empty = [](const std::string& t) { return t.find_first_not_of("\r \t") == std::string::npos; };

    // Translates `sentences` (numbered from first_no in messages) and prints one line each, in order. An empty
    // sentence gives an empty line, so outputs stay aligned with inputs.
    auto translate_lines = [&](const std::vector<std::string>& sentences, size_t first_no) {
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
          if (!o->input.empty() && o->input != "-") what = o->input + ": " + what;  // name the file it came from
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
      // Batches of similar length, at most --max-batch-tokens source tokens (sentences x longest) each.
      std::vector<int64_t> lengths;
      for (size_t i : todo) lengths.push_back((int64_t)src[i].size());
      BatchLimits limits;
      limits.max_tokens = o->max_batch_tokens;
      std::vector<std::string> out(sentences.size());
      for (const std::vector<size_t>& batch : length_batches(lengths, limits)) {
        std::vector<std::vector<int64_t>> sources;
        TranslateOptions bo = opt;
        for (size_t j : batch) sources.push_back(src[todo[j]]);
        if (!o->target_prefix.empty()) bo.target_prefix.assign(sources.size(), o->target_prefix);
        std::vector<Translation> res = translator.translate_ids(sources, bo);
        for (size_t b = 0; b < batch.size(); ++b) {
          const size_t j = batch[b];
          Translation& t = res[b];
          target_tokens += (int64_t)t.ids.size();
          // --num-hypotheses N: N lines, best first; --scores: each with a TAB and its score.
          std::string lines;
          for (const Translation* h : std::vector<const Translation*>{&t}) {
            if (h->hypotheses.empty()) {
              lines = h->text + (o->scores ? "\t" + format_score(h->score) : "");
            } else {
              for (size_t a = 0; a < h->hypotheses.size(); ++a)
                lines += (a ? "\n" : "") + h->hypotheses[a].text +
                         (o->scores ? "\t" + format_score(h->hypotheses[a].score) : "");
            }
          }
          out[todo[j]] = std::move(lines);
        }
      }
      return out;
    };
    auto translate = [&](const std::vector<std::string>& sentences, size_t first_no) {
      for (const std::string& line : translate_lines(sentences, first_no)) std::cout << line << "\n";
      flush_stdout();  // a failed write stops a long input here, not at the end
    };
    auto finish = [&] {
      if (!o->attention_png.empty() && !attention_written)
        throw std::invalid_argument("--attention-png: no sentence to plot; nothing written");
      if (warnings > kMaxWarnings)
        std::fprintf(stderr, "warning: %zu more warnings not shown (--quiet hides all)\n", warnings - kMaxWarnings);
    };

    if (!o->sentences.empty() && !o->input.empty())
      throw std::invalid_argument("give sentences on the command line or --input " + o->input + ", not both");
    // Under mpirun (or with --output-shards) every rank translates a contiguous run of the 512-line chunks.
    const ProcessGroup group = process_group();
    const bool sharded = group.world_size > 1 || o->output_shards;
    constexpr size_t kChunkLines = 512;
    LinePlan plan;
    if (sharded) {
      if (o->input.empty() || o->input == "-" || !o->sentences.empty())
        throw std::invalid_argument("under mpirun (or with --output-shards) give --input FILE, a file every rank "
                                    "reads (not stdin or sentences on the command line)");
      if (o->output_shards && (o->output.empty() || o->output == "-"))
        throw std::invalid_argument("--output-shards names each rank's file after --output; give --output FILE");
      if (!o->attention_png.empty())
        throw std::invalid_argument("--attention-png plots one sentence: run it without mpirun or --output-shards");
      struct stat st {};
      if (::stat(o->input.c_str(), &st) != 0) throw std::invalid_argument("--input " + o->input + ": no such file");
      plan = plan_lines(o->input, kChunkLines, [](const std::string&) { return true; });
    }
    if (!o->sentences.empty() && o->output.empty()) {
      translate(o->sentences, 1);
      return finish();
    }
    if (!o->input.empty() || !o->output.empty() || !::isatty(0)) {
      // Streaming: chunks of lines are read, translated (batched by length) and written in input order, so memory
      // stays bounded whatever the file's size; --output is written atomically (a failure leaves no partial file).
      std::ifstream file;
      const bool from_stdin = o->input.empty() || o->input == "-";
      int64_t total_bytes = 0;
      if (!from_stdin) {
        struct stat st {};
        if (::stat(o->input.c_str(), &st) != 0) throw std::invalid_argument("--input " + o->input + ": no such file");
        if (S_ISDIR(st.st_mode)) throw std::invalid_argument("--input " + o->input + " is a folder, not a text file");
        if (S_ISREG(st.st_mode)) total_bytes = (int64_t)st.st_size;
        file.open(o->input, std::ios::binary);
        if (!file) throw std::invalid_argument("--input " + o->input + ": cannot open");
      }
      std::istream& in = from_stdin ? std::cin : file;
      const std::string in_name = from_stdin ? "stdin" : o->input;
      Progress progress((o->progress || ::isatty(2)) && group.rank == 0, sharded ? plan.total_lines : total_bytes);
      // Sentences done so far; under mpirun rank 0 shows the sum over the ranks.
      auto show = [&](size_t done, int64_t bytes, bool last = false) {
        if (!sharded) return progress.update(done, bytes, target_tokens, last);
        if (group.rank != 0) return group::report_progress((int64_t)done);
        const int64_t sum = group::progress_sum((int64_t)done);
        progress.update((size_t)sum, sum, -1, last);
      };
      const int64_t first_line = sharded ? plan.first_line(group.rank) : 1;
      const int64_t end_line = sharded ? plan.end_line(group.rank) : -1;
      size_t done = 0;  // sentences of this rank translated
      auto run = [&](std::FILE* out) {
        size_t no = 0;
        int64_t bytes = 0;
        std::vector<std::string> chunk;
        auto flush_chunk = [&] {
          if (chunk.empty()) return;
          const std::vector<std::string> lines = translate_lines(chunk, no - chunk.size() + 1);
          for (const std::string& l : lines) {
            std::fwrite(l.data(), 1, l.size(), out);
            std::fputc('\n', out);
          }
          if (out == stdout) {
            flush_stdout();  // "cannot write to standard output: ...", the wording of every command
          } else if (std::fflush(out) != 0 || std::ferror(out)) {
            throw std::runtime_error("cannot write the translations: " + std::string(std::strerror(errno)));
          }
          done += chunk.size();
          chunk.clear();
          show(sharded ? done : no, bytes);
        };
        if (!o->sentences.empty()) {  // sentences given on the command line, into --output
          for (const std::string& s : o->sentences) chunk.push_back(s), ++no;
        } else if (from_stdin) {
          // Read as it arrives: what has come is answered whenever the writer pauses, so a co-process that writes
          // a line and waits for its translation gets it; a file or a fast writer still fills whole chunks.
          LineReader lines;
          lines.open("-");
          lines.name = "stdin";
          lines.strip_cr = false;
          lines.max_line = size_t(1) << 20;
          std::string line;
          for (;;) {
            if (!chunk.empty() && lines.paused()) flush_chunk();
            if (!lines.next(line)) break;
            ++no;
            bytes += (int64_t)line.size() + 1;
            chunk.push_back(line);
            if (chunk.size() == kChunkLines) flush_chunk();
          }
        } else {
          std::string line;
          while ((end_line < 0 || (int64_t)no + 1 < end_line) && read_line_capped(in, line, no + 1, in_name.c_str())) {
            ++no;
            bytes += (int64_t)line.size() + 1;
            if ((int64_t)no < first_line) continue;  // another rank's line
            chunk.push_back(line);
            if (chunk.size() == kChunkLines) flush_chunk();
          }
        }
        flush_chunk();
        if (!sharded) progress.update(no, total_bytes > 0 ? total_bytes : bytes, target_tokens, true);
      };
      if (sharded) {
        RankOutput part;
        run(part.body());
        part.counts = {(int64_t)done};
        const auto total = part.exchange((int64_t)done, [&](int64_t sum) { progress.update((size_t)sum, sum, -1); });
        progress.update((size_t)total[0], total[0], -1, true);
        write_job_output(part, plan, o->output, o->output_shards, (int64_t)done, total[0], nullptr, nullptr);
        return finish();
      }
      if (o->output.empty()) {
        run(stdout);
        flush_stdout();
      } else {
        write_file_atomic(o->output, run);
      }
      return finish();
    }
    // stdin at a terminal: line by line (each translation appears at once).
    std::string line;
    for (size_t no = 0; read_line_capped(std::cin, line, no + 1);) translate({line}, ++no);
    finish();
  });
}

}  // namespace tfm::cli
