// Seq2SeqConfig: the config.json of a transformer_seq2seq folder.
#include <stdexcept>

#include "io/json_util.h"
#include "models/seq2seq.h"
#include "models/registry.h"

namespace tfm {

Seq2SeqConfig Seq2SeqConfig::from_json(const nlohmann::json& j, const std::string& file) {
  Seq2SeqConfig c;
  const std::string type = read_model_type(j, file, "transformer_seq2seq");
  if (type != "transformer_seq2seq")
    throw std::runtime_error(file + ": model_type '" + type + "' is not 'transformer_seq2seq'");
  c.num_hiddens = json_int(j, "num_hiddens", file);
  c.num_layers = json_int(j, "num_layers", file);
  c.num_heads = json_int(j, "num_heads", file);
  c.ffn_num_hiddens = json_int(j, "ffn_num_hiddens", file);
  c.dropout = json_number_or(j, "dropout", 0.0, file);
  c.num_steps = json_int(j, "num_steps", file);
  c.src_vocab_size = json_int(j, "src_vocab_size", file);
  c.tgt_vocab_size = json_int(j, "tgt_vocab_size", file);
  c.max_len = json_int_or(j, "max_len", 1000, file);
  c.decode_positions = json_string_or(j, "decode_positions", "d2l_step", file);
  c.norm_first = json_bool_or(j, "norm_first", false, file);
  c.shared_embeddings = json_bool_or(j, "shared_embeddings", false, file);
  c.attention_bias = json_bool_or(j, "attention_bias", false, file);
  c.activation = json_string_or(j, "activation", "relu", file);
  if (c.activation != "relu" && c.activation != "gelu")
    throw std::runtime_error(file + ": key 'activation' must be 'relu' or 'gelu', found '" + c.activation + "'");
  if (c.decode_positions != "absolute" && c.decode_positions != "d2l_step")
    throw std::runtime_error(file + ": key 'decode_positions' must be 'absolute' or 'd2l_step', found '" +
                             c.decode_positions + "'");
  auto positive = [&](const char* k, int64_t v) {
    if (v <= 0) throw std::runtime_error(file + ": key '" + k + "' must be positive, found " + std::to_string(v));
  };
  positive("num_hiddens", c.num_hiddens);
  positive("num_layers", c.num_layers);
  positive("num_heads", c.num_heads);
  positive("ffn_num_hiddens", c.ffn_num_hiddens);
  positive("num_steps", c.num_steps);
  positive("src_vocab_size", c.src_vocab_size);
  positive("tgt_vocab_size", c.tgt_vocab_size);
  positive("max_len", c.max_len);
  check_at_most(file, "num_hiddens", c.num_hiddens, 1 << 14);
  check_at_most(file, "num_layers", c.num_layers, 1 << 10);
  check_at_most(file, "ffn_num_hiddens", c.ffn_num_hiddens, 1 << 16);
  check_at_most(file, "num_steps", c.num_steps, 1 << 16);
  check_at_most(file, "src_vocab_size", c.src_vocab_size, 1 << 22);
  check_at_most(file, "tgt_vocab_size", c.tgt_vocab_size, 1 << 22);
  check_at_most(file, "max_len", c.max_len, 1 << 16);
  {
    const double H = (double)c.num_hiddens, F = (double)c.ffn_num_hiddens;
    check_fits_in_memory(file, H * (double)(c.src_vocab_size + 2 * c.tgt_vocab_size + c.max_len) +
                                   (double)c.num_layers * H * (12 * H + 4 * F));
  }
  // Sources are padded to num_steps (d2l) and decoding runs up to num_steps positions.
  if (c.max_len < c.num_steps)
    throw std::runtime_error(file + ": max_len (" + std::to_string(c.max_len) + ") must be at least num_steps (" +
                             std::to_string(c.num_steps) + ")");
  if (c.num_hiddens % c.num_heads != 0)
    throw std::runtime_error(file + ": num_hiddens (" + std::to_string(c.num_hiddens) +
                             ") is not divisible by num_heads (" + std::to_string(c.num_heads) + ")");
  if (c.num_hiddens % 2 != 0)
    throw std::runtime_error(file + ": num_hiddens must be even for the sinusoidal positional encoding");
  if (c.shared_embeddings && c.src_vocab_size != c.tgt_vocab_size)
    throw std::runtime_error(file + ": shared_embeddings needs one joint vocabulary, but src_vocab_size " +
                             std::to_string(c.src_vocab_size) + " != tgt_vocab_size " + std::to_string(c.tgt_vocab_size));
  if (!(c.dropout >= 0.0 && c.dropout < 1.0))
    throw std::runtime_error(file + ": key 'dropout' must be in [0, 1), found " + std::to_string(c.dropout));
  return c;
}

Seq2SeqConfig Seq2SeqConfig::load(const std::string& path) { return from_json(load_json_file(path), path); }

nlohmann::json Seq2SeqConfig::to_json() const {
  return {{"model_type", "transformer_seq2seq"}, {"num_hiddens", num_hiddens},   {"num_layers", num_layers},
          {"num_heads", num_heads},               {"ffn_num_hiddens", ffn_num_hiddens}, {"dropout", dropout},
          {"num_steps", num_steps},               {"src_vocab_size", src_vocab_size},
          {"tgt_vocab_size", tgt_vocab_size},     {"max_len", max_len},
          {"decode_positions", decode_positions}, {"norm_first", norm_first},
          {"shared_embeddings", shared_embeddings}, {"attention_bias", attention_bias}, {"activation", activation}};
}

// The d2l tutorial's encoder-decoder (tfm train's recipe writes it; its own vocabularies or spm.model).
const ModelFamily& d2l_seq2seq_family() {
  static const ModelFamily f{
      .name = "d2l_seq2seq",
      .model_types = {{"transformer_seq2seq", ""}},
      .translation = true,
      .seq2seq_config = Seq2SeqConfig::from_json,
      .config_keys = {
          {"num_hiddens", "", ConfigKeyRole::Size},
          {"num_layers", "", ConfigKeyRole::Size},
          {"num_heads", "", ConfigKeyRole::Value},
          {"ffn_num_hiddens", "", ConfigKeyRole::Size},
          {"num_steps", "", ConfigKeyRole::Size},  // the padded source length and the decoding limit
          {"src_vocab_size", "", ConfigKeyRole::Size},
          {"tgt_vocab_size", "", ConfigKeyRole::Size},
          {"max_len", "1000", ConfigKeyRole::Size},  // rows of the sinusoidal table
          {"decode_positions", "\"d2l_step\"", ConfigKeyRole::Value},
          {"norm_first", "false", ConfigKeyRole::Size},          // true: pre-LN, with encoder.ln / decoder.ln
          {"shared_embeddings", "false", ConfigKeyRole::Size},   // one joint embedding matrix
          {"attention_bias", "false", ConfigKeyRole::Size},      // W_q, W_k, W_v, W_o biases
          {"activation", "\"relu\"", ConfigKeyRole::Value},
          {"dropout", "0.0", ConfigKeyRole::Training},
      },
  };
  return f;
}

}  // namespace tfm
