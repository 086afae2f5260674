// tfm::convert: an encoder folder rewritten with bf16 or int8 Linear weights (`tfm convert`).
#include "tfm/convert.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

#include "api/common.h"
#include "io/atomic_file.h"
#include "io/json_util.h"
#include "io/safetensors.h"
#include "models/encoder.h"
#include "models/hf_seq2seq.h"
#include "models/registry.h"
#include "models/seq2seq.h"
#include "ops/gemm.h"
#include "ops/gemm_bf16.h"

namespace tfm {
namespace {

bool ends_with(const std::string& s, const std::string& suf) {
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}
// The encoder's Linear weights: rank 2, "*.weight", not an embedding table (embeddings stay fp32, as at run
// time) and not the pooler or task heads (small, read unpacked in fp32).
bool is_linear_weight(const std::string& name, const Shape& shape) {
  return shape.size() == 2 && ends_with(name, ".weight") && name.find("embeddings") == std::string::npos &&
         name.find("pooler") == std::string::npos && name.find("cls.") == std::string::npos &&
         (name.find("layer.") != std::string::npos || name.find("layers.") != std::string::npos);
}

// w[r, c] = q[r, c] * scale[r]: the weights an int8 folder computes with (nn::Linear's dequantised load).
Tensor dequantize_int8(const SafeTensors& st, const std::string& name) {
  const Shape shape = st.shape_of(name);
  const std::string sn = name + "_scale";
  if (!st.has(sn) || st.dtype_of(sn) != "F32" || st.shape_of(sn) != Shape{shape[0]})
    throw std::runtime_error(st.path() + ": int8 tensor '" + name + "' needs '" + sn + "' (F32, [" +
                             std::to_string(shape[0]) + "]); nothing written");
  Tensor scale = st.get(sn);
  const int8_t* q = reinterpret_cast<const int8_t*>(st.raw_data(name));
  Tensor t = Tensor::empty(shape);
  float* w = t.f32();
  for (int64_t r = 0; r < shape[0]; ++r)
    for (int64_t c = 0; c < shape[1]; ++c) w[r * shape[1] + c] = (float)q[r * shape[1] + c] * scale.f32()[r];
  return t;
}

}  // namespace

ConvertSummary convert(const std::string& model, const std::string& out_dir, const ConvertOptions& options) {
  namespace fs = std::filesystem;
  if (options.dtype != "bf16" && options.dtype != "int8")
    throw std::invalid_argument("dtype '" + options.dtype + "' is not supported (supported: bf16, int8)");
  std::error_code ec;
  if (out_dir.empty()) throw std::invalid_argument("out_dir is empty");
  if (fs::exists(out_dir, ec) && (!fs::is_directory(out_dir, ec) || !fs::is_empty(out_dir, ec)))
    throw std::runtime_error(out_dir + ": exists and is not an empty folder; nothing written");
  const std::string model_dir = api::model_folder(model);
  api::require_dir(model_dir, "model folder");
  bool translation = false;  // a Hugging Face Marian / M2M100 / NLLB folder (tfm::Translator reads it)
  {
    const std::string cp = model_dir + "/config.json";
    api::require_file(cp);
    const nlohmann::json cj = load_json_file(cp);
    const std::string type = read_model_type(cj, cp, default_model_type(cj));
    const ModelFamily& family = family_of(type, cp);
    // tfm train's translation folders keep their own weight names; Hugging Face ones are converted.
    if (!family.hugging_face)
      require_encoder_family(family, type, cp, "convert takes encoder folders and Marian / M2M100 / NLLB folders");
    translation = family.translation;
    if (translation) {
      family.seq2seq_config(cj, cp);  // validated before anything is written
    } else {
      EncoderConfig::from_json(cj, cp);
      // Families that read their Linear weights through nn::Linear::load_packed take prequantised int8; the
      // tutorial encoder reads its per-head projections unpacked.
      if (options.dtype == "int8" && !family.int8_weights)
        throw std::runtime_error("dtype int8: model_type '" + type + "' is not supported (its attention reads "
                                 "unpacked per-head weights); use bf16");
    }
  }
  SafeTensors st = SafeTensors::open(model_dir + "/model.safetensors");
  // An int8 Linear weight (a folder this command wrote) is "<name>" I8 [out, in] plus "<name>_scale" F32 [out].
  auto is_int8_linear = [&](const std::string& name) {
    return st.dtype_of(name) == "I8" && is_linear_weight(name, st.shape_of(name));
  };
  std::vector<RawTensor> out;
  size_t converted = 0, unchanged = 0;
  for (const std::string& name : st.names()) {
    RawTensor r{name, st.dtype_of(name), st.shape_of(name), {}};
    const int64_t n = shape_numel(r.shape);
    // A scale goes with its int8 weight: copied with it (int8 -> int8) or dropped once the weight is dequantised.
    if (ends_with(name, "_scale") && st.has(name.substr(0, name.size() - 6)) &&
        is_int8_linear(name.substr(0, name.size() - 6)))
      continue;
    const bool int8_source = is_int8_linear(name);
    if (int8_source && options.dtype == "int8") {
      // Already in the target dtype: weight and scale copied as stored (requantising could move a scale by an ulp).
      const std::string sn = name + "_scale";
      if (!st.has(sn) || st.dtype_of(sn) != "F32" || st.shape_of(sn) != Shape{r.shape[0]})
        throw std::runtime_error(st.path() + ": int8 tensor '" + name + "' needs '" + sn + "' (F32, [" +
                                 std::to_string(r.shape[0]) + "]); nothing written");
      const unsigned char* p = st.raw_data(name);
      r.bytes.assign(p, p + n);
      const unsigned char* ps = st.raw_data(sn);
      out.push_back(std::move(r));
      out.push_back(RawTensor{sn, "F32", {st.shape_of(name)[0]}, std::vector<unsigned char>(ps, ps + 4 * st.shape_of(name)[0])});
      ++unchanged;
      continue;
    }
    if (is_linear_weight(name, r.shape) && (r.dtype == "F32" || r.dtype == "F16" || r.dtype == "BF16" || int8_source)) {
      Tensor t = int8_source ? dequantize_int8(st, name) : st.get(name);  // F32
      const float* w = t.f32();
      for (int64_t i = 0; i < n; ++i)
        if (!std::isfinite(w[i]))
          throw std::runtime_error(st.path() + ": tensor '" + name + "' contains NaN or Inf; nothing written");
      if (options.dtype == "bf16") {
        r.dtype = "BF16";
        r.bytes.resize(2 * n);
        for (int64_t i = 0; i < n; ++i) {
          uint16_t h = ops::to_bf16(w[i]);  // round to nearest even, as torch's .to(torch.bfloat16)
          std::memcpy(r.bytes.data() + 2 * i, &h, 2);
        }
      } else {
        // Symmetric per output row, PackedLinear's own quantiser: a converted folder loads to the same weights.
        const int64_t rows = r.shape[0], cols = r.shape[1];
        r.dtype = "I8";
        r.bytes.resize(n);
        std::vector<float> scale(rows);
        ops::quantize_weights_s8(reinterpret_cast<int8_t*>(r.bytes.data()), scale.data(), w, rows, cols);
        RawTensor sc{name + "_scale", "F32", {rows}, std::vector<unsigned char>(4 * rows)};
        std::memcpy(sc.bytes.data(), scale.data(), 4 * rows);
        out.push_back(std::move(sc));
      }
      ++converted;
    } else {
      const unsigned char* p = st.raw_data(name);
      size_t bytes = 0;
      if (n > 0) {
        static const std::map<std::string, size_t> kSize = {{"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2},
                                                            {"I64", 8}, {"I32", 4}, {"I16", 2}, {"I8", 1},
                                                            {"U8", 1},  {"BOOL", 1}};
        auto it = kSize.find(r.dtype);
        if (it == kSize.end()) throw std::runtime_error(st.path() + ": tensor '" + name + "' has dtype " + r.dtype);
        bytes = (size_t)n * it->second;
      }
      r.bytes.assign(p, p + bytes);
    }
    out.push_back(std::move(r));
  }
  fs::create_directories(out_dir);
  // Everything but the weights is copied byte for byte (config.json, tokenizer files, vocabularies), and so are
  // subfolders: a sentence-transformers folder needs its modules (1_Pooling/, 2_Dense/, ...) for `tfm embed`.
  for (const auto& entry : fs::recursive_directory_iterator(model_dir)) {
    const fs::path rel = fs::relative(entry.path(), model_dir);
    if (entry.is_directory()) {
      fs::create_directories(fs::path(out_dir) / rel);
      continue;
    }
    if (!entry.is_regular_file() || rel == "model.safetensors") continue;
    std::ifstream in(entry.path(), std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    if (!in.good() && !in.eof()) throw std::runtime_error(entry.path().string() + ": read error");
    write_file_atomic((fs::path(out_dir) / rel).string(), ss.str());
  }
  nlohmann::json meta = st.metadata().is_object() ? st.metadata() : nlohmann::json::object();
  meta["tfm_dtype"] = options.dtype;
  const std::string dst = out_dir + "/model.safetensors";
  save_safetensors_raw(dst, std::move(out), meta);
  ConvertSummary s;
  s.converted = (int64_t)converted;
  s.unchanged = (int64_t)unchanged;
  s.weights_path = dst;
  s.bytes = fs::file_size(dst);
  s.source_bytes = fs::file_size(model_dir + "/model.safetensors");
  return s;
}

}  // namespace tfm
