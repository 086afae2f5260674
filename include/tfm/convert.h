/// @file tfm/convert.h
/// Converting an encoder model folder to smaller Linear weights (`tfm convert`), as CTranslate2's converters do:
/// a folder whose model.safetensors stores the Linear weights in bf16 (2x smaller) or int8 (about 4x), which
/// tfm::Encoder loads without converting again.
#pragma once
#include <cstdint>
#include <string>

namespace tfm {

struct ConvertOptions {
  /// "bf16" (round to nearest even, as torch's .to(torch.bfloat16)) or "int8" (every family but transformer_encoder: symmetric per output
  /// row, s8 weights plus one F32 scale per row stored as '<name>_scale', the arithmetic tfm::Encoder's int8
  /// dtype uses when it quantises at load, so both give identical weights).
  std::string dtype;
};

struct ConvertSummary {
  int64_t converted = 0;      ///< Linear weights rewritten
  int64_t unchanged = 0;      ///< Linear weights already stored in the target dtype (int8 -> int8), copied as stored
  std::string weights_path;   ///< out_dir/model.safetensors
  uint64_t bytes = 0;         ///< its size in bytes
  uint64_t source_bytes = 0;  ///< size of model_dir/model.safetensors in bytes
};

/// Writes a copy of `model_dir` (config.json, model.safetensors; any encoder family: BERT, RoBERTa, XLM-RoBERTa,
/// CamemBERT, DistilBERT, ..., transformer_encoder; or a Hugging Face Marian / M2M100 / NLLB translation folder, whose
/// encoder and decoder layers' Linear weights are converted and whose shared embedding / tied output projection
/// stays F32; or a folder this function wrote: int8 weights are dequantised, w = q * scale, then converted, and
/// copied as stored when the target is int8 too) into `out_dir`
/// (created; must not exist or be empty) with the encoder's Linear weights (rank 2 "*.weight" of the layers, not
/// embeddings, pooler or heads) in options.dtype; embeddings, LayerNorm and biases stay F32; the metadata gets
/// "tfm_dtype". Every other file and subfolder is copied byte for byte (a sentence-transformers folder keeps its
/// modules). Files are written atomically. Throws std::invalid_argument for an unknown dtype or a
/// transformer_seq2seq folder, std::runtime_error for an out_dir that is not an empty folder, int8 on a
/// transformer_encoder folder, a weight with NaN or Inf, or a malformed folder (nothing is written before these checks).
ConvertSummary convert(const std::string& model_dir, const std::string& out_dir, const ConvertOptions& options);

}  // namespace tfm
