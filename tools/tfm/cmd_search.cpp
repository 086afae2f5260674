// tfm search: exact top-k semantic search of query texts (embedded with --model) or query vectors (--queries) over
// an embeddings file written by `tfm embed` (any --precision), as sentence-transformers' semantic_search (float32,
// cosine) and semantic_search_faiss / usearch with exact indexes and rescoring (binary corpora by Hamming
// distance). The search itself is tfm::semantic_search (tfm/pipeline.h).
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "commands.h"
#include "head_util.h"
#include "io/npy.h"
#include "tfm/encoder.h"
#include "tfm/pipeline.h"

namespace tfm::cli {

namespace {

// A .npy of `tfm embed` as QuantizedEmbeddings: float32 as is; int8 / uint8 rows of `dim` values, or of
// ceil(dim / 8) bytes for binary / ubinary (the stored dtype and the row length tell which; `precision` "" = so).
QuantizedEmbeddings read_embeddings(const std::string& path, int64_t dim, const std::string& precision,
                                    const char* what) {
  NpyData a = read_npy(path);
  if (a.shape.size() != 2)
    throw std::invalid_argument(path + ": " + what + " must be a 2-d array [rows, values], got " + shape_str(a.shape));
  QuantizedEmbeddings q;
  q.rows = a.shape[0];
  q.dim = a.shape[1];
  const int64_t packed = (dim + 7) / 8;
  if (!precision.empty()) {
    q.precision = parse_precision(precision);
  } else if (a.descr == "<f4") {
    q.precision = EmbeddingPrecision::Float32;
  } else if (a.descr == "|i1" || a.descr == "|u1") {
    const bool s = a.descr == "|i1";
    if (q.dim == dim) q.precision = s ? EmbeddingPrecision::Int8 : EmbeddingPrecision::Uint8;
    else if (q.dim == packed) q.precision = s ? EmbeddingPrecision::Binary : EmbeddingPrecision::Ubinary;
    else
      throw std::invalid_argument(path + ": " + what + " rows have " + std::to_string(q.dim) + " values; the queries' " +
                                  std::to_string(dim) + " values need " + std::to_string(dim) + " (int8 / uint8) or " +
                                  std::to_string(packed) + " (binary / ubinary, packed bits)");
  } else {
    throw std::invalid_argument(path + ": " + what + " must be float32, int8 or uint8 (tfm embed --precision), got " +
                                a.descr);
  }
  QuantizedEmbeddings kind;
  kind.precision = q.precision;
  if (a.descr != kind.npy_descr())
    throw std::invalid_argument(path + ": a " + precision_name(q.precision) + " " + what + " is stored as " +
                                kind.npy_descr() + ", got " + a.descr);
  q.values.assign(a.bytes.begin(), a.bytes.end());
  return q;
}

}  // namespace

void add_search_command(CLI::App& app) {
  struct Opts {
    std::string model, corpus, queries, texts, rescore_embeddings, corpus_precision, pooling, prompt_name, prompt,
        dtype;
    std::vector<std::string> query;
    bool no_prompt = false, no_rescore = false;
    int64_t top_k = 10, rescore_multiplier = 2;
    int threads = 0;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "search", "Exact top-k semantic search over an embeddings .npy of tfm embed: query texts embedded with --model "
                "(as tfm embed embeds lines) or query vectors (--queries). One JSON line per query, best first: "
                "[{\"corpus_id\", \"score\"}, ...] (corpus_id: the 0-based row). float32 corpus: cosine similarity "
                "(sentence-transformers' semantic_search); int8 / uint8 corpus: the float query's dot product with "
                "the integer rows; binary / ubinary corpus: the query's sign bits against the rows by Hamming "
                "distance, the top_k x --rescore-multiplier closest rescored by the float query's dot product with "
                "the rows' bits (0 / 1) or with --rescore-embeddings (semantic_search_faiss's rescoring)");
  cmd->add_option("query", o->query, "Query texts (with --model)");
  cmd->add_option("--corpus", o->corpus, "Embeddings .npy written by tfm embed (float32, or any --precision)")
      ->required();
  cmd->add_option("--model", o->model, "The folder the corpus was embedded with, to embed the query texts");
  cmd->add_option("--queries", o->queries, "Query vectors instead of texts: float32 [Q, dim] .npy");
  cmd->add_option("--texts", o->texts, "The corpus's text file (one line a row, as embedded): hits get \"text\"");
  cmd->add_option("--top-k", o->top_k, "Hits per query (default 10)")->check(whole_range(1, 1 << 24));
  cmd->add_option("--rescore-multiplier", o->rescore_multiplier,
                  "Binary / ubinary corpus: candidates kept by Hamming distance = top_k x this, before rescoring "
                  "(default 2, as sentence-transformers)")
      ->check(whole_range(1, 1 << 16));
  cmd->add_flag("--no-rescore", o->no_rescore,
                "Binary / ubinary corpus: hits by Hamming distance alone ({\"corpus_id\", \"hamming_distance\"})");
  cmd->add_option("--rescore-embeddings", o->rescore_embeddings,
                  "Binary / ubinary corpus: the same corpus as int8 / uint8 .npy (tfm embed --precision int8): "
                  "candidates are rescored by the float query's dot product with these rows instead of the bits");
  cmd->add_option("--corpus-precision", o->corpus_precision,
                  "float32, int8, uint8, binary or ubinary (default: from the .npy dtype and row length)")
      ->check(CLI::IsMember({"float32", "int8", "uint8", "binary", "ubinary"}));
  cmd->add_option("--pooling", o->pooling, "As tfm embed's --pooling (a folder without modules.json)")
      ->check(pooling_mode());
  cmd->add_option("--prompt-name", o->prompt_name, "Prompt of config_sentence_transformers.json for the queries");
  cmd->add_option("--prompt", o->prompt, "Literal prompt prepended to every query");
  cmd->add_flag("--no-prompt", o->no_prompt, "Do not apply the folder's default_prompt_name");
  add_dtype_option(cmd, o->dtype);
  add_threads_option(cmd, o->threads);
  cmd->callback([o] {
    if (o->query.empty() == o->queries.empty())
      throw CLI::ValidationError("give query texts (with --model) or --queries FILE.npy, not both");
    if (!o->query.empty() && o->model.empty()) throw CLI::ValidationError("query texts need --model to embed them");
    if (!o->queries.empty() && !o->model.empty())
      throw CLI::ValidationError("--queries are vectors already; --model embeds query texts");
    if (!o->prompt.empty() && !o->prompt_name.empty())
      throw CLI::ValidationError("give --prompt or --prompt-name, not both");
    std::vector<float> q;
    int64_t Q = 0, D = 0;
    if (!o->queries.empty()) {
      const NpyData a = read_npy(o->queries);
      if (a.descr != "<f4" || a.shape.size() != 2 || a.shape[1] < 1)
        throw std::invalid_argument(o->queries + ": query vectors must be float32 [Q, dim], got " + a.descr + " " +
                                    shape_str(a.shape));
      Q = a.shape[0], D = a.shape[1];
      q.resize((size_t)(Q * D));
      if (!q.empty()) std::memcpy(q.data(), a.bytes.data(), q.size() * sizeof(float));
    } else {
      for (const std::string& t : o->query) require_utf8("query", t);
      const std::vector<std::string> texts = gather_texts(o->query, "", "query");
      EncoderOptions eo;  // as tfm embed embeds lines
      eo.pipeline = "sentence_transformers";
      eo.threads = o->threads;
      eo.dtype = o->dtype;
      eo.pooling = o->pooling;
      eo.prompt_name = o->prompt_name;
      eo.prompt = o->prompt;
      eo.no_prompt = o->no_prompt;
      const Encoder model(o->model, eo);
      const FloatArray e = model.embed(texts);
      Q = e.size(0), D = e.size(1);
      q.assign(e.begin(), e.end());
    }
    const QuantizedEmbeddings corpus = read_embeddings(o->corpus, D, o->corpus_precision, "corpus");
    const bool bits = corpus.precision == EmbeddingPrecision::Binary || corpus.precision == EmbeddingPrecision::Ubinary;
    if (!bits && (o->no_rescore || !o->rescore_embeddings.empty()))
      throw CLI::ValidationError("--no-rescore and --rescore-embeddings are for a binary / ubinary corpus; " +
                                 o->corpus + " is " + precision_name(corpus.precision));
    std::vector<std::string> lines;
    if (!o->texts.empty()) {
      lines = read_lines(o->texts, /*allow_empty=*/true);
      if ((int64_t)lines.size() != corpus.rows)
        throw std::invalid_argument(o->texts + " has " + std::to_string(lines.size()) + " lines, " + o->corpus +
                                    " " + std::to_string(corpus.rows) + " rows");
    }
    SearchOptions so;
    so.top_k = o->top_k;
    so.rescore_multiplier = o->rescore_multiplier;
    so.rescore = !o->no_rescore;
    QuantizedEmbeddings re;
    if (!o->rescore_embeddings.empty()) {
      re = read_embeddings(o->rescore_embeddings, D, "", "rescoring embeddings");
      so.rescore_embeddings = &re;
    }
    const auto hits = semantic_search(q.data(), Q, D, corpus, so);
    for (const auto& per_query : hits) {
      nlohmann::ordered_json arr = nlohmann::ordered_json::array();
      for (const SearchHit& h : per_query) {
        nlohmann::ordered_json j = {{"corpus_id", h.corpus_id}};
        if (bits && o->no_rescore) j["hamming_distance"] = (int64_t)h.score;
        else j["score"] = h.score;
        if (!lines.empty()) j["text"] = lines[(size_t)h.corpus_id];
        arr.push_back(j);
      }
      emit_line(arr.dump());
    }
    finish_stdout();
  });
}

}  // namespace tfm::cli
