// c009: torch binding of the CUDA qknorm_rope kernel (qknorm_rope.cu).
//
// qknorm_rope(q, k, q_weight, k_weight, cos_sin_cache, positions, eps, head_dim, rope_dim, flags) -> bool
//   describes the six tensors to the contract (qknorm_rope_contract.h: shapes, strides, dtypes, alignment, the
//   rope width, one CUDA device that is the current one and has compute capability 9.0, no autograd recording),
//   returns False without touching anything when the call is outside it (register.py then calls SGLang), else
//   launches on torch's current stream (nothing to do for N == 0 or no heads) and returns True.
//   flags: bit 0 is_neox, bit 1 cache_has_full_width; dev knobs (dev/sweep.py): bits 4-5 pipe (0/1 the plain
//   kernel, 2 the double-buffered one), bits 8-9 grid (0 plan, 1 one row per group, 2 half the resident CTAs),
//   bit 12 launch_dependents at the start instead of the end, bit 13 take the call even where SGLang's kernel is
//   faster (kernel_pays() false: calls of fewer than 65536 rows go to SGLang otherwise).
// plan(...same arguments...) -> [pipe, rows per group, rows, blocks, CTAs per SM, step_head]
//   for an in-contract call ([] otherwise): what qknorm_rope would launch.
//
// Host cost per call: pybind11's argument conversion, ~40 integer reads and compares, torch's current stream and
// cudaLaunchKernelEx; nothing is allocated, nothing synchronizes (CUDA-graph capturable).
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/extension.h>

#include <cuda_runtime.h>

#include <vector>

#include "qknorm_rope_contract.h"
#include "qknorm_rope_launch.h"

namespace {

constexpr int64_t kFlagForceKernel = int64_t{1} << 13;


using kda_qkr::CallDesc;
using kda_qkr::Decision;
using kda_qkr::TensorDesc;

int32_t dtype_code(at::ScalarType t) {
  switch (t) {
    case at::kHalf: return kda_qkr::kF16;
    case at::kBFloat16: return kda_qkr::kBF16;
    case at::kFloat: return kda_qkr::kF32;
    case at::kInt: return kda_qkr::kI32;
    case at::kLong: return kda_qkr::kI64;
    default: return kda_qkr::kOther;
  }
}

void describe(const at::Tensor& t, TensorDesc* d) {
  d->dim = static_cast<int32_t>(t.dim());
  if (d->dim > 3) return;  // the contract wants 1-3 dims: decide() rejects this one
  d->dtype = dtype_code(t.scalar_type());
  d->is_cuda = t.is_cuda();
  d->device = t.is_cuda() ? t.get_device() : -1;
  d->requires_grad = t.requires_grad();
  for (int i = 0; i < d->dim; ++i) {
    d->sizes[i] = t.size(i);
    d->strides[i] = t.stride(i);
  }
  d->addr = reinterpret_cast<uint64_t>(t.data_ptr());
}

int g_cc[64][2];  // compute capability per device (0: not asked yet)

bool cc_of(int device, int32_t* major, int32_t* minor) {
  if (device < 0 || device >= 64) return false;
  if (g_cc[device][0] == 0) {
    int a = 0, b = 0;
    if (cudaDeviceGetAttribute(&a, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&b, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess)
      return false;
    g_cc[device][0] = a;
    g_cc[device][1] = b;
  }
  *major = g_cc[device][0];
  *minor = g_cc[device][1];
  return true;
}

// The contract's verdict, and the launch arguments when it is ok.
Decision decide_call(const at::Tensor& q, const at::Tensor& k, const at::Tensor& qw, const at::Tensor& kw,
                     const at::Tensor& cache, const at::Tensor& pos, double eps, int64_t head_dim, int64_t rope_dim,
                     int64_t flags, kda_qkr::Launch* args) {
  CallDesc c{};
  const at::Tensor* ts[6] = {&q, &k, &qw, &kw, &cache, &pos};
  for (int i = 0; i < 6; ++i) {
    if (!ts[i]->defined()) return Decision{};
    describe(*ts[i], &c.t[i]);
  }
  c.head_dim = head_dim;
  c.rope_dim = rope_dim;
  c.is_neox = (flags & 1) != 0;
  c.full_width = (flags & 2) != 0;
  c.grad_mode = at::GradMode::is_enabled();
  if (!q.is_cuda()) return Decision{};
  c.current_device = c10::cuda::current_device();
  if (!cc_of(q.get_device(), &c.cc_major, &c.cc_minor)) return Decision{};
  const Decision d = kda_qkr::decide(c);
  if (!d.ok || d.empty) return d;
  kda_qkr::Launch& a = *args;
  a.q = q.data_ptr();
  a.k = k.data_ptr();
  a.qw = qw.data_ptr();
  a.kw = kw.data_ptr();
  a.cache = cache.data_ptr();
  a.pos = pos.data_ptr();
  a.q_stride_t = q.stride(0);
  a.q_stride_h = q.stride(1);
  a.k_stride_t = k.stride(0);
  a.k_stride_h = k.stride(1);
  a.n_tokens = q.size(0);
  a.n_q_heads = q.size(1);
  a.n_k_heads = k.size(1);
  a.cache_rows = cache.size(0);
  a.cache_width = cache.size(1);
  a.eps = static_cast<float>(eps);
  a.device = q.get_device();
  a.stream = c10::cuda::getCurrentCUDAStream(a.device).stream();
  a.pipe_mode = static_cast<int32_t>((flags >> 4) & 3);
  a.grid_mode = static_cast<int32_t>((flags >> 8) & 3);
  a.early_trigger = static_cast<int32_t>((flags >> 12) & 1);
  return d;
}

bool qknorm_rope(const at::Tensor& q, const at::Tensor& k, const at::Tensor& qw, const at::Tensor& kw,
                 const at::Tensor& cache, const at::Tensor& pos, double eps, int64_t head_dim, int64_t rope_dim,
                 int64_t flags) {
  kda_qkr::Launch args{};
  const Decision d = decide_call(q, k, qw, kw, cache, pos, eps, head_dim, rope_dim, flags, &args);
  if (!d.ok) return false;
  if (d.empty) return true;
  if (!(flags & kFlagForceKernel) && !kda_qkr::kernel_pays(q.size(0), q.size(1), k.size(1))) return false;
  const int err = kda_qkr::launch(d, args);
  TORCH_CHECK(err == 0, "kda qknorm_rope (c009): launch failed: ", cudaGetErrorString(static_cast<cudaError_t>(err)));
  return true;
}

std::vector<int64_t> plan(const at::Tensor& q, const at::Tensor& k, const at::Tensor& qw, const at::Tensor& kw,
                          const at::Tensor& cache, const at::Tensor& pos, double eps, int64_t head_dim,
                          int64_t rope_dim, int64_t flags) {
  kda_qkr::Launch args{};
  const Decision d = decide_call(q, k, qw, kw, cache, pos, eps, head_dim, rope_dim, flags, &args);
  if (!d.ok || d.empty) return {};
  std::vector<int64_t> out(6);
  const int err = kda_qkr::describe(d, args, out.data());
  TORCH_CHECK(err == 0, "kda qknorm_rope (c009): plan failed: ", cudaGetErrorString(static_cast<cudaError_t>(err)));
  return out;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("qknorm_rope", &qknorm_rope, "fused in-place QK RMSNorm + RoPE (c009); False: outside the contract or a call SGLang runs faster");
  m.def("plan", &plan, "the launch plan qknorm_rope would use (dev)");
}
