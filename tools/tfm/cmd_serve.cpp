// tfm serve: HTTP server for an embedding or translation model folder (see src/serve/server.h).
#include <memory>

#include "cli_util.h"
#include "commands.h"
#include "serve/server.h"

namespace tfm::cli {

void add_serve_command(CLI::App& app) {
  struct Opts {
    serve::ServeOptions s;
    std::vector<std::string> models;
    int threads = 0;
    bool quiet = false;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "serve", "Serve a model over HTTP: encoders answer text-embeddings-inference's /embed, /embed_all, /tokenize "
               "and OpenAI's /v1/embeddings (a sentence-transformers folder with its own pipeline), classifier and "
               "cross-encoder checkpoints also /predict and /rerank; translation models LibreTranslate's /translate and /languages; all "
               "answer / (web page), /info, /health, /metrics. Stops on SIGTERM after finishing requests in flight");
  cmd->add_option("--model", o->models,
                  "Model folder (an encoder or a transformer_seq2seq folder); translation folders may be given "
                  "several times (one per language pair: /translate routes by source and target)")
      ->required();
  cmd->add_option("--host", o->s.host, "Address to listen on (loopback unless told otherwise)")->capture_default_str();
  cmd->add_option("--port", o->s.port, "Port (0 = any free port, printed at start)")
      ->capture_default_str()->check(whole_range(0, 65535));
  cmd->add_option("--max-batch-tokens", o->s.max_batch_tokens,
                  "Padded tokens per model batch (inputs x longest input); requests are gathered up to this")
      ->capture_default_str()->check(whole_range(1, 1 << 24));
  cmd->add_option("--max-concurrent-requests", o->s.max_concurrent_requests,
                  "Model requests in flight; more are answered 429")
      ->capture_default_str()->check(whole_range(1, 1000));
  cmd->add_option("--max-client-batch-size", o->s.max_client_batch_size,
                  "Inputs per request; more are answered 413")
      ->capture_default_str()->check(whole_range(1, 100000));
  cmd->add_option("--payload-limit", o->s.payload_limit, "Request body bytes; more are answered 413")
      ->capture_default_str()->check(whole_range(64, 1 << 30));
  cmd->add_flag("--auto-truncate", o->s.auto_truncate,
                "Cut inputs longer than the model allows (default: answer 422 naming the limit)");
  cmd->add_option("--api-key", o->s.api_key,
                  "Require 'Authorization: Bearer KEY' on every route but / (the page asks for it) and /health");
  cmd->add_option("--pooling", o->s.pooling,
                  "Encoders: cls, mean, max, mean_sqrt_len, weightedmean, lasttoken, or several joined by '+' "
                  "(as tfm embed; default: mean; a sentence-transformers folder's own Pooling module)")
      ->check(pooling_mode());
  cmd->add_option("--prompt-name", o->s.prompt_name,
                  "sentence-transformers folders: prompt from config_sentence_transformers.json (default: its "
                  "default_prompt_name)");
  cmd->add_flag("--no-prompt", o->s.no_prompt, "sentence-transformers folders: ignore default_prompt_name");
  cmd->add_option("--max-beam-size", o->s.max_beam_size, "Translation: largest beam_size a request may ask for")
      ->capture_default_str()->check(whole_range(1, 64));
  cmd->add_option("--source-lang", o->s.source_lang,
                  "Translation: source language code (default: config.json source_lang, else en)");
  cmd->add_option("--target-lang", o->s.target_lang,
                  "Translation: target language code (default: config.json target_lang, else fr)");
  cmd->add_option("--langid", o->s.langid,
                  "Translation: a language identifier written by 'tfm langid train', for LibreTranslate's /detect "
                  "and source \"auto\" (detection among the served source languages; without it, only where one "
                  "source language can be meant)");
  cmd->add_option("--cors-allow-origin", o->s.cors_allow_origin,
                  "Let browser pages from this origin call the API ('*' = any; default: none): "
                  "Access-Control-Allow-Origin on every answer, CORS preflight (OPTIONS) answered");
  cmd->add_flag("--quiet", o->quiet, "No access log (one line per request on stderr)");
  add_threads_option(cmd, o->threads);
  add_dtype_option(cmd, o->s.dtype);
  cmd->callback([o] {
    if (o->s.host.empty()) throw CLI::ValidationError("--host is empty");
    if (o->s.cors_allow_origin.find_first_of("\r\n ,") != std::string::npos)
      throw CLI::ValidationError("--cors-allow-origin takes one origin (scheme://host[:port]) or '*'");
    if (o->s.api_key.find_first_of("\r\n ") != std::string::npos)
      throw CLI::ValidationError("--api-key must not contain spaces or line breaks");
    o->s.model = o->models.front();
    o->s.extra_models.assign(o->models.begin() + 1, o->models.end());
    o->s.access_log = !o->quiet;
    o->s.threads = o->threads;
    serve::run_server(o->s);
  });
}

}  // namespace tfm::cli
