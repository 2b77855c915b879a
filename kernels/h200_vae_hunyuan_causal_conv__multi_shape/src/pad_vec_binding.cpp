// torch binding of pad_vec.cu: replicate_pad3d's CUDA kernel (register.py checks the contract before calling).
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/extension.h>

#include <cstdint>

namespace kda_pad {
template <typename T>
cudaError_t launch_pad_vec(const T* x, T* out, int B, int C, int T_in, int H, int W, int To, int Ho, int Wo,
                           int pad_t, int pad_h, int pad_w, int sm_count, cudaStream_t stream);
}

namespace {
int sm_count(int device) {
  static int cached[64] = {0};  // per device: the attribute query costs a driver call
  if (device >= 0 && device < 64 && cached[device] > 0) return cached[device];
  int sms = 0;
  TORCH_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) == cudaSuccess,
              "pad_vec: multiprocessor count");
  if (device >= 0 && device < 64) cached[device] = sms;
  return sms;
}
}  // namespace

// out = F.pad(x, (pad_w, *, pad_h, *, pad_t, *), "replicate"); the right pads are read off out's shape.
void pad_vec(const torch::Tensor& x, torch::Tensor& out, int64_t pad_w, int64_t pad_h, int64_t pad_t) {
  TORCH_CHECK(x.is_cuda() && out.is_cuda() && x.dim() == 5 && out.dim() == 5, "pad_vec: 5-D CUDA tensors");
  TORCH_CHECK(x.is_contiguous() && out.is_contiguous() && x.dtype() == out.dtype(), "pad_vec: contiguous, one dtype");
  TORCH_CHECK(x.size(0) == out.size(0) && x.size(1) == out.size(1), "pad_vec: B and C must match");
  for (int d = 2; d < 5; ++d) {
    TORCH_CHECK(x.size(d) > 0 && out.size(d) < (1LL << 31), "pad_vec: sizes");
  }
  const int64_t pads[3] = {pad_t, pad_h, pad_w};
  for (int d = 0; d < 3; ++d) {
    TORCH_CHECK(pads[d] >= 0 && pads[d] + x.size(d + 2) <= out.size(d + 2), "pad_vec: pads must fit out's shape");
  }
  const c10::cuda::CUDAGuard guard(x.device());
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  const int sms = sm_count(x.get_device());
  const int B = x.size(0), C = x.size(1), T = x.size(2), H = x.size(3), W = x.size(4);
  const int To = out.size(2), Ho = out.size(3), Wo = out.size(4);
  cudaError_t err;
  if (x.element_size() == 2) {
    err = kda_pad::launch_pad_vec<uint16_t>(static_cast<const uint16_t*>(x.data_ptr()),
                                            static_cast<uint16_t*>(out.data_ptr()), B, C, T, H, W, To, Ho, Wo,
                                            pad_t, pad_h, pad_w, sms, stream);
  } else {
    TORCH_CHECK(x.element_size() == 4, "pad_vec: 2- or 4-byte elements");
    err = kda_pad::launch_pad_vec<uint32_t>(static_cast<const uint32_t*>(x.data_ptr()),
                                            static_cast<uint32_t*>(out.data_ptr()), B, C, T, H, W, To, Ho, Wo,
                                            pad_t, pad_h, pad_w, sms, stream);
  }
  TORCH_CHECK(err == cudaSuccess, "pad_vec: ", cudaGetErrorString(err));
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("pad_vec", &pad_vec, "replicate pad, NCDHW, 16-byte output vectors"); }
