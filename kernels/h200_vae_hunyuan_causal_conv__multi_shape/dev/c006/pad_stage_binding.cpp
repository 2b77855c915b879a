// c006: torch binding of pad_stage.cu for replicate_pad3d (register.py).
//
// pad(x, out, pad_w, pad_h, pad_t) -> int
//   writes out = F.pad(x, (pad_w, *, pad_h, *, pad_t, *), "replicate") on torch's current stream of x's device and
//   returns 0, or returns a nonzero code (the caller then runs c004's Triton kernel over the whole of out, so
//   every call still gets a bit-exact answer; codes 1-5 and the launcher's refusals launch nothing). The right
//   pads are read off out's shape. It never throws: a pad that cannot run here is a code, not an exception (an
//   exception inside a pad the decode calls thousands of times would be a crash, where the Triton path is only
//   slower).
//
// Codes: 0 launched; 1 not two CUDA tensors on one device; 2 not 5-D, or out smaller than x plus the left pads,
// or B / C differ; 3 not both contiguous with one dtype of 2 or 4 bytes; 4 a size outside the int32 range the
// kernel indexes with; 5 the device is not compute capability 9.0 (the build is sm_90a only); 6 an exception
// from torch (caught here); 100 + cudaError_t: the launcher refused (misaligned pointers, a shape outside its
// plan, a chunk over shared memory) or the launch failed.
//
// The plan is pad_stage.cu's "2x16K": two stage buffers of ~16 KB of source rows per chunk, the best of the three
// staged plans on five of the seven rows of the H200 sweep (dev/results/20261127-pad_sweep_stage.json; "1x16K"
// won the 7.1 GB row by 0.01).
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/extension.h>

#include <cuda_runtime.h>

#include <cstdint>

namespace kda_pad {
template <typename T>
cudaError_t launch_pad_stage(const T* x, T* out, int B, int C, int T_in, int H, int W, int To, int Ho, int Wo,
                             int pad_t, int pad_h, int pad_w, int sm_count, cudaStream_t stream, int chunk_bytes,
                             int stages);
}

namespace {

constexpr int kChunkBytes = 16384;
constexpr int kStages = 2;
constexpr int kMaxDevices = 64;

// Per device, asked once: the SM count (the launcher's persistent grid) and whether it is compute capability 9.0.
// 0 = not asked yet, -1 = not usable.
int g_sms[kMaxDevices];

int sm_count_if_sm90(int device) {
  if (device < 0 || device >= kMaxDevices) return -1;
  if (g_sms[device] == 0) {
    int major = 0, minor = 0, sms = 0;
    const bool ok = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
                    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) == cudaSuccess &&
                    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) == cudaSuccess;
    g_sms[device] = ok && major == 9 && minor == 0 && sms > 0 ? sms : -1;
  }
  return g_sms[device];
}

int64_t pad_impl(const at::Tensor& x, const at::Tensor& out, int64_t pad_w, int64_t pad_h, int64_t pad_t) {
  if (!x.defined() || !out.defined() || !x.is_cuda() || !out.is_cuda() || x.get_device() != out.get_device())
    return 1;
  if (x.dim() != 5 || out.dim() != 5 || x.size(0) != out.size(0) || x.size(1) != out.size(1)) return 2;
  if (pad_w < 0 || pad_h < 0 || pad_t < 0 || out.size(2) < x.size(2) + pad_t || out.size(3) < x.size(3) + pad_h ||
      out.size(4) < x.size(4) + pad_w)
    return 2;
  if (x.scalar_type() != out.scalar_type() || !x.is_contiguous() || !out.is_contiguous() ||
      (x.element_size() != 2 && x.element_size() != 4))
    return 3;
  constexpr int64_t kI32 = (1LL << 31) - 1;
  for (int d = 2; d < 5; ++d)
    if (x.size(d) < 1 || out.size(d) > kI32) return 4;
  if (x.size(0) < 1 || x.size(1) < 1 || out.size(0) * out.size(1) > kI32) return 4;
  const int device = x.get_device();
  const int sms = sm_count_if_sm90(device);
  if (sms < 0) return 5;
  const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device)).stream();
  const int B = static_cast<int>(x.size(0)), C = static_cast<int>(x.size(1)), T = static_cast<int>(x.size(2));
  const int H = static_cast<int>(x.size(3)), W = static_cast<int>(x.size(4));
  const int To = static_cast<int>(out.size(2)), Ho = static_cast<int>(out.size(3)), Wo = static_cast<int>(out.size(4));
  const int pt = static_cast<int>(pad_t), ph = static_cast<int>(pad_h), pw = static_cast<int>(pad_w);
  cudaError_t err;
  // the pad is a copy: fp16 and bf16 move as 2-byte words, fp32 as 4-byte words (bit-exact whatever the values)
  if (x.element_size() == 2) {
    err = kda_pad::launch_pad_stage(static_cast<const uint16_t*>(x.const_data_ptr()),
                                    static_cast<uint16_t*>(out.data_ptr()), B, C, T, H, W, To, Ho, Wo, pt, ph, pw,
                                    sms, stream, kChunkBytes, kStages);
  } else {
    err = kda_pad::launch_pad_stage(static_cast<const uint32_t*>(x.const_data_ptr()),
                                    static_cast<uint32_t*>(out.data_ptr()), B, C, T, H, W, To, Ho, Wo, pt, ph, pw,
                                    sms, stream, kChunkBytes, kStages);
  }
  return err == cudaSuccess ? 0 : 100 + static_cast<int64_t>(err);
}

int64_t pad(const at::Tensor& x, const at::Tensor& out, int64_t pad_w, int64_t pad_h, int64_t pad_t) {
  try {
    return pad_impl(x, out, pad_w, pad_h, pad_t);
  } catch (...) {  // nothing here should throw; if torch does, the caller's Triton path still answers
    return 6;
  }
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("pad", &pad, "replicate pad, NCDHW, staged plane chunks (c006): 0 when launched, else a code (out untouched)",
        pybind11::arg("x"), pybind11::arg("out"), pybind11::arg("pad_w"), pybind11::arg("pad_h"),
        pybind11::arg("pad_t"));
}
