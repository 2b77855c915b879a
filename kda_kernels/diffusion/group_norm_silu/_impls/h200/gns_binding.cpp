// Torch binding for the pure-CUDA GroupNorm+SiLU launchers in gns_kernels.cu.
// Launches on torch's current stream; the only allocations are the output and (for groups
// too large for a cluster's shared memory) a small fp32 workspace, both through torch's
// caching allocator, so the call is CUDA-graph capturable.  Contract checks live in
// register.py (anything outside the contract never reaches this file).
#include <torch/extension.h>

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>

extern "C" {
int64_t gns_workspace_bytes(int dtype, int64_t N, int64_t C, int64_t HW, int64_t G,
                            int x_aligned16, int force_path, int force_cs, int smem_cap);
int gns_forward(const void* x, const void* w, const void* b, void* y, void* ws, int64_t ws_bytes,
                int dtype, int64_t N, int64_t C, int64_t HW, int64_t G, float eps, int force_path,
                int force_cs, int smem_cap, cudaStream_t stream);
int gns_describe(int dtype, int64_t N, int64_t C, int64_t HW, int64_t G, int force_path,
                 int force_cs, int smem_cap, int64_t* out8);
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

torch::Tensor group_norm_silu(const torch::Tensor& x, const torch::Tensor& weight,
                              const torch::Tensor& bias, int64_t num_groups, double eps,
                              int64_t force_path, int64_t force_cs, int64_t smem_cap) {
  TORCH_CHECK(x.is_cuda() && weight.is_cuda() && bias.is_cuda(), "gns: CUDA tensors expected");
  TORCH_CHECK(x.is_contiguous() && weight.is_contiguous() && bias.is_contiguous(),
              "gns: contiguous tensors expected");
  TORCH_CHECK(x.dim() >= 2, "gns: x must be at least 2-D");
  const int dt = dtype_code(x.scalar_type());
  TORCH_CHECK(dt >= 0 && weight.scalar_type() == x.scalar_type() &&
                  bias.scalar_type() == x.scalar_type(),
              "gns: fp16/bf16/fp32 with matching weight/bias dtype expected");
  const int64_t N = x.size(0);
  const int64_t C = x.size(1);
  TORCH_CHECK(weight.numel() == C && bias.numel() == C, "gns: weight/bias must have C entries");
  TORCH_CHECK(num_groups > 0 && C % num_groups == 0, "gns: C % num_groups != 0");
  const int64_t HW = C > 0 && N > 0 ? x.numel() / (N * C) : 0;
  const c10::cuda::CUDAGuard guard(x.device());
  auto y = torch::empty_like(x, at::MemoryFormat::Contiguous);
  if (x.numel() == 0) return y;
  const int aligned = (reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(y.data_ptr()) % 16 == 0)
                          ? 1
                          : 0;
  const int64_t ws_bytes = gns_workspace_bytes(dt, N, C, HW, num_groups, aligned, (int)force_path,
                                               (int)force_cs, (int)smem_cap);
  TORCH_CHECK(ws_bytes >= 0, "gns: planning failed (code ", ws_bytes, ")");
  torch::Tensor ws;
  void* ws_ptr = nullptr;
  if (ws_bytes > 0) {
    ws = torch::empty({ws_bytes}, x.options().dtype(at::kByte));
    ws_ptr = ws.data_ptr();
  }
  cudaStream_t stream = at::cuda::getCurrentCUDAStream(x.device().index()).stream();
  const int rc = gns_forward(x.data_ptr(), weight.data_ptr(), bias.data_ptr(), y.data_ptr(), ws_ptr,
                             ws_bytes, dt, N, C, HW, num_groups, (float)eps, (int)force_path,
                             (int)force_cs, (int)smem_cap, stream);
  TORCH_CHECK(rc == 0, "gns_forward failed: code ", rc,
              rc > 0 ? cudaGetErrorString((cudaError_t)rc) : " (contract)");
  return y;
}

std::vector<int64_t> describe(int64_t dtype, int64_t N, int64_t C, int64_t HW, int64_t G,
                              int64_t force_path, int64_t force_cs, int64_t smem_cap) {
  std::vector<int64_t> out(8, 0);
  // No throw here: a rejected forced plan is an ordinary answer (out[0] = the negative code).
  const int rc = gns_describe((int)dtype, N, C, HW, G, (int)force_path, (int)force_cs,
                              (int)smem_cap, out.data());
  if (rc != 0) out[0] = rc;
  return out;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("group_norm_silu", &group_norm_silu, "silu(group_norm(x)) (H200, contiguous NC...)",
        py::arg("x"), py::arg("weight"), py::arg("bias"), py::arg("num_groups"), py::arg("eps"),
        py::arg("force_path") = 0, py::arg("force_cs") = 0, py::arg("smem_cap") = 0);
  m.def("describe", &describe, "plan for a shape: path, vec, cs, slice_vec, threads, smem, q, tiles");
}
