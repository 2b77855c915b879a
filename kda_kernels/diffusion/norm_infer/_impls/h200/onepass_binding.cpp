// c007: torch binding of the CUDA one-pass RMSNorm kernel (onepass_rms.cu).
//
// one_pass(x, w, eps) -> Tensor | None
//   describes x and w to the contract (onepass_contract.h: dtypes, shapes, strides, alignment, one CUDA device
//   that is the current one and has compute capability 9.0, no autograd recording); returns None without
//   touching anything when the call is outside it (register.py then takes c006's Triton path, which sends what
//   it does not take to SGLang), else allocates y (torch's caching allocator: a contiguous tensor of x's shape
//   and dtype, as SGLang's empty_like of the contiguous x) and launches on torch's current stream.
// plan(x, w, eps, force_rows) -> [R, G, CTAs, resident CTAs per SM] for an in-contract call ([] otherwise).
// launch_into(x, w, eps, y, force_rows, pdl) -> bool: the dev entry (a given contiguous y, the R / PDL knobs).
//
// Host cost per call: pybind11's conversion of two tensors and a float, ~30 integer reads and compares, one
// at::empty, torch's current stream and one cudaLaunchKernelEx; no signature cache, nothing synchronizes, no
// compilation for any new shape (CUDA-graph capturable).
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/extension.h>

#include <cuda_runtime.h>

#include <cstdlib>
#include <optional>
#include <vector>

#include "onepass_contract.h"
#include "onepass_launch.h"

namespace {

using kda_onepass::CallDesc;
using kda_onepass::Decision;
using kda_onepass::TensorDesc;

int32_t dtype_code(at::ScalarType t) {
  switch (t) {
    case at::kHalf: return kda_onepass::kF16;
    case at::kBFloat16: return kda_onepass::kBF16;
    case at::kFloat: return kda_onepass::kF32;
    default: return kda_onepass::kOther;
  }
}

void describe(const at::Tensor& t, TensorDesc* d) {
  d->dim = static_cast<int32_t>(t.dim());
  if (d->dim < 1 || d->dim > kda_onepass::kMaxDims) return;  // decide() rejects it
  d->dtype = dtype_code(t.scalar_type());
  d->is_cuda = t.is_cuda();
  d->device = t.is_cuda() ? t.get_device() : -1;
  d->requires_grad = t.requires_grad();
  const auto sizes = t.sizes();
  const auto strides = t.strides();
  for (int i = 0; i < d->dim; ++i) {
    d->sizes[i] = sizes[i];
    d->strides[i] = strides[i];
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

Decision decide_call(const at::Tensor& x, const at::Tensor& w) {
  if (!x.defined() || !w.defined() || !x.is_cuda() || !w.is_cuda()) return Decision{};
  CallDesc c{};
  describe(x, &c.x);
  describe(w, &c.w);
  c.grad_mode = at::GradMode::is_enabled();
  c.current_device = c10::cuda::current_device();
  if (!cc_of(x.get_device(), &c.cc_major, &c.cc_minor)) return Decision{};
  return kda_onepass::decide(c);
}

// KDA_ONEPASS_NO_PDL=1 (read once): launch without programmatic stream serialization (a dev A/B; the candidate's
// evidence is taken without it).
const bool g_pdl = std::getenv("KDA_ONEPASS_NO_PDL") == nullptr;

kda_onepass::Launch launch_args(const at::Tensor& x, const at::Tensor& w, const at::Tensor& y, double eps) {
  kda_onepass::Launch a{};
  a.x = x.data_ptr();
  a.w = w.data_ptr();
  a.y = y.data_ptr();
  a.eps = static_cast<float>(eps);
  a.device = x.get_device();
  a.stream = c10::cuda::getCurrentCUDAStream(a.device).stream();
  a.pdl = g_pdl ? 1 : 0;
  return a;
}

std::optional<at::Tensor> one_pass(const at::Tensor& x, const at::Tensor& w, double eps) {
  const Decision d = decide_call(x, w);
  if (!d.ok) return std::nullopt;
  at::Tensor y = at::empty(x.sizes(), x.options().memory_format(at::MemoryFormat::Contiguous));
  const int err = kda_onepass::launch(d, launch_args(x, w, y, eps));
  TORCH_CHECK(err == 0, "kda one-pass RMSNorm (c007): launch failed: ",
              cudaGetErrorString(static_cast<cudaError_t>(err)));
  return y;
}

bool launch_into(const at::Tensor& x, const at::Tensor& w, double eps, const at::Tensor& y, int64_t force_rows,
                 bool pdl) {
  const Decision d = decide_call(x, w);
  if (!d.ok || !y.defined() || !y.is_cuda() || y.get_device() != x.get_device() || !y.is_contiguous() ||
      y.scalar_type() != x.scalar_type() || y.sizes() != x.sizes())
    return false;
  kda_onepass::Launch a = launch_args(x, w, y, eps);
  a.force_rows = static_cast<int32_t>(force_rows);
  a.pdl = pdl ? 1 : 0;
  const int err = kda_onepass::launch(d, a);
  TORCH_CHECK(err == 0, "kda one-pass RMSNorm (c007): launch failed: ",
              cudaGetErrorString(static_cast<cudaError_t>(err)));
  return true;
}

std::vector<int64_t> plan(const at::Tensor& x, const at::Tensor& w, double eps, int64_t force_rows) {
  const Decision d = decide_call(x, w);
  if (!d.ok) return {};
  kda_onepass::Launch a{};
  a.eps = static_cast<float>(eps);
  a.device = x.get_device();
  a.force_rows = static_cast<int32_t>(force_rows);
  std::vector<int64_t> out(4);
  const int err = kda_onepass::describe(d, a, out.data());
  TORCH_CHECK(err == 0, "kda one-pass RMSNorm (c007): plan failed: ",
              cudaGetErrorString(static_cast<cudaError_t>(err)));
  return out;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("one_pass", &one_pass, "one-pass RMSNorm (c007): a new y, or None outside the contract");
  m.def("launch_into", &launch_into, "dev: the kernel into a given contiguous y with the R / PDL knobs");
  m.def("plan", &plan, "dev: the launch plan one_pass would use");
}
