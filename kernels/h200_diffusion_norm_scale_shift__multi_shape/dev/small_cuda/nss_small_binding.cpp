// c006: torch binding of the CUDA small-row kernel (nss_small.cu).
//
// nss(x, weight, bias, scale, shift, norm_type, eps) -> Tensor | None
// srnss(residual, x, gate, weight, bias, scale, shift, norm_type, eps) -> (Tensor, Tensor) | None
//   describe every tensor to the contract (nss_small_contract.h: dtypes, shapes, strides, alignment, bytes moved,
//   one CUDA device that is the current one with compute capability 9.0, no Python-dispatch tensor, no autograd
//   recording); return None without touching anything when the call is outside it (register.py then takes c005's
//   Triton path, which hands what it does not take to SGLang), else allocate y (and residual_out) through torch's
//   caching allocator (contiguous, x's shape and dtype: what the custom op's fake describes) and launch on
//   torch's current stream. A failed launch also returns None (its error cleared): nothing here throws on
//   purpose (no TORCH_CHECK: a throw inside an extension has taken a process down on this box); only the
//   allocator's own out-of-memory error can propagate, as it would from SGLang's allocation.
// reason_nss(...) / reason_srnss(...) -> int: the contract's Reason code for such a call (dev and GPU tests).
//
// Host cost per call: pybind11's conversion of 5-7 tensors (or None), a string and a float, ~80 integer reads
// and compares, one or two at::empty, torch's current stream and one cudaLaunchKernelEx; no signature cache,
// nothing synchronizes, nothing compiles for a new shape (CUDA-graph capturable).
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/extension.h>

#include <cuda_runtime.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <tuple>

#include "nss_small_contract.h"
#include "nss_small_launch.h"

namespace {

using kda_nss::CallDesc;
using kda_nss::Decision;
using kda_nss::TensorDesc;
using OptTensor = std::optional<at::Tensor>;

int32_t dtype_code(at::ScalarType t) {
  switch (t) {
    case at::kHalf: return kda_nss::kF16;
    case at::kBFloat16: return kda_nss::kBF16;
    case at::kFloat: return kda_nss::kF32;
    default: return kda_nss::kOther;
  }
}

// A tensor whose sizes / data pointer are not plain strided memory (fake / functional / nested / sparse) or whose
// values carry a lazy conjugate / negation: never read by the kernel.
bool is_special(const at::Tensor& t) {
  if (t.layout() != at::kStrided || t.is_nested()) return true;
  const c10::DispatchKeySet ks = t.key_set();
  return ks.has(c10::DispatchKey::Python) || ks.has(c10::DispatchKey::Functionalize) || t.is_conj() || t.is_neg();
}

void describe(const at::Tensor* t, TensorDesc* d) {
  if (t == nullptr || !t->defined()) return;  // None: present = 0
  d->present = 1;
  if (is_special(*t)) {
    d->special = 1;
    return;  // dim 0: every shape rule rejects it
  }
  d->dim = static_cast<int32_t>(t->dim());
  if (d->dim < 1 || d->dim > kda_nss::kMaxDims) return;  // decide() rejects it
  d->dtype = dtype_code(t->scalar_type());
  d->is_cuda = t->is_cuda();
  d->device = d->is_cuda ? t->get_device() : -1;
  d->requires_grad = t->requires_grad();
  const auto sizes = t->sizes();
  const auto strides = t->strides();
  for (int i = 0; i < d->dim; ++i) {
    d->sizes[i] = sizes[i];
    d->strides[i] = strides[i];
  }
  d->addr = reinterpret_cast<uint64_t>(t->const_data_ptr());
}

const at::Tensor* ptr(const OptTensor& t) { return t.has_value() ? &*t : nullptr; }

int g_cc[64][2];  // compute capability per device (0: not asked yet)

bool cc_of(int device, int32_t* major, int32_t* minor) {
  if (device < 0 || device >= 64) return false;
  if (g_cc[device][0] == 0) {
    int a = 0, b = 0;
    if (cudaDeviceGetAttribute(&a, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&b, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    g_cc[device][0] = a;
    g_cc[device][1] = b;
  }
  *major = g_cc[device][0];
  *minor = g_cc[device][1];
  return true;
}

int32_t norm_code(const std::string& norm) { return norm == "layer" ? 0 : (norm == "rms" ? 1 : -1); }

Decision decide_call(const at::Tensor* residual, const at::Tensor& x, const at::Tensor* gate, const OptTensor& weight,
                     const OptTensor& bias, const at::Tensor& scale, const at::Tensor& shift,
                     const std::string& norm) {
  Decision no{};
  no.reason = kda_nss::kDevice;
  if (!x.defined() || !x.is_cuda()) return no;  // a CPU call asks the CUDA runtime nothing
  CallDesc c{};
  c.residual_form = residual != nullptr;
  c.norm = norm_code(norm);
  describe(&x, &c.x);
  describe(residual, &c.residual);
  describe(gate, &c.gate);
  describe(ptr(weight), &c.weight);
  describe(ptr(bias), &c.bias);
  describe(&scale, &c.scale);
  describe(&shift, &c.shift);
  c.grad_mode = at::GradMode::is_enabled();
  c.current_device = c10::cuda::current_device();
  if (!cc_of(x.get_device(), &c.cc_major, &c.cc_minor)) return no;
  return kda_nss::decide(c);
}

// KDA_NSS_SMALL_NO_PDL=1 (read once): launch without programmatic stream serialization (a dev A/B; the
// candidate's evidence is taken with PDL).
const bool g_pdl = std::getenv("KDA_NSS_SMALL_NO_PDL") == nullptr;

bool run(const Decision& d, const at::Tensor* residual, const at::Tensor& x, const at::Tensor* gate,
         const OptTensor& weight, const OptTensor& bias, const at::Tensor& scale, const at::Tensor& shift,
         double eps, const at::Tensor& y, const at::Tensor* r_out) {
  kda_nss::Launch a{};
  a.x = x.const_data_ptr();
  a.residual = residual != nullptr ? residual->const_data_ptr() : nullptr;
  a.gate = gate != nullptr ? gate->const_data_ptr() : nullptr;
  a.weight = weight.has_value() ? weight->const_data_ptr() : nullptr;
  a.bias = bias.has_value() ? bias->const_data_ptr() : nullptr;
  a.scale = scale.const_data_ptr();
  a.shift = shift.const_data_ptr();
  a.y = y.data_ptr();
  a.residual_out = r_out != nullptr ? r_out->data_ptr() : nullptr;
  a.eps = static_cast<float>(eps);
  a.stream = c10::cuda::getCurrentCUDAStream(x.get_device()).stream();
  a.pdl = g_pdl ? 1 : 0;
  return kda_nss::launch(d, a) == 0;
}

at::Tensor new_like(const at::Tensor& x) {
  return at::empty(x.sizes(), x.options().memory_format(at::MemoryFormat::Contiguous));
}

std::optional<at::Tensor> nss(const at::Tensor& x, const OptTensor& weight, const OptTensor& bias,
                              const at::Tensor& scale, const at::Tensor& shift, const std::string& norm, double eps) {
  const Decision d = decide_call(nullptr, x, nullptr, weight, bias, scale, shift, norm);
  if (d.reason != kda_nss::kOk) return std::nullopt;
  at::Tensor y = new_like(x);
  if (!run(d, nullptr, x, nullptr, weight, bias, scale, shift, eps, y, nullptr)) return std::nullopt;
  return y;
}

std::optional<std::tuple<at::Tensor, at::Tensor>> srnss(const at::Tensor& residual, const at::Tensor& x,
                                                        const OptTensor& gate, const OptTensor& weight,
                                                        const OptTensor& bias, const at::Tensor& scale,
                                                        const at::Tensor& shift, const std::string& norm,
                                                        double eps) {
  const Decision d = decide_call(&residual, x, ptr(gate), weight, bias, scale, shift, norm);
  if (d.reason != kda_nss::kOk) return std::nullopt;
  at::Tensor y = new_like(x);
  at::Tensor r_out = new_like(x);
  if (!run(d, &residual, x, ptr(gate), weight, bias, scale, shift, eps, y, &r_out)) return std::nullopt;
  return std::make_tuple(y, r_out);
}

int64_t reason_nss(const at::Tensor& x, const OptTensor& weight, const OptTensor& bias, const at::Tensor& scale,
                   const at::Tensor& shift, const std::string& norm) {
  return decide_call(nullptr, x, nullptr, weight, bias, scale, shift, norm).reason;
}

int64_t reason_srnss(const at::Tensor& residual, const at::Tensor& x, const OptTensor& gate, const OptTensor& weight,
                     const OptTensor& bias, const at::Tensor& scale, const at::Tensor& shift,
                     const std::string& norm) {
  return decide_call(&residual, x, ptr(gate), weight, bias, scale, shift, norm).reason;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("nss", &nss, "fused_norm_scale_shift on the small-row kernel (c006): a new y, or None outside its contract");
  m.def("srnss", &srnss,
        "fused_scale_residual_norm_scale_shift on the small-row kernel (c006): (y, residual_out), or None");
  m.def("reason_nss", &reason_nss, "dev: the contract's reason code for an nss call (0: the kernel's)");
  m.def("reason_srnss", &reason_srnss, "dev: the contract's reason code for a residual call (0: the kernel's)");
}
