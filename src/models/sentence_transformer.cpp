#include "models/sentence_transformer.h"

#include <filesystem>
#include <stdexcept>
#include <utf8proc.h>

#include "io/json_util.h"
#include "models/checkpoint_weights.h"
#include "nn/weights.h"
#include "text/vocab_check.h"

namespace tfm {

namespace fs = std::filesystem;

namespace {
std::string join(const std::string& dir, const std::string& sub) { return sub.empty() ? dir : dir + "/" + sub; }

// sentence-transformers lowercases with Python's str.lower(); this is the per-code-point (simple) mapping, equal
// to it except for the few characters whose lowercase is two code points (U+0130). Invalid UTF-8 is left for
// the tokenizer to report.
std::string lower_utf8(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  const auto* p = (const utf8proc_uint8_t*)s.data();
  utf8proc_ssize_t n = (utf8proc_ssize_t)s.size(), i = 0;
  while (i < n) {
    utf8proc_int32_t cp = 0;
    utf8proc_ssize_t k = utf8proc_iterate(p + i, n - i, &cp);
    if (k <= 0) return s;
    utf8proc_uint8_t buf[4];
    utf8proc_ssize_t m = utf8proc_encode_char(utf8proc_tolower(cp), buf);
    out.append((const char*)buf, (size_t)m);
    i += k;
  }
  return out;
}

Tensor stack(const std::vector<const Encoding*>& enc, std::vector<int64_t> Encoding::*field, int64_t L) {
  const int64_t B = (int64_t)enc.size();
  Tensor t = Tensor::zeros({B, L}, DType::I64);
  for (int64_t b = 0; b < B; ++b) {
    const auto& v = enc[b]->*field;
    for (size_t l = 0; l < v.size(); ++l) t.i64()[b * L + (int64_t)l] = v[l];
  }
  return t;
}
}  // namespace

SentenceTransformerLayout read_sentence_transformer_layout(const std::string& dir) {
  SentenceTransformerLayout lay;
  lay.transformer_dir = dir;
  const std::string modules_path = dir + "/modules.json";
  if (fs::exists(modules_path)) {
    nlohmann::json mods = load_json_file(modules_path);
    if (!mods.is_array()) throw std::runtime_error(modules_path + ": expected a JSON list of modules");
    bool have_transformer = false;
    for (const auto& mod : mods) {
      const std::string type = json_string(mod, "type", modules_path);
      const std::string rel = json_string_or(mod, "path", "", modules_path);
      const std::string path = join(dir, rel);
      std::string kind = type;
      const std::string prefix = "sentence_transformers.models.";
      if (kind.rfind(prefix, 0) == 0) kind = kind.substr(prefix.size());
      if (kind == "Transformer") {
        if (have_transformer) throw std::runtime_error(modules_path + ": more than one Transformer module");
        have_transformer = true;
        lay.transformer_dir = path;
        lay.transformer_path = rel;
      } else if (kind == "Pooling") {
        if (!have_transformer || !lay.dense_paths.empty() || lay.normalize)
          throw std::runtime_error(modules_path + ": Pooling must follow the Transformer, before Dense / Normalize");
        const std::string p = path + "/config.json";
        lay.pooling = PoolingConfig::from_json(load_json_file(p), p);
        lay.pooling_path = rel;
        lay.has_pooling = true;
      } else if (kind == "Dense") {
        if (!lay.has_pooling) throw std::runtime_error(modules_path + ": Dense before Pooling is not supported");
        lay.dense_paths.push_back(rel);
      } else if (kind == "Normalize") {
        if (!lay.has_pooling) throw std::runtime_error(modules_path + ": Normalize before Pooling is not supported");
        lay.normalize = true;
        lay.normalize_path = rel;
      } else {
        throw std::runtime_error(modules_path + ": module type '" + type +
                                 "' is not supported (Transformer, Pooling, Dense, Normalize)");
      }
    }
    if (!have_transformer) throw std::runtime_error(modules_path + ": no sentence_transformers.models.Transformer");
  }
  // sentence_bert_config.json sits in the Transformer's folder (the root for a usual folder).
  for (const std::string& d : {lay.transformer_dir, dir}) {
    const std::string p = d + "/sentence_bert_config.json";
    if (!fs::exists(p)) continue;
    nlohmann::json j = load_json_file(p);
    lay.max_seq_length = json_int_or(j, "max_seq_length", 0, p);
    if (lay.max_seq_length < 0) throw std::runtime_error(p + ": max_seq_length must be positive");
    lay.do_lower_case = json_bool_or(j, "do_lower_case", false, p);
    lay.sentence_bert_config = p;
    break;
  }
  return lay;
}

std::string lower_like_python(const std::string& s) { return lower_utf8(s); }

SentenceTransformer SentenceTransformer::load(const std::string& dir, const SentenceTransformerOptions& opt) {
  SentenceTransformer m;
  const SentenceTransformerLayout lay = read_sentence_transformer_layout(dir);
  const std::string& transformer_dir = lay.transformer_dir;
  bool have_pooling = lay.has_pooling;
  m.pooling_ = lay.pooling;
  for (const std::string& d : lay.dense_paths) m.dense_.push_back(DenseModule::load(join(dir, d)));
  m.normalize_ = lay.normalize;
  if (!opt.pooling.empty()) {
    PoolingConfig p = PoolingConfig::from_names(opt.pooling);
    p.include_prompt = m.pooling_.include_prompt;
    m.pooling_ = p;
    have_pooling = true;
  }
  if (!have_pooling)
    throw std::invalid_argument(dir + " has no modules.json (not a sentence-transformers folder): choose the "
                                "pooling with --pooling cls|mean|max|...");
  if (opt.normalize) m.normalize_ = true;
  const int64_t st_max = lay.max_seq_length;
  m.do_lower_case_ = lay.do_lower_case;

  EncoderConfig cfg = EncoderConfig::load(transformer_dir + "/config.json");
  CheckpointWeights w(transformer_dir);
  m.compute_type_ = opt.dtype ? *opt.dtype : w.stored_compute_type();  // an int8 folder computes in int8 by default
  m.encoder_ = make_encoder(cfg, w, m.compute_type_);
  w.check_all_used(transformer_dir + "/config.json");
  m.tokenizer_ = std::make_shared<BertTokenizer>(BertTokenizer::from_dir(transformer_dir));
  check_tokenizer_vocab(transformer_dir, m.tokenizer_->vocab_size(), cfg.vocab_size);
  const int64_t limit = std::min(cfg.max_position_embeddings, m.tokenizer_->model_max_length());
  m.max_seq_length_ = opt.max_seq_length > 0 ? opt.max_seq_length : st_max > 0 ? st_max : limit;
  if (m.max_seq_length_ > cfg.max_position_embeddings)
    throw std::invalid_argument("max_seq_length " + std::to_string(m.max_seq_length_) +
                                " is more than the model's max_position_embeddings (" +
                                std::to_string(cfg.max_position_embeddings) + ")");
  if (m.max_seq_length_ < 2) throw std::invalid_argument("max_seq_length must be at least 2 ([CLS] and [SEP])");

  // Prompts: config_sentence_transformers.json {"prompts": {name: text}, "default_prompt_name": name}.
  std::string default_prompt;
  const std::string pc = dir + "/config_sentence_transformers.json";
  m.prompts_file_ = pc;
  if (fs::exists(pc)) {
    nlohmann::json j = load_json_file(pc);
    if (j.contains("prompts") && j["prompts"].is_object())
      for (auto& [k, v] : j["prompts"].items()) {
        if (!v.is_string()) throw std::runtime_error(pc + ": prompt '" + k + "' is not a string");
        m.prompts_[k] = v.get<std::string>();
      }
    default_prompt = json_string_or(j, "default_prompt_name", "", pc);
  }
  if (!opt.prompt.empty()) {
    m.set_prompt(opt.prompt);
  } else {
    m.set_prompt(m.prompt_text(!opt.prompt_name.empty() ? opt.prompt_name : opt.no_prompt ? "" : default_prompt));
  }

  const int64_t H = cfg.hidden_size;
  if (m.pooling_.word_embedding_dimension > 0 && m.pooling_.word_embedding_dimension != H)
    throw std::runtime_error(dir + ": Pooling word_embedding_dimension " +
                             std::to_string(m.pooling_.word_embedding_dimension) + " differs from hidden_size " +
                             std::to_string(H));
  m.dim_ = m.pooling_.output_dim(H);
  for (const DenseModule& d : m.dense_) {
    if (d.linear.in_features != m.dim_)
      throw std::runtime_error(dir + ": a Dense module has in_features " + std::to_string(d.linear.in_features) +
                               " but its input has " + std::to_string(m.dim_) + " values");
    m.dim_ = d.linear.out_features;
  }
  return m;
}

Encoding SentenceTransformer::tokenize(const std::string& text) const {
  std::string t = prompt_ + text;
  if (do_lower_case_) t = lower_utf8(t);
  return tokenizer_->encode(t, nullptr, true, max_seq_length_);
}

Tensor encode_and_pool(const EncoderModel& m, const PoolingConfig& pooling, const Tensor& input_ids,
                       const Tensor& token_type_ids, const Tensor& attention_mask, int64_t prompt_length) {
  if (pooling.cls && pooling.num_modes() == 1 && input_ids.ndim() == 2) {
    // CLS pooling reads h[:, 0] only: so does the last layer, on the real tokens; pooled as a batch of one
    // position.
    const int64_t B = input_ids.size(0), L = input_ids.size(1), H = m.config().hidden_size;
    Tensor first = m.forward_first_token(input_ids, token_type_ids, attention_mask, /*unpadded=*/true)
                       .first_token_state.reshape({B, 1, H});
    std::vector<int64_t> first_mask(B, 1);
    if (attention_mask.defined())
      for (int64_t b = 0; b < B; ++b) first_mask[b] = attention_mask.i64()[b * L];
    return pool(pooling, first, Tensor::from_i64({B, 1}, first_mask), 0);
  }
  EncoderOutput out = m.forward_unpadded(input_ids, token_type_ids, attention_mask);  // pooling reads real tokens
  Tensor mask = attention_mask;
  if (!mask.defined() && input_ids.ndim() == 2) {
    mask = Tensor::zeros({input_ids.size(0), input_ids.size(1)}, DType::I64);
    std::fill(mask.i64(), mask.i64() + mask.numel(), int64_t{1});
  }
  return pool(pooling, out.last_hidden_state, mask, prompt_length);
}

Tensor SentenceTransformer::embed(const std::vector<const Encoding*>& batch) const {
  if (batch.empty()) return Tensor::zeros({0, dim_});
  int64_t L = 0;
  for (const Encoding* e : batch) L = std::max(L, (int64_t)e->input_ids.size());
  Tensor ids = stack(batch, &Encoding::input_ids, L);
  Tensor tt = stack(batch, &Encoding::token_type_ids, L);
  Tensor mask = stack(batch, &Encoding::attention_mask, L);
  Tensor x = encode_and_pool(*encoder_, pooling_, ids, tt, mask, prompt_length_);
  for (const DenseModule& d : dense_) x = d.forward(x);
  if (normalize_) l2_normalize_rows(x);
  return x;
}

Tensor SentenceTransformer::token_embeddings(const std::vector<const Encoding*>& batch) const {
  int64_t L = 0;
  for (const Encoding* e : batch) L = std::max(L, (int64_t)e->input_ids.size());
  if (batch.empty() || L == 0) return Tensor::zeros({(int64_t)batch.size(), L, encoder_->config().hidden_size});
  return encoder_->forward(stack(batch, &Encoding::input_ids, L), stack(batch, &Encoding::token_type_ids, L),
                           stack(batch, &Encoding::attention_mask, L))
      .last_hidden_state;
}

Tensor SentenceTransformer::encode(const std::vector<std::string>& texts) const {
  std::vector<Encoding> enc;
  enc.reserve(texts.size());
  for (const auto& t : texts) enc.push_back(tokenize(t));
  std::vector<const Encoding*> ptrs;
  for (const auto& e : enc) ptrs.push_back(&e);
  return embed(ptrs);
}

const std::string& SentenceTransformer::prompt_text(const std::string& name) const {
  static const std::string none;
  if (name.empty()) return none;
  auto it = prompts_.find(name);
  if (it == prompts_.end()) {
    std::string names;
    for (auto& [k, v] : prompts_) names += (names.empty() ? "" : ", ") + k;
    throw std::invalid_argument("prompt name '" + name + "' is not in " + prompts_file_ +
                                (names.empty() ? std::string(" (it has no prompts)") : " (prompts: " + names + ")"));
  }
  return it->second;
}

void SentenceTransformer::set_prompt(const std::string& text) {
  prompt_ = text;
  prompt_length_ = 0;
  if (!prompt_.empty()) {
    // sentence-transformers: len(tokenize([prompt]).input_ids) - 1 (the final [SEP] is not part of the prompt).
    std::string p = do_lower_case_ ? lower_utf8(prompt_) : prompt_;
    prompt_length_ = (int64_t)tokenizer_->encode(p, nullptr, true, max_seq_length_).input_ids.size() - 1;
  }
}

SentenceTransformer SentenceTransformer::with_prompt(const std::string& name) const {
  SentenceTransformer m = *this;  // shares the encoder, tokenizer and Dense weights
  m.set_prompt(prompt_text(name));
  return m;
}

SentenceTransformer SentenceTransformer::with_normalize(bool normalize) const {
  SentenceTransformer m = *this;
  m.normalize_ = normalize;
  return m;
}

std::vector<std::string> SentenceTransformer::prompt_names() const {
  std::vector<std::string> v;
  for (auto& [k, t] : prompts_) v.push_back(k);
  return v;
}

std::string SentenceTransformer::describe() const {
  std::string s = "Transformer(" + encoder_->config().model_type + ", max_seq_length " +
                  std::to_string(max_seq_length_) + (do_lower_case_ ? ", do_lower_case" : "") + ") -> Pooling(" +
                  pooling_.describe() + (pooling_.include_prompt ? "" : ", prompt excluded") + ")";
  for (const DenseModule& d : dense_)
    s += " -> Dense(" + std::to_string(d.linear.in_features) + " -> " + std::to_string(d.linear.out_features) + ")";
  if (normalize_) s += " -> Normalize";
  return s;
}

}  // namespace tfm
