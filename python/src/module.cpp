// tfm._tfm: pybind11 bindings of the public C++ API (include/tfm), one to one. Arrays cross without copies where
// the layout allows (int64 C-contiguous inputs are read in place; outputs are numpy views of the library's
// buffers, kept alive by a capsule). The GIL is released around every computation. C++ exceptions become
// ValueError (std::invalid_argument), FileNotFoundError (tfm::FileNotFoundError), IndexError (std::out_of_range)
// or RuntimeError (std::runtime_error and the rest) with the same message.
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cctype>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <limits>
#include <optional>

#include "tfm/tfm.h"

namespace py = pybind11;

namespace {

// A numpy array viewing `a`'s buffer; the capsule owns a reference to it.
template <class T>
py::array_t<T> to_numpy(const tfm::Array<T>& a) {
  auto* keep = new std::shared_ptr<const T>(a.storage());
  py::capsule owner(keep, [](void* p) { delete static_cast<std::shared_ptr<const T>*>(p); });
  std::vector<py::ssize_t> shape(a.shape().begin(), a.shape().end()), strides(shape.size());
  py::ssize_t stride = sizeof(T);
  for (size_t i = shape.size(); i-- > 0;) strides[i] = stride, stride *= shape[i];
  // The buffer belongs to this array alone (the library keeps no reference), so it may be written.
  return py::array_t<T>(shape, strides, const_cast<T*>(a.data()), owner);
}

// A float32 [rows, dim] C-contiguous array of an array-like (copied when needed). ValueError naming `name` otherwise.
py::array_t<float, py::array::c_style | py::array::forcecast> float_rows(const py::object& obj, const char* name) {
  py::array a = py::array::ensure(obj);
  if (!a || (a.dtype().kind() != 'f' && a.dtype().kind() != 'i' && a.dtype().kind() != 'u'))
    throw py::value_error(std::string(name) + " must be a float array [rows, dim] (embeddings to quantize must be "
                          "float rather than int8 or uint8)");
  if (a.dtype().kind() != 'f')
    throw py::value_error(std::string(name) + ": embeddings to quantize must be float rather than int8 or uint8");
  auto f = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(a);
  if (f.ndim() != 2) throw py::value_error(std::string(name) + " must be 2-d [rows, dim]");
  return f;
}

// sentence_transformers.quantization.quantize_embeddings over float32 [rows, dim]: ranges [2, dim], else those of
// calibration_embeddings, else (int8 / uint8) those of the embeddings. An int8 / uint8 numpy array.
py::object quantize_rows(const float* e, int64_t rows, int64_t dim, const std::string& precision,
                         const py::object& ranges, const py::object& calibration) {
  const tfm::EmbeddingPrecision p = tfm::parse_precision(precision);
  std::vector<float> r;
  if (!ranges.is_none()) {
    auto a = float_rows(ranges, "ranges");
    if (a.shape(0) != 2 || a.shape(1) != dim)
      throw py::value_error("ranges must be [2, " + std::to_string(dim) + "] (min row, max row)");
    r.assign(a.data(), a.data() + 2 * dim);
  } else if (!calibration.is_none()) {
    auto c = float_rows(calibration, "calibration_embeddings");
    if (c.shape(1) != dim)
      throw py::value_error("calibration_embeddings have " + std::to_string(c.shape(1)) + " values a row, the "
                            "embeddings " + std::to_string(dim));
    if (tfm::precision_needs_ranges(p)) r = tfm::embedding_ranges(c.data(), c.shape(0), dim);
  }
  if (!tfm::precision_needs_ranges(p)) r.clear();
  tfm::QuantizedEmbeddings q;
  {
    py::gil_scoped_release nogil;
    q = tfm::quantize_embeddings(e, rows, dim, p, r);
  }
  if (p == tfm::EmbeddingPrecision::Float32) {
    py::array_t<float> out({(py::ssize_t)rows, (py::ssize_t)dim});
    if (rows) std::memcpy(out.mutable_data(), q.values.data(), q.values.size());
    return out;
  }
  const bool is_signed = p == tfm::EmbeddingPrecision::Int8 || p == tfm::EmbeddingPrecision::Binary;
  py::array out(is_signed ? py::dtype("int8") : py::dtype("uint8"), {(py::ssize_t)rows, (py::ssize_t)q.dim});
  if (rows) std::memcpy(out.mutable_data(), q.values.data(), q.values.size());
  return out;
}

// An int64 [batch, length] array from any integer (or bool) array-like; no copy when it already is int64 and
// C-contiguous. Throws ValueError naming `name` otherwise.
py::array_t<int64_t, py::array::c_style> id_array(const py::object& obj, const char* name) {
  py::array a = py::array::ensure(obj);
  if (!a) throw py::value_error(std::string(name) + " must be an integer array [batch, length]");
  const char kind = a.dtype().kind();
  if (kind != 'i' && kind != 'u' && kind != 'b')
    throw py::value_error(std::string(name) + " must be an integer array, got dtype " +
                          py::str(a.dtype()).cast<std::string>());
  if (a.ndim() != 2)
    throw py::value_error(std::string(name) + " must be 2-d [batch, length], got " + std::to_string(a.ndim()) +
                          "-d (use x[None, :] for one sequence)");
  if (kind == 'u' && a.itemsize() == 8) {  // uint64 above the int64 maximum would wrap to negative ids
    const auto u = py::array_t<uint64_t, py::array::c_style | py::array::forcecast>::ensure(a);
    const py::ssize_t length = u.shape(1);
    for (py::ssize_t i = 0; i < u.size(); ++i)
      if (u.data()[i] > (uint64_t)std::numeric_limits<int64_t>::max())
        throw py::value_error(std::string(name) + "[" + std::to_string(i / length) + ", " +
                              std::to_string(i % length) + "] = " + std::to_string(u.data()[i]) +
                              " is larger than the int64 maximum " +
                              std::to_string(std::numeric_limits<int64_t>::max()));
  }
  return py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(a);
}

py::dict batch_to_dict(const tfm::TokenBatch& b, bool return_tokens) {
  py::dict d;
  d["input_ids"] = to_numpy(b.input_ids);
  d["attention_mask"] = to_numpy(b.attention_mask);
  d["token_type_ids"] = to_numpy(b.token_type_ids);
  if (return_tokens) d["tokens"] = b.tokens;
  return d;
}

py::dict encoding_to_dict(const tfm::TextEncoding& e) {
  py::dict d;
  d["input_ids"] = e.input_ids;
  d["token_type_ids"] = e.token_type_ids;
  d["tokens"] = e.tokens;
  d["special_tokens_mask"] = std::vector<int>(e.special.begin(), e.special.end());
  if (!e.offsets.empty()) {  // Hugging Face's offset_mapping: (0, 0) for special tokens (the C++ API's (-1, -1))
    std::vector<std::pair<int64_t, int64_t>> off;
    off.reserve(e.offsets.size());
    for (const auto& [a, b] : e.offsets) off.emplace_back(a < 0 ? 0 : a, a < 0 ? 0 : b);
    d["offsets"] = off;
  }
  return d;
}

// texts[i] encoded for a head (special tokens, offsets), max_length truncating.
std::vector<tfm::TextEncoding> encode_texts(const tfm::Tokenizer& tok, const std::vector<std::string>& texts,
                                            int64_t max_length) {
  tfm::TokenizeOptions o;
  o.max_length = max_length;
  std::vector<tfm::TextEncoding> enc;
  for (const std::string& t : texts) enc.push_back(tok.encode(t, o));
  return enc;
}

// A path argument: str or os.PathLike.
std::string path_arg(const py::object& obj) {
  return py::module_::import("os").attr("fspath")(obj).cast<std::string>();
}

std::vector<std::string> string_list(const py::handle& obj, const char* name) {
  if (py::isinstance<py::str>(obj))
    throw py::value_error(std::string(name) + " must be a list of strings, got a single str (wrap it in a list)");
  try {
    return obj.cast<std::vector<std::string>>();
  } catch (const py::cast_error&) {
    // A str that cannot be encoded as UTF-8 (a lone surrogate such as "\ud800") is a bad element, not a bad list.
    if (py::isinstance<py::sequence>(obj)) {
      const py::sequence seq = py::reinterpret_borrow<py::sequence>(obj);
      for (size_t i = 0; i < seq.size(); ++i) {
        const py::object item = seq[i];
        if (!py::isinstance<py::str>(item) && !py::isinstance<py::bytes>(item))
          throw py::value_error(std::string(name) + " must be a list of strings; item " + std::to_string(i) +
                                " is a " + py::str(py::type::of(item).attr("__name__")).cast<std::string>());
        if (py::isinstance<py::str>(item) && !PyUnicode_AsUTF8AndSize(item.ptr(), nullptr)) {
          PyErr_Clear();
          throw py::value_error(std::string(name) + "[" + std::to_string(i) +
                                "] cannot be encoded as UTF-8 (a lone surrogate such as '\\ud800')");
        }
      }
    }
    throw py::value_error(std::string(name) + " must be a list of strings");
  }
}

// tfm::finetune's messages name its options as `tfm finetune` spells them; Python callers see tfm.finetune's
// arguments instead ("--overwrite" -> "overwrite=True", "--task mlm" -> "task='mlm'", "--out" -> "out_dir").
std::string finetune_argument_names(std::string msg) {
  static const std::pair<const char*, const char*> names[] = {
      {"--task mlm", "task='mlm'"},         {"--task classify", "task='classify'"},
      {"--task embed", "task='embed'"},     {"--precision bf16", "precision='bf16'"},
      {"--precision fp32", "precision='fp32'"}, {"--problem-type regression", "problem_type='regression'"},
      {"--overwrite", "overwrite=True"},    {"--resume", "resume=True"},
      {"--group-texts", "group_texts=True"}, {"--problem-type", "problem_type"},
      {"--labels", "labels"},               {"--batch-size", "batch_size"},
      {"--train FILE", "train"},            {"--out DIR", "out_dir"},
      {"--out", "out_dir"}};
  for (const auto& [flag, arg] : names) {
    const size_t n = std::strlen(flag);
    for (size_t p = 0; (p = msg.find(flag, p)) != std::string::npos;) {
      const char next = p + n < msg.size() ? msg[p + n] : ' ';
      if (std::isalnum((unsigned char)next) || next == '-' || next == '_') {  // a longer flag or word
        p += n;
        continue;
      }
      msg.replace(p, n, arg);
      p += std::strlen(arg);
    }
  }
  return msg;
}

}  // namespace

PYBIND11_MODULE(_tfm, m) {
  m.doc() = "transformer.cpp: Transformer encoders, translation, training and BLEU (C++ with numpy arrays)";
  m.attr("__version__") = tfm::version();
  m.def(
      "quantize_embeddings",
      [](const py::object& embeddings, const std::string& precision, const py::object& ranges,
         const py::object& calibration_embeddings) {
        auto e = float_rows(embeddings, "embeddings");
        return quantize_rows(e.data(), e.shape(0), e.shape(1), precision, ranges, calibration_embeddings);
      },
      py::arg("embeddings"), py::arg("precision"), py::arg("ranges") = py::none(),
      py::arg("calibration_embeddings") = py::none(),
      "sentence_transformers.quantization.quantize_embeddings over float embeddings [rows, dim]: precision "
      "'float32', 'int8' / 'uint8' (per dimension step = (max - min) / 255, trunc((x - min) / step) (int8: - 128), "
      "the ranges [2, dim] given, else the min / max of calibration_embeddings, else of the embeddings; values "
      "outside wrap around as numpy's cast does), 'binary' / 'ubinary' (np.packbits(x > 0) per row, binary - 128 "
      "as int8: [rows, ceil(dim / 8)]). ValueError for another precision, int embeddings or ranges of another "
      "shape");
  m.def("native_dtype", &tfm::native_dtype, py::arg("dtype"),
        "Whether this CPU multiplies dtype ('fp32', 'bf16', 'int8') natively (bf16: AVX512_BF16 or AMX; int8: VNNI or "
        "AMX); elsewhere bf16 / int8 weights are multiplied in fp32");

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const tfm::FileNotFoundError& e) {
      PyErr_SetString(PyExc_FileNotFoundError, e.what());
    }
  });

  // ------------------------------------------------------------------ Tokenizer
  py::class_<tfm::Tokenizer>(m, "Tokenizer",
                             "Tokenizer of a model folder (tokenizer.json: WordPiece, byte-level BPE, Unigram, "
                             "WordLevel; or a BERT vocab.txt; or a SentencePiece model), equal to Hugging Face "
                             "tokenizers. Thread-safe.")
      .def(
          "encode",
          [](const tfm::Tokenizer& t, const std::string& text, const std::optional<std::string>& pair,
             bool add_special_tokens, int64_t max_length) {
            tfm::TokenizeOptions o;
            o.add_special_tokens = add_special_tokens;
            o.max_length = max_length;
            tfm::TextEncoding e;
            {
              py::gil_scoped_release nogil;
              e = pair ? t.encode_pair(text, *pair, o) : t.encode(text, o);
            }
            return encoding_to_dict(e);
          },
          py::arg("text"), py::arg("pair") = py::none(), py::arg("add_special_tokens") = true,
          py::arg("max_length") = 0,
          "One text (or pair), unpadded: {input_ids, token_type_ids, tokens, special_tokens_mask, offsets}; offsets "
          "are character [start, end) pairs in each token's own text (a pair's second text counts from its own "
          "start), (0, 0) for special tokens as Hugging Face's offset_mapping gives them (special_tokens_mask tells "
          "them from an empty token at the text's start)")
      .def(py::init([](const py::object& path) {
             const std::string dir = path_arg(path);
             py::gil_scoped_release nogil;
             return tfm::Tokenizer(dir);
           }),
           py::arg("model_dir"))
      .def(
          "__call__",
          [](const tfm::Tokenizer& t, const py::object& texts, const py::object& text_pair, bool add_special_tokens,
             int64_t max_length, bool return_tokens) {
            tfm::TokenizeOptions o;
            o.add_special_tokens = add_special_tokens;
            o.max_length = max_length;
            std::vector<std::string> a = string_list(texts, "texts"), b;
            if (!text_pair.is_none()) b = string_list(text_pair, "text_pair");
            tfm::TokenBatch r;
            {
              py::gil_scoped_release nogil;
              r = text_pair.is_none() ? t(a, o) : t(a, b, o);
            }
            return batch_to_dict(r, return_tokens);
          },
          py::arg("texts"), py::arg("text_pair") = py::none(), py::arg("add_special_tokens") = true,
          py::arg("max_length") = 0, py::arg("return_tokens") = false,
          "Encode a list of texts (and optional pairs) into one right-padded batch: a dict of int64 numpy arrays "
          "[batch, length] 'input_ids', 'attention_mask' (1 = token, 0 = padding), 'token_type_ids' (+ 'tokens', "
          "a list of lists of str, with return_tokens). max_length > 0 truncates (special tokens included).")
      .def(
          "decode",
          [](const tfm::Tokenizer& t, const std::vector<int64_t>& ids, bool skip_special_tokens) {
            py::gil_scoped_release nogil;
            return t.decode(ids, skip_special_tokens);
          },
          py::arg("ids"), py::arg("skip_special_tokens") = true,
          "Text of ids, as Hugging Face decode(ids, skip_special_tokens, clean_up_tokenization_spaces=False).")
      .def_property_readonly("has_token_type_ids", &tfm::Tokenizer::has_token_type_ids)
      .def_property_readonly("model_type", &tfm::Tokenizer::model_type)
      .def("tokenize", &tfm::Tokenizer::tokenize, py::arg("text"), "Tokens of text, no special tokens")
      .def("token_to_id", &tfm::Tokenizer::token_to_id, py::arg("token"), "Id of token, or -1")
      .def("id_to_token", &tfm::Tokenizer::id_to_token, py::arg("id"))
      .def_property_readonly("vocab_size", &tfm::Tokenizer::vocab_size)
      .def_property_readonly("pad_id", &tfm::Tokenizer::pad_id)
      .def_property_readonly("model_max_length", &tfm::Tokenizer::model_max_length);

  // ------------------------------------------------------------------ Encoder
  py::class_<tfm::Encoder>(m, "Encoder",
                           "BERT or tutorial encoder of a model folder (config.json, model.safetensors, tokenizer). "
                           "Thread-safe: forward/embed may run in several Python threads at once (the GIL is "
                           "released while they compute).")
      .def(py::init([](const py::object& path, const py::object& dtype, int threads) {
             const std::string dir = path_arg(path);
             tfm::EncoderOptions o;
             if (!dtype.is_none()) {
               o.dtype = dtype.cast<std::string>();
               if (o.dtype.empty())  // "" is the C++ default's spelling; here it is None
                 throw py::value_error("unknown dtype '' (expected fp32, bf16 or int8)");
             }
             o.threads = threads;
             py::gil_scoped_release nogil;
             return tfm::Encoder(dir, o);
           }),
           py::arg("model_dir"), py::arg("dtype") = py::none(), py::arg("threads") = 0,
           "dtype: compute type of the Linear layers, 'fp32', 'bf16' or 'int8' (ValueError otherwise); None "
           "(default): as the folder stores it (int8 for a `tfm convert --dtype int8` folder, else fp32); "
           "Encoder.dtype is the type used; threads: "
           "threads per call (0 = all cores)")
      .def(
          "forward",
          [](const tfm::Encoder& e, const py::object& input_ids, const py::object& attention_mask,
             const py::object& token_type_ids, bool output_hidden_states, bool return_dict,
             bool all_positions) -> py::object {
            auto ids = id_array(input_ids, "input_ids");
            std::optional<py::array_t<int64_t, py::array::c_style>> mask, types;
            for (auto [obj, arr, name] : {std::tuple{&attention_mask, &mask, "attention_mask"},
                                          std::tuple{&token_type_ids, &types, "token_type_ids"}}) {
              if (obj->is_none()) continue;
              *arr = id_array(*obj, name);
              if ((*arr)->shape(0) != ids.shape(0) || (*arr)->shape(1) != ids.shape(1))
                throw py::value_error(std::string(name) + " has shape [" + std::to_string((*arr)->shape(0)) + ", " +
                                      std::to_string((*arr)->shape(1)) + "] but input_ids has [" +
                                      std::to_string(ids.shape(0)) + ", " + std::to_string(ids.shape(1)) + "]");
            }
            tfm::EncoderInputs in;
            in.input_ids = ids.data();
            in.attention_mask = mask ? mask->data() : nullptr;
            in.token_type_ids = types ? types->data() : nullptr;
            in.batch = ids.shape(0);
            in.length = ids.shape(1);
            if (!output_hidden_states && !return_dict && !all_positions) {
              tfm::FloatArray out;
              {
                py::gil_scoped_release nogil;
                out = e.forward(in);
              }
              return to_numpy(out);
            }
            tfm::EncoderOutputs out;
            {
              py::gil_scoped_release nogil;
              tfm::ForwardOptions fo;
              fo.output_hidden_states = output_hidden_states;
              fo.all_positions = all_positions;
              out = e.forward_all(in, fo);
            }
            if (!output_hidden_states && !return_dict) return to_numpy(out.last_hidden_state);
            py::dict d;
            d["last_hidden_state"] = to_numpy(out.last_hidden_state);
            d["pooler_output"] = out.pooler_output.data() ? to_numpy(out.pooler_output) : py::object(py::none());
            if (output_hidden_states) {
              // HF's tuple of num_hidden_layers + 1 arrays [batch, length, hidden_size], the embedding output first.
              py::array all = to_numpy(out.hidden_states);
              py::tuple layers(out.hidden_states.size(0));
              for (int64_t l = 0; l < out.hidden_states.size(0); ++l)
                layers[l] = all[py::int_(l)].attr("copy")();
              d["hidden_states"] = layers;
            } else {
              d["hidden_states"] = py::none();
            }
            return d;
          },
          py::arg("input_ids"), py::arg("attention_mask") = py::none(), py::arg("token_type_ids") = py::none(),
          py::arg("output_hidden_states") = false, py::arg("return_dict") = false, py::arg("all_positions") = false,
          "last_hidden_state [batch, length, hidden_size] float32 of int arrays [batch, length]: input_ids, "
          "attention_mask (1 = attend, 0 = padding; None = all ones), token_type_ids (None = zeros). With padding "
          "in the batch the layers run on the real tokens only and padded positions hold 0 (real positions equal "
          "Hugging Face's up to float rounding); all_positions=True (or output_hidden_states=True) computes every "
          "position as Hugging Face does. With "
          "output_hidden_states=True or return_dict=True, a dict as Hugging Face's BaseModelOutputWithPooling: "
          "last_hidden_state, pooler_output ([batch, hidden_size], tanh(dense(h[:, 0])) for BERT with pooler "
          "weights, else None) and hidden_states (output_hidden_states: a tuple of num_hidden_layers + 1 arrays "
          "[batch, length, hidden_size], the embedding output first; else None)")
      .def(
          "embed",
          [](const tfm::Encoder& e, const py::object& texts, std::optional<bool> normalize,
             const std::string& pooling, int64_t max_length, int64_t batch_size,
             const std::optional<std::string>& prompt_name, const std::optional<int64_t>& dimensions,
             int64_t batch_tokens, const std::string& precision, const py::object& ranges,
             const py::object& calibration_embeddings) -> py::object {
            tfm::parse_precision(precision);  // a bad precision fails before the model runs
            tfm::EmbedOptions o;
            o.normalize = normalize;
            if (prompt_name) {
              if (prompt_name->empty()) throw py::value_error("prompt_name '' is not a prompt name (None = the default)");
              o.prompt_name = *prompt_name;
            }
            if (dimensions) {
              if (*dimensions < 1) tfm::check_dimensions(*dimensions, e.embedding_dim());  // 0 is not "all" here
              o.dimensions = *dimensions;
            }
            o.pooling = pooling;
            o.max_length = max_length;
            o.batch_size = batch_size;
            o.batch_tokens = batch_tokens;
            std::vector<std::string> t = string_list(texts, "texts");
            tfm::FloatArray out;
            {
              py::gil_scoped_release nogil;
              out = e.embed(t, o);
            }
            if (precision == "float32" && ranges.is_none() && calibration_embeddings.is_none()) return to_numpy(out);
            return quantize_rows(out.data(), out.size(0), out.size(1), precision, ranges, calibration_embeddings);
          },
          py::arg("texts"), py::arg("normalize") = py::none(), py::arg("pooling") = "", py::arg("max_length") = 0,
          py::arg("batch_size") = tfm::EmbedOptions{}.batch_size, py::arg("prompt_name") = py::none(),
          py::arg("dimensions") = py::none(), py::arg("batch_tokens") = tfm::EmbedOptions{}.batch_tokens,
          py::arg("precision") = "float32", py::arg("ranges") = py::none(),
          py::arg("calibration_embeddings") = py::none(),
          "One vector per text, [len(texts), embedding_dim] float32. A sentence-transformers folder (modules.json) "
          "runs its pipeline as SentenceTransformer.encode(): pooling '' = its own Pooling module (or 'mean', "
          "'cls', 'max', ... joined by '+'), normalize None = as its modules.json says. A plain folder: pooling "
          "'mean' (default, over tokens with attention mask 1), 'cls', or the same other modes ('max', "
          "'cls+mean', ...: [len(texts), k * hidden_size] for k modes); normalize=True divides by the L2 norm, "
          "normalize=False also skips a folder's Normalize module (as text-embeddings-inference). prompt_name: a "
          "prompt of config_sentence_transformers.json (SentenceTransformer.encode(prompt_name=); None = the "
          "folder's default; ValueError for an unknown name or a plain folder). dimensions: Matryoshka truncation "
          "(sentence-transformers truncate_dim): the first dimensions values, then normalised when normalizing; "
          "ValueError when < 1 or > embedding_dim. An empty text '' is embedded (its special tokens alone, with "
          "a prompt the prompt's tokens), as SentenceTransformer.encode does; `tfm embed` refuses empty lines "
          "unless --skip-empty. Batching as `tfm embed`'s (same defaults): texts sorted by token count, batches of "
          "at most batch_size texts and batch_tokens padded tokens; the same texts and limits give the CLI's "
          "numbers. precision: 'float32' (default), 'int8', 'uint8', 'binary' or 'ubinary', as "
          "SentenceTransformer.encode(precision=) / quantize_embeddings: int8 / uint8 [len(texts), dim] with "
          "per-dimension ranges from `ranges` [2, dim], else from `calibration_embeddings` [N, dim], else from "
          "these embeddings; binary (int8) / ubinary (uint8) packed sign bits [len(texts), ceil(dim / 8)]; values "
          "outside the ranges wrap around as numpy's cast does (tfm.quantize_embeddings)")
      .def_property_readonly("tokenizer", &tfm::Encoder::tokenizer, py::return_value_policy::reference_internal)
      .def_property_readonly("has_tokenizer", &tfm::Encoder::has_tokenizer)
      .def_property_readonly("model_type", &tfm::Encoder::model_type)
      .def_property_readonly("hidden_size", &tfm::Encoder::hidden_size)
      .def_property_readonly("embedding_dim", &tfm::Encoder::embedding_dim)
      .def_property_readonly("is_sentence_transformer", &tfm::Encoder::is_sentence_transformer)
      .def_property_readonly("vocab_size", &tfm::Encoder::vocab_size)
      .def_property_readonly("max_position_embeddings", &tfm::Encoder::max_position_embeddings)
      .def_property_readonly("dtype", &tfm::Encoder::dtype)
      .def_property_readonly("threads", &tfm::Encoder::threads);

  // SentenceTransformer.encode's name for embed (encode(texts, precision="int8") as sentence-transformers).
  m.attr("Encoder").attr("encode") = m.attr("Encoder").attr("embed");

  // ------------------------------------------------------------------ Classifier
  // ClassifierOptions of the head classes' constructors: dtype None = as the folder stores it.
  auto head_options = [](const py::object& dtype, int threads) {
    tfm::ClassifierOptions o;
    o.threads = threads;
    if (!dtype.is_none()) {
      o.dtype = dtype.cast<std::string>();
      if (o.dtype.empty()) throw py::value_error("unknown dtype '' (expected fp32, bf16 or int8)");
    }
    return o;
  };
  static const char* kHeadInitDoc =
      "dtype: compute type of the encoder body, 'fp32', 'bf16' or 'int8' (ValueError otherwise); None (default): as "
      "the folder stores it (int8 for a `tfm convert --dtype int8` folder, else fp32); the head computes in fp32; "
      "threads: threads per call";
  py::class_<tfm::Classifier>(m, "Classifier",
                              "*ForSequenceClassification folder of any encoder family (BERT, RoBERTa, XLM-RoBERTa, "
                              "CamemBERT, DistilBERT, ...: config.json id2label, weights, tokenizer). Thread-safe; "
                              "the GIL is released while it computes.")
      .def(py::init([head_options](const py::object& path, const py::object& dtype, int threads) {
             const std::string dir = path_arg(path);
             tfm::ClassifierOptions o = head_options(dtype, threads);
             py::gil_scoped_release nogil;
             return tfm::Classifier(dir, o);
           }),
           py::arg("model_dir"), py::arg("dtype") = py::none(), py::arg("threads") = 0, kHeadInitDoc)
      .def_property_readonly("dtype", &tfm::Classifier::dtype)
      .def(
          "classify",
          [](const tfm::Classifier& c, const py::object& texts, bool all_scores, const std::string& function,
             int64_t max_length, int64_t batch_size, const py::object& top_k) -> py::list {
            tfm::ClassifyOptions o;
            o.function = function;
            o.max_length = max_length;
            o.batch_size = batch_size;
            // top_k: None = the best label as a dict; N = a list of the best N; "all" = every label.
            int64_t k = all_scores ? -1 : 0;
            if (!top_k.is_none()) {
              if (py::isinstance<py::str>(top_k)) {
                if (top_k.cast<std::string>() != "all")
                  throw py::value_error("top_k must be a whole number >= 1, 'all' or None, got '" +
                                        top_k.cast<std::string>() + "'");
                k = -1;
              } else {
                k = top_k.cast<int64_t>();
                if (k < 1) throw py::value_error("top_k must be >= 1 ('all' or None), got " + std::to_string(k));
              }
            }
            // Items: a text, a (text, text_pair) tuple or list, or {"text", "text_pair"} (the pipeline's forms).
            if (py::isinstance<py::str>(texts))
              throw py::value_error("texts must be a list of strings, got a single str (wrap it in a list)");
            std::vector<std::string> t;
            bool any_pair = false;
            std::vector<std::string> pairs;
            const py::sequence seq = py::reinterpret_borrow<py::sequence>(texts);
            for (size_t i = 0; i < seq.size(); ++i) {
              const py::object item = seq[i];
              if (py::isinstance<py::dict>(item)) {
                const py::dict d = item.cast<py::dict>();
                if (!d.contains("text")) throw py::value_error("texts[" + std::to_string(i) + "] has no 'text'");
                t.push_back(d["text"].cast<std::string>());
                pairs.push_back(d.contains("text_pair") ? d["text_pair"].cast<std::string>() : "");
              } else if (py::isinstance<py::tuple>(item) || py::isinstance<py::list>(item)) {
                const std::vector<std::string> p = string_list(item, "a (text, text_pair) item");
                if (p.size() != 2)
                  throw py::value_error("texts[" + std::to_string(i) + "] must be a text or a (text, text_pair) pair");
                t.push_back(p[0]);
                pairs.push_back(p[1]);
              } else {
                t.push_back(string_list(py::make_tuple(item), "texts")[0]);
                pairs.push_back("");
                continue;
              }
              any_pair |= !pairs.back().empty();
            }
            if (any_pair) o.text_pairs = pairs;
            std::vector<tfm::Classification> r;
            {
              py::gil_scoped_release nogil;
              r = c.classify(t, o);
            }
            py::list out;
            for (const auto& x : r) {
              auto entry = [&](size_t j) {
                py::dict d;
                d["label"] = x.labels[j];
                d["score"] = (double)x.scores[j];
                return d;
              };
              if (k == 0) {
                out.append(entry(0));
                continue;
              }
              py::list all;
              for (size_t j = 0; j < x.labels.size() && (k < 0 || (int64_t)j < k); ++j) all.append(entry(j));
              out.append(all);
            }
            return out;
          },
          py::arg("texts"), py::arg("all_scores") = false, py::arg("function") = "", py::arg("max_length") = 0,
          py::arg("batch_size") = 32, py::arg("top_k") = py::none(),
          "Per text {'label': str, 'score': float} of the best label, as `tfm classify` prints; top_k=N: a list "
          "of the best N, best first; top_k='all' (or all_scores=True): every label's. An item may be a text, a "
          "(text, text_pair) pair or {'text', 'text_pair'}, as the text-classification pipeline takes them. "
          "function: '' (the pipeline default), 'softmax', 'sigmoid', 'none'")
      .def(
          "zero_shot",
          [](const tfm::Classifier& c, const py::object& sequences, const py::object& candidate_labels,
             const std::string& hypothesis_template, bool multi_label, int64_t max_length,
             int64_t batch_size) -> py::object {
            const bool one = py::isinstance<py::str>(sequences);
            std::vector<std::string> seqs =
                one ? std::vector<std::string>{sequences.cast<std::string>()} : string_list(sequences, "sequences");
            std::vector<std::string> labels = py::isinstance<py::str>(candidate_labels)
                                                  ? tfm::split_candidate_labels(candidate_labels.cast<std::string>())
                                                  : string_list(candidate_labels, "candidate_labels");
            tfm::ZeroShotOptions o;
            o.hypothesis_template = hypothesis_template;
            o.multi_label = multi_label;
            o.max_length = max_length;
            o.batch_size = batch_size;
            std::vector<tfm::ZeroShotResult> r;
            {
              py::gil_scoped_release nogil;
              r = c.zero_shot(seqs, labels, o);
            }
            py::list out;
            for (const auto& x : r) {
              py::dict d;
              d["sequence"] = x.sequence;
              d["labels"] = x.labels;
              py::list sc;
              for (float v : x.scores) sc.append((double)v);
              d["scores"] = sc;
              out.append(d);
            }
            return one ? py::object(out[0]) : py::object(out);
          },
          py::arg("sequences"), py::arg("candidate_labels"), py::arg("hypothesis_template") = "This example is {}.",
          py::arg("multi_label") = false, py::arg("max_length") = 0, py::arg("batch_size") = 32,
          "Zero-shot classification with an NLI head, as the zero-shot-classification pipeline: {'sequence', "
          "'labels', 'scores'} (labels best first) for a str, a list of them for a list. candidate_labels: a list "
          "or one comma-separated str; the entailment label found by name in id2label. ValueError for no labels, "
          "a template without {}, an empty sequence")
      .def(
          "logits",
          [](const tfm::Classifier& c, const py::object& texts, int64_t max_length, int64_t batch_size) {
            tfm::ClassifyOptions o;
            o.max_length = max_length;
            o.batch_size = batch_size;
            std::vector<std::string> t = string_list(texts, "texts");
            tfm::FloatArray out;
            {
              py::gil_scoped_release nogil;
              out = c.logits(t, o);
            }
            return to_numpy(out);
          },
          py::arg("texts"), py::arg("max_length") = 0, py::arg("batch_size") = 32,
          "The head's logits [len(texts), num_labels] float32")
      .def(
          "rerank",
          [](const tfm::Classifier& c, const std::string& query, const py::object& passages,
             const std::optional<int64_t>& top_k, bool return_documents, bool raw_scores, int64_t max_length,
             int64_t batch_size) -> py::list {
            tfm::RerankOptions o;
            if (top_k) {
              if (*top_k < 1) throw py::value_error("top_k must be >= 1 (None = all), got " + std::to_string(*top_k));
              o.top_k = *top_k;
            }
            o.raw_scores = raw_scores;
            o.max_length = max_length;
            o.batch_size = batch_size;
            std::vector<std::string> p = string_list(passages, "passages");
            std::vector<tfm::RankedPassage> r;
            {
              py::gil_scoped_release nogil;
              r = c.rerank(query, p, o);
            }
            py::list out;
            for (const auto& x : r) {
              py::dict d;
              d["corpus_id"] = x.index;
              d["score"] = (double)x.score;
              if (return_documents) d["text"] = p[x.index];
              out.append(d);
            }
            return out;
          },
          py::arg("query"), py::arg("passages"), py::arg("top_k") = py::none(), py::arg("return_documents") = false,
          py::arg("raw_scores") = false, py::arg("max_length") = 0, py::arg("batch_size") = 32,
          "Passages ranked for query by a cross-encoder, as sentence-transformers' CrossEncoder.rank: "
          "[{'corpus_id': int, 'score': float(, 'text': str)}] best first (one label: its activation; two labels: "
          "softmax probability of label 1; raw_scores: the logit). ValueError for an empty query or passage, "
          "top_k < 1, a pair over max_position_embeddings without max_length; RuntimeError for a head with more "
          "than two labels")
      .def_property_readonly("labels", &tfm::Classifier::labels)
      .def_property_readonly("num_labels", &tfm::Classifier::num_labels);

  // ------------------------------------------------------------------ Translator
  py::class_<tfm::Translator>(m, "Translator",
                              "transformer_seq2seq model folder from `tfm train` or the d2l reference. Calls from "
                              "several threads are safe and run one at a time.")
      .def(py::init([](const py::object& path, const std::string& dtype, int threads) {
             const std::string dir = path_arg(path);
             tfm::TranslatorOptions o;
             o.dtype = dtype;
             o.threads = threads;
             py::gil_scoped_release nogil;
             return tfm::Translator(dir, o);
           }),
           py::arg("model_dir"), py::arg("dtype") = "fp32", py::arg("threads") = 0,
           "dtype: 'fp32', 'bf16' or 'int8' (encoder and decoder Linear layers); threads: threads per call")
      .def(
          "translate_batch",
          [](const tfm::Translator& t, const py::object& sentences, int64_t beam_size, float length_penalty,
             int64_t max_steps, bool return_scores, bool disable_unk, int64_t sampling_topk, float sampling_topp,
             float sampling_temperature, uint64_t seed, float repetition_penalty, int64_t no_repeat_ngram_size,
             int64_t min_length, const std::vector<std::vector<int64_t>>& bad_words_ids,
             const py::object& target_prefix, int64_t num_hypotheses, const std::string& target_lang,
             const std::string& source_lang, const std::string& early_stopping,
             const py::object& forced_eos, bool seed_per_sentence) -> py::list {
            tfm::TranslateOptions o;
            o.seed_per_sentence = seed_per_sentence;
            o.sampling_topk = sampling_topk;
            o.sampling_topp = sampling_topp;
            o.sampling_temperature = sampling_temperature;
            o.seed = seed;
            o.repetition_penalty = repetition_penalty;
            o.no_repeat_ngram_size = no_repeat_ngram_size;
            o.min_length = min_length;
            o.bad_words_ids = bad_words_ids;
            std::vector<std::string> s = string_list(sentences, "sentences");
            if (py::isinstance<py::str>(target_prefix)) {  // one prefix for every sentence (as /translate's field)
              o.target_prefix.assign(s.size(), target_prefix.cast<std::string>());
            } else if (!target_prefix.is_none()) {
              if (!py::isinstance<py::sequence>(target_prefix))
                throw py::type_error("target_prefix must be None, a str or a list of str, not " +
                                     py::str(py::type::of(target_prefix).attr("__name__")).cast<std::string>());
              for (const py::handle& p : target_prefix)
                o.target_prefix.push_back(p.is_none() ? std::string() : py::cast<std::string>(p));
            }
            o.beam_size = beam_size;
            o.length_penalty = length_penalty;
            o.max_steps = max_steps;
            o.return_scores = return_scores;
            o.disable_unk = disable_unk;
            o.num_hypotheses = num_hypotheses;
            o.target_lang = target_lang;
            o.source_lang = source_lang;
            o.early_stopping = early_stopping;
            if (!forced_eos.is_none()) o.forced_eos = py::cast<bool>(forced_eos) ? 1 : 0;
            std::vector<tfm::Translation> r;
            {
              py::gil_scoped_release nogil;
              r = t.translate_batch(s, o);
            }
            py::list out;
            auto item = [&](const tfm::Translation& x) -> py::object {
              if (return_scores) return py::make_tuple(x.text, x.score);
              return py::str(x.text);
            };
            for (const auto& x : r) {
              if (num_hypotheses > 1) {
                py::list n;
                for (const auto& h : x.hypotheses) n.append(item(h));
                if (x.hypotheses.empty()) n.append(item(x));  // an empty sentence
                out.append(n);
              } else {
                out.append(item(x));
              }
            }
            return out;
          },
          py::arg("sentences"), py::arg("beam_size") = 0,
          py::arg("length_penalty") = std::numeric_limits<float>::quiet_NaN(), py::arg("max_steps") = 0, py::arg("return_scores") = false, py::arg("disable_unk") = false,
          py::arg("sampling_topk") = 1, py::arg("sampling_topp") = 1.0f, py::arg("sampling_temperature") = 1.0f,
          py::arg("seed") = 0, py::arg("repetition_penalty") = 1.0f, py::arg("no_repeat_ngram_size") = 0,
          py::arg("min_length") = 0, py::arg("bad_words_ids") = std::vector<std::vector<int64_t>>{},
          py::arg("target_prefix") = py::none(), py::arg("num_hypotheses") = 1, py::arg("target_lang") = "",
          py::arg("source_lang") = "", py::arg("early_stopping") = "", py::arg("forced_eos") = py::none(),
          py::arg("seed_per_sentence") = false,
          "Translate a list of sentences: a list of str, or with return_scores a list of (text, score); with "
          "num_hypotheses > 1 each item is the list of the n best (str or (text, score)), best first. beam_size 0 "
          "and length_penalty NaN: the model's defaults (generation_config.json for Hugging Face folders; greedy and "
          "0 otherwise). Our models: score = log p(text + <eos>) / ((5 + length) / 6) ** length_penalty (natural "
          "log; length in tokens with <eos>), length_penalty needs beam_size > 1 or return_scores (ValueError "
          "otherwise). Hugging Face folders (Marian, M2M100, NLLB): score = log p / length ** length_penalty as "
          "transformers' generate (greedy: log p); early_stopping 'true' / 'false' / 'never' ('' = "
          "generation_config.json's); forced_eos True / False (None = the folder's forced_eos_token_id); target_lang 'fr' / 'fra_Latn' (forced first token) or Marian's '>>fra<<' code; "
          "sampling is do_sample with top_k = sampling_topk on greedy search. "
          "disable_unk=True never generates <unk> (CTranslate2's disable_unk). CTranslate2's sampling: sampling_topk (1 = greedy, 0 = all "
          "tokens; beam_size 1), sampling_topp, sampling_temperature, seed (a stream per sample: reproducible; "
          "repeated sentences draw independently unless seed_per_sentence=True); with sampling, num_hypotheses N "
          "gives N samples of each sentence, highest log-probability first. "
          "Hugging Face processors: repetition_penalty, no_repeat_ngram_size, min_length (start token counted), "
          "bad_words_ids (lists of target ids). target_prefix: the text the translation starts with "
          "(autocompletion): None (none), a str (the same prefix for every sentence) or a list of one str per "
          "sentence ('' or None = none); TypeError for another type")
      .def_property_readonly("languages", &tfm::Translator::languages,
                             "Multilingual folders (M2M100, NLLB): the codes target_lang / source_lang take; else []")
      .def(
          "score_batch",
          [](const tfm::Translator& t, const py::object& sources, const py::object& targets) -> py::list {
            std::vector<std::string> s = string_list(sources, "sources"), g = string_list(targets, "targets");
            std::vector<tfm::ScoringResult> r;
            {
              py::gil_scoped_release nogil;
              r = t.score_batch(s, g);
            }
            py::list out;
            for (const auto& x : r) {
              py::dict d;
              d["tokens"] = x.tokens;
              d["log_probs"] = x.log_probs;
              d["cumulated_score"] = x.cumulated_score;
              d["normalized_score"] = x.normalized_score;
              out.append(d);
            }
            return out;
          },
          py::arg("sources"), py::arg("targets"),
          "Score given translations (CTranslate2's score_batch): per pair a dict {tokens (target tokens + '<eos>'), "
          "log_probs (natural log, one per token, teacher forcing), cumulated_score (their sum), normalized_score "
          "(sum / len(tokens))}")
      .def(
          "encode_source",
          [](const tfm::Translator& t, const std::string& sentence) {
            tfm::SourceEncoding e = t.encode_source(sentence);
            py::dict d;
            d["ids"] = e.ids;
            d["full_length"] = e.full_length;
            d["unknown_words"] = e.unknown_words;
            return d;
          },
          py::arg("sentence"),
          "The sentence as the model reads it: {ids (with <eos>, truncated), full_length, unknown_words}")
      .def(
          "attention",
          [](const tfm::Translator& t, const std::vector<int64_t>& source, int64_t beam_size) {
            tfm::TranslateOptions o;
            o.beam_size = beam_size;
            tfm::TranslationAttention a;
            {
              py::gil_scoped_release nogil;
              a = t.attention(source, o);
            }
            py::dict d;
            d["text"] = a.translation.text;
            d["source_tokens"] = a.source_tokens;
            d["target_tokens"] = a.target_tokens;
            py::list enc, cross;
            for (const auto& x : a.encoder_self) enc.append(to_numpy(x));
            for (const auto& x : a.cross) cross.append(to_numpy(x));
            d["encoder_self"] = enc;
            d["cross"] = cross;
            return d;
          },
          py::arg("source"), py::arg("beam_size") = 1,
          "Translation of encode_source()['ids'] with every layer's attention: encoder_self [layers] of float32 "
          "[heads, Ls, Ls], cross [layers] of [heads, T, Ls]")
      .def_property_readonly("max_source_tokens", &tfm::Translator::max_source_tokens)
      .def_property_readonly("num_steps", &tfm::Translator::num_steps)
      .def_property_readonly("subword", &tfm::Translator::subword)
      .def_property_readonly("dtype", &tfm::Translator::dtype)
      .def_property_readonly("model_type", &tfm::Translator::model_type);

  // ------------------------------------------------------------------ BLEU
  py::module_ bleu = m.def_submodule("bleu", "BLEU: sacreBLEU's corpus BLEU and d2l's sentence BLEU");
  py::class_<tfm::bleu::CorpusScore>(bleu, "CorpusScore", "sacreBLEU's BLEUScore (percent)")
      .def_readonly("score", &tfm::bleu::CorpusScore::score)
      .def_readonly("bp", &tfm::bleu::CorpusScore::bp)
      .def_readonly("ratio", &tfm::bleu::CorpusScore::ratio)
      .def_readonly("hyp_len", &tfm::bleu::CorpusScore::hyp_len)
      .def_readonly("ref_len", &tfm::bleu::CorpusScore::ref_len)
      .def_readonly("precisions", &tfm::bleu::CorpusScore::precisions)
      .def_readonly("counts", &tfm::bleu::CorpusScore::counts)
      .def_readonly("totals", &tfm::bleu::CorpusScore::totals)
      .def("format", &tfm::bleu::CorpusScore::format)
      .def("__float__", [](const tfm::bleu::CorpusScore& s) { return s.score; })
      .def("__str__", &tfm::bleu::CorpusScore::format)
      .def("__repr__", [](const tfm::bleu::CorpusScore& s) { return "<CorpusScore " + s.format() + ">"; });
  bleu.def(
      "corpus",
      [](const py::object& hypotheses, const py::object& references) {
        // sacrebleu.corpus_bleu(hypotheses, [references]): one reference stream, given as it is or wrapped in a list.
        py::object refs = references;
        if (py::isinstance<py::list>(references) || py::isinstance<py::tuple>(references)) {
          const py::sequence seq = py::reinterpret_borrow<py::sequence>(references);
          if (seq.size() > 0 && !py::isinstance<py::str>(seq[0]) && py::isinstance<py::sequence>(seq[0])) {
            if (seq.size() != 1)
              throw py::value_error("references: " + std::to_string(seq.size()) +
                                    " reference streams; tfm.bleu.corpus takes one (a list of str, or [list of str])");
            refs = seq[0];
          }
        }
        auto h = string_list(hypotheses, "hypotheses"), r = string_list(refs, "references");
        py::gil_scoped_release nogil;
        return tfm::bleu::corpus(r, h);
      },
      py::arg("hypotheses"), py::arg("references"),
      "sacrebleu.corpus_bleu(hypotheses, [references]) with its defaults (13a, cased, 4-grams, exp smoothing), in "
      "its argument order: hypotheses first; references a list of str, or sacreBLEU's one-stream [list of str]");
  bleu.def("sentence", &tfm::bleu::sentence, py::arg("hypothesis"), py::arg("reference"), py::arg("k") = 2,
           "d2l.ai's sentence BLEU (space-separated tokens, n-grams up to k)");

  // ------------------------------------------------------------------ train
  py::class_<tfm::TrainProgress>(m, "TrainProgress", "What tfm.train passes to its progress callback")
      .def_readonly("epoch_end", &tfm::TrainProgress::epoch_end)
      .def_readonly("epoch", &tfm::TrainProgress::epoch)
      .def_readonly("epochs", &tfm::TrainProgress::epochs)
      .def_readonly("batch", &tfm::TrainProgress::batch)
      .def_readonly("num_batches", &tfm::TrainProgress::num_batches)
      .def_readonly("step", &tfm::TrainProgress::step)
      .def_readonly("train_loss", &tfm::TrainProgress::train_loss)
      .def_readonly("lr", &tfm::TrainProgress::lr)
      .def_readonly("tokens_per_sec", &tfm::TrainProgress::tokens_per_sec)
      .def_readonly("valid_loss", &tfm::TrainProgress::valid_loss)
      .def_readonly("valid_bleu", &tfm::TrainProgress::valid_bleu)
      .def("__repr__", [](const tfm::TrainProgress& p) {
        char buf[320];
        std::snprintf(buf, sizeof buf,
                      "TrainProgress(epoch=%lld/%lld, batch=%lld/%lld, step=%lld, train_loss=%.4f, lr=%.3g, "
                      "tokens_per_sec=%.0f, epoch_end=%s, valid_loss=%.4f, valid_bleu=%.2f)",
                      (long long)p.epoch, (long long)p.epochs, (long long)p.batch, (long long)p.num_batches,
                      (long long)p.step, p.train_loss, p.lr, p.tokens_per_sec, p.epoch_end ? "True" : "False",
                      p.valid_loss, p.valid_bleu);
        return std::string(buf);
      });
  py::class_<tfm::TrainSummary>(m, "TrainSummary")
      .def_readonly("best_valid_bleu", &tfm::TrainSummary::best_valid_bleu)
      .def_readonly("best_epoch", &tfm::TrainSummary::best_epoch)
      .def_readonly("epochs_run", &tfm::TrainSummary::epochs_run)
      .def_readonly("steps", &tfm::TrainSummary::steps)
      .def_readonly("seconds", &tfm::TrainSummary::seconds)
      .def_readonly("tokens_per_sec", &tfm::TrainSummary::tokens_per_sec)
      .def_readonly("step_tokens_per_sec", &tfm::TrainSummary::step_tokens_per_sec)
      .def_readonly("stopped_early", &tfm::TrainSummary::stopped_early)
      .def("__repr__", [](const tfm::TrainSummary& s) {
        char buf[320];
        std::snprintf(buf, sizeof buf,
                      "TrainSummary(best_valid_bleu=%.2f, best_epoch=%lld, epochs_run=%lld, steps=%lld, seconds=%.1f, "
                      "tokens_per_sec=%.0f, stopped_early=%s)",
                      s.best_valid_bleu, (long long)s.best_epoch, (long long)s.epochs_run, (long long)s.steps,
                      s.seconds, s.tokens_per_sec, s.stopped_early ? "True" : "False");
        return std::string(buf);
      });
  m.def(
      "train",
      [](const py::object& config_path, const py::object& out_path, const py::object& progress, bool resume,
         int threads, const py::object& overrides, bool verbose) {
        tfm::TrainRunOptions o;
        o.resume = resume;
        o.threads = threads;
        o.print_progress = verbose;
        if (!overrides.is_none()) {
          py::object dumps = py::module_::import("json").attr("dumps");
          for (auto [k, v] : overrides.cast<py::dict>())
            o.overrides.emplace_back(py::str(k).cast<std::string>(),
                                     py::isinstance<py::str>(v) ? v.cast<std::string>() : dumps(v).cast<std::string>());
        }
        if (!progress.is_none() && !PyCallable_Check(progress.ptr()))
          throw py::type_error("progress must be callable or None");
        py::object cb = progress;
        // After every step: Ctrl-C (KeyboardInterrupt) and exceptions from the callback propagate as
        // error_already_set and stop the run; the last checkpoint stays valid.
        o.progress = [cb](const tfm::TrainProgress& p) {
          py::gil_scoped_acquire gil;
          if (PyErr_CheckSignals() != 0) throw py::error_already_set();
          if (!cb.is_none()) cb(p);
        };
        const std::string config = config_path.is_none() ? "" : path_arg(config_path), out_dir = path_arg(out_path);
        py::gil_scoped_release nogil;
        return tfm::train(config, out_dir, o);
      },
      py::arg("config_path"), py::arg("out_dir"), py::arg("progress") = py::none(), py::arg("resume") = false,
      py::arg("threads") = 0, py::arg("overrides") = py::none(), py::arg("verbose") = false,
      "Train a transformer_seq2seq with the subword recipe (tfm train --config): config_path is its JSON (None "
      "with resume=True), out_dir a new or empty folder; progress(TrainProgress) is called after every step and "
      "epoch; overrides = {key: value} as --set; returns a TrainSummary");

  // ------------------------------------------------------------------ finetune
  py::class_<tfm::FinetuneProgress>(m, "FinetuneProgress", "What tfm.finetune passes to its progress callback")
      .def_readonly("epoch_end", &tfm::FinetuneProgress::epoch_end)
      .def_readonly("epoch", &tfm::FinetuneProgress::epoch)
      .def_readonly("epochs", &tfm::FinetuneProgress::epochs)
      .def_readonly("step", &tfm::FinetuneProgress::step)
      .def_readonly("total_steps", &tfm::FinetuneProgress::total_steps)
      .def_readonly("train_loss", &tfm::FinetuneProgress::train_loss)
      .def_readonly("lr", &tfm::FinetuneProgress::lr)
      .def_readonly("examples_per_sec", &tfm::FinetuneProgress::examples_per_sec)
      .def_readonly("eval_loss", &tfm::FinetuneProgress::eval_loss)
      .def_readonly("eval_accuracy", &tfm::FinetuneProgress::eval_accuracy)
      .def_readonly("eval_macro_f1", &tfm::FinetuneProgress::eval_macro_f1)
      .def_property_readonly("eval_metrics", [](const tfm::FinetuneProgress& p) {
        py::dict d;
        for (const auto& [k, v] : p.eval_metrics) d[py::str(k)] = v;
        return d;
      })
      .def_readonly("eval_mrr", &tfm::FinetuneProgress::eval_mrr)
      .def_readonly("eval_spearman", &tfm::FinetuneProgress::eval_spearman)
      .def("__repr__", [](const tfm::FinetuneProgress& p) {
        char buf[256];
        std::snprintf(buf, sizeof buf,
                      "FinetuneProgress(epoch=%lld/%lld, step=%lld/%lld, train_loss=%.4f, lr=%.3g, "
                      "examples_per_sec=%.1f, epoch_end=%s",
                      (long long)p.epoch, (long long)p.epochs, (long long)p.step, (long long)p.total_steps,
                      p.train_loss, p.lr, p.examples_per_sec, p.epoch_end ? "True" : "False");
        std::string r = buf;
        for (const auto& [k, v] : p.eval_metrics) {
          std::snprintf(buf, sizeof buf, ", %s=%.4f", k.c_str(), v);
          r += buf;
        }
        return r + ")";
      });
  py::class_<tfm::FinetuneSummary>(m, "FinetuneSummary")
      .def_readonly("out_dir", &tfm::FinetuneSummary::out_dir)
      .def_readonly("labels", &tfm::FinetuneSummary::labels)
      .def_readonly("steps", &tfm::FinetuneSummary::steps)
      .def_readonly("train_examples", &tfm::FinetuneSummary::train_examples)
      .def_readonly("eval_examples", &tfm::FinetuneSummary::eval_examples)
      .def_readonly("final_train_loss", &tfm::FinetuneSummary::final_train_loss)
      .def_readonly("best_epoch", &tfm::FinetuneSummary::best_epoch)
      .def_readonly("best_eval_accuracy", &tfm::FinetuneSummary::best_eval_accuracy)
      .def_readonly("best_eval_macro_f1", &tfm::FinetuneSummary::best_eval_macro_f1)
      .def_readonly("best_eval_loss", &tfm::FinetuneSummary::best_eval_loss)
      .def_readonly("resumed_from_step", &tfm::FinetuneSummary::resumed_from_step)
      .def_property_readonly("best_eval_metrics", [](const tfm::FinetuneSummary& s) {
        py::dict d;
        for (const auto& [k, v] : s.best_eval_metrics) d[py::str(k)] = v;
        return d;
      })
      .def_readonly("best_eval_mrr", &tfm::FinetuneSummary::best_eval_mrr)
      .def_readonly("best_eval_spearman", &tfm::FinetuneSummary::best_eval_spearman)
      .def_readonly("loss", &tfm::FinetuneSummary::loss)
      .def_readonly("seconds", &tfm::FinetuneSummary::seconds)
      .def_readonly("step_seconds", &tfm::FinetuneSummary::step_seconds)
      .def_readonly("stopped_by_signal", &tfm::FinetuneSummary::stopped_by_signal)
      .def("__repr__", [](const tfm::FinetuneSummary& s) {
        char buf[320];
        std::snprintf(buf, sizeof buf,
                      "FinetuneSummary(steps=%lld, final_train_loss=%.4f, best_epoch=%lld, best_eval_accuracy=%.4f, "
                      "best_eval_macro_f1=%.4f, seconds=%.1f)",
                      (long long)s.steps, s.final_train_loss, (long long)s.best_epoch, s.best_eval_accuracy,
                      s.best_eval_macro_f1, s.seconds);
        return std::string(buf);
      });
  m.def(
      "finetune",
      [](const py::object& model, const py::object& train, const py::object& out, const std::string& task,
         const py::object& eval, int64_t epochs, int64_t batch_size, double lr, double weight_decay,
         double warmup_ratio, int64_t max_length, uint64_t seed, const py::object& labels, bool overwrite,
         int threads, const py::object& progress, int64_t gradient_accumulation_steps, int64_t save_steps,
         bool resume, double mlm_probability, const std::string& precision, bool group_texts,
         const std::string& problem_type) {
        tfm::FinetuneOptions o;
        o.task = task;
        o.train_file = path_arg(train);
        o.out_dir = path_arg(out);
        if (!eval.is_none()) o.eval_file = path_arg(eval);
        o.epochs = epochs;
        o.batch_size = batch_size;
        o.learning_rate = lr;
        o.weight_decay = weight_decay;
        o.warmup_ratio = warmup_ratio;
        o.max_length = max_length;
        o.seed = seed;
        o.overwrite = overwrite;
        o.threads = threads;
        o.gradient_accumulation_steps = gradient_accumulation_steps;
        o.save_steps = save_steps;
        o.resume = resume;
        o.mlm_probability = mlm_probability;
        o.precision = precision;
        o.group_texts = group_texts;
        o.problem_type = problem_type;
        if (!labels.is_none()) o.labels = labels.cast<std::vector<std::string>>();
        if (!progress.is_none() && !PyCallable_Check(progress.ptr()))
          throw py::type_error("progress must be callable or None");
        py::object cb = progress;
        o.progress = [cb](const tfm::FinetuneProgress& p) {
          py::gil_scoped_acquire gil;
          if (PyErr_CheckSignals() != 0) throw py::error_already_set();
          if (!cb.is_none()) cb(p);
        };
        const std::string dir = path_arg(model);
        py::gil_scoped_release nogil;
        try {
          return tfm::finetune(dir, o);
        } catch (const py::error_already_set&) {  // the progress callback's own exception
          throw;
        } catch (const tfm::FileNotFoundError&) {
          throw;
        } catch (const std::invalid_argument& e) {
          throw std::invalid_argument(finetune_argument_names(e.what()));
        } catch (const std::runtime_error& e) {
          throw std::runtime_error(finetune_argument_names(e.what()));
        }
      },
      py::arg("model_dir"), py::arg("train"), py::arg("out_dir"), py::arg("task") = "classify",
      py::arg("eval") = py::none(), py::arg("epochs") = 3, py::arg("batch_size") = 16, py::arg("lr") = 5e-5,
      py::arg("weight_decay") = 0.0, py::arg("warmup_ratio") = 0.0, py::arg("max_length") = 128,
      py::arg("seed") = 42, py::arg("labels") = py::none(), py::arg("overwrite") = false, py::arg("threads") = 0,
      py::arg("progress") = py::none(), py::arg("gradient_accumulation_steps") = 1, py::arg("save_steps") = 0,
      py::arg("resume") = false, py::arg("mlm_probability") = 0.15, py::arg("precision") = "fp32",
      py::arg("group_texts") = false, py::arg("problem_type") = "",
      "Fine-tune a BERT folder (tfm finetune): task 'classify' (columns text [, text_pair], label; "
      "problem_type='regression', or numeric labels with a decimal point, trains one output with MSELoss), "
      "'token-classify' (tokens, tags), 'mlm' (text) or 'embed' (a sentence-transformers folder trained on anchor, "
      "positive [, negative] or sentence1, sentence2, score; writes a sentence-transformers folder); train/eval are .csv/.tsv/.jsonl files; writes a "
      "BertFor{SequenceClassification,TokenClassification,MaskedLM} folder to out_dir; progress(FinetuneProgress) "
      "after every step and epoch; resume=True continues a stopped run; group_texts=True (mlm) cuts the concatenated texts into "
      "blocks of max_length as run_mlm.py without --line_by_line; data-parallel under mpirun; returns a FinetuneSummary. ValueError for "
      "bad options or data, naming these arguments (a non-empty out_dir: 'pass overwrite=True to replace it, or "
      "resume=True to continue a stopped run').");

  // ------------------------------------------------------------------ token classification, fill-mask
  py::class_<tfm::TokenClassifier>(m, "TokenClassifier",
                                   "*ForTokenClassification folder of any encoder family: the token-classification "
                                   "pipeline (aggregation 'none'). Calls from several threads are safe.")
      .def(py::init([head_options](const py::object& path, const py::object& dtype, int threads) {
             const std::string dir = path_arg(path);
             tfm::ClassifierOptions o = head_options(dtype, threads);
             py::gil_scoped_release nogil;
             return tfm::TokenClassifier(dir, o);
           }),
           py::arg("model_dir"), py::arg("dtype") = py::none(), py::arg("threads") = 0, kHeadInitDoc)
      .def_property_readonly("dtype", &tfm::TokenClassifier::dtype)
      .def(
          "tag",
          [](const tfm::TokenClassifier& c, const py::object& texts, const std::string& function, bool all_tokens,
             int64_t max_length, const std::string& aggregation_strategy, const py::object& ignore_labels) {
            std::vector<std::string> t = string_list(texts, "texts");
            tfm::TagOptions o;
            o.function = function;
            o.all_tokens = all_tokens;
            o.aggregation_strategy = aggregation_strategy;
            if (!ignore_labels.is_none()) o.ignore_labels = string_list(ignore_labels, "ignore_labels");
            std::vector<std::vector<tfm::TokenTag>> r;
            {
              py::gil_scoped_release nogil;
              r = c.tag(encode_texts(c.tokenizer(), t, max_length), t, o);
            }
            py::list out;
            for (const auto& row : r) {
              py::list l;
              for (const auto& x : row) {
                py::dict d;
                if (x.group()) {
                  d["entity_group"] = x.entity, d["score"] = x.score, d["word"] = x.word;
                } else {
                  d["entity"] = x.entity, d["score"] = x.score, d["index"] = x.index, d["word"] = x.word;
                }
                d["start"] = x.start, d["end"] = x.end;
                l.append(d);
              }
              out.append(l);
            }
            return out;
          },
          py::arg("texts"), py::arg("function") = "softmax", py::arg("all_tokens") = false, py::arg("max_length") = 0,
          py::arg("aggregation_strategy") = "none", py::arg("ignore_labels") = py::none(),
          "Per text a list of {entity, score, index, word, start, end} (aggregation_strategy 'none'), or of entity "
          "groups {entity_group, score, word, start, end} ('simple', 'first', 'average', 'max'), as the "
          "token-classification pipeline; ignore_labels (default ['O']) left out unless all_tokens")
      .def_property_readonly("labels", &tfm::TokenClassifier::labels);
  py::class_<tfm::QuestionAnswerer>(m, "QuestionAnswerer",
                                    "*ForQuestionAnswering folder (BERT, RoBERTa / XLM-R, DistilBERT, MPNet): the "
                                    "question-answering pipeline. Calls from several threads are safe.")
      .def(py::init([head_options](const py::object& path, const py::object& dtype, int threads) {
             const std::string dir = path_arg(path);
             tfm::ClassifierOptions o = head_options(dtype, threads);
             py::gil_scoped_release nogil;
             return tfm::QuestionAnswerer(dir, o);
           }),
           py::arg("model_dir"), py::arg("dtype") = py::none(), py::arg("threads") = 0, kHeadInitDoc)
      .def_property_readonly("dtype", &tfm::QuestionAnswerer::dtype)
      .def(
          "__call__",
          [](const tfm::QuestionAnswerer& qa, const std::string& question, const std::string& context, int64_t top_k,
             int64_t doc_stride, int64_t max_answer_len, int64_t max_seq_len, bool handle_impossible_answer,
             bool align_to_words) -> py::object {
            tfm::QuestionAnsweringOptions o;
            o.top_k = top_k, o.doc_stride = doc_stride, o.max_answer_length = max_answer_len;
            o.max_seq_length = max_seq_len, o.handle_impossible_answer = handle_impossible_answer;
            o.align_to_words = align_to_words;
            std::vector<tfm::QaAnswer> r;
            {
              py::gil_scoped_release nogil;
              r = qa.answer(question, context, o);
            }
            py::list out;
            for (const tfm::QaAnswer& a : r) {
              py::dict d;
              d["score"] = a.score, d["start"] = a.start, d["end"] = a.end, d["answer"] = a.answer;
              out.append(d);
            }
            if (out.size() == 1) return out[0];
            return out;
          },
          py::arg("question"), py::arg("context"), py::arg("top_k") = 1, py::arg("doc_stride") = 0,
          py::arg("max_answer_len") = 15, py::arg("max_seq_len") = 0, py::arg("handle_impossible_answer") = false,
          py::arg("align_to_words") = true,
          "The answer {score, start, end, answer} (a list, best first, when there are several), as transformers' "
          "question-answering pipeline: start / end index the context's characters; doc_stride / max_seq_len 0: "
          "the pipeline's defaults. ValueError for an empty question or context and bad options.");
  py::class_<tfm::MaskFiller>(m, "MaskFiller",
                              "*ForMaskedLM folder of any encoder family: the fill-mask pipeline. Calls from several "
                              "threads are safe.")
      .def(py::init([head_options](const py::object& path, const py::object& dtype, int threads) {
             const std::string dir = path_arg(path);
             tfm::ClassifierOptions o = head_options(dtype, threads);
             py::gil_scoped_release nogil;
             return tfm::MaskFiller(dir, o);
           }),
           py::arg("model_dir"), py::arg("dtype") = py::none(), py::arg("threads") = 0, kHeadInitDoc)
      .def_property_readonly("dtype", &tfm::MaskFiller::dtype)
      .def_property_readonly("mask_token", &tfm::MaskFiller::mask_token)
      .def(
          "fill",
          [](const tfm::MaskFiller& f, const py::object& texts, int64_t top_k, int64_t max_length) {
            std::vector<std::string> t = string_list(texts, "texts");
            std::vector<std::vector<std::vector<tfm::MaskCandidate>>> r;
            {
              py::gil_scoped_release nogil;
              r = f.fill(encode_texts(f.tokenizer(), t, max_length), top_k);
            }
            py::list out;
            for (const auto& per_text : r) {
              py::list masks;
              for (const auto& cands : per_text) {
                py::list l;
                for (const auto& c : cands) {
                  py::dict d;
                  d["score"] = c.score, d["token"] = c.token, d["token_str"] = c.token_str, d["sequence"] = c.sequence;
                  l.append(d);
                }
                masks.append(l);
              }
              out.append(masks);
            }
            return out;
          },
          py::arg("texts"), py::arg("top_k") = 5, py::arg("max_length") = 0,
          "Per text, per [MASK], the top_k {score, token, token_str, sequence} best first. ValueError for a text "
          "without [MASK] ('input 1 has no [MASK] token', as the fill-mask pipeline raises), top_k < 1, a text over "
          "max_position_embeddings without max_length")
      .def(
          "fill_mask",
          [](const tfm::MaskFiller& f, const py::object& inputs, int64_t top_k, int64_t max_length) -> py::object {
            const bool one = py::isinstance<py::str>(inputs);
            std::vector<std::string> t = one ? std::vector<std::string>{inputs.cast<std::string>()}
                                             : string_list(inputs, "inputs");
            if (t.empty()) throw py::value_error("inputs is empty");
            std::vector<tfm::TextEncoding> enc = encode_texts(f.tokenizer(), t, max_length);
            std::vector<std::vector<std::vector<tfm::MaskCandidate>>> r;
            {
              py::gil_scoped_release nogil;
              r = f.fill(enc, top_k);
            }
            py::list out;
            for (const auto& per_text : r) {
              py::list masks;
              for (const auto& cands : per_text) {
                py::list l;
                for (const auto& c : cands) {
                  py::dict d;
                  d["score"] = c.score, d["token"] = c.token, d["token_str"] = c.token_str, d["sequence"] = c.sequence;
                  l.append(d);
                }
                masks.append(l);
              }
              // The pipeline: one [MASK] gives its list of candidates, several a list per mask.
              out.append(masks.size() == 1 ? py::object(masks[0]) : py::object(masks));
            }
            return one ? py::object(out[0]) : py::object(out);
          },
          py::arg("inputs"), py::arg("top_k") = 5, py::arg("max_length") = 0,
          "transformers' fill-mask pipeline: a str gives its [{score, token, token_str, sequence}] best first (a "
          "list per [MASK] when it has several), a list of str a list of those. ValueError for an input without "
          "[MASK], top_k < 1, an input over max_position_embeddings without max_length");

  // ------------------------------------------------------------------ convert, d2l training
  py::class_<tfm::ConvertSummary>(m, "ConvertSummary")
      .def_readonly("converted", &tfm::ConvertSummary::converted)
      .def_readonly("weights_path", &tfm::ConvertSummary::weights_path)
      .def_readonly("bytes", &tfm::ConvertSummary::bytes)
      .def_readonly("source_bytes", &tfm::ConvertSummary::source_bytes)
      .def_readonly("unchanged", &tfm::ConvertSummary::unchanged)
      .def("__repr__", [](const tfm::ConvertSummary& s) {
        return "ConvertSummary(converted=" + std::to_string(s.converted) + ", unchanged=" + std::to_string(s.unchanged) +
               ", weights_path=" + py::repr(py::str(s.weights_path)).cast<std::string>() +
               ", bytes=" + std::to_string(s.bytes) + ", source_bytes=" + std::to_string(s.source_bytes) + ")";
      });
  m.def(
      "convert",
      [](const py::object& model_dir, const py::object& out_dir, const std::string& dtype) {
        const std::string in = path_arg(model_dir), out = path_arg(out_dir);
        tfm::ConvertOptions o;
        o.dtype = dtype;
        py::gil_scoped_release nogil;
        return tfm::convert(in, out, o);
      },
      py::arg("model_dir"), py::arg("out_dir"), py::arg("dtype"),
      "Copy an encoder folder with its Linear weights in 'bf16' or 'int8' (tfm convert); returns a ConvertSummary");
  py::class_<tfm::ModelInfo>(m, "ModelInfo")
      .def_readonly("dir", &tfm::ModelInfo::dir)
      .def_readonly("model_type", &tfm::ModelInfo::model_type)
      .def_readonly("family", &tfm::ModelInfo::family)
      .def_readonly("architectures", &tfm::ModelInfo::architectures)
      .def_readonly("translation", &tfm::ModelInfo::translation)
      .def_readonly("task", &tfm::ModelInfo::task)
      .def_readonly("source_lang", &tfm::ModelInfo::source_lang)
      .def_readonly("target_lang", &tfm::ModelInfo::target_lang);
  m.def(
      "inspect_model", [](const py::object& model_dir) { return tfm::inspect_model(path_arg(model_dir)); },
      py::arg("model_dir"),
      "What a model folder holds (its config.json through the family registry): family, model_type, "
      "architectures, translation, task, source_lang / target_lang; RuntimeError for a folder of an unsupported "
      "kind");
  py::class_<tfm::D2lTrainSummary>(m, "D2lTrainSummary")
      .def_readonly("loss", &tfm::D2lTrainSummary::loss)
      .def_readonly("token_loss", &tfm::D2lTrainSummary::token_loss)
      .def_readonly("tokens_per_sec", &tfm::D2lTrainSummary::tokens_per_sec)
      .def_readonly("seconds", &tfm::D2lTrainSummary::seconds)
      .def_readonly("epochs_run", &tfm::D2lTrainSummary::epochs_run)
      .def("__repr__", [](const tfm::D2lTrainSummary& s) {
        char buf[200];
        std::snprintf(buf, sizeof buf,
                      "D2lTrainSummary(loss=%.4f, token_loss=%.4f, epochs_run=%lld, seconds=%.1f, tokens_per_sec=%.0f)",
                      s.loss, s.token_loss, (long long)s.epochs_run, s.seconds, s.tokens_per_sec);
        return std::string(buf);
      });
  m.def(
      "train_d2l",
      [](const py::object& data, const py::object& out_dir, int64_t num_examples, int64_t epochs, uint64_t seed,
         bool overwrite, bool progress, int threads) {
        tfm::D2lTrainOptions o;
        o.data = path_arg(data);
        o.out = path_arg(out_dir);
        o.num_examples = num_examples, o.epochs = epochs, o.seed = seed, o.overwrite = overwrite;
        o.progress = progress, o.threads = threads;
        py::gil_scoped_release nogil;
        return tfm::train_d2l(o);
      },
      py::arg("data"), py::arg("out_dir"), py::arg("num_examples") = 600, py::arg("epochs") = 200,
      py::arg("seed") = 0, py::arg("overwrite") = false, py::arg("progress") = false, py::arg("threads") = 0,
      "d2l.ai's trainer on a 'source<TAB>target' corpus (tfm train --data); returns a D2lTrainSummary");
  m.def(
      "download",
      [](const std::string& id, const py::object& revision, const py::object& include, const py::object& cache_dir,
         bool progress) {
        tfm::HubDownloadOptions o;
        if (!revision.is_none()) o.revision = revision.cast<std::string>();
        if (!include.is_none()) o.include = string_list(include, "include");
        if (!cache_dir.is_none()) o.cache_dir = path_arg(cache_dir);
        o.progress = progress;
        py::gil_scoped_release nogil;
        return tfm::download_model(id, o);
      },
      py::arg("model_id"), py::arg("revision") = py::none(), py::arg("include") = py::none(),
      py::arg("cache_dir") = py::none(), py::arg("progress") = true,
      "Download a Hugging Face model (tfm download) into the huggingface_hub cache and return its snapshot folder, "
      "which Encoder, Classifier, Translator and Tokenizer take (they also take the id itself, at revision main). "
      "revision: branch, tag or commit; include: fnmatch globs (default: the files tfm reads). HF_ENDPOINT, "
      "HF_TOKEN and HF_HUB_OFFLINE are read as huggingface_hub reads them");
}
