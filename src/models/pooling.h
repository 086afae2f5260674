// sentence-transformers' Pooling, Dense and Normalize modules (sentence_transformers/models/{Pooling,Dense,
// Normalize}.py, v3.x semantics), on the last hidden state of an encoder.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "core/tensor.h"
#include "nn/layers.h"

namespace tfm {

// 1_Pooling/config.json. Several modes may be on; their vectors are concatenated in sentence-transformers' order:
// cls, max, mean, mean_sqrt_len, weightedmean, lasttoken.
struct PoolingConfig {
  int64_t word_embedding_dimension = 0;  // H; 0 = not checked
  bool cls = false;            // pooling_mode_cls_token: h[:, 0]
  bool max = false;            // pooling_mode_max_tokens: max over real tokens (padding excluded)
  bool mean = false;           // pooling_mode_mean_tokens: sum(h * mask) / max(sum(mask), 1e-9)
  bool mean_sqrt_len = false;  // pooling_mode_mean_sqrt_len_tokens: sum(h * mask) / sqrt(max(sum(mask), 1e-9))
  bool weightedmean = false;   // pooling_mode_weightedmean_tokens: position i (0-based) weighted i + 1
  bool lasttoken = false;      // pooling_mode_lasttoken: h at the last position whose mask is 1
  bool include_prompt = true;  // false: prompt tokens (incl. [CLS]) are left out of the pooling

  int64_t num_modes() const;
  // Output size for hidden size H: num_modes() * H.
  int64_t output_dim(int64_t H) const { return num_modes() * H; }
  // "mean", "cls+max", ...
  std::string describe() const;
  // Parses the config.json of a Pooling module; `file` names it in errors. Also reads the older
  // "pooling_mode": "mean" form. Throws std::runtime_error when no mode is on or a key has the wrong type.
  static PoolingConfig from_json(const nlohmann::json& j, const std::string& file);
  // "cls", "mean", "max", "mean_sqrt_len", "weightedmean", "lasttoken", or several joined with ',' or '+'.
  // Throws std::invalid_argument naming the unknown mode.
  static PoolingConfig from_names(const std::string& names);
};

// Pools token embeddings into sentence vectors.
//   token_embeddings: [B, L, H] float32; attention_mask: [B, L] int64 (1 = real token);
//   prompt_length: with include_prompt false, the first prompt_length positions are masked out.
// Returns [B, num_modes * H]. Throws std::invalid_argument on shape mismatch or when H differs from
// word_embedding_dimension.
Tensor pool(const PoolingConfig& config, const Tensor& token_embeddings, const Tensor& attention_mask,
            int64_t prompt_length = 0);

// The one mean pooling (pool() with only `mean` on; the ModernBERT classifier_pooling "mean" head calls it too):
// out [B, H] = sum of token_embeddings [B, L, H] over the positions where attention_mask [B, L] int64 is non-zero,
// summed in double, divided by max(count, 1e-9) (sentence-transformers' Pooling: torch.clamp(sum_mask, min=1e-9)),
// so a row without a real token gives zeros. attention_mask undefined: every position counts.
Tensor mean_pool(const Tensor& token_embeddings, const Tensor& attention_mask);

// Activations a Dense module names ("torch.nn.modules.activation.Tanh", ...).
enum class DenseActivation { Identity, Tanh, ReLU, GELU, Sigmoid };

// 2_Dense: y = activation(x W^T + b); weights "linear.weight" [out_features, in_features], "linear.bias".
struct DenseModule {
  nn::Linear linear;
  DenseActivation activation = DenseActivation::Tanh;
  // Reads DIR/config.json (in_features, out_features, bias, activation_function) and DIR/model.safetensors.
  // Throws std::runtime_error naming the file: missing file, unknown activation, shape mismatch. (A folder with
  // only pytorch_model.bin is refused with a message saying to convert it to safetensors.)
  static DenseModule load(const std::string& dir);
  // x: [B, in_features] -> [B, out_features]
  Tensor forward(const Tensor& x) const;
};

// Normalize: x / max(||x||_2, 1e-12) per row (torch.nn.functional.normalize, p=2, dim=1), in place. x: [B, D].
void l2_normalize_rows(Tensor& x);

}  // namespace tfm
