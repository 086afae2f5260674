// tfm translate: greedy or beam-search translation with a trained transformer_seq2seq folder.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <unistd.h>

#include "commands.h"
#include "decode/search.h"
#include "io/json_util.h"
#include "io/plot.h"
#include "models/seq2seq.h"
#include "text/nmt_data.h"
#include "text/subword.h"
#include "text/text_file.h"
#include "text/vocab.h"

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

// The attention weights behind hypothesis `hyp` of one sentence (src [Ls], valid length vl): the decoder is run
// again on <bos> hyp (teacher forcing), which gives each step the keys/values the search had for that hypothesis.
// Beam search keeps no attention, so this is how --attention-png plots the chosen beam, not greedy's path.
// Steps: one per token of hyp, plus the <eos> step unless hyp was cut off at max_steps (as greedy_decode counts).
DecodeAttention replay_attention(Seq2SeqModel& model, const std::vector<int64_t>& src, int64_t vl,
                                 const std::vector<int64_t>& hyp, const DecodeOptions& opt) {
  const int64_t Ls = (int64_t)src.size(), heads = model.config().num_heads, V = model.config().tgt_vocab_size;
  DecodeAttention att;
  std::vector<Tensor> enc_attn;
  Tensor enc = model.encode(src.data(), &vl, 1, Ls, &enc_attn);
  for (const Tensor& w : enc_attn) att.encoder_self.push_back(w.reshape({heads, Ls, Ls}));
  const int64_t steps = std::min<int64_t>((int64_t)hyp.size() + 1, opt.max_steps);
  DecoderCache cache;
  model.start_decoding(cache, enc, &vl, opt.max_steps);
  std::vector<float> logits(V);
  att.cross = Tensor::zeros({heads, steps, Ls});
  for (int64_t t = 0; t < steps; ++t) {
    const int64_t token = t == 0 ? opt.bos_id : hyp[t - 1];
    std::vector<std::vector<float>> cross;
    model.decode_step(cache, &token, logits.data(), opt.position_mode, &cross);
    for (int64_t h = 0; h < heads; ++h)
      std::copy_n(cross.back().data() + h * Ls, Ls, att.cross.f32() + (h * steps + t) * Ls);
  }
  return att;
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
    namespace fs = std::filesystem;
    const std::string config_path = o->model + "/config.json";
    const nlohmann::json config_json = load_json_file(config_path);
    if (const std::string t = json_string_or(config_json, "model_type", "", config_path);
        t == "bert" || t == "transformer_encoder")
      throw std::invalid_argument(config_path + ": this is a " + t + " folder (an encoder), not a translation model; "
                                  "use 'tfm encode --model " + o->model + "'");
    Seq2SeqModel model(Seq2SeqConfig::from_json(config_json, config_path));
    const Seq2SeqConfig& c = model.config();
    // Two kinds of folders: d2l word vocabularies (src_vocab.txt / tgt_vocab.txt) or a joint SentencePiece model
    // (config.json "tokenizer": "sentencepiece", written by the recipe).
    const bool subword = fs::exists(o->model + "/spm.model") ||
                         json_string_or(config_json, "tokenizer", "", config_path) == "sentencepiece";
    std::unique_ptr<SubwordModel> spm;
    std::unique_ptr<Vocab> src_vocab, tgt_vocab;
    if (subword) {
      spm = std::make_unique<SubwordModel>(SubwordModel::load(o->model + "/spm.model"));
      if (spm->vocab_size() != c.src_vocab_size || spm->vocab_size() != c.tgt_vocab_size)
        throw std::runtime_error(o->model + ": spm.model has " + std::to_string(spm->vocab_size()) +
                                 " pieces but config.json says src_vocab_size " + std::to_string(c.src_vocab_size) +
                                 ", tgt_vocab_size " + std::to_string(c.tgt_vocab_size));
    } else {
      src_vocab = std::make_unique<Vocab>(Vocab::load(o->model + "/src_vocab.txt"));
      tgt_vocab = std::make_unique<Vocab>(Vocab::load(o->model + "/tgt_vocab.txt"));
      if (src_vocab->size() != c.src_vocab_size || tgt_vocab->size() != c.tgt_vocab_size)
        throw std::runtime_error(o->model + ": vocabulary files have " + std::to_string(src_vocab->size()) + " / " +
                                 std::to_string(tgt_vocab->size()) + " tokens but config.json says src_vocab_size " +
                                 std::to_string(c.src_vocab_size) + ", tgt_vocab_size " +
                                 std::to_string(c.tgt_vocab_size));
    }
    model.load(o->model + "/model.safetensors");
    model.prepare_inference(ops::parse_compute_type(o->dtype), o->quantize_output);
    DecodeOptions opt;
    opt.beam_size = o->beam;
    opt.length_penalty = o->length_penalty;
    opt.max_steps = c.num_steps;
    opt.bos_id = subword ? spm->bos_id() : (*tgt_vocab)["<bos>"];
    opt.eos_id = subword ? spm->eos_id() : (*tgt_vocab)["<eos>"];
    if (o->suppress_unk) opt.suppress_id = subword ? spm->unk_id() : (*tgt_vocab)["<unk>"];
    opt.position_mode = c.decode_positions == "absolute" ? PositionMode::kAbsolute : PositionMode::kD2lStep;

    // d2l word models pad every source to num_steps, as predict_seq2seq does (the padding is masked).
    const int64_t pad_id = subword ? spm->pad_id() : (*src_vocab)["<pad>"];
    auto padded_len = [&](int64_t n) { return subword ? n : std::max<int64_t>(n, c.num_steps); };
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
        std::string text = sentences[i];
        while (!text.empty() && (text.back() == '\r' || text.back() == ' ' || text.back() == '\t')) text.pop_back();
        if (text.empty()) continue;
        todo.push_back(i);
        if (auto bad = find_invalid_utf8(text))
          throw std::invalid_argument("sentence " + std::to_string(no) + ": invalid UTF-8 at byte offset " +
                                      std::to_string(*bad));
        if (subword) {
          src[i] = spm->encode(text);
          const int64_t limit = std::min<int64_t>(c.max_len, 1024) - 1;
          if ((int64_t)src[i].size() > limit) {
            warn("sentence " + std::to_string(no) + ": " + std::to_string(src[i].size()) + " subwords, truncated to " +
                 std::to_string(limit));
            src[i].resize(limit);
          }
          src[i].push_back(spm->eos_id());
          continue;
        }
        text = preprocess_nmt(text);
        EncodedSource s = encode_source_sentence(text, *src_vocab, c.num_steps);
        src[i].assign(s.ids.begin(), s.ids.begin() + s.valid_len);
        std::string unknown;
        size_t words = 0;
        for (size_t p = 0, q; p <= text.size(); p = q + 1) {
          q = text.find(' ', p);
          if (q == std::string::npos) q = text.size();
          std::string w = text.substr(p, q - p);
          ++words;
          if (!w.empty() && !src_vocab->contains(w)) unknown += (unknown.empty() ? "" : ", ") + w;
        }
        if (!unknown.empty()) warn("sentence " + std::to_string(no) + ": not in the source vocabulary (read as <unk>): " + unknown);
        // d2l's truncate_pad: the model reads num_steps tokens of words + <eos>; the rest is dropped.
        if ((int64_t)words + 1 > c.num_steps)
          warn("sentence " + std::to_string(no) + ": " + std::to_string(words) + " tokens + <eos> are more than the " +
               "model's num_steps (" + std::to_string(c.num_steps) + "); only the first " +
               std::to_string(c.num_steps) + " are read");
      }
      std::vector<std::vector<int64_t>> out(sentences.size());
      // The PNG shows sentence 1; an empty one has no attention to plot (another sentence's would mislead).
      if (!o->attention_png.empty() && !attention_written && first_no == 1 && !sentences.empty() &&
          trimmed_empty(sentences[0]))
        throw std::invalid_argument("--attention-png plots sentence 1, which is empty; nothing written");
      if (!o->attention_png.empty() && !attention_written && !todo.empty()) {
        attention_written = true;
        DecodeAttention att;
        const auto& s0 = src[todo[0]];
        std::vector<int64_t> ids(s0);
        ids.resize(padded_len((int64_t)s0.size()), pad_id);
        int64_t vl = (int64_t)s0.size();
        std::vector<int64_t> hyp;
        if (o->beam > 1) {  // the beam's best hypothesis, as printed
          hyp = beam_search_batch(model, ids.data(), &vl, 1, (int64_t)ids.size(), opt)[0];
          att = replay_attention(model, ids, vl, hyp, opt);
        } else {
          hyp = greedy_decode(model, ids.data(), &vl, 1, (int64_t)ids.size(), opt, &att)[0];
        }
        const Tensor& enc = att.encoder_self.back();
        const int64_t heads = c.num_heads, Ls = enc.size(1), steps = att.cross.size(1);
        // Token labels: source pieces (with <eos>) on the keys; the token each decoder step produced on the queries.
        auto src_token = [&](int64_t id) { return subword ? spm->id_to_piece(id) : src_vocab->to_token(id); };
        auto tgt_token = [&](int64_t id) { return subword ? spm->id_to_piece(id) : tgt_vocab->to_token(id); };
        std::vector<std::string> keys, queries;
        for (int64_t b = 0; b < vl; ++b) keys.push_back(src_token(s0[b]));
        for (int64_t a = 0; a < std::max<int64_t>(steps, 1); ++a)
          queries.push_back(a < (int64_t)hyp.size() ? tgt_token(hyp[a]) : tgt_token(opt.eos_id));
        HeatmapFigure fig;
        fig.title = "Attention weights (last layer)";
        fig.panels_per_row = (int)heads;
        for (int64_t h = 0; h < heads; ++h) {
          Tensor t = Tensor::empty({vl, vl});
          for (int64_t a = 0; a < vl; ++a)
            for (int64_t b = 0; b < vl; ++b) t.f32()[a * vl + b] = enc.f32()[(h * Ls + a) * Ls + b];
          fig.panels.push_back({t, "Encoder self, head " + std::to_string(h + 1), keys, keys});
        }
        for (int64_t h = 0; h < heads; ++h) {
          Tensor t = Tensor::zeros({std::max<int64_t>(steps, 1), vl});
          for (int64_t a = 0; a < steps; ++a)
            for (int64_t b = 0; b < vl; ++b) t.f32()[a * vl + b] = att.cross.f32()[(h * steps + a) * Ls + b];
          fig.panels.push_back({t, "Cross, head " + std::to_string(h + 1), queries, keys});
        }
        write_heatmaps(o->attention_png, fig);
        std::fprintf(stderr, "wrote %s\n", o->attention_png.c_str());
      }
      // Batches of similar length; greedy, or beam search with finished sentences leaving the batch.
      std::vector<size_t> order = todo;
      std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return src[a].size() < src[b].size(); });
      const size_t batch = o->beam > 1 ? 32 : 64;
      for (size_t s = 0; s < order.size(); s += batch) {
        size_t n = std::min(batch, order.size() - s);
        int64_t Ls = 0;
        for (size_t k = 0; k < n; ++k) Ls = std::max<int64_t>(Ls, padded_len((int64_t)src[order[s + k]].size()));
        std::vector<int64_t> ids(n * Ls, pad_id), vl(n);
        for (size_t k = 0; k < n; ++k) {
          const auto& v = src[order[s + k]];
          std::copy(v.begin(), v.end(), ids.begin() + k * Ls);
          vl[k] = (int64_t)v.size();
        }
        auto res = o->beam > 1 ? beam_search_batch(model, ids.data(), vl.data(), (int64_t)n, Ls, opt)
                               : greedy_decode(model, ids.data(), vl.data(), (int64_t)n, Ls, opt);
        for (size_t k = 0; k < n; ++k) out[order[s + k]] = res[k];
      }
      for (const auto& ids : out) {
        std::string line;
        if (subword) {
          line = spm->decode(ids);
        } else {
          for (size_t k = 0; k < ids.size(); ++k) line += (k ? " " : "") + tgt_vocab->to_token(ids[k]);
        }
        std::cout << line << "\n";
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
