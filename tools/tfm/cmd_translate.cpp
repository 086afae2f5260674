// tfm translate: greedy or beam-search translation with a trained transformer_seq2seq folder.
#include <cstdio>
#include <iostream>
#include <memory>

#include "commands.h"
#include "decode/search.h"
#include "io/png.h"
#include "models/seq2seq.h"
#include "text/nmt_data.h"
#include "text/vocab.h"

namespace tfm::cli {

void add_translate_command(CLI::App& app) {
  struct Opts {
    std::string model, attention_png;
    std::vector<std::string> sentences;
    int64_t beam = 1;
    float length_penalty = 0.0f;
    int threads = 0;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "translate", "Translate sentences with a model folder from 'tfm train' (or the d2l reference); one "
                   "translation a line. Reads sentences from stdin, one a line, when none are given");
  cmd->add_option("--model", o->model, "Folder with config.json, model.safetensors, src_vocab.txt, tgt_vocab.txt")
      ->required();
  cmd->add_option("sentences", o->sentences, "Sentences to translate");
  cmd->add_option("--beam", o->beam, "Beam size (1 = greedy)")->capture_default_str()->check(CLI::Range(1, 64));
  cmd->add_option("--length-penalty", o->length_penalty, "GNMT length penalty alpha for beam search")
      ->capture_default_str()->check(CLI::Range(0.0, 5.0));
  cmd->add_option("--attention-png", o->attention_png,
                  "Save the first sentence's attention weights as a PNG: top row encoder self-attention (last "
                  "layer), bottom row decoder cross-attention (last layer), one tile per head");
  add_threads_option(cmd, o->threads);
  cmd->callback([o] {
    Seq2SeqModel model(Seq2SeqConfig::load(o->model + "/config.json"));
    Vocab src_vocab = Vocab::load(o->model + "/src_vocab.txt");
    Vocab tgt_vocab = Vocab::load(o->model + "/tgt_vocab.txt");
    const Seq2SeqConfig& c = model.config();
    if (src_vocab.size() != c.src_vocab_size || tgt_vocab.size() != c.tgt_vocab_size)
      throw std::runtime_error(o->model + ": vocabulary files have " + std::to_string(src_vocab.size()) + " / " +
                               std::to_string(tgt_vocab.size()) + " tokens but config.json says src_vocab_size " +
                               std::to_string(c.src_vocab_size) + ", tgt_vocab_size " +
                               std::to_string(c.tgt_vocab_size));
    model.load(o->model + "/model.safetensors");
    std::vector<std::string> sentences = o->sentences;
    if (sentences.empty()) {
      std::string line;
      while (std::getline(std::cin, line)) sentences.push_back(line);
    }
    if (sentences.empty()) throw std::invalid_argument("no sentences given (as arguments or on stdin)");
    DecodeOptions opt;
    opt.beam_size = o->beam;
    opt.length_penalty = o->length_penalty;
    opt.max_steps = c.num_steps;
    opt.bos_id = tgt_vocab["<bos>"];
    opt.eos_id = tgt_vocab["<eos>"];
    opt.position_mode = c.decode_positions == "absolute" ? PositionMode::kAbsolute : PositionMode::kD2lStep;
    for (size_t i = 0; i < sentences.size(); ++i) {
      std::string text = preprocess_nmt(sentences[i]);
      while (!text.empty() && (text.back() == '\r' || text.back() == ' ')) text.pop_back();
      if (text.empty()) throw std::invalid_argument("sentence " + std::to_string(i + 1) + " is empty");
      EncodedSource s = encode_source_sentence(text, src_vocab, c.num_steps);
      std::string unknown;
      for (size_t p = 0, q; p <= text.size(); p = q + 1) {
        q = text.find(' ', p);
        if (q == std::string::npos) q = text.size();
        std::string w = text.substr(p, q - p);
        if (!w.empty() && !src_vocab.contains(w)) unknown += (unknown.empty() ? "" : ", ") + w;
      }
      if (!unknown.empty())
        std::fprintf(stderr, "warning: sentence %zu: not in the source vocabulary (read as <unk>): %s\n", i + 1,
                     unknown.c_str());
      std::vector<int64_t> out;
      if (!o->attention_png.empty() && i == 0) {
        DecodeAttention att;
        DecodeOptions g = opt;
        out = greedy_decode(model, s.ids.data(), &s.valid_len, 1, (int64_t)s.ids.size(), g, &att)[0];
        std::vector<Tensor> tiles;
        const Tensor& enc = att.encoder_self.back();
        const int64_t heads = c.num_heads, Ls = enc.size(1), steps = att.cross.size(1);
        for (int64_t h = 0; h < heads; ++h) {
          Tensor t = Tensor::empty({s.valid_len, s.valid_len});
          for (int64_t a = 0; a < s.valid_len; ++a)
            for (int64_t b = 0; b < s.valid_len; ++b) t.f32()[a * s.valid_len + b] = enc.f32()[(h * Ls + a) * Ls + b];
          tiles.push_back(t);
        }
        for (int64_t h = 0; h < heads; ++h) {
          Tensor t = Tensor::empty({std::max<int64_t>(steps, 1), s.valid_len});
          t.fill(0.0f);
          for (int64_t a = 0; a < steps; ++a)
            for (int64_t b = 0; b < s.valid_len; ++b)
              t.f32()[a * s.valid_len + b] = att.cross.f32()[(h * steps + a) * Ls + b];
          tiles.push_back(t);
        }
        write_heatmaps_png(o->attention_png, tiles, (int)heads, 16);
        if (o->beam > 1) out = beam_search(model, s.ids.data(), s.valid_len, (int64_t)s.ids.size(), opt);
      } else if (o->beam > 1) {
        out = beam_search(model, s.ids.data(), s.valid_len, (int64_t)s.ids.size(), opt);
      } else {
        out = greedy_decode(model, s.ids.data(), &s.valid_len, 1, (int64_t)s.ids.size(), opt)[0];
      }
      std::string line;
      for (size_t k = 0; k < out.size(); ++k) line += (k ? " " : "") + tgt_vocab.to_token(out[k]);
      std::cout << line << "\n";
    }
    if (!o->attention_png.empty()) std::fprintf(stderr, "wrote %s\n", o->attention_png.c_str());
  });
}

}  // namespace tfm::cli
