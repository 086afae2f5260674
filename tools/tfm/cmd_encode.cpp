// tfm encode: text in, contextual vectors out (.npy), with a BERT or tutorial encoder.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>

#include "cli_util.h"
#include "commands.h"
#include "io/json_util.h"
#include "io/npy.h"
#include "io/safetensors.h"
#include "io/torch_pickle.h"
#include "tfm/encoder.h"
#include "tfm/pipeline.h"
#include "tfm/tfm.h"

namespace tfm::cli {

void add_encode_command(CLI::App& app) {
  struct Opts {
    std::string model, config, init = "file", output, pooled, save;
    std::vector<std::string> texts, pairs;
    bool no_special = false, all_layers = false, all_positions = false;
    uint64_t seed = 0;
    int64_t max_length = 0;
    int threads = 0;
    std::string dtype;  // "": as the folder stores it
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "encode", "Run an encoder on texts: tokenizes them (several --text are padded into one batch with an "
                "attention mask) and writes the last hidden state [B, L, hidden_size] as a float32 .npy (0 at "
                "padded positions unless --all-positions)");
  cmd->add_option("--model", o->model,
                  "Model folder: config.json, model.safetensors and the tokenizer files (tokenizer.json or vocab.txt)")
      ->required();
  // Not ->required(): CLI11 would mark both spellings REQUIRED in the help; the callback asks for one.
  cmd->add_option("--text,text", o->texts, "Text to encode (TEXT or --text TEXT, at least one); repeat for a batch");
  cmd->add_option("--pair", o->pairs,
                  "Second sentence of a pair (token_type_ids 1), one per --text, in the same order")
      ->allow_extra_args(false);  // --pair A B: B is a TEXT, not a second pair
  cmd->add_flag("--no-special-tokens", o->no_special, "Do not add [CLS] / [SEP]");
  cmd->add_option("--output,-o", o->output, "Write the hidden states here (.npy, float32)")
      ->check(file_suffix({".npy"}));
  cmd->add_flag("--all-layers", o->all_layers,
                "Write every layer's output [num_hidden_layers + 1, B, L, H], the embedding output first (every "
                "position computed, as --all-positions)");
  cmd->add_flag("--all-positions", o->all_positions,
                "Compute padded positions too, as Hugging Face does (default: the layers run on the real tokens "
                "only and padded positions hold 0)");
  cmd->add_option("--pooled", o->pooled, "Write BERT's pooler output [B, H] here (.npy)")
      ->check(file_suffix({".npy"}));
  cmd->add_option("--config", o->config, "config.json to use instead of the model folder's");
  cmd->add_option("--init", o->init, "Weights: 'file' (model.safetensors) or 'random' (seeded; Hugging Face families as BertModel(config) initialises them: N(0, initializer_range), LayerNorm 1 / 0, biases 0)")
      ->check(CLI::IsMember({"file", "random"}));
  cmd->add_option("--seed", o->seed, "Seed of --init random")->check(seed_value());
  cmd->add_option("--save", o->save,
                  "With --init random: write the model it builds to this new folder (config.json, model.safetensors, "
                  "the tokenizer files), which --model then loads with the same outputs");
  cmd->add_option("--max-length", o->max_length,
                  "Truncate each text to this many tokens (default: error when longer than the model allows)")
      ->check(whole_range(0, 1 << 20));
  add_threads_option(cmd, o->threads);
  add_dtype_option(cmd, o->dtype);
  cmd->callback([o, cmd] {
    namespace fs = std::filesystem;
    if (o->texts.empty()) throw CLI::ValidationError("give TEXT or --text TEXT (at least one text to encode)");
    if ((cmd->count("--output") && o->output.empty()) || (cmd->count("--pooled") && o->pooled.empty()))
      throw CLI::ValidationError("--output and --pooled need a file name");
    std::error_code ec;
    if (!o->output.empty() && (o->output == o->pooled || fs::weakly_canonical(o->output, ec) ==
                                                             fs::weakly_canonical(o->pooled, ec)))
      throw CLI::ValidationError("--output and --pooled name the same file '" + o->output + "'");
    if (cmd->count("--save") && o->init != "random")
      throw CLI::ValidationError("--save writes the model --init random builds; a checkpoint folder is copied as is");
    if (cmd->count("--save") && o->save.empty()) throw CLI::ValidationError("--save needs a folder name");
    if (!o->save.empty() && fs::exists(o->save, ec) && (!fs::is_directory(o->save, ec) || !fs::is_empty(o->save, ec)))
      throw std::runtime_error("--save: " + o->save + " exists and is not an empty folder; nothing written");
    if (cmd->count("--seed") && o->init != "random")
      throw CLI::ValidationError("--seed seeds --init random only; the weights come from model.safetensors");
    if (!o->pairs.empty() && o->pairs.size() != o->texts.size())
      throw CLI::ValidationError("--pair: give one per --text (" + std::to_string(o->texts.size()) + " --text, " +
                                 std::to_string(o->pairs.size()) + " --pair)");
    std::string config_path = o->config.empty() ? o->model + "/config.json" : o->config;
    // Validated before any weights are read; a translation folder or an unsupported one is refused here.
    const EncoderConfigInfo config = Encoder::read_config(config_path);
    const std::string& model_type = config.model_type;
    const int64_t vocab_size = config.vocab_size, max_positions = config.max_position_embeddings;
    if (!o->pairs.empty() && model_type == "transformer_encoder")
      throw CLI::ValidationError("--pair: model_type 'transformer_encoder' has no segment embeddings, so the pair's "
                                 "token_type_ids would be ignored");
    const Tokenizer tok(o->model);
    check_tokenizer_vocab(o->model, tok.vocab_size(), vocab_size);
    if (o->max_length > max_positions)
      throw CLI::ValidationError("--max-length " + std::to_string(o->max_length) +
                                 " is more than the model's max_position_embeddings (" + std::to_string(max_positions) +
                                 "); use at most " + std::to_string(max_positions));
    // Texts are numbered in messages when there are several (which one is empty or too long).
    auto which = [&](size_t i) {
      return o->texts.size() > 1 ? "--text " + std::to_string(i + 1) + " of " + std::to_string(o->texts.size())
                                 : std::string("--text");
    };
    // Before the weights: an empty text is one error line, not after "initialising ..." and a model load.
    for (size_t i = 0; i < o->texts.size(); ++i)
      if (o->texts[i].empty()) throw std::invalid_argument(which(i) + " is empty; give at least one character");
    EncoderOptions eo;
    eo.dtype = o->dtype;
    eo.threads = o->threads;
    eo.pipeline = "none";  // the encoder's own outputs, whatever modules.json says
    eo.load_tokenizer = false;  // `tok` above tokenizes; its vocabulary was checked against the config
    eo.config_path = config_path;
    if (o->init != "random") {
      // model.safetensors, pytorch_model.bin or the .index.json of shards of either (models/checkpoint_weights.h
      // reads them; the names are checked here to fail before the model loads).
      std::string weights;
      std::error_code wec;
      for (const char* f : {"model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                            "pytorch_model.bin.index.json"})
        if (weights.empty() && fs::is_regular_file(o->model + "/" + f, wec)) weights = o->model + "/" + f;
      if (weights.empty())
        throw std::runtime_error(o->model + "/model.safetensors: no such file (nor pytorch_model.bin: the folder has "
                                 "no weights; --init random runs the model with seeded random weights)");
      // Before the forward pass: --pooled needs the checkpoint's pooler.
      if (!o->pooled.empty()) {
        auto has = [&](const std::string& name) {
          if (weights.ends_with(".index.json")) {
            const nlohmann::json j = load_json_file(weights);
            return j.contains("weight_map") && j["weight_map"].is_object() && j["weight_map"].contains(name);
          }
          if (weights.ends_with(".bin")) return TorchCheckpoint::open(weights).has(name);
          return SafeTensors::open(weights).has(name);
        };
        if (!has("pooler.dense.weight") && !has("bert.pooler.dense.weight"))
          throw std::invalid_argument("--pooled: this " + model_type +
                                      " model has no pooler (no pooler.dense weights in the checkpoint); nothing "
                                      "written");
      }
    } else if (!o->pooled.empty() && model_type == "transformer_encoder") {
      throw std::invalid_argument("--pooled: this transformer_encoder model has no pooler; nothing written");
    }
    if (o->init == "random") {
      std::fprintf(stderr, "initialising %s weights randomly (seed %llu)\n", model_type.c_str(),
                   (unsigned long long)o->seed);
      eo.random_weights = true;
      eo.seed = o->seed;
    }
    std::optional<Encoder> model;
    model.emplace(o->model, eo);
    const int64_t limit = model->max_position_embeddings();
    std::vector<TextEncoding> enc;
    size_t longest = 0;
    TokenizeOptions to;
    to.add_special_tokens = !o->no_special;
    to.max_length = o->max_length;
    for (size_t i = 0; i < o->texts.size(); ++i) {
      enc.push_back(o->pairs.empty() ? tok.encode(o->texts[i], to) : tok.encode_pair(o->texts[i], o->pairs[i], to));
      // A row of padding only would be returned as if it were text; alone this was always an error.
      if (enc.back().input_ids.empty())
        throw std::invalid_argument(which(i) + " produces no tokens (only spaces or characters the tokenizer drops)");
      const int64_t n = (int64_t)enc.back().input_ids.size();
      if (n > limit)
        throw std::invalid_argument(which(i) + " has " + std::to_string(n) + " tokens, more than " +
                                    "max_position_embeddings (" + std::to_string(limit) + "); pass --max-length " +
                                    std::to_string(limit) + " to truncate");
      longest = std::max(longest, enc.back().input_ids.size());
    }
    // Right-padded with [PAD], as encode_batch does.
    const int64_t B = (int64_t)enc.size(), L = (int64_t)longest;
    std::vector<int64_t> ids(B * L, tok.pad_id()), types(B * L, 0), mask(B * L, 0);
    for (int64_t b = 0; b < B; ++b) {
      const TextEncoding& e = enc[b];
      std::copy(e.input_ids.begin(), e.input_ids.end(), ids.begin() + b * L);
      std::copy(e.token_type_ids.begin(), e.token_type_ids.end(), types.begin() + b * L);
      std::fill(mask.begin() + b * L, mask.begin() + b * L + (int64_t)e.input_ids.size(), int64_t{1});
    }
    ForwardOptions fo;
    fo.output_hidden_states = o->all_layers;
    fo.all_positions = o->all_positions;
    const EncoderOutputs out = model->forward_all(EncoderInputs{ids.data(), mask.data(), types.data(), B, L}, fo);
    const std::string pad_token = tok.id_to_token(tok.pad_id());
    for (int64_t b = 0; b < B; ++b) {
      std::string toks;
      for (int64_t i = 0; i < L; ++i)
        toks += (i ? " " : "") + (i < (int64_t)enc[b].tokens.size() ? enc[b].tokens[i] : pad_token);
      std::cout << "tokens: " << toks << "\n";
      std::cout << "input_ids: " << format_ids(std::vector<int64_t>(ids.begin() + b * L, ids.begin() + (b + 1) * L))
                << "\n";
      if (!o->pairs.empty())
        std::cout << "token_type_ids: "
                  << format_ids(std::vector<int64_t>(types.begin() + b * L, types.begin() + (b + 1) * L)) << "\n";
    }
    const FloatArray& result = o->all_layers ? out.hidden_states : out.last_hidden_state;
    std::cout << (o->all_layers ? "hidden_states" : "last_hidden_state") << " shape: " << shape_str(result.shape())
              << " (computed in " << model->dtype()
              << (native_dtype(model->dtype()) ? std::string()
                                               : "; this CPU has no native " + model->dtype() +
                                                     " products, so its " + model->dtype() +
                                                     " weights are multiplied in fp32")
              << ")\n";
    // Every check before the first write, so an error leaves no half of the requested outputs behind.
    if (!o->pooled.empty() && !out.pooler_output.data())
      throw std::invalid_argument("--pooled: this " + model_type +
                                  " model has no pooler (no pooler.dense weights in the checkpoint); nothing written");
    for (const FloatArray* t : {&result, &out.pooler_output})
      for (float x : *t)
        if (!std::isfinite(x))
          throw std::runtime_error("the encoder produced a non-finite value (NaN/Inf in the inputs?); nothing written");
    // .npy files from the arrays (views of the model's output, not copied).
    auto as_tensor = [](const FloatArray& a) {
      return Tensor::view_of(const_cast<float*>(a.data()), Shape(a.shape().begin(), a.shape().end()), DType::F32,
                             nullptr);
    };
    if (!o->output.empty()) {
      save_npy(o->output, as_tensor(result));
      std::cout << "wrote " << o->output << "\n";
    }
    if (!o->pooled.empty()) {
      save_npy(o->pooled, as_tensor(out.pooler_output));
      std::cout << "wrote " << o->pooled << "\n";
    }
    if (!o->save.empty()) {
      model->save(o->save);
      std::cout << "saved the model to " << o->save << "\n";
    }
  });
}

}  // namespace tfm::cli
