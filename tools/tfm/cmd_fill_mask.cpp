// tfm fill-mask: the most likely tokens for each [MASK] with a BertForMaskedLM checkpoint, printed as the
// fill-mask pipeline returns them: per input a list of {"score", "token", "token_str", "sequence"}, best first
// (a list of such lists when the input has several masks).
#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>

#include "commands.h"
#include "head_util.h"

namespace tfm::cli {

void add_fill_mask_command(CLI::App& app) {
  struct Opts {
    std::string model, input, dtype = "fp32";
    std::vector<std::string> texts;
    int64_t top_k = 5, max_length = 0;
    int threads = 0;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "fill-mask", "Predict the [MASK] tokens of texts with a BertForMaskedLM checkpoint (decoder tied to the word "
                   "embeddings when the file does not store it); one JSON line per input");
  cmd->add_option("--model", o->model, "Checkpoint folder: config.json, model.safetensors, tokenizer files")->required();
  cmd->add_option("text", o->texts, "Texts with at least one [MASK]");
  cmd->add_option("--input,-i", o->input, "File with one text a line (- for stdin)");
  cmd->add_option("--top-k", o->top_k, "Candidates per mask (default 5)")->check(whole_range(1, 1 << 20));
  cmd->add_option("--max-length", o->max_length, "Truncate texts to this many tokens (default: refuse longer ones)")
      ->check(whole_range(2, 1 << 20));
  add_fp32_dtype_option(cmd, o->dtype, o->model);
  add_threads_option(cmd, o->threads);
  cmd->callback([o] {
    std::vector<std::string> texts = gather_texts(o->texts, o->input);
    if (texts.empty()) throw CLI::ValidationError("give texts with [MASK], or --input FILE");
    TaskModel m = TaskModel::load(o->model, HeadKind::MaskedLM);
    const BertTokenizer& tok = m.tokenizer();
    const int64_t mask_id = tok.token_to_id("[MASK]");
    if (mask_id < 0) throw std::runtime_error(o->model + ": the vocabulary has no [MASK] token");
    std::vector<Encoding> enc = encode_all(m, texts, nullptr, o->max_length);
    for (size_t b = 0; b < enc.size(); ++b)
      if (std::find(enc[b].input_ids.begin(), enc[b].input_ids.end(), mask_id) == enc[b].input_ids.end())
        throw std::invalid_argument("input " + std::to_string(b + 1) + " has no [MASK] token: '" + texts[b] + "'");
    const int64_t V = m.encoder_config().vocab_size, K = std::min<int64_t>(o->top_k, V);
    const size_t batch = 32;
    for (size_t s = 0; s < enc.size(); s += batch) {
      std::vector<Encoding> chunk(enc.begin() + s, enc.begin() + std::min(enc.size(), s + batch));
      BatchTensors bt = make_batch(chunk, tok.pad_id());
      std::vector<std::pair<int64_t, int64_t>> pos;
      for (size_t b = 0; b < chunk.size(); ++b)
        for (size_t l = 0; l < chunk[b].input_ids.size(); ++l)
          if (chunk[b].input_ids[l] == mask_id) pos.push_back({(int64_t)b, (int64_t)l});
      Tensor logits = m.mlm_logits(bt.input_ids, bt.token_type_ids, bt.attention_mask, pos);
      size_t p = 0;
      for (size_t b = 0; b < chunk.size(); ++b) {
        nlohmann::ordered_json per_mask = nlohmann::ordered_json::array();
        // As the fill-mask pipeline: with several masks, `sequence` is decoded with skip_special_tokens=False, so
        // it keeps the other [MASK] tokens (and [CLS] / [SEP]).
        const bool single_mask = std::count(chunk[b].input_ids.begin(), chunk[b].input_ids.end(), mask_id) == 1;
        for (; p < pos.size() && pos[p].first == (int64_t)b; ++p) {
          std::vector<float> prob = apply_score_function(logits.f32() + p * V, V, ScoreFunction::Softmax);
          std::vector<int64_t> idx(V);
          std::iota(idx.begin(), idx.end(), 0);
          std::partial_sort(idx.begin(), idx.begin() + K, idx.end(), [&](int64_t a, int64_t c) {
            return prob[a] > prob[c] || (prob[a] == prob[c] && a < c);
          });
          nlohmann::ordered_json cands = nlohmann::ordered_json::array();
          for (int64_t k = 0; k < K; ++k) {
            const int64_t id = idx[k];
            std::vector<std::string> toks = chunk[b].tokens;
            toks[pos[p].second] = tok.id_to_token(id);
            cands.push_back({{"score", prob[id]}, {"token", id}, {"token_str", tok.id_to_token(id)},
                             {"sequence", decode_wordpieces(tok, toks, m.clean_up_tokenization_spaces(), single_mask)}});
          }
          per_mask.push_back(cands);
        }
        emit_line(per_mask.size() == 1 ? per_mask[0].dump() : per_mask.dump());
      }
    }
    finish_stdout();
  });
}

}  // namespace tfm::cli
