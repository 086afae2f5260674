// tfm::Encoder over models/encoder (BERT, transformer_encoder) and text/bert_tokenizer.
#include "tfm/encoder.h"

#include <utf8proc.h>

#include <unistd.h>

#include <algorithm>
#include <functional>
#include <filesystem>
#include <optional>
#include <set>
#include <stdexcept>

#include "api/common.h"
#include "api/impl.h"
#include "core/rng.h"
#include "io/atomic_file.h"
#include "text/vocab_check.h"
#include "tfm/pipeline.h"
#include "io/json_util.h"
#include "io/safetensors.h"
#include "models/encoder.h"
#include "models/checkpoint_weights.h"
#include "nn/weights.h"
#include "models/pooling.h"
#include "models/sentence_transformer.h"
#include "ops/gemm.h"
#include "io/text_file.h"

namespace tfm {

struct Encoder::Impl {
  std::unique_ptr<EncoderModel> model;
  std::optional<Tokenizer> tokenizer;
  std::optional<SentenceTransformer> st;  // modules.json pipeline with the folder's own settings
  std::string dir;
  std::string dtype;
  std::string pooling;                    // EncoderOptions::pooling
  std::string prompt_name, prompt;        // EncoderOptions' sentence-transformers settings
  bool no_prompt = false, normalize = false;
  int64_t max_seq_length = 0;
  bool do_lower_case = false;             // sentence_bert_config.json do_lower_case
  int threads = 0;
  std::string config_path;                                      // the config.json it was built from
  std::vector<std::pair<std::string, Tensor>> random_params;    // random_weights: every parameter, for save()
  std::optional<ops::ComputeType> st_dtype;  // the pipeline's Transformer module's (none: as stored)

  // The plain folder's pooling of embed(): `requested`, else the Encoder's default, else mean.
  PoolingConfig plain_pooling(const std::string& requested) const {
    const std::string p = !requested.empty() ? requested : !pooling.empty() ? pooling : "mean";
    return PoolingConfig::from_names(p);  // sentence-transformers' modes; throws naming an unknown one
  }
  SentenceTransformerOptions st_options() const {
    SentenceTransformerOptions so;
    so.pooling = pooling;
    so.prompt_name = prompt_name;
    so.prompt = prompt;
    so.no_prompt = no_prompt;
    so.normalize = normalize;
    so.max_seq_length = max_seq_length;
    so.dtype = st_dtype;
    return so;
  }
  // The pipeline with a per-call prompt ("" = this Encoder's) and normalisation (unset = the folder's).
  SentenceTransformer st_variant(const std::string& prompt_name, std::optional<bool> normalize) const {
    SentenceTransformer v = prompt_name.empty() ? *st : st->with_prompt(prompt_name);
    if (normalize) v = v.with_normalize(*normalize);
    return v;
  }
  void check_plain_prompt(const std::string& prompt_name) const {
    if (!st && !prompt_name.empty())
      throw std::invalid_argument("prompt name '" + prompt_name + "': " + dir +
                                  " is not a sentence-transformers folder (no modules.json), so it has no prompts");
  }
  // The encoder's config: the plain model's, or the pipeline's Transformer module's.
  const EncoderConfig& config() const { return model ? model->config() : st->encoder_config(); }
  const EncoderModel& plain() const {
    if (!model)
      throw std::runtime_error(dir + ": this Encoder runs the sentence-transformers pipeline only "
                               "(EncoderOptions::pipeline); use embed() or token_embeddings()");
    return *model;
  }
};

namespace {

// The weights a Hugging Face encoder starts from when built from its config (BertModel(config):
// PreTrainedModel._init_weights): every matrix (Linear and Embedding weights) N(0, initializer_range), the
// word_embeddings row padding_idx (pad_token_id) zero, biases 0, LayerNorm weight 1 and bias 0; seeded, in the
// order the model asks for them.
class HfInitWeights : public WeightSource {
 public:
  HfInitWeights(uint64_t seed, float std, int64_t padding_idx) : rng_(seed), std_(std), padding_idx_(padding_idx) {}
  Tensor get(const std::string& name, const Shape& shape, const std::vector<std::string>&) override {
    Tensor t = Tensor::empty(shape);
    float* p = t.f32();
    const int64_t n = t.numel();
    const bool norm = name.find("LayerNorm") != std::string::npos || name.find("layer_norm") != std::string::npos ||
                      name.find("norm.") != std::string::npos;
    if (norm || shape.size() != 2) {
      const bool one = norm && (name.ends_with("weight") || name.ends_with("gamma"));
      t.fill(one ? 1.0f : 0.0f);
    } else {
      for (int64_t i = 0; i < n; ++i) p[i] = std_ * rng_.normal();
      if (name.find("word_embeddings") != std::string::npos && padding_idx_ >= 0 && padding_idx_ < shape[0])
        std::fill(p + padding_idx_ * shape[1], p + (padding_idx_ + 1) * shape[1], 0.0f);
    }
    created_.emplace_back(name, t);
    return t;
  }
  const std::vector<std::pair<std::string, Tensor>>& created() const { return created_; }

 private:
  Rng rng_;
  float std_;
  int64_t padding_idx_;
  std::vector<std::pair<std::string, Tensor>> created_;
};
Tensor id_view(const int64_t* p, const Shape& shape) {
  return p ? Tensor::view_of(const_cast<int64_t*>(p), shape, DType::I64, nullptr) : Tensor();
}
// The unpadded rows of a right-padded batch (a row ends at its last attention_mask 1), as the sentence-transformers
// pipeline takes them.
std::vector<Encoding> unpadded_rows(const EncoderInputs& in) {
  std::vector<Encoding> enc(in.batch);
  for (int64_t b = 0; b < in.batch; ++b) {
    int64_t n = in.length;
    if (in.attention_mask)
      while (n > 0 && in.attention_mask[b * in.length + n - 1] == 0) --n;
    const int64_t* ids = in.input_ids + b * in.length;
    enc[b].input_ids.assign(ids, ids + n);
    if (in.token_type_ids)
      enc[b].token_type_ids.assign(in.token_type_ids + b * in.length, in.token_type_ids + b * in.length + n);
    else
      enc[b].token_type_ids.assign(n, 0);
    enc[b].attention_mask.assign(n, 1);
  }
  return enc;
}
std::vector<const Encoding*> pointers(const std::vector<Encoding>& enc) {
  std::vector<const Encoding*> p;
  for (const Encoding& e : enc) p.push_back(&e);
  return p;
}
// sentence-transformers' do_lower_case (str.lower, per code point).
std::string lower_utf8(const std::string& s) {
  std::string out;
  const auto* p = (const utf8proc_uint8_t*)s.data();
  for (utf8proc_ssize_t i = 0, n = (utf8proc_ssize_t)s.size(); i < n;) {
    utf8proc_int32_t cp;
    utf8proc_ssize_t k = utf8proc_iterate(p + i, n - i, &cp);
    if (k <= 0) return s;  // invalid UTF-8: the tokenizer reports it
    utf8proc_uint8_t buf[4];
    out.append((const char*)buf, (size_t)utf8proc_encode_char(utf8proc_tolower(cp), buf));
    i += k;
  }
  return out;
}
int64_t code_points(const std::string& s) {
  int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}
}  // namespace

Encoder::Encoder(const std::string& model, const EncoderOptions& options) : impl_(std::make_unique<Impl>()) {
  // "" = as the folder stores it; otherwise std::invalid_argument naming the accepted values.
  std::optional<ops::ComputeType> want;
  if (!options.dtype.empty()) want = ops::parse_compute_type(options.dtype);
  api::check_threads(options.threads);
  const std::string& pipeline = options.pipeline;
  if (pipeline != "auto" && pipeline != "none" && pipeline != "sentence_transformers")
    throw std::invalid_argument("pipeline '" + pipeline + "' is not supported (supported: auto, none, "
                                "sentence_transformers)");
  const std::string model_dir = api::model_folder(model);
  api::require_dir(model_dir, "model folder");
  impl_->threads = options.threads;
  impl_->pooling = options.pooling;
  impl_->prompt_name = options.prompt_name;
  impl_->prompt = options.prompt;
  impl_->no_prompt = options.no_prompt;
  impl_->normalize = options.normalize;
  impl_->max_seq_length = options.max_seq_length;
  impl_->dir = model_dir;
  std::error_code ec;
  namespace fs = std::filesystem;
  auto load_pipeline = [&] {
    impl_->st.emplace(SentenceTransformer::load(model_dir, impl_->st_options()));
    const std::string sb = model_dir + "/sentence_bert_config.json";
    if (fs::exists(sb, ec)) impl_->do_lower_case = json_bool_or(load_json_file(sb), "do_lower_case", false, sb);
  };
  if (pipeline == "sentence_transformers") {  // the pipeline alone; its loader names what a folder lacks
    impl_->st_dtype = want;
    load_pipeline();
    impl_->dtype = ops::compute_type_name(impl_->st->compute_type());
    return;
  }
  const std::string config_path = options.config_path.empty() ? model_dir + "/config.json" : options.config_path;
  api::require_file(config_path);
  if (!options.random_weights) api::require_weights(model_dir);
  ops::ComputeType ct = want ? *want : ops::ComputeType::F32;
  if (options.random_weights) {
    // A Hugging Face family as its model class initialises itself (BertModel(config)); the tutorial encoder as
    // PyTorch's modules do.
    const EncoderConfig config = EncoderConfig::load(config_path);
    const nlohmann::json cj = load_json_file(config_path);
    const bool hf = config.model_type != "transformer_encoder";
    const double init_std = cj.contains("initializer_range") && cj["initializer_range"].is_number()
                           ? cj["initializer_range"].get<double>()
                           : 0.02;  // PretrainedConfig's default
    if (hf) {
      HfInitWeights w(options.seed, (float)init_std, config.pad_token_id);
      impl_->model = make_encoder(config, w, ct);
      impl_->random_params = w.created();
    } else {
      RandomWeights w(options.seed);
      impl_->model = make_encoder(config, w, ct);
      impl_->random_params = w.created();
    }
  } else if (!options.config_path.empty()) {
    CheckpointWeights w(model_dir);
    if (!want) ct = w.stored_compute_type();  // int8 for a `tfm convert --dtype int8` folder
    impl_->model = make_encoder(EncoderConfig::load(config_path), w, ct);
    w.check_all_used(config_path);
  } else {
    impl_->model = load_encoder(model_dir, want, &ct);  // no dtype: as the file is stored
  }
  impl_->dtype = ops::compute_type_name(ct);
  impl_->config_path = config_path;
  impl_->st_dtype = ct;  // the pipeline computes in the plain model's type
  if (pipeline == "auto" && fs::exists(model_dir + "/modules.json", ec)) {
    load_pipeline();
  } else if (!options.pooling.empty()) {
    impl_->plain_pooling("");  // throws for an unknown mode
  }
  if (options.load_tokenizer &&
      (fs::exists(model_dir + "/tokenizer.json", ec) || fs::exists(model_dir + "/vocab.txt", ec))) {
    impl_->tokenizer.emplace(model_dir);
    check_tokenizer_vocab(model_dir, impl_->tokenizer->vocab_size(), impl_->config().vocab_size);
  }
}
EncoderConfigInfo Encoder::read_config(const std::string& config_path) {
  api::require_file(config_path);
  const EncoderConfig c = EncoderConfig::load(config_path);
  EncoderConfigInfo i;
  i.model_type = c.model_type, i.vocab_size = c.vocab_size, i.hidden_size = c.hidden_size;
  i.num_hidden_layers = c.num_hidden_layers, i.num_attention_heads = c.num_attention_heads;
  i.max_position_embeddings = c.max_position_embeddings;
  return i;
}

Encoder::~Encoder() = default;
Encoder::Encoder(Encoder&&) noexcept = default;
Encoder& Encoder::operator=(Encoder&&) noexcept = default;

namespace {
void check_inputs(const EncoderInputs& in) {
  if (!in.input_ids) throw std::invalid_argument("input_ids is null");
  if (in.batch < 1 || in.length < 1)
    throw std::invalid_argument("input_ids must be [batch, length] with batch, length >= 1, got [" +
                                std::to_string(in.batch) + ", " + std::to_string(in.length) + "]");
  if (in.attention_mask)
    for (int64_t i = 0; i < in.batch * in.length; ++i)
      if (in.attention_mask[i] != 0 && in.attention_mask[i] != 1)
        throw std::invalid_argument("attention_mask[" + std::to_string(i / in.length) + ", " +
                                    std::to_string(i % in.length) + "] = " + std::to_string(in.attention_mask[i]) +
                                    ": expected 0 or 1");
}
}  // namespace

FloatArray Encoder::forward(const EncoderInputs& in) const {
  check_inputs(in);
  const Shape shape{in.batch, in.length};
  // Views of the caller's memory: nothing is copied, and nothing is written. The layers run on the real tokens
  // only (padded positions come back 0); without padding this is the padded path.
  api::apply_threads(impl_->threads);
  EncoderOutput out = impl_->plain().forward_unpadded(id_view(in.input_ids, shape), id_view(in.token_type_ids, shape),
                                                      id_view(in.attention_mask, shape));
  return api::to_array(std::move(out.last_hidden_state));
}

EncoderOutputs Encoder::forward_all(const EncoderInputs& in, const ForwardOptions& o) const {
  const Shape shape{in.batch, in.length};
  check_inputs(in);
  api::apply_threads(impl_->threads);
  // Every layer's output, or every position on request, comes from the padded path (Hugging Face's values at
  // padded positions); else the real tokens only, as forward().
  const bool all = o.output_hidden_states || o.all_positions;
  const Tensor ids = id_view(in.input_ids, shape), types = id_view(in.token_type_ids, shape),
               mask = id_view(in.attention_mask, shape);
  EncoderOutput out = all ? impl_->plain().forward(ids, types, mask, o.output_hidden_states)
                          : impl_->plain().forward_unpadded(ids, types, mask);
  EncoderOutputs r;
  r.last_hidden_state = api::to_array(std::move(out.last_hidden_state));
  if (out.hidden_states.defined()) r.hidden_states = api::to_array(std::move(out.hidden_states));
  if (out.pooler_output.defined()) r.pooler_output = api::to_array(std::move(out.pooler_output));
  return r;
}

namespace {
// The pooled last hidden state, [batch, output_dim(hidden_size)] (models/sentence_transformer's encode_and_pool:
// the layers run on the real tokens only; CLS-only pooling computes the last layer at position 0 only).
Tensor encode_and_pool(const EncoderModel& m, const PoolingConfig& pc, const EncoderInputs& in) {
  check_inputs(in);
  const Shape shape{in.batch, in.length};
  return encode_and_pool(m, pc, id_view(in.input_ids, shape), id_view(in.token_type_ids, shape),
                         id_view(in.attention_mask, shape));
}
Tensor plain_embed(const EncoderModel& m, const PoolingConfig& pc, const std::vector<const Encoding*>& rows,
                   int64_t pad_id, bool normalize) {
  const int64_t B = (int64_t)rows.size();
  int64_t L = 0;
  for (const Encoding* e : rows) L = std::max(L, (int64_t)e->input_ids.size());
  std::vector<int64_t> ids(B * L, pad_id), mask(B * L, 0), types(B * L, 0);
  for (int64_t b = 0; b < B; ++b) {
    std::copy(rows[b]->input_ids.begin(), rows[b]->input_ids.end(), ids.begin() + b * L);
    std::copy(rows[b]->attention_mask.begin(), rows[b]->attention_mask.end(), mask.begin() + b * L);
    std::copy(rows[b]->token_type_ids.begin(), rows[b]->token_type_ids.end(), types.begin() + b * L);
  }
  Tensor pooled = encode_and_pool(m, pc, EncoderInputs{ids.data(), mask.data(), types.data(), B, L});  // [B, D]
  if (normalize) l2_normalize_rows(pooled);  // torch.nn.functional.normalize
  return pooled;
}
}  // namespace

FloatArray Encoder::forward(const TokenBatch& b) const {
  if (b.input_ids.ndim() != 2) throw std::invalid_argument("TokenBatch.input_ids must be [batch, length]");
  for (const IdArray* a : {&b.attention_mask, &b.token_type_ids})
    if (a->data() && a->shape() != b.input_ids.shape())
      throw std::invalid_argument("TokenBatch arrays must all have the shape of input_ids");
  return forward(EncoderInputs{b.input_ids.data(), b.attention_mask.data(), b.token_type_ids.data(),
                               b.input_ids.size(0), b.input_ids.size(1)});
}

namespace {
void check_batch_options(const EmbedOptions& o) {
  if (o.batch_size < 1) throw std::invalid_argument("batch_size must be >= 1, got " + std::to_string(o.batch_size));
  if (o.batch_tokens < 1)
    throw std::invalid_argument("batch_tokens must be >= 1, got " + std::to_string(o.batch_tokens));
}
// Embeds rows in batches of similar length (tfm::length_batches under batch_tokens and batch_size) and returns
// [N, D] in input order; run(batch) embeds one batch, [batch.size(), D].
Tensor embed_batched(const std::vector<Encoding>& rows, const EmbedOptions& o, int64_t D,
                     const std::function<Tensor(const std::vector<const Encoding*>&)>& run) {
  std::vector<int64_t> lengths;
  lengths.reserve(rows.size());
  for (const Encoding& e : rows) lengths.push_back((int64_t)e.input_ids.size());
  BatchLimits limits;
  limits.max_tokens = o.batch_tokens;
  limits.max_rows = o.batch_size;
  Tensor result = Tensor::empty({(int64_t)rows.size(), D});
  for (const std::vector<size_t>& batch : length_batches(lengths, limits)) {
    std::vector<const Encoding*> ptrs;
    for (size_t i : batch) ptrs.push_back(&rows[i]);
    const Tensor e = run(ptrs);  // [batch.size(), D]
    for (size_t r = 0; r < batch.size(); ++r)
      std::copy(e.f32() + r * D, e.f32() + (r + 1) * D, result.f32() + batch[r] * D);
  }
  return result;
}
// A plain folder's pooled rows: right-padded with `pad_id` (attention_mask 0) into one [B, L] batch.
Tensor plain_embed(const EncoderModel& m, const PoolingConfig& pc, const std::vector<const Encoding*>& rows,
                   int64_t pad_id, bool normalize);
}  // namespace

FloatArray Encoder::embed(const std::vector<std::string>& texts, const EmbedOptions& o) const {
  if (texts.empty()) throw std::invalid_argument("texts is empty");
  check_batch_options(o);
  if (o.max_length < 0) throw std::invalid_argument("max_length must be >= 0, got " + std::to_string(o.max_length));
  if (o.dimensions < 0) check_dimensions(o.dimensions, embedding_dim());
  impl_->check_plain_prompt(o.prompt_name);
  if (o.dimensions > 0) {  // cut the unnormalised vectors, then normalise as asked (or as the folder does)
    EmbedOptions full = o;
    full.dimensions = 0;
    const bool norm = o.normalize.value_or(impl_->st && impl_->st->normalizes());
    full.normalize = false;
    return truncate_dimensions(embed(texts, full), o.dimensions, norm);
  }
  if (impl_->st) {
    const SentenceTransformer* st = &*impl_->st;
    std::optional<SentenceTransformer> custom;
    if (!o.pooling.empty() || o.max_length > 0) {
      SentenceTransformerOptions so = impl_->st_options();
      if (!o.pooling.empty()) so.pooling = o.pooling;
      so.max_seq_length = o.max_length;
      if (!o.prompt_name.empty()) so.prompt_name = o.prompt_name, so.prompt.clear();
      custom.emplace(SentenceTransformer::load(impl_->dir, so));
      if (o.normalize) custom.emplace(custom->with_normalize(*o.normalize));
      st = &*custom;
    } else if (!o.prompt_name.empty() || o.normalize) {
      custom.emplace(impl_->st_variant(o.prompt_name, o.normalize));
      st = &*custom;
    }
    const int64_t N = (int64_t)texts.size();
    std::vector<Encoding> enc(N);
    for (int64_t i = 0; i < N; ++i) {
      if (auto bad = find_invalid_utf8(texts[i]))
        throw std::invalid_argument("text " + std::to_string(i) + ": invalid UTF-8 at byte offset " +
                                    std::to_string(*bad));
      enc[i] = st->tokenize(texts[i]);  // prompt, do_lower_case, cut to max_seq_length
    }
    api::apply_threads(impl_->threads);
    return api::to_array(embed_batched(enc, o, st->dimension(), [&](const auto& b) { return st->embed(b); }));
  }
  const PoolingConfig pc = impl_->plain_pooling(o.pooling);
  const Tokenizer& tok = tokenizer();
  TokenizeOptions to;
  to.max_length = o.max_length;
  std::vector<Encoding> enc = api::encode_texts(tok.impl_->tok, texts, nullptr, to);
  const EncoderConfig& c = impl_->config();
  for (size_t i = 0; i < enc.size(); ++i)
    if ((int64_t)enc[i].input_ids.size() > c.max_position_embeddings)
      throw std::invalid_argument("text " + std::to_string(i) + " has " + std::to_string(enc[i].input_ids.size()) +
                                  " tokens, more than max_position_embeddings (" +
                                  std::to_string(c.max_position_embeddings) + "); pass max_length to truncate");
  api::apply_threads(impl_->threads);
  const int64_t pad = tok.impl_->tok.pad_id();
  const bool norm = o.normalize.value_or(false);
  return api::to_array(embed_batched(enc, o, pc.output_dim(c.hidden_size), [&](const auto& b) {
    return plain_embed(impl_->plain(), pc, b, pad, norm);
  }));
}

FloatArray Encoder::embed(const std::vector<TextEncoding>& encodings, const EmbedOptions& o) const {
  if (encodings.empty()) throw std::invalid_argument("encodings is empty");
  if (!o.pooling.empty() || o.max_length != 0)
    throw std::invalid_argument("embed(encodings, options): pooling and max_length are for texts, not for already "
                                "tokenized inputs");
  check_batch_options(o);
  impl_->check_plain_prompt(o.prompt_name);
  if (o.dimensions != 0) check_dimensions(o.dimensions, embedding_dim());
  std::vector<Encoding> rows(encodings.size());
  const int64_t V = vocab_size();
  for (size_t i = 0; i < encodings.size(); ++i) {
    const TextEncoding& t = encodings[i];
    const size_t n = t.input_ids.size();
    if (n == 0) throw std::invalid_argument("encoding " + std::to_string(i) + " is empty");
    if ((int64_t)n > max_position_embeddings())
      throw std::invalid_argument("encoding " + std::to_string(i) + " has " + std::to_string(n) +
                                  " tokens, more than max_position_embeddings (" +
                                  std::to_string(max_position_embeddings()) + ")");
    for (int64_t id : t.input_ids)
      if (id < 0 || id >= V)
        throw std::invalid_argument("encoding " + std::to_string(i) + ": token id " + std::to_string(id) +
                                    " is outside the vocabulary [0, " + std::to_string(V) + ")");
    rows[i].input_ids = t.input_ids;
    rows[i].token_type_ids = t.token_type_ids.size() == n ? t.token_type_ids : std::vector<int64_t>(n, 0);
    rows[i].attention_mask.assign(n, 1);
  }
  api::apply_threads(impl_->threads);
  if (!impl_->st) {
    const PoolingConfig pc = impl_->plain_pooling("");
    const int64_t pad = impl_->tokenizer ? impl_->tokenizer->impl_->tok.pad_id() : 0;
    const bool norm = o.normalize.value_or(false);
    const Tensor out = embed_batched(rows, o, pc.output_dim(hidden_size()), [&](const auto& b) {
      return plain_embed(impl_->plain(), pc, b, pad, norm && o.dimensions == 0);
    });
    return truncate_dimensions(api::to_array(out), o.dimensions, norm && o.dimensions != 0);
  }
  if (o.dimensions == 0) {  // the pipeline as it is (or with the prompt / Normalize asked for)
    const SentenceTransformer v = impl_->st_variant(o.prompt_name, o.normalize);
    return api::to_array(embed_batched(rows, o, v.dimension(), [&](const auto& b) { return v.embed(b); }));
  }
  // Matryoshka: cut the unnormalised vectors, then normalise as asked (or as the folder does).
  const bool norm = o.normalize.value_or(impl_->st->normalizes());
  const SentenceTransformer v = impl_->st_variant(o.prompt_name, false);
  const Tensor out = embed_batched(rows, o, v.dimension(), [&](const auto& b) { return v.embed(b); });
  return truncate_dimensions(api::to_array(out), o.dimensions, norm);
}

FloatArray Encoder::embed(const EncoderInputs& in) const {
  if (!impl_->st) {
    const PoolingConfig pc = impl_->plain_pooling("");
    api::apply_threads(impl_->threads);
    return api::to_array(encode_and_pool(impl_->plain(), pc, in));  // checks the inputs
  }
  check_inputs(in);
  api::apply_threads(impl_->threads);
  std::vector<Encoding> enc = unpadded_rows(in);
  return api::to_array(impl_->st->embed(pointers(enc)));
}

FloatArray Encoder::embed(const EncoderInputs& in, const EmbedOptions& o) const {
  if (!o.pooling.empty() || o.max_length != 0 || o.batch_size != EmbedOptions{}.batch_size ||
      o.batch_tokens != EmbedOptions{}.batch_tokens)
    throw std::invalid_argument("embed(inputs, options): pooling, max_length, batch_size and batch_tokens are for "
                                "texts, not for already tokenized inputs");
  impl_->check_plain_prompt(o.prompt_name);
  if (o.dimensions != 0) check_dimensions(o.dimensions, embedding_dim());
  FloatArray out;
  bool norm = false;
  if (!impl_->st) {
    out = embed(in);
    norm = o.normalize.value_or(false);
  } else {
    check_inputs(in);
    api::apply_threads(impl_->threads);
    norm = o.normalize.value_or(impl_->st->normalizes());
    const SentenceTransformer v = impl_->st_variant(o.prompt_name, false);
    std::vector<Encoding> enc = unpadded_rows(in);
    out = api::to_array(v.embed(pointers(enc)));
  }
  return truncate_dimensions(out, o.dimensions, norm);
}

std::vector<std::string> Encoder::prompt_names() const {
  return impl_->st ? impl_->st->prompt_names() : std::vector<std::string>{};
}

FloatArray Encoder::token_embeddings(const EncoderInputs& in) const {
  if (!impl_->st) return forward(in);
  check_inputs(in);
  api::apply_threads(impl_->threads);
  std::vector<Encoding> enc = unpadded_rows(in);
  return api::to_array(impl_->st->token_embeddings(pointers(enc)));
}

namespace {
// Encoder::tokenize for a sentence-transformers pipeline.
TextEncoding st_tokenize(const SentenceTransformer& st, bool lower, const std::string& text, const TokenizeOptions& o) {
  const std::string seen = st.prompt() + text;  // what the tokenizer reads (lowercasing keeps the character count)
  Encoding e;
  if (!o.add_special_tokens) {  // the pipeline's text, pieces only
    e = st.tokenizer().encode(lower ? lower_utf8(seen) : seen, nullptr, false, 0);
  } else {
    e = st.tokenize(text);  // prompt, do_lower_case, cut to max_seq_length
    if (o.max_length == 0 && (int64_t)e.input_ids.size() >= st.max_seq_length()) {
      Encoding full = st.tokenizer().encode(lower ? lower_utf8(seen) : seen, nullptr, true, 0);
      if (full.input_ids.size() > e.input_ids.size()) e = std::move(full);  // over the limit: its full length
    }
  }
  return api::text_encoding(st.tokenizer(), e, o.add_special_tokens, lower ? lower_utf8(seen) : seen,
                            code_points(st.prompt()), o.return_offsets);
}
}  // namespace

TextEncoding Encoder::tokenize(const std::string& text, const TokenizeOptions& o) const {
  if (!impl_->st) return tokenizer().encode(text, o);
  return st_tokenize(*impl_->st, impl_->do_lower_case, text, o);
}

TextEncoding Encoder::tokenize(const std::string& text, const TokenizeOptions& o, const std::string& prompt_name) const {
  impl_->check_plain_prompt(prompt_name);
  if (prompt_name.empty()) return tokenize(text, o);
  return st_tokenize(impl_->st_variant(prompt_name, std::nullopt), impl_->do_lower_case, text, o);
}

std::string Encoder::pooling() const {
  if (impl_->st) return impl_->st->describe();
  return impl_->pooling.empty() ? "mean" : impl_->pooling;
}
bool Encoder::normalizes() const { return impl_->st ? impl_->st->normalizes() : false; }
int64_t Encoder::max_input_length() const {
  if (impl_->st) return impl_->st->max_seq_length();
  const int64_t m = impl_->config().max_position_embeddings;
  return impl_->tokenizer ? std::min(m, impl_->tokenizer->model_max_length()) : m;
}

const Tokenizer& Encoder::tokenizer() const {
  if (!impl_->tokenizer) throw std::runtime_error("this model folder has no tokenizer (tokenizer.json or vocab.txt)");
  return *impl_->tokenizer;
}
bool Encoder::has_tokenizer() const { return impl_->tokenizer.has_value(); }
std::string Encoder::model_type() const { return impl_->config().model_type; }
int64_t Encoder::hidden_size() const { return impl_->config().hidden_size; }
int64_t Encoder::num_hidden_layers() const { return impl_->config().num_hidden_layers; }
int64_t Encoder::embedding_dim() const {
  return impl_->st ? impl_->st->dimension() : impl_->plain_pooling("").output_dim(hidden_size());
}
void Encoder::check_pooling(const std::string& pooling) { (void)PoolingConfig::from_names(pooling); }
void Encoder::check_config(const std::string& config_path) {
  api::require_file(config_path);
  (void)EncoderConfig::load(config_path);
}
bool Encoder::is_sentence_transformer() const { return impl_->st.has_value(); }
int64_t Encoder::vocab_size() const { return impl_->config().vocab_size; }
int64_t Encoder::max_position_embeddings() const { return impl_->config().max_position_embeddings; }
const std::string& Encoder::dtype() const { return impl_->dtype; }
int Encoder::threads() const { return impl_->threads; }

void Encoder::save(const std::string& dir) const {
  namespace fs = std::filesystem;
  if (impl_->random_params.empty())
    throw std::logic_error(impl_->dir + ": save() writes an Encoder built with random weights; this one was loaded "
                           "from its folder's checkpoint (copy the folder instead)");
  if (dir.empty()) throw std::invalid_argument("save: empty folder name");
  std::error_code ec;
  if (fs::exists(dir, ec) && (!fs::is_directory(dir, ec) || !fs::is_empty(dir, ec)))
    throw std::runtime_error(dir + ": exists and is not an empty folder; nothing written");
  // Built next to `dir` and renamed onto it: `dir` is either absent or the whole folder.
  const fs::path target = fs::absolute(dir, ec);
  const fs::path tmp = target.parent_path() / (target.filename().string() + ".tmp-" + std::to_string(::getpid()));
  fs::remove_all(tmp, ec);
  try {
    fs::create_directories(tmp);
    // The model built is the bare encoder: architectures names its base class (BertForMaskedLM -> BertModel), as
    // BertModel(config).save_pretrained writes it.
    nlohmann::ordered_json cfg = nlohmann::ordered_json::parse(read_whole_file(impl_->config_path));
    if (cfg.is_object() && cfg.contains("architectures") && cfg["architectures"].is_array()) {
      nlohmann::ordered_json bases = nlohmann::ordered_json::array();
      for (const auto& a : cfg["architectures"]) {
        if (!a.is_string()) continue;
        const std::string name = a.get<std::string>();
        const size_t f = name.find("For");
        const std::string base = f == std::string::npos || f == 0 ? name : name.substr(0, f) + "Model";
        if (std::find(bases.begin(), bases.end(), base) == bases.end()) bases.push_back(base);
      }
      cfg["architectures"] = bases;
    }
    write_file_atomic((tmp / "config.json").string(), cfg.dump(2) + "\n");
    std::vector<std::pair<std::string, Tensor>> params;
    std::set<std::string> seen;
    for (const auto& [name, t] : impl_->random_params)
      if (seen.insert(name).second) params.emplace_back(name, t);  // a tied parameter is stored once
    save_safetensors((tmp / "model.safetensors").string(), params, {{"format", "pt"}});
    for (const char* f : {"tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json",
                          "vocab.json", "merges.txt", "added_tokens.json", "sentencepiece.bpe.model", "spiece.model"})
      if (fs::exists(fs::path(impl_->dir) / f, ec)) fs::copy_file(fs::path(impl_->dir) / f, tmp / f);
    if (fs::exists(target, ec)) fs::remove(target);  // the empty folder checked above
    fs::rename(tmp, target);
  } catch (const fs::filesystem_error& e) {
    fs::remove_all(tmp, ec);
    throw std::runtime_error(dir + ": cannot write the model folder: " + e.code().message() + " (" +
                             e.path1().string() + ")");
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
}

}  // namespace tfm
