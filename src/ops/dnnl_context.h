// The oneDNN CPU engine and this thread's stream, shared by every oneDNN call of the project (ops/gemm.cpp,
// ops/gemm_bf16.cpp). Internal to src/ops.
#pragma once
#include <oneapi/dnnl/dnnl.hpp>

namespace tfm::ops {
dnnl::engine& dnnl_cpu_engine();
// A stream per thread: oneDNN does not promise that one stream may be used from several threads at once.
dnnl::stream& dnnl_cpu_stream();
}  // namespace tfm::ops
