// The one GEMM seam of the project: every matrix product goes through here, backed by oneDNN (Debian
// libdnnl 2.x, OpenMP runtime, so it shares the OpenMP threads set by tfm::set_num_threads).
//
// - gemm(): a plain row-major product (cblas_sgemm convention) for training, attention and other activations
//   times activations; dnnl_sgemm, or a plain loop for products too small to amortise a library call.
// - PackedLinear: an inference Linear whose weights are reordered once, at load (or, for PackedLinear::lazy, at
//   their second use: a model loaded to run once multiplies by the weights where they lie), into the blocked
//   layout a oneDNN matmul picks (format_tag::any), in fp32, bf16 or int8, with bias and activation fused into
//   the product.
//   One matmul primitive is created per (rows, activation) and cached (about 0.15 ms each).
//
// What each compute type does on a CPU without the instructions (oneDNN picks kernels at run time; the build
// stays x86-64-v3): fp32 runs everywhere (AVX2 brgemm/gemm kernels on Zen 3 or Haswell).
// int8 runs as int8 everywhere: with AMX or VNNI (AVX512_VNNI, AVX_VNNI) on 8-bit weights; without them
// oneDNN's AVX2 / AVX-512 kernels (gemm:jit) sum pairs of u8 x s8 products in saturating int16 (vpmaddubsw), so
// the weights are quantised to 7 bits there (int8_weight_max() 63: a pair is at most 2 x 255 x 63 = 32,130 <
// 32,767, the remedy oneDNN documents and ONNX Runtime's reduce_range), and 8-bit weights stored by `tfm convert`
// are requantised to 7 bits at load. (8-bit weights there gave token cosines of 0.96-0.98 on Zen 3.)
// ONEDNN_MAX_CPU_ISA=AVX2 (or AVX512_CORE) at start-up runs this path on a CPU that has VNNI.
// bf16 uses AMX or AVX512_BF16. Without them (has_native_product false) a bf16 PackedLinear falls back to an
// fp32 product of the same weights (rounded to bf16, or as stored) widened to fp32, inputs kept fp32, so its
// compute_type() is F32 and the result is at least as close to fp32 as the native product (the model's dtype()
// still names the type of its weights); one line on stderr says so, once per process, when stderr is a terminal
// (oneDNN 2.6 has no bf16 matmul on AVX2-only CPUs). With TFM_EMULATE_BF16=1 (ops/gemm_bf16.h) it runs the bf16
// arithmetic instead (activations rounded to bf16, fp32 sums), so that its tests run on every CPU.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ops/activation.h"

namespace tfm::ops {

// C[M, N] = alpha * op(A) op(B) + beta * C, all row-major; op(A) is [M, K] (A is [K, M] when trans_a),
// op(B) is [K, N] (B is [N, K] when trans_b). lda/ldb/ldc are row strides in floats. beta = 0 ignores C's
// contents (NaN-safe). Thread-safe; inside an OpenMP parallel region it runs on the calling thread only.
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
          const float* B, int64_t ldb, float beta, float* C, int64_t ldc);
// Plain triple loop in double precision (same contract); tests compare gemm() against it.
void gemm_ref(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
              const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// How inference weights are stored and multiplied. Accumulation is fp32 (bf16) or int32 (int8) in every case.
enum class ComputeType { F32, BF16, I8 };
// "fp32" / "float32", "bf16" / "bfloat16", "int8"; throws std::invalid_argument naming the accepted values.
ComputeType parse_compute_type(const std::string& name);
const char* compute_type_name(ComputeType ct);  // "fp32", "bf16", "int8"
// oneDNN's run-time view of the CPU (e.g. "avx512_core_amx"), and the oneDNN version, for logs and benchmarks.
std::string cpu_isa_name();
std::string onednn_version();
// Whether a PackedLinear of type ct multiplies in ct on this CPU: always for F32 and I8 (7-bit weights without
// VNNI); BF16 with AVX512_BF16 or AMX (has_bf16_gemm). Otherwise it runs the fp32 fallback described above.
bool has_native_product(ComputeType ct);
// The largest |q| of the int8 weights a PackedLinear multiplies by on this CPU: 127 where oneDNN runs VNNI or AMX
// int8 kernels, 63 (7-bit weights) where it does not (see above). Decided once, from oneDNN's effective ISA.
int int8_weight_max();

// Granularity of int8 activation scales, process-wide: PerToken by default, PerTensor when TFM_INT8_ACT=tensor
// at start-up. PerToken keeps each row independent of the other rows of a call (a served request's result does
// not depend on its batch-mates) and is more accurate when tokens differ widely in magnitude; PerTensor fuses
// dequantisation into the matmul and measured at most 4% faster on BERT-base (BENCHMARKS.md).
// Set it before running forward passes, not concurrently with them.
enum class Int8ActivationScales { PerTensor, PerToken };
void set_int8_activation_scales(Int8ActivationScales s);
Int8ActivationScales int8_activation_scales();

// Whether the producers of a GEMM's input (add + LayerNorm, the first FFN product) write it in the product's
// input type (PreparedInput) on the inference path, process-wide: on by default, off when TFM_FUSED_QUANT=0 at
// start-up (then every PackedLinear converts its fp32 input itself: the same values, one more pass; benchmarks
// compare the two). Set it before running forward passes, not concurrently with them.
void set_fused_quantisation(bool on);
bool fused_quantisation();

// An activation matrix [rows, cols] already in a PackedLinear's input type (PackedLinear::input_type()), written
// by the kernel that produced the activations while each row was in cache, so that the product reads it without
// a conversion pass. It holds exactly what PackedLinear::forward computes from the fp32 rows:
//   BF16: bf16 bits, round to nearest even (to_bf16);
//   I8:   s8 values with one scale per row (scale = max |x| / 127, 1 for an all-zero row; q = x / scale rounded
//         half to even, clamped to [-127, 127]); a row holding a NaN or an infinity has scale NaN and q all 0.
// ct F32 means nothing is held.
struct PreparedInput {
  ComputeType ct = ComputeType::F32;
  int64_t rows = 0, cols = 0;
  std::vector<uint16_t> bf16;  // [rows, cols] when ct is BF16
  std::vector<int8_t> s8;      // [rows, cols] when ct is I8
  std::vector<float> scale;    // [rows] when ct is I8
  // Sizes the buffers for ct (contents unspecified until written); F32 marks it empty.
  void reset(ComputeType ct, int64_t rows, int64_t cols);
  void clear() { reset(ComputeType::F32, 0, 0); }
  bool holds(ComputeType t, int64_t r, int64_t c) const {
    return ct != ComputeType::F32 && ct == t && rows == r && cols == c;
  }
};
// dst = x [rows, cols] (row-major fp32) in type ct, the plain conversion (parallel over rows, vectorised for
// kernel_isa()). The reference every fused producer is tested against.
void prepare_input(PreparedInput& dst, ComputeType ct, const float* x, int64_t rows, int64_t cols);
// The same in plain scalar code (std::nearbyint of x / scale for s8): the reference the fast kernels are tested
// against (s8 values may differ by one where x / scale and x * (1 / scale) round to different sides of a half).
void prepare_input_ref(PreparedInput& dst, ComputeType ct, const float* x, int64_t rows, int64_t cols);

// The one int8 weight quantiser: symmetric, one scale per output row, what PackedLinear applies to fp32 weights
// at load (qmax int8_weight_max()) and what `tfm convert --dtype int8` stores (qmax 127, so a converted folder
// loads to the same weights on a VNNI CPU): scale[r] = max |w[r, :]| / qmax (1 for an all-zero row),
// q[r, c] = w[r, c] * (1 / scale[r]) rounded half to even, clamped to [-qmax, qmax]; a row holding a NaN or an
// infinity gets scale NaN and q all 0. w [rows, cols] fp32 row-major; q [rows, cols] and scale [rows] written.
// Parallel over rows. Throws std::invalid_argument for qmax outside [1, 127].
void quantize_weights_s8(int8_t* q, float* scale, const float* w, int64_t rows, int64_t cols, int qmax = 127);

// Optional activation applied to the product (torch.nn.Linear followed by it).
enum class Epilogue { None, Relu, Gelu, GeluTanh, Silu };
Epilogue epilogue_of(Activation act);
// The activation of an epilogue other than None.
Activation activation_of(Epilogue ep);

// out[N, out_features] = act(inp[N, in_features] @ weight[out_features, in_features]^T + bias)
// (torch.nn.functional.linear), weights packed once.
//   F32:  fp32 weights, fp32 product (matches linear_forward up to summation order).
//   BF16: weights rounded to bf16 at pack time, each input row rounded to bf16 before the product, fp32
//         accumulation, output fp32.
//   I8:   dynamic quantisation: weights s8 with one scale per output row (max |w| / 127); the input quantised
//         to s8 at run time with one scale per row (max |x| / 127, the default) or per tensor
//         (set_int8_activation_scales); int32 accumulation. Per tensor, dequantisation (output scale
//         x_scale * w_scale[o], as a post-op), bias and activation run inside the oneDNN matmul; per row they are one extra
//         pass over the output (oneDNN 2.x output scales cannot vary per row).
//         An input row holding a NaN or an infinity gives NaN in all its outputs (its scale would be NaN or
//         infinite; never a finite answer); per tensor, such a call falls back to per-row scales, so that the
//         other rows are unaffected. (fp32 and bf16 propagate NaN as IEEE arithmetic does, except that oneDNN's
//         fused ReLU is max(x, 0) and maps NaN to 0.)
// Copyable (shares the packed weights); forward is const and thread-safe.
class PackedLinear {
 public:
  PackedLinear() = default;
  // weight: [out_features, in_features] fp32 row-major; bias: [out_features] or null. Both are copied (packed),
  // so the caller may release them afterwards. Where !has_native_product(ct), the fp32 fallback (above). I8
  // weights are quantised to int8_weight_max().
  PackedLinear(const float* weight, const float* bias, int64_t in_features, int64_t out_features, ComputeType ct);
  // Prequantised int8 weights (tfm convert): weight [out, in] s8, weight_scale [out] (w = weight * scale). Where
  // int8_weight_max() is below 127 they are requantised to it (w = weight * scale quantised again).
  static PackedLinear from_int8(const int8_t* weight, const float* weight_scale, const float* bias,
                                int64_t in_features, int64_t out_features);
  // bf16 weights as stored by `tfm convert --dtype bf16` (weight [out, in] raw bf16): packed for ComputeType
  // BF16 as they are, without a round trip through fp32.
  static PackedLinear from_bf16(const uint16_t* weight, const float* bias, int64_t in_features, int64_t out_features);
  // Weights used where they lie, packed only when they are used again (load once, run once: a one-sentence
  // `tfm encode` multiplies by the mapped file's pages and never allocates or reorders a packed copy).
  // parts: the weights of each part, [part_out, in_features] row-major of type `ct` (F32: float, BF16: raw bf16
  // uint16_t, I8: int8_t with weight_scale [parts * part_out], w = q * scale of its row), stacked along
  // out_features (out_features = parts.size() * part_out; a fused query/key/value projection is three parts);
  // bias [out_features] or null (copied). The first forward multiplies by the parts in place (one product per
  // part, same results as the packed product up to summation order); the second forward call packs them (once,
  // thread-safe, as the constructor does), then calls `after_pack` (e.g. to drop the file pages) and drops
  // `owner`, which must keep the parts valid and unchanged until then. Where oneDNN has no fast kernel for the
  // plain layout (its reference kernel would run), the weights are packed at once instead.
  // Where !has_native_product(ct), the parts are widened to fp32 and packed at once (the fallback above); I8
  // parts where int8_weight_max() is below 127 are requantised and packed at once.
  static PackedLinear lazy(std::vector<const void*> parts, const float* weight_scale, const float* bias,
                           int64_t in_features, int64_t part_out, ComputeType ct, std::shared_ptr<const void> owner,
                           std::function<void()> after_pack = {});
  // Whether the weights are in oneDNN's packed layout (false for a lazy one not yet packed).
  bool is_packed() const;
  // Whether every weight (and scale and bias) is finite: one read of the packed copy (or of a lazy one's parts),
  // which the loader checks instead of the file it was packed from (a bf16 weight that rounded to infinity also
  // counts).
  bool all_finite() const;
  // out: [N, out_features] fp32, written; inp: [N, in_features] fp32.
  void forward(float* out, const float* inp, int64_t N, Epilogue epilogue = Epilogue::None) const;

  // The type forward(const PreparedInput&) takes: BF16 for a BF16 product, I8 for an I8 product with per-token
  // activation scales (the default); F32, meaning "give fp32", for an F32 product, for I8 per tensor (its scale
  // needs the whole tensor), when fused_quantisation() is off, and when undefined.
  ComputeType input_type() const;
  // out: [in.rows, out_features] fp32, written, from an input already in input_type() (in.cols ==
  // in_features). The same result as forward() on the fp32 rows `in` was made from. Throws
  // std::invalid_argument when `in` does not match.
  void forward(float* out, const PreparedInput& in, Epilogue epilogue = Epilogue::None) const;
  // The product written as the next PackedLinear's input: next [N, out_features] in next_ct (that product's
  // input_type(), BF16 or I8; F32 throws std::invalid_argument), bit for bit what forward() followed by
  // prepare_input gives. The input is `in` when non-null, else inp [N, in_features] fp32. work: [N,
  // out_features] fp32 scratch (overwritten; unused when both products are BF16: the matmul writes bf16).
  void forward_to(PreparedInput& next, ComputeType next_ct, float* work, const float* inp, const PreparedInput* in,
                  int64_t N, Epilogue epilogue = Epilogue::None) const;

  bool defined() const { return impl_ != nullptr; }
  int64_t in_features() const;
  int64_t out_features() const;
  ComputeType compute_type() const;  // F32 when undefined
  struct Impl;

 private:
  // ComputeType BF16 run as bf16_gemm_emulated() says (weight: [out, in] fp32 holding bf16 values).
  static PackedLinear emulated_bf16(const float* weight, const float* bias, int64_t in_features,
                                    int64_t out_features);
  std::shared_ptr<Impl> impl_;
};

}  // namespace tfm::ops
