#include "models/pooling.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <vector>

#include "io/json_util.h"
#include "models/checkpoint_weights.h"
#include "nn/weights.h"
#include "ops/activation.h"

namespace tfm {

int64_t PoolingConfig::num_modes() const {
  return (int64_t)cls + max + mean + mean_sqrt_len + weightedmean + lasttoken;
}

std::string PoolingConfig::describe() const {
  std::string s;
  auto add = [&](bool on, const char* n) {
    if (!on) return;
    if (!s.empty()) s += '+';
    s += n;
  };
  add(cls, "cls");
  add(max, "max");
  add(mean, "mean");
  add(mean_sqrt_len, "mean_sqrt_len");
  add(weightedmean, "weightedmean");
  add(lasttoken, "lasttoken");
  return s;
}

PoolingConfig PoolingConfig::from_json(const nlohmann::json& j, const std::string& file) {
  PoolingConfig c;
  if (!j.is_object()) throw std::runtime_error(file + ": expected a JSON object");
  c.word_embedding_dimension = json_int_or(j, "word_embedding_dimension", 0, file);
  if (j.contains("pooling_mode") && j["pooling_mode"].is_string()) {
    try {
      c = from_names(j["pooling_mode"].get<std::string>());
    } catch (const std::invalid_argument& e) {
      throw std::runtime_error(file + ": key 'pooling_mode': " + e.what());
    }
    c.word_embedding_dimension = json_int_or(j, "word_embedding_dimension", 0, file);
  }
  c.cls |= json_bool_or(j, "pooling_mode_cls_token", false, file);
  c.max |= json_bool_or(j, "pooling_mode_max_tokens", false, file);
  c.mean |= json_bool_or(j, "pooling_mode_mean_tokens", false, file);
  c.mean_sqrt_len |= json_bool_or(j, "pooling_mode_mean_sqrt_len_tokens", false, file);
  c.weightedmean |= json_bool_or(j, "pooling_mode_weightedmean_tokens", false, file);
  c.lasttoken |= json_bool_or(j, "pooling_mode_lasttoken", false, file);
  c.include_prompt = json_bool_or(j, "include_prompt", true, file);
  if (c.num_modes() == 0) throw std::runtime_error(file + ": no pooling mode is true");
  return c;
}

PoolingConfig PoolingConfig::from_names(const std::string& names) {
  PoolingConfig c;
  size_t start = 0;
  while (start <= names.size()) {
    size_t end = names.find_first_of(",+", start);
    if (end == std::string::npos) end = names.size();
    std::string n = names.substr(start, end - start);
    if (n == "cls") c.cls = true;
    else if (n == "max") c.max = true;
    else if (n == "mean") c.mean = true;
    else if (n == "mean_sqrt_len" || n == "mean_sqrt_len_tokens") c.mean_sqrt_len = true;
    else if (n == "weightedmean") c.weightedmean = true;
    else if (n == "lasttoken") c.lasttoken = true;
    else
      throw std::invalid_argument("unknown pooling mode '" + n +
                                  "' (modes: cls, mean, max, mean_sqrt_len, weightedmean, lasttoken)");
    start = end + 1;
  }
  return c;
}

Tensor pool(const PoolingConfig& c, const Tensor& h, const Tensor& mask, int64_t prompt_length) {
  if (h.ndim() != 3 || mask.ndim() != 2 || mask.dtype() != DType::I64 || mask.size(0) != h.size(0) ||
      mask.size(1) != h.size(1))
    throw std::invalid_argument("pool: token_embeddings must be [B, L, H] and attention_mask [B, L] int64, got " +
                                shape_str(h.shape()) + " and " + shape_str(mask.shape()));
  const int64_t B = h.size(0), L = h.size(1), H = h.size(2);
  if (c.word_embedding_dimension > 0 && c.word_embedding_dimension != H)
    throw std::invalid_argument("pool: hidden size " + std::to_string(H) + " differs from the Pooling config's "
                                "word_embedding_dimension " + std::to_string(c.word_embedding_dimension));
  const int64_t D = c.output_dim(H);
  Tensor out = Tensor::zeros({B, D});
  const float* X = h.f32();
  const int64_t* M = mask.i64();
  const int64_t skip = c.include_prompt ? 0 : prompt_length;
#pragma omp parallel for if (B * L * H > 65536)
  for (int64_t b = 0; b < B; ++b) {
    const float* xb = X + b * L * H;
    std::vector<float> m(L);
    for (int64_t l = 0; l < L; ++l) m[l] = (M[b * L + l] != 0 && l >= skip) ? 1.0f : 0.0f;
    float* o = out.f32() + b * D;
    // cls: position 0, whatever the mask (sentence-transformers takes token_embeddings[:, 0]).
    if (c.cls) {
      std::memcpy(o, xb, sizeof(float) * H);
      o += H;
    }
    if (c.max) {
      // Padding is set to -1e9 before the max, so an all-masked row gives -1e9 as sentence-transformers does.
      for (int64_t k = 0; k < H; ++k) o[k] = -1e9f;
      for (int64_t l = 0; l < L; ++l)
        if (m[l] != 0)
          for (int64_t k = 0; k < H; ++k) o[k] = std::max(o[k], xb[l * H + k]);
      o += H;
    }
    if (c.mean || c.mean_sqrt_len) {
      std::vector<double> sum(H, 0.0);
      double n = 0;
      for (int64_t l = 0; l < L; ++l)
        if (m[l] != 0) {
          n += 1;
          for (int64_t k = 0; k < H; ++k) sum[k] += xb[l * H + k];
        }
      n = std::max(n, 1e-9);
      if (c.mean) {
        for (int64_t k = 0; k < H; ++k) o[k] = (float)(sum[k] / n);
        o += H;
      }
      if (c.mean_sqrt_len) {
        for (int64_t k = 0; k < H; ++k) o[k] = (float)(sum[k] / std::sqrt(n));
        o += H;
      }
    }
    if (c.weightedmean) {
      std::vector<double> sum(H, 0.0);
      double n = 0;
      for (int64_t l = 0; l < L; ++l)
        if (m[l] != 0) {
          const double w = (double)(l + 1);
          n += w;
          for (int64_t k = 0; k < H; ++k) sum[k] += w * xb[l * H + k];
        }
      n = std::max(n, 1e-9);
      for (int64_t k = 0; k < H; ++k) o[k] = (float)(sum[k] / n);
      o += H;
    }
    if (c.lasttoken) {
      int64_t last = -1;
      for (int64_t l = L - 1; l >= 0 && last < 0; --l)
        if (m[l] != 0) last = l;
      // No real token: sentence-transformers gathers position L-1 of h * mask, i.e. zeros.
      if (last >= 0) std::memcpy(o, xb + last * H, sizeof(float) * H);
      o += H;
    }
  }
  return out;
}

Tensor mean_pool(const Tensor& h, const Tensor& mask) {
  PoolingConfig c;
  c.mean = true;
  if (mask.defined()) return pool(c, h, mask);
  if (h.ndim() != 3)
    throw std::invalid_argument("mean_pool: token_embeddings must be [B, L, H], got " + shape_str(h.shape()));
  Tensor all = Tensor::empty({h.size(0), h.size(1)}, DType::I64);
  std::fill(all.i64(), all.i64() + all.numel(), (int64_t)1);
  return pool(c, h, all);
}

namespace {
DenseActivation parse_dense_activation(const std::string& name, const std::string& file) {
  std::string n = name;
  size_t dot = n.rfind('.');
  if (dot != std::string::npos) n = n.substr(dot + 1);
  if (n == "Identity") return DenseActivation::Identity;
  if (n == "Tanh") return DenseActivation::Tanh;
  if (n == "ReLU") return DenseActivation::ReLU;
  if (n == "GELU") return DenseActivation::GELU;
  if (n == "Sigmoid") return DenseActivation::Sigmoid;
  throw std::runtime_error(file + ": activation_function '" + name +
                           "' is not supported (Identity, Tanh, ReLU, GELU, Sigmoid)");
}
}  // namespace

DenseModule DenseModule::load(const std::string& dir) {
  namespace fs = std::filesystem;
  const std::string cfg_path = dir + "/config.json";
  nlohmann::json j = load_json_file(cfg_path);
  const int64_t in = json_int(j, "in_features", cfg_path), out = json_int(j, "out_features", cfg_path);
  if (in <= 0 || out <= 0) throw std::runtime_error(cfg_path + ": in_features and out_features must be positive");
  check_at_most(cfg_path, "in_features", in, 1 << 16);
  check_at_most(cfg_path, "out_features", out, 1 << 16);
  const bool bias = json_bool_or(j, "bias", true, cfg_path);
  DenseModule d;
  d.activation = parse_dense_activation(
      json_string_or(j, "activation_function", "torch.nn.modules.activation.Tanh", cfg_path), cfg_path);
  CheckpointWeights w(dir);
  d.linear = nn::Linear::load(nn::Vars(w).prefix("linear"), in, out, bias);
  w.check_all_used(cfg_path);
  return d;
}

Tensor DenseModule::forward(const Tensor& x) const {
  if (x.ndim() != 2 || x.size(1) != linear.in_features)
    throw std::invalid_argument("Dense: input " + shape_str(x.shape()) + " does not have in_features " +
                                std::to_string(linear.in_features));
  const int64_t B = x.size(0), O = linear.out_features;
  Tensor y = Tensor::empty({B, O});
  linear.forward_inference(y.f32(), x.f32(), B);
  float* p = y.f32();
  const int64_t n = B * O;
  switch (activation) {
    case DenseActivation::Identity: break;
    case DenseActivation::Tanh: ops::tanh_forward(p, p, n); break;
    case DenseActivation::ReLU: ops::activation_forward(p, p, n, ops::Activation::Relu); break;
    case DenseActivation::GELU: ops::activation_forward(p, p, n, ops::Activation::Gelu); break;
    case DenseActivation::Sigmoid: ops::sigmoid_forward(p, p, n); break;
  }
  return y;
}

void l2_normalize_rows(Tensor& x) {
  if (x.ndim() != 2) throw std::invalid_argument("normalize: expected [B, D], got " + shape_str(x.shape()));
  const int64_t B = x.size(0), D = x.size(1);
  for (int64_t b = 0; b < B; ++b) {
    float* r = x.f32() + b * D;
    double ss = 0;
    for (int64_t k = 0; k < D; ++k) ss += (double)r[k] * r[k];
    const double norm = std::max(std::sqrt(ss), 1e-12);
    for (int64_t k = 0; k < D; ++k) r[k] = (float)(r[k] / norm);
  }
}

}  // namespace tfm
