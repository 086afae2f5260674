// libFuzzer target: the request-body parsers of `tfm serve` (src/serve/requests.h) on arbitrary bytes.
// Contract: each parser returns a request that satisfies the limits it promises, or throws ApiError with a
// status in {413, 422} and a message; anything else (another exception, a crash, a broken limit) is a bug.
// Build and run: scripts/fuzz.sh 60 fuzz_serve_request (FUZZING.md).
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "serve/requests.h"

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

template <class F>
void expect_ok_or_api_error(F&& f) {
  try {
    f();
  } catch (const tfm::serve::ApiError& e) {
    check((e.status == 413 || e.status == 422) && *e.what() && !e.type.empty());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tfm::serve;
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  RequestLimits lim;
  lim.max_client_batch_size = 4;
  lim.max_input_chars = 64;
  auto inputs_ok = [&](const std::vector<std::string>& v, bool single) {
    check(!v.empty() && (int64_t)v.size() <= lim.max_client_batch_size && (!single || v.size() == 1));
    for (const auto& s : v) check(!s.empty() && (int64_t)s.size() <= lim.max_input_chars);
  };
  for (EmbedRoute route : {EmbedRoute::Embed, EmbedRoute::EmbedAll, EmbedRoute::EmbedSparse, EmbedRoute::OpenAI})
    expect_ok_or_api_error([&] {
      EmbedRequest r = parse_embed_request(body, lim, route);
      check(!r.inputs.empty() && r.token_ids.size() == r.inputs.size() &&
            (int64_t)r.inputs.size() <= lim.max_client_batch_size && (!r.single || r.inputs.size() == 1));
      for (size_t i = 0; i < r.inputs.size(); ++i)
        check(r.inputs[i].empty() != r.token_ids[i].empty() && (int64_t)r.inputs[i].size() <= lim.max_input_chars);
      check(r.dimensions >= 0);
    });
  expect_ok_or_api_error([&] {
    SimilarityRequest r = parse_similarity_request(body, lim);
    check(!r.source_sentence.empty() && !r.sentences.empty());
  });
  expect_ok_or_api_error([&] {
    TokenizeRequest r = parse_tokenize_request(body, lim);
    inputs_ok(r.inputs, r.single);
  });
  expect_ok_or_api_error([&] {
    TranslateRequest r = parse_translate_request(body, lim, 8);
    inputs_ok(r.q, r.single);
    check(r.beam_size >= 1 && r.beam_size <= 8 && !r.target.empty());
  });
  expect_ok_or_api_error([&] { check(!parse_attention_request(body, lim).empty()); });
  return 0;
}
