// tfm convert: rewrites an encoder model folder with its Linear weights stored in bf16 or int8, as CTranslate2's
// converters do, so the file is 2x (bf16) or about 4x (int8) smaller and int8 loads without quantising
// (tfm::convert, src/api/convert.cpp).
#include <filesystem>
#include <iostream>

#include "cli_util.h"
#include "commands.h"
#include "tfm/convert.h"

namespace tfm::cli {

void add_convert_command(CLI::App& app) {
  struct Opts {
    std::string model, out, dtype;
    int threads = 0;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "convert", "Write a copy of an encoder model folder, or of a Marian / M2M100 / NLLB translation folder, whose "
                 "model.safetensors stores the Linear weights in bf16 or int8 (s8 + one F32 scale per output row, "
                 "'<name>_scale'); embeddings, LayerNorm and biases stay F32. Other files of the folder (tokenizer, "
                 "vocabulary) are copied");
  cmd->add_option("--model", o->model,
                  "Model folder: config.json and model.safetensors (an encoder, or a Marian / M2M100 / NLLB "
                  "translation model; a folder tfm convert wrote converts from the dtype it stores)")
      ->required();
  cmd->add_option("--dtype", o->dtype,
                  "bf16 or int8 (int8: every family but transformer_encoder; Marian / M2M100 / NLLB folders too)")
      ->required()
      ->check(CLI::IsMember({"bf16", "int8"}));
  cmd->add_option("--out", o->out, "Output folder (created; must not exist or be empty)")->required();
  add_threads_option(cmd, o->threads);
  cmd->callback([o] {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (fs::exists(o->out, ec) && (!fs::is_directory(o->out, ec) || !fs::is_empty(o->out, ec)))
      throw std::runtime_error("--out '" + o->out + "' exists and is not an empty folder; nothing written");
    // The folder (missing, an unsupported model_type, a tfm train translation folder, int8 of the tutorial
    // encoder) is checked by convert() before anything is written.
    ConvertOptions co;
    co.dtype = o->dtype;
    const ConvertSummary s = convert(o->model, o->out, co);
    std::cout << "converted " << s.converted << " Linear weights to " << o->dtype;
    if (s.unchanged > 0) std::cout << " (" << s.unchanged << " already " << o->dtype << ", copied)";
    std::cout << ": " << s.weights_path << " (" << s.bytes << " bytes, from " << s.source_bytes << ")\n";
  });
}

}  // namespace tfm::cli
