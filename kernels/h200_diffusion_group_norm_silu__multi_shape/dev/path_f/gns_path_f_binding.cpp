// Dev torch binding for path F (src/gns_path_f.cu: gnsf_plan, gnsf_forward) and the L2 microbenchmark
// (dev/path_f/gnsf_l2.cu: gnsf_l2_stream); the candidate itself goes through src/gns_binding.cpp (force_path 8).
// Nothing here throws on a plan or launch failure: each function returns the launcher's code and pathf.py raises
// in Python (a C++ exception out of an extension killed the process in v3, docs/notes.md). The caller (pathf.py)
// allocates y and the workspace through torch's allocator, so a call is CUDA-graph capturable; launches go to
// torch's current stream.
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/extension.h>

#include <cuda_runtime_api.h>

#include <vector>

extern "C" {
int gnsf_plan(int dtype, int64_t N, int64_t C, int64_t HW, int64_t G, int64_t chunk_bytes, int flags, int aligned,
              int64_t* out10);
int gnsf_forward(const void* x, const void* w, const void* b, void* y, void* ws, int64_t ws_bytes, int dtype,
                 int64_t N, int64_t C, int64_t HW, int64_t G, float eps, int64_t chunk_bytes, int flags,
                 cudaStream_t stream);
int gnsf_l2_stream(const void* a, const void* c, void* wr, int64_t nbytes, int pa, int pc, int pw, void* sink,
                   cudaStream_t stream);
}

namespace {

int dtype_code(const at::ScalarType t) {
  switch (t) {
    case at::kHalf:
      return 0;
    case at::kBFloat16:
      return 1;
    case at::kFloat:
      return 2;
    default:
      return -1;
  }
}

const void* opt_ptr(const torch::Tensor& t) { return t.numel() > 0 ? t.data_ptr() : nullptr; }

// [rc, vec, tile_elems, P, gpc, K, launches, ws_bytes, max_blocks, chunk_x_bytes, group_bytes]
std::vector<int64_t> plan(int64_t dtype, int64_t N, int64_t C, int64_t HW, int64_t G, int64_t chunk_bytes,
                          int64_t flags, int64_t aligned) {
  std::vector<int64_t> out(11, 0);
  out[0] = gnsf_plan(static_cast<int>(dtype), N, C, HW, G, chunk_bytes, static_cast<int>(flags),
                     static_cast<int>(aligned), out.data() + 1);
  return out;
}

// y (preallocated, x's shape and dtype, contiguous) = silu(group_norm(x)); w / b: [C] or empty (absent).
int64_t forward(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b, const torch::Tensor& y,
                const torch::Tensor& ws, int64_t num_groups, double eps, int64_t chunk_bytes, int64_t flags) {
  const int dt = dtype_code(x.scalar_type());
  if (dt < 0 || !x.is_cuda() || !x.is_contiguous() || !y.is_contiguous() || x.dim() < 2 ||
      y.scalar_type() != x.scalar_type() || y.numel() != x.numel())
    return -1;
  if ((w.numel() > 0 && (w.scalar_type() != x.scalar_type() || w.numel() != x.size(1) || !w.is_contiguous())) ||
      (b.numel() > 0 && (b.scalar_type() != x.scalar_type() || b.numel() != x.size(1) || !b.is_contiguous())))
    return -1;
  const int64_t N = x.size(0);
  const int64_t C = x.size(1);
  if (N <= 0 || C <= 0 || x.numel() == 0) return -1;
  const int64_t HW = x.numel() / (N * C);
  const c10::cuda::CUDAGuard guard(x.device());
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream(x.device().index()).stream();
  return gnsf_forward(x.data_ptr(), opt_ptr(w), opt_ptr(b), y.data_ptr(), ws.data_ptr(), ws.numel(), dt, N, C, HW,
                      num_groups, static_cast<float>(eps), chunk_bytes, static_cast<int>(flags), stream);
}

// One L2 microbenchmark kernel over a.numel() bytes (uint8 views); c / wr empty = absent.
int64_t l2_stream(const torch::Tensor& a, const torch::Tensor& c, const torch::Tensor& wr, const torch::Tensor& sink,
                  int64_t pa, int64_t pc, int64_t pw) {
  if (!a.is_cuda() || (c.numel() > 0 && c.numel() != a.numel()) || (wr.numel() > 0 && wr.numel() != a.numel()))
    return -1;
  const c10::cuda::CUDAGuard guard(a.device());
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream(a.device().index()).stream();
  return gnsf_l2_stream(a.data_ptr(), opt_ptr(c), wr.numel() > 0 ? wr.data_ptr() : nullptr, a.numel(),
                        static_cast<int>(pa), static_cast<int>(pc), static_cast<int>(pw), sink.data_ptr(), stream);
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("plan", &plan, "path F plan: [rc, vec, tile_elems, P, gpc, K, launches, ws_bytes, max_blocks, chunk_x, group]");
  m.def("forward", &forward, "path F: y = silu(group_norm(x)) into y; returns 0 or an error code");
  m.def("l2_stream", &l2_stream, "L2 microbenchmark stream kernel; returns 0 or an error code");
}
