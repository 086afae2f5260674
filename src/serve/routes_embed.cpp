#include <cmath>

#include "serve/server_core.h"
#include "tfm/pipeline.h"

namespace tfm::serve {

using nlohmann::json;

namespace {

// The request's finished vectors (each of `dim` values) at its `precision`, as quantize_embeddings gives them:
// int8 / uint8 ranges from `ranges` or else from these vectors. 422 for ranges of another width.
QuantizedEmbeddings quantize(const EmbedRequest& r, const std::vector<std::vector<float>>& vectors) {
  const int64_t dim = vectors.empty() ? 0 : (int64_t)vectors[0].size();
  if (!r.ranges.empty() && (int64_t)r.ranges.size() != 2 * dim)
    throw validation_error("`ranges` has " + std::to_string(r.ranges.size() / 2) + " values per row, the embeddings " +
                           std::to_string(dim) + (r.dimensions ? " (after `dimensions`)" : ""));
  std::vector<float> flat;
  flat.reserve(vectors.size() * (size_t)dim);
  for (const auto& v : vectors) flat.insert(flat.end(), v.begin(), v.end());
  return quantize_embeddings(flat.data(), (int64_t)vectors.size(), dim, r.precision, r.ranges);
}

// Row `i` of a quantised batch: a JSON list of its integers, or (base64) its bytes.
json quantized_row(const QuantizedEmbeddings& q, int64_t i, bool base64) {
  if (base64) return base64_bytes(std::string(q.values.begin() + i * q.dim, q.values.begin() + (i + 1) * q.dim));
  json row = json::array();
  for (int64_t k = 0; k < q.dim; ++k) row.push_back((int64_t)q.at(i, k));
  return row;
}

}  // namespace

// Cuts `t` to `limit` tokens from the left, as tokenizers' TruncationDirection::Left: the leading and trailing
// special tokens stay, the text's first tokens go.
void Server::truncate_left(TokenizedInput& t, int64_t limit) {
  const int64_t n = (int64_t)t.ids.size();
  if (n <= limit) return;
  int64_t lead = 0, trail = 0;
  while (lead < n && lead < (int64_t)t.special.size() && t.special[lead]) ++lead;
  while (trail < n - lead && t.special[n - 1 - trail]) ++trail;
  if (lead + trail >= limit) lead = trail = 0;  // no room for text: plain cut
  const int64_t keep = limit - lead - trail, from = n - trail - keep;
  auto cut = [&](auto& v) {
    if ((int64_t)v.size() != n) return;
    auto w = v;
    w.erase(w.begin() + lead, w.begin() + from);
    v = std::move(w);
  };
  cut(t.ids), cut(t.token_type_ids), cut(t.tokens), cut(t.special), cut(t.offsets);
}

// Tokenizes every input for the encoder (token-id inputs used as given), 422 over the limit unless truncating
// (from the right, or the left with truncation_direction Left). `limit`: 0 = the server's max input length.
std::vector<Task> Server::embed_tasks(const EmbedRequest& r, BatchKey::Op op, const char* field, int64_t vocab_size,
                                      int64_t limit,
                                      const std::function<TokenizedInput(const std::string&, int64_t)>& tokenize) {
  if (!limit) limit = max_input_length_;
  const auto t0 = std::chrono::steady_clock::now();
  const bool truncate = r.truncate.value_or(o_.auto_truncate);
  const std::string prompt = r.prompt_name.value_or("");
  const int64_t slot = op == BatchKey::Op::Embed && !prompt.empty() ? prompt_slot(prompt) : 0;
  std::vector<Task> tasks(r.inputs.size());
  for (size_t i = 0; i < r.inputs.size(); ++i) {
    std::string where = std::string("`") + field;
    if (!r.single) (where += '[') += std::to_string(i) + ']';
    where += '`';
    TokenizedInput t;
    if (!r.token_ids[i].empty()) {
      t.ids = r.token_ids[i];
      t.token_type_ids.assign(t.ids.size(), 0);
      for (int64_t id : t.ids)
        if (id >= vocab_size)
          throw validation_error(where + ": token id " + std::to_string(id) + " is not below the vocabulary size " +
                                 std::to_string(vocab_size));
      if (truncate && (int64_t)t.ids.size() > limit) {
        if (r.truncate_left) {
          t.ids.erase(t.ids.begin(), t.ids.end() - limit);
        } else {
          t.ids.resize(limit);
        }
        t.token_type_ids.resize(limit);
      }
    } else {
      t = tokenize ? tokenize(r.inputs[i], truncate && !r.truncate_left ? limit : 0)
                   : embedder_->tokenize(r.inputs[i], true, truncate && !r.truncate_left ? limit : 0, prompt);
      if (truncate && r.truncate_left) truncate_left(t, limit);
    }
    if ((int64_t)t.ids.size() > limit)
      throw validation_error(where + " has " + std::to_string(t.ids.size()) +
                             " tokens, more than the model's limit of " + std::to_string(limit) +
                             " (max_input_length); send \"truncate\": true or start the server with --auto-truncate");
    tasks[i].key = BatchKey{.op = op, .prompt_slot = slot};
    tasks[i].tokens = (int64_t)t.ids.size();
    tasks[i].ids = std::move(t.ids);
    tasks[i].token_type_ids = std::move(t.token_type_ids);
  }
  observe_tokenization(seconds_since(t0));
  return tasks;
}
std::vector<Task> Server::embed_tasks(const EmbedRequest& r, BatchKey::Op op, const char* field) {
  need_embedder();
  if (op == BatchKey::Op::EmbedAll && !embedder_->has_token_embeddings()) embedder_->embed_all({});  // throws its 501
  return embed_tasks(r, op, field, embedder_->vocab_size());
}

// A pooled vector as the request asks: the first `dimensions` values (Matryoshka, as sentence-transformers'
// truncate_dim), then L2-normalised when `normalize`.
std::vector<float> Server::finish(std::vector<float> v, int64_t dimensions, bool normalize) {
  if (dimensions > (int64_t)v.size())
    throw validation_error("`dimensions` " + std::to_string(dimensions) + " is more than the embedding size " +
                           std::to_string(v.size()));
  return truncate_dimensions(std::move(v), dimensions, normalize);
}
void Server::check_dimensions(const EmbedRequest& r) const {
  if (r.dimensions > embedder_->hidden_size())
    throw validation_error("`dimensions` " + std::to_string(r.dimensions) + " is more than the embedding size " +
                           std::to_string(embedder_->hidden_size()));
}

void Server::need_embedder() const {
  if (!embedder_)
    throw ApiError(501, "not_implemented", "this classification checkpoint cannot embed: " + embed_error_);
}

void Server::embed_routes() {
  if (translation_) {
    for (const char* path : {"/embed", "/embed_all", "/v1/embeddings", "/tokenize", "/decode", "/similarity",
                             "/embed_sparse"})
      not_for_this_model(path, "an encoder model");
    return;
  }
  add("POST", "/embed", "text-embeddings-inference /embed: pooled embeddings",
      guard([this](const httplib::Request& req, httplib::Response& res) {
              EmbedRequest r = parse_embed_request(json_body(req), limits_, EmbedRoute::Embed);
              need_embedder();
              check_dimensions(r);
              std::vector<Task> tasks = embed_tasks(r, BatchKey::Op::Embed, "inputs");
              run_queued(tasks, req);
              json out = json::array();
              if (r.precision == EmbeddingPrecision::Float32) {
                for (Task& t : tasks) out.push_back(finish(std::move(t.vector), r.dimensions, r.normalize));
              } else {
                std::vector<std::vector<float>> vectors;
                for (Task& t : tasks) vectors.push_back(finish(std::move(t.vector), r.dimensions, r.normalize));
                const QuantizedEmbeddings q = quantize(r, vectors);
                for (int64_t i = 0; i < q.rows; ++i) out.push_back(quantized_row(q, i, false));
              }
              send_json(res, 200, out);
            }, true));
  add("POST", "/embed_all", "text-embeddings-inference /embed_all: every token's embedding",
      guard([this](const httplib::Request& req, httplib::Response& res) {
              EmbedRequest r = parse_embed_request(json_body(req), limits_, EmbedRoute::EmbedAll);
              std::vector<Task> tasks = embed_tasks(r, BatchKey::Op::EmbedAll, "inputs");
              run_queued(tasks, req);
              json out = json::array();
              for (Task& t : tasks) {
                // Token vectors are the encoder's width, which a sentence-transformers Dense may change.
                const int64_t H = t.tokens ? (int64_t)t.vector.size() / t.tokens : 0;
                json rows = json::array();
                for (int64_t l = 0; l < t.tokens; ++l)
                  rows.push_back(std::vector<float>(t.vector.begin() + l * H, t.vector.begin() + (l + 1) * H));
                out.push_back(rows);
              }
              send_json(res, 200, out);
            }, true));
  add("POST", "/v1/embeddings", "OpenAI embeddings",
      guard([this](const httplib::Request& req, httplib::Response& res) {
              EmbedRequest r = parse_embed_request(json_body(req), limits_, EmbedRoute::OpenAI);
              need_embedder();
              check_dimensions(r);
              std::vector<Task> tasks = embed_tasks(r, BatchKey::Op::Embed, "input");
              run_queued(tasks, req);
              json data = json::array();
              int64_t tokens = 0;
              std::vector<std::vector<float>> vectors;
              for (size_t i = 0; i < tasks.size(); ++i) {
                vectors.push_back(finish(std::move(tasks[i].vector), r.dimensions, true));
                tokens += tasks[i].tokens;
              }
              QuantizedEmbeddings q;
              if (r.precision != EmbeddingPrecision::Float32) q = quantize(r, vectors);
              for (size_t i = 0; i < vectors.size(); ++i) {
                const std::vector<float>& v = vectors[i];
                const json e = r.precision != EmbeddingPrecision::Float32 ? quantized_row(q, (int64_t)i, r.base64)
                               : r.base64                                  ? json(base64_f32(v))
                                                                           : json(v);
                data.push_back({{"object", "embedding"}, {"embedding", e}, {"index", i}});
              }
              send_json(res, 200, {{"object", "list"}, {"data", data},
                                   {"model", r.model.empty() ? model_id_ : r.model},
                                   {"usage", {{"prompt_tokens", tokens}, {"total_tokens", tokens}}}});
            }, true));
  add("POST", "/similarity", "text-embeddings-inference /similarity: cosine similarity to a source sentence",
      guard([this](const httplib::Request& req, httplib::Response& res) {
              SimilarityRequest s = parse_similarity_request(json_body(req), limits_);
              EmbedRequest r;
              r.inputs.push_back(s.source_sentence);
              r.inputs.insert(r.inputs.end(), s.sentences.begin(), s.sentences.end());
              r.token_ids.assign(r.inputs.size(), {});
              r.truncate = s.truncate;
              r.truncate_left = s.truncate_left;
              r.prompt_name = s.prompt_name;
              std::vector<Task> tasks = embed_tasks(r, BatchKey::Op::Embed, "inputs");
              run_queued(tasks, req);
              std::vector<float>& a = tasks[0].vector;
              l2_normalize(a.data(), (int64_t)a.size());
              json out = json::array();
              for (size_t i = 1; i < tasks.size(); ++i) {
                std::vector<float>& b = tasks[i].vector;
                l2_normalize(b.data(), (int64_t)b.size());
                double dot = 0;
                for (size_t k = 0; k < a.size(); ++k) dot += (double)a[k] * b[k];
                out.push_back((float)dot);
              }
              send_json(res, 200, out);
            }, true));
  add("POST", "/embed_sparse", "text-embeddings-inference /embed_sparse: SPLADE of a masked-LM checkpoint",
      guard([this](const httplib::Request& req, httplib::Response& res) {
              if (!sparse_)
                throw ApiError(501, "not_implemented",
                               "/embed_sparse needs a masked-LM checkpoint (config.json architectures "
                               "BertForMaskedLM, a SPLADE model); " + o_.model + " has no masked-LM head");
              EmbedRequest r = parse_embed_request(json_body(req), limits_, EmbedRoute::EmbedSparse);
              if (r.prompt_name)
                throw validation_error("`prompt_name`: " + o_.model +
                                       " is not a sentence-transformers folder, so it has no prompts");
              const MaskFiller& mf = *sparse_;
              std::vector<Task> tasks = embed_tasks(
                  r, BatchKey::Op::Sparse, "inputs", mf.vocab_size(), mf.max_position_embeddings(),
                  [&mf](const std::string& text, int64_t max_length) {
                    TokenizeOptions to;
                    to.max_length = max_length;
                    TextEncoding e = mf.tokenizer().encode(text, to);
                    TokenizedInput t;
                    t.ids = std::move(e.input_ids), t.token_type_ids = std::move(e.token_type_ids);
                    t.tokens = std::move(e.tokens), t.special = std::move(e.special);
                    return t;
                  });
              run_queued(tasks, req);
              json out = json::array();
              for (Task& t : tasks) {
                json one = json::array();
                for (size_t k = 0; k < t.vector.size(); ++k)
                  if (t.vector[k] > 0) one.push_back({{"index", k}, {"value", t.vector[k]}});
                out.push_back(one);
              }
              send_json(res, 200, out);
            }, true));
  add("POST", "/tokenize", "text-embeddings-inference /tokenize",
      guard([this](const httplib::Request& req, httplib::Response& res) {
              TokenizeRequest r = parse_tokenize_request(json_body(req), limits_);
              const auto t0 = std::chrono::steady_clock::now();
              json out = json::array();
              need_embedder();
              for (const auto& text : r.inputs) {
                TokenizedInput t = embedder_->tokenize(text, r.add_special_tokens, 0, r.prompt_name.value_or(""));
                json toks = json::array();
                for (size_t i = 0; i < t.ids.size(); ++i) {
                  // Character offsets in the text (Hugging Face's offset_mapping); null: no place in it.
                  json start = nullptr, stop = nullptr;
                  if (i < t.offsets.size() && t.offsets[i].first >= 0) {
                    start = t.offsets[i].first;
                    stop = t.offsets[i].second;
                  }
                  toks.push_back({{"id", t.ids[i]}, {"text", t.tokens[i]}, {"special", (bool)t.special[i]},
                                  {"start", start}, {"stop", stop}});
                }
                out.push_back(toks);
              }
              observe_tokenization(seconds_since(t0));
              send_json(res, 200, out);
            }, true));
  // text-embeddings-inference /decode: the text of each list of ids.
  add("POST", "/decode", "text-embeddings-inference /decode: token ids to text",
      guard([this](const httplib::Request& req, httplib::Response& res) {
              DecodeRequest r = parse_decode_request(json_body(req), limits_);
              need_embedder();
              json out = json::array();
              // Ids without a token are skipped, as tokenizers' decode (and the CLI and Python) do.
              for (const auto& ids : r.ids) out.push_back(embedder_->decode(ids, r.skip_special_tokens));
              send_json(res, 200, out);
            }, true));
}

}  // namespace tfm::serve
