// Marian and M2M100 / NLLB as compositions of nn/ blocks (see hf_seq2seq.h); read against modeling_marian.py and
// modeling_m2m_100.py: each prefix below is the module path of the transformers model.
#include "models/hf_seq2seq.h"

#include <cmath>
#include <stdexcept>

#include "io/json_util.h"
#include "models/registry.h"

namespace tfm {

bool is_hf_seq2seq_type(const std::string& t) { return t == "marian" || t == "m2m_100"; }

Seq2SeqConfig hf_seq2seq_config(const nlohmann::json& j, const std::string& file) {
  Seq2SeqConfig c;
  c.family = read_model_type(j, file, "");
  if (!is_hf_seq2seq_type(c.family))
    throw std::runtime_error(file + ": model_type '" + c.family + "' is not 'marian' or 'm2m_100'");
  const bool marian = c.family == "marian";
  c.num_hiddens = json_int(j, "d_model", file);
  c.num_layers = json_int(j, "encoder_layers", file);
  c.decoder_layers = json_int_or(j, "decoder_layers", c.num_layers, file);
  c.num_heads = json_int(j, "encoder_attention_heads", file);
  c.ffn_num_hiddens = json_int(j, "encoder_ffn_dim", file);
  auto same = [&](const char* key, int64_t v) {
    const int64_t d = json_int_or(j, key, v, file);
    if (d != v)
      throw std::runtime_error(file + ": " + key + " " + std::to_string(d) +
                               " differs from the encoder's " + std::to_string(v) + " (not supported)");
  };
  same("decoder_attention_heads", c.num_heads);
  same("decoder_ffn_dim", c.ffn_num_hiddens);
  c.src_vocab_size = json_int(j, "vocab_size", file);
  // MarianConfig's; M2M100 always shares model.shared.
  c.shared_embeddings = !marian || json_bool_or(j, "share_encoder_decoder_embeddings", true, file);
  // MarianConfig's decoder_vocab_size (default vocab_size): the rows of lm_head and final_logits_bias, which a
  // shared embedding has only when it equals vocab_size. M2M100Config has none.
  c.tgt_vocab_size = marian ? json_int_or(j, "decoder_vocab_size", c.src_vocab_size, file) : c.src_vocab_size;
  if (c.shared_embeddings && c.tgt_vocab_size != c.src_vocab_size)
    throw std::runtime_error(file + ": decoder_vocab_size " + std::to_string(c.tgt_vocab_size) + " differs from "
                             "vocab_size " + std::to_string(c.src_vocab_size) +
                             " with share_encoder_decoder_embeddings true (not supported)");
  c.max_len = json_int(j, "max_position_embeddings", file);
  c.num_steps = c.max_len;
  c.dropout = 0.0;
  c.decode_positions = "absolute";
  c.attention_bias = true;
  // The defaults are MarianConfig's ("gelu", false) and M2M100Config's ("relu", true); OPUS-MT folders say
  // "swish" and true.
  c.activation = json_string_or(j, "activation_function", marian ? "gelu" : "relu", file);
  c.scale_embedding = json_bool_or(j, "scale_embedding", !marian, file);
  c.pad_token_id = json_int(j, "pad_token_id", file);
  c.norm_first = !marian;
  if (marian && json_bool_or(j, "normalize_before", false, file))
    throw std::runtime_error(file + ": normalize_before true (pre-LN Marian) is not supported");
  if (marian && json_bool_or(j, "normalize_embedding", false, file))
    throw std::runtime_error(file + ": normalize_embedding true is not supported");
  if (!marian && json_bool_or(j, "layernorm_embedding", false, file))
    throw std::runtime_error(file + ": layernorm_embedding true is not supported");
  for (auto [k, v] : {std::pair{"d_model", c.num_hiddens}, {"encoder_layers", c.num_layers},
                      {"decoder_layers", c.decoder_layers}, {"encoder_attention_heads", c.num_heads},
                      {"encoder_ffn_dim", c.ffn_num_hiddens}, {"vocab_size", c.src_vocab_size},
                      {"decoder_vocab_size", c.tgt_vocab_size}, {"max_position_embeddings", c.max_len}})
    if (v <= 0) throw std::runtime_error(file + ": key '" + k + "' must be positive, found " + std::to_string(v));
  check_at_most(file, "d_model", c.num_hiddens, 1 << 14);
  check_at_most(file, "encoder_layers", c.num_layers, 1 << 10);
  check_at_most(file, "decoder_layers", c.decoder_layers, 1 << 10);
  check_at_most(file, "encoder_ffn_dim", c.ffn_num_hiddens, 1 << 16);
  check_at_most(file, "vocab_size", c.src_vocab_size, 1 << 22);
  check_at_most(file, "decoder_vocab_size", c.tgt_vocab_size, 1 << 22);
  check_at_most(file, "max_position_embeddings", c.max_len, 1 << 16);
  if (c.num_hiddens % c.num_heads != 0 || c.num_hiddens % 2 != 0)
    throw std::runtime_error(file + ": d_model " + std::to_string(c.num_hiddens) +
                             " must be even and divisible by encoder_attention_heads " + std::to_string(c.num_heads));
  if (c.pad_token_id < 0 || c.pad_token_id >= c.tgt_vocab_size)
    throw std::runtime_error(file + ": pad_token_id " + std::to_string(c.pad_token_id) + " is outside the vocabulary");
  ops::parse_activation(c.activation);
  {
    const double H = (double)c.num_hiddens, F = (double)c.ffn_num_hiddens;
    check_fits_in_memory(file, H * (double)(c.src_vocab_size + 2 * c.tgt_vocab_size + c.max_len) +
                                   (double)(c.num_layers + c.decoder_layers) * H * (12 * H + 4 * F));
  }
  return c;
}

namespace {

// A Linear with bias. Over a file, a weight stored prequantised by `tfm convert --dtype int8` is dequantised
// (w = q * scale of its row, what Seq2SeqModel::load writes into its store; packing in int8 quantises it back).
nn::Linear hf_linear(const nn::Vars& vb, int64_t in, int64_t out) {
  const float* scale = nullptr;
  const int8_t* q = vb.get_int8("weight", {out, in}, &scale);
  if (!q) return nn::Linear::load(vb, in, out, true);
  Tensor w = Tensor::empty({out, in});
  float* dst = w.f32();
  for (int64_t r = 0; r < out; ++r)
    for (int64_t k = 0; k < in; ++k) dst[r * in + k] = (float)q[r * in + k] * scale[r];
  vb.release_bytes(q, (size_t)(out * in));
  nn::Linear l;
  l.weight = nn::Param(std::move(w));
  l.bias = vb.get("bias", {out});
  l.in_features = in;
  l.out_features = out;
  return l;
}

// BartAttention / MarianAttention / M2M100Attention: q_proj, k_proj, v_proj, out_proj with biases; HF scales q by
// head_dim^-0.5 after the projection, the same product as softmax(q k^T / sqrt(head_dim)).
nn::MultiHeadAttention hf_attention(const nn::Vars& vb, const Seq2SeqConfig& c) {
  nn::MultiHeadAttention a;
  for (auto [l, name] : {std::pair{&a.query, "q_proj"}, {&a.key, "k_proj"}, {&a.value, "v_proj"},
                         {&a.output, "out_proj"}})
    *l = hf_linear(vb.prefix(name), c.num_hiddens, c.num_hiddens);
  a.num_heads = c.num_heads;
  a.hidden_size = c.num_hiddens;
  return a;
}
nn::FeedForward hf_ffn(const nn::Vars& vb, const Seq2SeqConfig& c) {
  nn::FeedForward f;
  f.linear1 = hf_linear(vb.prefix("fc1"), c.num_hiddens, c.ffn_num_hiddens);
  f.linear2 = hf_linear(vb.prefix("fc2"), c.ffn_num_hiddens, c.num_hiddens);
  f.act = ops::parse_activation(c.activation);
  return f;
}
nn::LayerNorm hf_norm(const nn::Vars& vb, const Seq2SeqConfig& c) { return nn::LayerNorm::load(vb, c.num_hiddens, 1e-5f); }

// MarianSinusoidalPositionalEmbedding._init_weight, in double then rounded to float as numpy does there.
std::vector<float> marian_positions(int64_t n, int64_t d) {
  std::vector<float> P(n * d);
  const int64_t half = d / 2;
  for (int64_t pos = 0; pos < n; ++pos)
    for (int64_t j = 0; j < half; ++j) {
      const double x = (double)pos / std::pow(10000.0, (double)(2 * j) / (double)d);
      P[pos * d + j] = (float)std::sin(x);
      P[pos * d + half + j] = (float)std::cos(x);
    }
  return P;
}

// M2M100SinusoidalPositionalEmbedding.get_embedding (float32 as torch computes it), rows offset by
// padding_idx + 1: row t is position id padding_idx + 1 + t.
std::vector<float> m2m100_positions(int64_t n, int64_t d, int64_t padding_idx) {
  std::vector<float> P(n * d);
  const int64_t half = d / 2;
  const float step = (float)(std::log(10000.0) / (double)(half - 1));
  for (int64_t t = 0; t < n; ++t) {
    const float pos = (float)(padding_idx + 1 + t);
    for (int64_t i = 0; i < half; ++i) {
      const float x = pos * std::exp((float)i * -step);
      P[t * d + i] = std::sin(x);
      P[t * d + half + i] = std::cos(x);
    }
  }
  return P;
}

}  // namespace

void build_hf_seq2seq(Seq2SeqModel& model, const nn::Vars& vb) {
  const Seq2SeqConfig& c = model.config_;
  Seq2SeqModules& m = model.m_;
  const int64_t H = c.num_hiddens;
  const bool marian = c.family == "marian";
  const nn::Vars mv = vb.prefix("model"), enc = mv.prefix("encoder"), dec = mv.prefix("decoder");
  const float scale = c.scale_embedding ? std::sqrt((float)H) : 1.0f;
  if (c.shared_embeddings) {
    m.src_embedding = nn::Embedding::load(mv.prefix("shared"), c.src_vocab_size, H, scale);
    m.tgt_embedding = m.src_embedding;
  } else {  // Marian with separate vocabularies
    m.src_embedding = nn::Embedding::load(enc.prefix("embed_tokens"), c.src_vocab_size, H, scale);
    m.tgt_embedding = nn::Embedding::load(dec.prefix("embed_tokens"), c.tgt_vocab_size, H, scale);
  }
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const nn::Vars p = enc.prefix("layers").prefix(i);
    nn::EncoderBlock b;
    b.attention = hf_attention(p.prefix("self_attn"), c);
    b.norm1 = hf_norm(p.prefix("self_attn_layer_norm"), c);
    b.ffn = hf_ffn(p, c);
    b.norm2 = hf_norm(p.prefix("final_layer_norm"), c);
    b.norm_first = c.norm_first;
    m.encoder.push_back(std::move(b));
  }
  if (c.norm_first) m.encoder_norm = hf_norm(enc.prefix("layer_norm"), c);
  const int64_t dl = c.decoder_layers > 0 ? c.decoder_layers : c.num_layers;
  for (int64_t i = 0; i < dl; ++i) {
    const nn::Vars p = dec.prefix("layers").prefix(i);
    nn::DecoderBlock b;
    b.attention1 = hf_attention(p.prefix("self_attn"), c);
    b.norm1 = hf_norm(p.prefix("self_attn_layer_norm"), c);
    b.attention2 = hf_attention(p.prefix("encoder_attn"), c);
    b.norm2 = hf_norm(p.prefix("encoder_attn_layer_norm"), c);
    b.ffn = hf_ffn(p, c);
    b.norm3 = hf_norm(p.prefix("final_layer_norm"), c);
    b.norm_first = c.norm_first;
    m.decoder.push_back(std::move(b));
  }
  if (c.norm_first) m.decoder_norm = hf_norm(dec.prefix("layer_norm"), c);
  // lm_head tied to the (decoder) input embeddings; Marian adds final_logits_bias [1, V].
  m.dense.weight = m.tgt_embedding.weight;
  if (marian) m.dense.bias = vb.get("final_logits_bias", {1, c.tgt_vocab_size});
  m.dense.in_features = H;
  m.dense.out_features = c.tgt_vocab_size;
  m.P = marian ? marian_positions(c.max_len, H) : m2m100_positions(c.max_len, H, c.pad_token_id);
}

std::vector<std::string> hf_seq2seq_aliases(const std::string& name) {
  if (name == "model.shared.weight")
    return {"model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight", "lm_head.weight"};
  if (name == "model.decoder.embed_tokens.weight") return {"lm_head.weight"};
  return {};
}

void hf_seq2seq_load_extras(Seq2SeqModel& model, const SafeTensors& st, const std::string& path,
                            std::set<std::string>& seen) {
  const Seq2SeqConfig& c = model.config_;
  const int64_t H = c.num_hiddens;
  // Tied copies: the same matrix under its other names (transformers may save them).
  const std::string emb = c.shared_embeddings ? "model.shared.weight" : "model.decoder.embed_tokens.weight";
  for (const std::string& n : {std::string("model.shared.weight"), std::string("model.encoder.embed_tokens.weight"),
                               std::string("model.decoder.embed_tokens.weight"), std::string("lm_head.weight")}) {
    if (!st.has(n) || seen.count(n)) continue;
    if (!c.shared_embeddings && n == "model.encoder.embed_tokens.weight") continue;
    const auto& tied = model.m_.tgt_embedding.weight;
    if (st.shape_of(n) != Shape{c.tgt_vocab_size, H})
      throw std::runtime_error(path + ": tensor '" + n + "' has shape " + shape_str(st.shape_of(n)) + ", expected [" +
                               std::to_string(c.tgt_vocab_size) + ", " + std::to_string(H) + "] (tied to " + emb + ")");
    Tensor t = st.get(n);
    const float* a = t.f32();
    const float* b = tied.data();
    for (int64_t i = 0; i < c.tgt_vocab_size * H; ++i)
      if (a[i] != b[i])
        throw std::runtime_error(path + ": tensor '" + n + "' differs from " + emb +
                                 " (untied output projections are not supported)");
    st.release_pages(a, sizeof(float) * c.tgt_vocab_size * H);  // a copy read only for this check
    seen.insert(n);
  }
  // Marian saves its sinusoidal tables (the same for encoder and decoder); use the stored one.
  for (const char* n : {"model.encoder.embed_positions.weight", "model.decoder.embed_positions.weight"}) {
    if (!st.has(n)) continue;
    if (c.family != "marian" || st.shape_of(n) != Shape{c.max_len, H})
      throw std::runtime_error(path + ": tensor '" + std::string(n) + "' has shape " + shape_str(st.shape_of(n)) +
                               ", expected [" + std::to_string(c.max_len) + ", " + std::to_string(H) +
                               "] (max_position_embeddings, d_model)");
    Tensor t = st.get(n);
    std::copy_n(t.f32(), c.max_len * H, model.m_.P.data());
    seen.insert(n);
  }
}

// ---------------------------------------------------------------- the families' entries (models/registry.h)

const ModelFamily& marian_family() {
  static const ModelFamily f{
      .name = "marian",
      .model_types = {{"marian", "Marian"}},
      .architectures = {"MarianMTModel"},
      .translation = true,
      .seq2seq_config = hf_seq2seq_config,
      .hugging_face = true,
      // The defaults are MarianConfig's.
      .config_keys = {
          {"d_model", "", ConfigKeyRole::Size},
          {"encoder_layers", "", ConfigKeyRole::Size},
          {"decoder_layers", "(encoder_layers)", ConfigKeyRole::Size},
          {"encoder_attention_heads", "", ConfigKeyRole::Value},
          {"decoder_attention_heads", "(encoder_attention_heads)", ConfigKeyRole::Checked},  // must equal it
          {"encoder_ffn_dim", "", ConfigKeyRole::Size},
          {"decoder_ffn_dim", "(encoder_ffn_dim)", ConfigKeyRole::Checked},  // must equal it
          {"vocab_size", "", ConfigKeyRole::Size},
          {"max_position_embeddings", "", ConfigKeyRole::Size},  // rows of the sinusoidal table: the longest input
          {"decoder_vocab_size", "(vocab_size)", ConfigKeyRole::Size},
          {"share_encoder_decoder_embeddings", "true", ConfigKeyRole::Size},
          {"activation_function", "\"gelu\"", ConfigKeyRole::Value},
          {"scale_embedding", "false", ConfigKeyRole::Value},
          {"pad_token_id", "", ConfigKeyRole::Ignored},  // the padding of batches, masked: no effect on the numbers
          {"normalize_before", "false", ConfigKeyRole::Checked},
          {"normalize_embedding", "false", ConfigKeyRole::Checked},
      },
  };
  return f;
}

// M2M100 and NLLB (NLLB's checkpoints are M2M100ForConditionalGeneration under model_type m2m_100).
const ModelFamily& m2m_100_family() {
  static const ModelFamily f{
      .name = "m2m_100",
      .model_types = {{"m2m_100", "M2M100"}},
      .translation = true,
      .seq2seq_config = hf_seq2seq_config,
      .hugging_face = true,
      // The defaults are M2M100Config's (pad_token_id's 1 is required here).
      .config_keys = {
          {"d_model", "", ConfigKeyRole::Size},
          {"encoder_layers", "", ConfigKeyRole::Size},
          {"decoder_layers", "(encoder_layers)", ConfigKeyRole::Size},
          {"encoder_attention_heads", "", ConfigKeyRole::Value},
          {"decoder_attention_heads", "(encoder_attention_heads)", ConfigKeyRole::Checked},  // must equal it
          {"encoder_ffn_dim", "", ConfigKeyRole::Size},
          {"decoder_ffn_dim", "(encoder_ffn_dim)", ConfigKeyRole::Checked},  // must equal it
          {"vocab_size", "", ConfigKeyRole::Size},
          {"max_position_embeddings", "", ConfigKeyRole::Size},  // rows of the sinusoidal table: the longest input
          {"activation_function", "\"relu\"", ConfigKeyRole::Value},
          {"scale_embedding", "true", ConfigKeyRole::Value},
          {"pad_token_id", "", ConfigKeyRole::Value},  // positions count from pad_token_id + 1
          {"layernorm_embedding", "false", ConfigKeyRole::Checked},
      },
  };
  return f;
}

}  // namespace tfm
