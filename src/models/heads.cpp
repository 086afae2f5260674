#include "models/heads.h"

#include <utf8proc.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <stdexcept>

#include "io/json_util.h"
#include "models/checkpoint_weights.h"
#include "models/distilbert.h"
#include "models/modernbert.h"
#include "models/mpnet.h"
#include "models/pooling.h"
#include "models/registry.h"
#include "models/roberta.h"
#include "nn/weights.h"
#include "ops/activation.h"
#include "ops/layer_norm.h"
#include "ops/softmax.h"
#include "text/vocab_check.h"

namespace tfm {

const char* head_kind_name(HeadKind k) {
  switch (k) {
    case HeadKind::SequenceClassification: return "sequence classification";
    case HeadKind::TokenClassification: return "token classification";
    case HeadKind::MaskedLM: return "masked language modelling (fill-mask)";
    case HeadKind::QuestionAnswering: return "question answering";
  }
  return "?";
}

ScoreFunction HeadConfig::default_score_function() const {
  if (!activation_fn.empty()) {
    std::string n = activation_fn.substr(activation_fn.rfind('.') == std::string::npos ? 0 : activation_fn.rfind('.') + 1);
    if (n == "Sigmoid") return ScoreFunction::Sigmoid;
    if (n == "Identity") return ScoreFunction::None;
    if (n == "Softmax") return ScoreFunction::Softmax;
  }
  // TextClassificationPipeline.postprocess: problem_type "regression" first (the raw score), then sigmoid for one
  // label or multi-label problems.
  if (problem_type == "regression") return ScoreFunction::None;
  if (id2label.size() == 1 || problem_type == "multi_label_classification") return ScoreFunction::Sigmoid;
  return ScoreFunction::Softmax;
}

namespace {
bool contains(const std::vector<std::string>& v, const std::string& suffix) {
  for (const auto& s : v)
    if (s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0) return true;
  return false;
}

// Which head does the file hold? architectures first, then the family's tensors.
HeadKind detect(const std::string& dir, const std::vector<std::string>& arch, const CheckpointWeights& w,
                const FamilyHeads& family) {
  if (contains(arch, "ForSequenceClassification")) return HeadKind::SequenceClassification;
  if (contains(arch, "ForTokenClassification")) return HeadKind::TokenClassification;
  if (contains(arch, "ForMaskedLM") || contains(arch, "ForPreTraining")) return HeadKind::MaskedLM;
  if (contains(arch, "ForQuestionAnswering")) return HeadKind::QuestionAnswering;
  if (arch.empty())
    if (std::optional<HeadKind> k = family.detect(w)) return *k;
  std::string a = arch.empty() ? "no architectures" : "architectures " + arch[0];
  throw std::runtime_error(dir + " has no task head (" + a + ", and none of its family's head tensors); " +
                           "use 'tfm embed' or 'tfm encode' for a plain encoder folder");
}
std::vector<std::string> read_architectures(const nlohmann::json& j) {
  std::vector<std::string> out;
  if (j.contains("architectures") && j["architectures"].is_array())
    for (const auto& a : j["architectures"])
      if (a.is_string()) out.push_back(a.get<std::string>());
  return out;
}

// "mask_token" of a tokenizer_config.json / special_tokens_map.json: a string or an AddedToken {"content": ...}.
std::string read_mask_token(const std::string& path) {
  if (!std::filesystem::exists(path)) return "";
  nlohmann::json j = load_json_file(path);
  if (!j.is_object() || !j.contains("mask_token")) return "";
  const auto& m = j["mask_token"];
  if (m.is_string()) return m.get<std::string>();
  if (m.is_object() && m.contains("content") && m["content"].is_string()) return m["content"].get<std::string>();
  return "";
}

void clean_up_tokenization(std::string& s) {
  static const std::pair<const char*, const char*> rules[] = {
      {" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"}, {" n't", "n't"},
      {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  for (auto [from, to] : rules) {
    std::string out;
    const std::string f = from;
    size_t pos = 0, hit;
    while ((hit = s.find(f, pos)) != std::string::npos) {
      out += s.substr(pos, hit - pos) + to;
      pos = hit + f.size();
    }
    s = out + s.substr(pos);
  }
}
}  // namespace

FamilyHeads family_heads(const std::string& model_type, const std::string& file) {
  const ModelFamily& family = family_of(model_type, file);
  if (!family.heads)
    throw std::runtime_error(file + ": task heads are not implemented for model_type '" + model_type +
                             "' (supported: " + model_types_with_heads() + ")");
  return family.heads();
}

namespace detail {
bool has_any(const CheckpointWeights& w, const std::vector<std::string>& names) {
  for (const auto& n : names)
    if (w.has(n)) return true;
  return false;
}

nn::Linear load_head_linear(CheckpointWeights& w, const std::vector<std::string>& prefixes, int64_t in) {
  std::string found;
  for (const auto& p : prefixes)
    if (w.has(p + ".weight")) {
      found = p;
      break;
    }
  if (found.empty()) {
    std::string tried;
    for (size_t i = 1; i < prefixes.size(); ++i) tried += (tried.empty() ? " (also tried '" : "', '") + prefixes[i] + ".weight";
    throw std::runtime_error(w.path() + ": missing tensor '" + prefixes[0] + ".weight'" + (tried.empty() ? "" : tried + "')") +
                             " of the task head");
  }
  const Shape& s = w.shape_of(found + ".weight");
  if (s.size() != 2 || s[1] != in)
    throw std::runtime_error(w.path() + ": tensor '" + found + ".weight' has shape " + shape_str(s) + ", expected [num_labels, " +
                             std::to_string(in) + "]");
  return nn::Linear::load(nn::Vars(w).prefix(found), in, s[0]);
}

nn::Linear load_vocab_decoder(CheckpointWeights& w, const std::vector<std::string>& weight_names,
                              const std::vector<std::string>& tied_names, const std::vector<std::string>& bias_names,
                              int64_t V, int64_t H, bool* tied) {
  nn::Linear d;
  // Stored, or tied to the word embeddings (save_pretrained's safetensors drop tied copies).
  std::vector<std::string> stored;
  for (const auto& n : weight_names)
    if (w.has(n)) stored.push_back(n);
  *tied = stored.empty();
  const std::vector<std::string>& names = stored.empty() ? tied_names : stored;
  d.weight = nn::Param(w.get(names[0], {V, H}, std::vector<std::string>(names.begin() + 1, names.end())));
  d.bias = nn::Param(w.get(bias_names[0], {V}, std::vector<std::string>(bias_names.begin() + 1, bias_names.end())));
  d.in_features = H;
  d.out_features = V;
  return d;
}

bool has_qa_outputs(const CheckpointWeights& w) { return w.has("qa_outputs.weight"); }

HeadLayout load_qa_outputs_head(CheckpointWeights& w, int64_t H) {
  HeadStage qa;
  qa.linear = load_head_linear(w, {"qa_outputs"}, H);
  if (qa.linear.out_features != 2)
    throw std::runtime_error(w.path() + ": tensor 'qa_outputs.weight' has " + std::to_string(qa.linear.out_features) +
                             " rows; a question-answering head has 2 (start, end)");
  HeadLayout head;
  head.stages = {std::move(qa)};
  return head;
}

nn::LayerNorm load_head_layer_norm(CheckpointWeights& w, const std::string& p, int64_t C, float eps) {
  nn::LayerNorm ln;
  ln.weight = nn::Param(w.get(p + ".weight", {C}, {p + ".gamma"}));
  ln.bias = nn::Param(w.get(p + ".bias", {C}, {p + ".beta"}));
  ln.C = C;
  ln.eps = eps;
  return ln;
}
}  // namespace detail

std::string checked_problem_type(const nlohmann::json& config, const std::string& file) {
  if (config.contains("id2label") && !config["id2label"].is_null() && !config["id2label"].is_object())
    throw std::runtime_error(file + ": key 'id2label' must be an object of label ids to names, such as "
                             "{\"0\": \"negative\", \"1\": \"positive\"}");
  if (!config.contains("problem_type") || config["problem_type"].is_null()) return "";
  const std::string p = json_string_or(config, "problem_type", "", file);
  if (p != "regression" && p != "single_label_classification" && p != "multi_label_classification")
    throw std::runtime_error(file + ": problem_type '" + p + "' is not one of regression, "
                             "single_label_classification, multi_label_classification");
  return p;
}

HeadKind detect_head_kind(const std::string& dir) {
  const std::string cfg_path = dir + "/config.json";
  nlohmann::json j = load_json_file(cfg_path);
  EncoderConfig cfg = EncoderConfig::from_json(j, cfg_path);
  const FamilyHeads& family = family_heads(cfg.model_type, cfg_path);
  CheckpointWeights w(dir);
  return detect(dir, read_architectures(j), w, family);
}

TaskModel TaskModel::load(const std::string& dir, HeadKind want, std::optional<ops::ComputeType> dtype,
                          ops::ComputeType* resolved) {
  namespace fs = std::filesystem;
  TaskModel m;
  const std::string cfg_path = dir + "/config.json";
  nlohmann::json j = load_json_file(cfg_path);
  EncoderConfig cfg = EncoderConfig::from_json(j, cfg_path);
  const FamilyHeads& family = family_heads(cfg.model_type, cfg_path);
  m.head_.architectures = read_architectures(j);
  m.head_.problem_type = checked_problem_type(j, cfg_path);
  if (j.contains("sentence_transformers") && j["sentence_transformers"].is_object())
    m.head_.activation_fn = json_string_or(j["sentence_transformers"], "activation_fn", "", cfg_path);
  if (m.head_.activation_fn.empty())
    m.head_.activation_fn = json_string_or(j, "sbert_ce_default_activation_function", "", cfg_path);

  CheckpointWeights w(dir);
  HeadKind kind = detect(dir, m.head_.architectures, w, family);
  if (kind != want) {
    const auto& arch = m.head_.architectures;
    std::string a = arch.empty() ? std::string(head_kind_name(kind)) + " checkpoint" : arch[0] + " checkpoint";
    throw std::runtime_error(dir + " is a " + a + ": it has no " + head_kind_name(want) + " head");
  }
  m.kind_ = kind;
  const ops::ComputeType ct = dtype ? *dtype : w.stored_compute_type();
  if (resolved) *resolved = ct;
  m.layout_ = std::make_shared<const HeadLayout>(family.load(kind, cfg, w));
  m.encoder_ = make_encoder(cfg, w, ct);
  if (m.layout_->stages.empty()) throw std::logic_error("head layout without stages");
  m.tokenizer_ = std::make_shared<BertTokenizer>(BertTokenizer::from_dir(dir));
  check_tokenizer_vocab(dir, m.tokenizer_->vocab_size(), cfg.vocab_size);
  const std::string tc = dir + "/tokenizer_config.json";
  if (fs::exists(tc)) m.cleanup_ = json_bool_or(load_json_file(tc), "clean_up_tokenization_spaces", true, tc);
  m.mask_token_ = read_mask_token(tc);
  if (m.mask_token_.empty()) m.mask_token_ = read_mask_token(dir + "/special_tokens_map.json");
  if (m.mask_token_.empty())
    m.mask_token_ = m.tokenizer_->token_to_id("[MASK]") >= 0 ? "[MASK]"
                    : m.tokenizer_->token_to_id("<mask>") >= 0 ? "<mask>" : "";
  m.mask_id_ = m.mask_token_.empty() ? -1 : m.tokenizer_->token_to_id(m.mask_token_);

  const int64_t out = m.layout_->stages.back().linear.out_features;
  if (kind == HeadKind::QuestionAnswering) {  // no labels: start and end logits
    w.check_all_used(cfg_path);
    return m;
  }
  if (kind == HeadKind::MaskedLM) {
    if (out != cfg.vocab_size)
      throw std::runtime_error(w.path() + ": the masked-LM decoder has " + std::to_string(out) +
                               " rows, config.json vocab_size is " + std::to_string(cfg.vocab_size));
    w.check_all_used(cfg_path);
    return m;
  }
  // Classification: labels from id2label, else from the classifier's rows.
  const int64_t num_labels = out;
  if (j.contains("id2label") && j["id2label"].is_object() && !j["id2label"].empty()) {
    if ((int64_t)j["id2label"].size() != num_labels)
      throw std::runtime_error(cfg_path + ": id2label has " + std::to_string(j["id2label"].size()) +
                               " labels, the classifier " + std::to_string(num_labels));
    m.head_.id2label.assign(num_labels, "");
    for (auto& [k, v] : j["id2label"].items()) {
      char* end = nullptr;
      long idx = std::strtol(k.c_str(), &end, 10);
      if (k.empty() || *end || idx < 0 || idx >= num_labels || !v.is_string())
        throw std::runtime_error(cfg_path + ": id2label key '" + k + "' is not a label id 0.." +
                                 std::to_string(num_labels - 1) + " with a string label");
      m.head_.id2label[idx] = v.get<std::string>();
    }
  } else {
    for (int64_t i = 0; i < num_labels; ++i) m.head_.id2label.push_back("LABEL_" + std::to_string(i));
  }
  w.check_all_used(cfg_path);
  return m;
}

int64_t TaskModel::max_input_tokens() const { return encoder_->config().max_input_tokens(); }

std::vector<float> TaskModel::run_stages(std::vector<float> x, int64_t N) const {
  std::vector<float> y;
  for (const HeadStage& st : layout_->stages) {
    const int64_t O = st.linear.out_features;
    y.assign(N * O, 0.0f);
    st.linear.forward_inference(y.data(), x.data(), N);
    if (st.tanh) ops::tanh_forward(y.data(), y.data(), N * O);
    else if (st.act) ops::activation_forward(y.data(), y.data(), N * O, *st.act);
    if (st.norm) st.norm->forward_inference(y.data(), y.data(), N);
    std::swap(x, y);
  }
  return x;
}

Tensor TaskModel::sequence_logits(const Tensor& ids, const Tensor& tt, const Tensor& mask) const {
  const int64_t B = ids.size(0), H = encoder_->config().hidden_size;
  std::vector<float> x(B * H, 0.0f);
  if (layout_->input != HeadInput::MeanTokens) {  // the head reads position 0 only: so does the last layer
    EncoderOutput out = encoder_->forward_first_token(ids, tt, mask);
    const Tensor& from = layout_->input == HeadInput::PoolerOutput ? out.pooler_output : out.first_token_state;
    if (!from.defined()) throw std::logic_error("sequence head reads a pooler the model lacks");
    std::copy_n(from.f32(), B * H, x.data());
  } else {
    const Tensor pooled = mean_pool(encoder_->forward(ids, tt, mask).last_hidden_state, mask);
    std::copy_n(pooled.f32(), B * H, x.data());
  }
  std::vector<float> y = run_stages(std::move(x), B);
  Tensor logits = Tensor::empty({B, num_labels()});
  std::copy(y.begin(), y.end(), logits.f32());
  return logits;
}

Tensor TaskModel::token_logits(const Tensor& ids, const Tensor& tt, const Tensor& mask) const {
  EncoderOutput out = encoder_->forward(ids, tt, mask);
  const int64_t B = ids.size(0), L = ids.size(1), H = encoder_->config().hidden_size;
  const float* h = out.last_hidden_state.f32();
  std::vector<float> y = run_stages(std::vector<float>(h, h + B * L * H), B * L);
  Tensor logits = Tensor::empty({B, L, layout_->stages.back().linear.out_features});
  std::copy(y.begin(), y.end(), logits.f32());
  return logits;
}

Tensor TaskModel::mlm_logits(const Tensor& ids, const Tensor& tt, const Tensor& mask,
                             const std::vector<std::pair<int64_t, int64_t>>& positions) const {
  EncoderOutput out = encoder_->forward(ids, tt, mask);
  const int64_t L = ids.size(1), H = encoder_->config().hidden_size;
  const int64_t V = layout_->stages.back().linear.out_features;
  const int64_t P = (int64_t)positions.size();
  std::vector<float> h(P * H);
  for (int64_t p = 0; p < P; ++p) {
    auto [b, l] = positions[p];
    if (b < 0 || b >= ids.size(0) || l < 0 || l >= L) throw std::invalid_argument("mlm_logits: position out of range");
    std::copy_n(out.last_hidden_state.f32() + (b * L + l) * H, H, h.data() + p * H);
  }
  std::vector<float> y = run_stages(std::move(h), P);
  Tensor logits = Tensor::empty({P, V});
  std::copy(y.begin(), y.end(), logits.f32());
  return logits;
}

std::string TaskModel::decode_token(int64_t id) const {
  if (tokenizer_->engine().model_type() == "WordPiece") return tokenizer_->id_to_token(id);
  std::string s = tokenizer_->decode({id}, false);
  if (cleanup_) clean_up_tokenization(s);
  return s;
}

std::string TaskModel::decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const {
  const BertTokenizer& tok = *tokenizer_;
  if (tok.engine().model_type() == "WordPiece") {
    std::vector<std::string> tokens;
    for (int64_t id : ids) tokens.push_back(tok.id_to_token(id));
    return decode_wordpieces(tok, tokens, cleanup_, skip_special_tokens);
  }
  std::vector<int64_t> kept;
  for (int64_t id : ids)
    if (id != tok.pad_id()) kept.push_back(id);
  std::string s = tok.decode(kept, skip_special_tokens);
  if (cleanup_) clean_up_tokenization(s);
  return s;
}

BatchTensors make_batch(const std::vector<Encoding>& enc, int64_t pad_id) {
  const int64_t B = (int64_t)enc.size();
  int64_t L = 0;
  for (const auto& e : enc) L = std::max(L, (int64_t)e.input_ids.size());
  BatchTensors t{Tensor::zeros({B, L}, DType::I64), Tensor::zeros({B, L}, DType::I64),
                 Tensor::zeros({B, L}, DType::I64)};
  for (int64_t b = 0; b < B; ++b)
    for (int64_t l = 0; l < L; ++l) {
      const bool real = l < (int64_t)enc[b].input_ids.size();
      t.input_ids.i64()[b * L + l] = real ? enc[b].input_ids[l] : pad_id;
      t.token_type_ids.i64()[b * L + l] = real ? enc[b].token_type_ids[l] : 0;
      t.attention_mask.i64()[b * L + l] = real ? enc[b].attention_mask[l] : 0;
    }
  return t;
}

std::vector<float> apply_score_function(const float* x, int64_t n, ScoreFunction f) {
  std::vector<float> s(x, x + n);
  if (f == ScoreFunction::Sigmoid) ops::sigmoid_forward(s.data(), s.data(), n);
  else if (f == ScoreFunction::Softmax) ops::softmax(s.data(), n, s.data());
  return s;
}

std::string decode_wordpieces(const BertTokenizer& tok, const std::vector<std::string>& tokens, bool cleanup,
                              bool skip_special_tokens) {
  std::string s;
  bool first = true;
  for (const auto& t : tokens) {
    const int64_t id = tok.token_to_id(t);
    if (!skip_special_tokens) {
      if (t == "[PAD]" || id == tok.pad_id()) continue;
    } else if (t == "[CLS]" || t == "[SEP]" || t == "[PAD]" || t == "[MASK]" || t == "[UNK]" ||
        id == tok.cls_id() || id == tok.sep_id() || id == tok.pad_id() || id == tok.unk_id())
      continue;
    if (!first && t.rfind("##", 0) == 0) {
      s += t.substr(2);
    } else {
      if (!first) s += ' ';
      s += t;
    }
    first = false;
  }
  if (cleanup) clean_up_tokenization(s);
  return s;
}

namespace {
std::u32string to_u32(const std::string& s) {
  std::u32string out;
  const auto* p = (const utf8proc_uint8_t*)s.data();
  utf8proc_ssize_t n = (utf8proc_ssize_t)s.size(), i = 0;
  while (i < n) {
    utf8proc_int32_t cp = 0;
    utf8proc_ssize_t k = utf8proc_iterate(p + i, n - i, &cp);
    if (k <= 0) throw std::invalid_argument("invalid UTF-8 at byte " + std::to_string(i));
    out += (char32_t)cp;
    i += k;
  }
  return out;
}
std::string to_utf8(char32_t c) {
  utf8proc_uint8_t buf[4];
  utf8proc_ssize_t m = utf8proc_encode_char((utf8proc_int32_t)c, buf);
  return std::string((const char*)buf, (size_t)m);
}
bool is_space(char32_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || utf8proc_category(c) == UTF8PROC_CATEGORY_ZS; }
bool is_punct(char32_t c) {
  if ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126)) return true;
  auto cat = utf8proc_category((utf8proc_int32_t)c);
  return cat >= UTF8PROC_CATEGORY_PC && cat <= UTF8PROC_CATEGORY_PO;
}
}  // namespace

std::vector<std::pair<int64_t, int64_t>> token_offsets(const BertTokenizer& tok, const std::string& text,
                                                       const Encoding& enc) {
  // The normalizer works character by character (clean-up, lowercase, accent stripping, spaces around CJK), so
  // normalizing each source character alone gives the normalized text with the source index of every character.
  const std::u32string src = to_u32(text);
  std::u32string norm;
  std::vector<int64_t> origin;
  for (size_t i = 0; i < src.size(); ++i) {
    std::u32string piece = to_u32(tok.normalize(to_utf8(src[i])));
    for (char32_t c : piece) {
      norm += c;
      origin.push_back((int64_t)i);
    }
  }
  std::vector<std::pair<int64_t, int64_t>> out;
  size_t cur = 0;
  for (size_t t = 0; t < enc.tokens.size(); ++t) {
    const std::string& token = enc.tokens[t];
    if (enc.attention_mask[t] == 0 || enc.input_ids[t] == tok.cls_id() || enc.input_ids[t] == tok.sep_id() ||
        enc.input_ids[t] == tok.pad_id()) {
      out.push_back({0, 0});
      continue;
    }
    const bool cont = token.rfind("##", 0) == 0;
    if (!cont)
      while (cur < norm.size() && is_space(norm[cur])) ++cur;
    const size_t start = cur;
    std::u32string piece = to_u32(cont ? token.substr(2) : token);
    if (norm.compare(cur, piece.size(), piece) == 0) {
      cur += piece.size();
    } else if (cur < norm.size() && is_punct(norm[cur])) {  // [UNK] of a punctuation character
      ++cur;
    } else {  // [UNK] (or an added token): the whole word
      while (cur < norm.size() && !is_space(norm[cur]) && !is_punct(norm[cur])) ++cur;
    }
    if (start >= origin.size() || cur == start) {
      out.push_back({0, 0});
      continue;
    }
    out.push_back({origin[start], origin[cur - 1] + 1});
  }
  return out;
}

}  // namespace tfm
