// tfm::Encoder over models/encoder (BERT, transformer_encoder) and text/bert_tokenizer.
#include "tfm/encoder.h"

#include <cmath>
#include <filesystem>
#include <optional>
#include <stdexcept>

#include "api/common.h"
#include "api/impl.h"
#include "models/encoder.h"
#include "models/sentence_transformer.h"
#include "ops/gemm.h"
#include "text/text_file.h"

namespace tfm {

struct Encoder::Impl {
  std::unique_ptr<EncoderModel> model;
  std::optional<Tokenizer> tokenizer;
  std::optional<SentenceTransformer> st;  // modules.json pipeline with the folder's own settings
  std::string dir;
  std::string dtype;
  int threads = 0;
};

Encoder::Encoder(const std::string& model_dir, const EncoderOptions& options) : impl_(std::make_unique<Impl>()) {
  // "" = as the folder stores it; otherwise std::invalid_argument naming the accepted values.
  std::optional<ops::ComputeType> want;
  if (!options.dtype.empty()) want = ops::parse_compute_type(options.dtype);
  api::check_threads(options.threads);
  api::require_dir(model_dir, "model folder");
  api::require_file(model_dir + "/config.json");
  api::require_file(model_dir + "/model.safetensors");
  impl_->threads = options.threads;
  ops::ComputeType ct = ops::ComputeType::F32;
  impl_->model = load_encoder(model_dir, want, &ct);
  impl_->dtype = ops::compute_type_name(ct);
  impl_->dir = model_dir;
  std::error_code ec;
  namespace fs = std::filesystem;
  if (fs::exists(model_dir + "/modules.json", ec)) impl_->st.emplace(SentenceTransformer::load(model_dir));
  if (fs::exists(model_dir + "/tokenizer.json", ec) || fs::exists(model_dir + "/vocab.txt", ec)) {
    impl_->tokenizer.emplace(model_dir);
    const int64_t tv = impl_->tokenizer->vocab_size(), mv = impl_->model->config().vocab_size;
    if (tv > mv)
      throw std::runtime_error(model_dir + ": tokenizer vocabulary (" + std::to_string(tv) +
                               " tokens) is larger than config.json vocab_size (" + std::to_string(mv) + ")");
  }
}
Encoder::~Encoder() = default;
Encoder::Encoder(Encoder&&) noexcept = default;
Encoder& Encoder::operator=(Encoder&&) noexcept = default;

FloatArray Encoder::forward(const EncoderInputs& in) const {
  if (!in.input_ids) throw std::invalid_argument("input_ids is null");
  if (in.batch < 1 || in.length < 1)
    throw std::invalid_argument("input_ids must be [batch, length] with batch, length >= 1, got [" +
                                std::to_string(in.batch) + ", " + std::to_string(in.length) + "]");
  const Shape shape{in.batch, in.length};
  if (in.attention_mask)
    for (int64_t i = 0; i < in.batch * in.length; ++i)
      if (in.attention_mask[i] != 0 && in.attention_mask[i] != 1)
        throw std::invalid_argument("attention_mask[" + std::to_string(i / in.length) + ", " +
                                    std::to_string(i % in.length) + "] = " + std::to_string(in.attention_mask[i]) +
                                    ": expected 0 or 1");
  // Views of the caller's memory: nothing is copied, and nothing is written.
  auto view = [&](const int64_t* p) {
    return p ? Tensor::view_of(const_cast<int64_t*>(p), shape, DType::I64, nullptr) : Tensor();
  };
  api::apply_threads(impl_->threads);
  EncoderOutput out = impl_->model->forward(view(in.input_ids), view(in.token_type_ids), view(in.attention_mask));
  return api::to_array(std::move(out.last_hidden_state));
}

FloatArray Encoder::forward(const TokenBatch& b) const {
  if (b.input_ids.ndim() != 2) throw std::invalid_argument("TokenBatch.input_ids must be [batch, length]");
  for (const IdArray* a : {&b.attention_mask, &b.token_type_ids})
    if (a->data() && a->shape() != b.input_ids.shape())
      throw std::invalid_argument("TokenBatch arrays must all have the shape of input_ids");
  return forward(EncoderInputs{b.input_ids.data(), b.attention_mask.data(), b.token_type_ids.data(),
                               b.input_ids.size(0), b.input_ids.size(1)});
}

FloatArray Encoder::embed(const std::vector<std::string>& texts, const EmbedOptions& o) const {
  if (texts.empty()) throw std::invalid_argument("texts is empty");
  if (o.batch_size < 1) throw std::invalid_argument("batch_size must be >= 1, got " + std::to_string(o.batch_size));
  if (o.max_length < 0) throw std::invalid_argument("max_length must be >= 0, got " + std::to_string(o.max_length));
  if (impl_->st) {
    const SentenceTransformer* st = &*impl_->st;
    std::optional<SentenceTransformer> custom;
    const bool folder_normalizes = impl_->st->describe().find("Normalize") != std::string::npos;
    if (o.normalize == false && folder_normalizes)
      throw std::invalid_argument(impl_->dir + "/modules.json has a Normalize module: normalize=false cannot skip it");
    if (!o.pooling.empty() || o.normalize == true || o.max_length > 0) {
      SentenceTransformerOptions so;
      so.pooling = o.pooling;
      so.normalize = o.normalize.value_or(false);
      so.max_seq_length = o.max_length;
      custom.emplace(SentenceTransformer::load(impl_->dir, so));
      st = &*custom;
    }
    api::apply_threads(impl_->threads);
    const int64_t N = (int64_t)texts.size(), D = st->dimension();
    Tensor result = Tensor::empty({N, D});
    for (int64_t s = 0; s < N; s += o.batch_size) {
      const int64_t n = std::min(o.batch_size, N - s);
      for (int64_t i = s; i < s + n; ++i)
        if (auto bad = find_invalid_utf8(texts[i]))
          throw std::invalid_argument("text " + std::to_string(i) + ": invalid UTF-8 at byte offset " +
                                      std::to_string(*bad));
      Tensor e = st->encode(std::vector<std::string>(texts.begin() + s, texts.begin() + s + n));
      std::copy(e.f32(), e.f32() + n * D, result.f32() + s * D);
    }
    return api::to_array(std::move(result));
  }
  const std::string pooling = o.pooling.empty() ? "mean" : o.pooling;
  if (pooling != "mean" && pooling != "cls")
    throw std::invalid_argument("pooling '" + pooling + "' is not supported (supported: mean, cls)");
  const Tokenizer& tok = tokenizer();
  TokenizeOptions to;
  to.max_length = o.max_length;
  std::vector<Encoding> enc = api::encode_texts(tok.impl_->tok, texts, nullptr, to);
  const EncoderConfig& c = impl_->model->config();
  for (size_t i = 0; i < enc.size(); ++i)
    if ((int64_t)enc[i].input_ids.size() > c.max_position_embeddings)
      throw std::invalid_argument("text " + std::to_string(i) + " has " + std::to_string(enc[i].input_ids.size()) +
                                  " tokens, more than max_position_embeddings (" +
                                  std::to_string(c.max_position_embeddings) + "); pass max_length to truncate");
  const int64_t N = (int64_t)texts.size(), H = c.hidden_size;
  Tensor result = Tensor::empty({N, H});
  for (int64_t s = 0; s < N; s += o.batch_size) {
    const int64_t n = std::min(o.batch_size, N - s);
    TokenBatch b = api::pad_batch(tok.impl_->tok, std::vector<Encoding>(enc.begin() + s, enc.begin() + s + n));
    FloatArray h = forward(b);  // [n, L, H]
    const int64_t L = b.input_ids.size(1);
    for (int64_t r = 0; r < n; ++r) {
      float* dst = result.f32() + (s + r) * H;
      const float* hr = h.data() + r * L * H;
      if (pooling == "cls") {
        std::copy(hr, hr + H, dst);
      } else {
        // sentence-transformers: sum(h * mask) / clamp(sum(mask), 1e-9), accumulated in double.
        std::vector<double> acc(H, 0.0);
        double count = 0;
        for (int64_t l = 0; l < L; ++l) {
          if (b.attention_mask[r * L + l] == 0) continue;
          count += 1;
          for (int64_t k = 0; k < H; ++k) acc[k] += hr[l * H + k];
        }
        for (int64_t k = 0; k < H; ++k) dst[k] = (float)(acc[k] / std::max(count, 1e-9));
      }
      if (o.normalize.value_or(false)) {  // torch.nn.functional.normalize: x / max(||x||, 1e-12)
        double sq = 0;
        for (int64_t k = 0; k < H; ++k) sq += (double)dst[k] * dst[k];
        const double norm = std::max(std::sqrt(sq), 1e-12);
        for (int64_t k = 0; k < H; ++k) dst[k] = (float)(dst[k] / norm);
      }
    }
  }
  return api::to_array(std::move(result));
}

const Tokenizer& Encoder::tokenizer() const {
  if (!impl_->tokenizer) throw std::runtime_error("this model folder has no tokenizer (tokenizer.json or vocab.txt)");
  return *impl_->tokenizer;
}
bool Encoder::has_tokenizer() const { return impl_->tokenizer.has_value(); }
std::string Encoder::model_type() const { return impl_->model->config().model_type; }
int64_t Encoder::hidden_size() const { return impl_->model->config().hidden_size; }
int64_t Encoder::embedding_dim() const { return impl_->st ? impl_->st->dimension() : hidden_size(); }
bool Encoder::is_sentence_transformer() const { return impl_->st.has_value(); }
int64_t Encoder::vocab_size() const { return impl_->model->config().vocab_size; }
int64_t Encoder::max_position_embeddings() const { return impl_->model->config().max_position_embeddings; }
const std::string& Encoder::dtype() const { return impl_->dtype; }
int Encoder::threads() const { return impl_->threads; }

}  // namespace tfm
