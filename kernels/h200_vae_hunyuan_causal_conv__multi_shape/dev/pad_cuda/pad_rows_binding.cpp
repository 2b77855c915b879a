// torch binding of pad_rows.cu for dev/pad_sweep.py --cuda (built there with torch.utils.cpp_extension).
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/extension.h>

#include <cstdint>

namespace kda_pad {
template <typename T>
cudaError_t launch_pad_rows(const T* x, T* out, int B, int C, int T_in, int H, int W, int To, int Ho, int Wo,
                            int pad_t, int pad_h, int pad_w, int sm_count, cudaStream_t stream);
}

// out = F.pad(x, (pad_w, *, pad_h, *, pad_t, *), "replicate"); the right pads are read off out's shape.
void pad_rows(const torch::Tensor& x, torch::Tensor& out, int64_t pad_w, int64_t pad_h, int64_t pad_t) {
  TORCH_CHECK(x.is_cuda() && out.is_cuda() && x.dim() == 5 && out.dim() == 5, "pad_rows: 5-D CUDA tensors");
  TORCH_CHECK(x.is_contiguous() && out.is_contiguous() && x.dtype() == out.dtype(), "pad_rows: contiguous, one dtype");
  TORCH_CHECK(x.size(0) == out.size(0) && x.size(1) == out.size(1), "pad_rows: B and C must match");
  for (int d = 2; d < 5; ++d) TORCH_CHECK(x.size(d) > 0 && x.size(d) < (1LL << 31), "pad_rows: sizes");
  TORCH_CHECK(out.size(0) * out.size(1) < (1LL << 31), "pad_rows: B * C");
  const c10::cuda::CUDAGuard guard(x.device());
  int sms = 0;
  TORCH_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, x.get_device()) == cudaSuccess,
              "pad_rows: multiprocessor count");
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  const int B = x.size(0), C = x.size(1), T = x.size(2), H = x.size(3), W = x.size(4);
  const int To = out.size(2), Ho = out.size(3), Wo = out.size(4);
  cudaError_t err;
  if (x.element_size() == 2) {
    err = kda_pad::launch_pad_rows<uint16_t>(static_cast<const uint16_t*>(x.data_ptr()),
                                             static_cast<uint16_t*>(out.data_ptr()), B, C, T, H, W, To, Ho, Wo,
                                             pad_t, pad_h, pad_w, sms, stream);
  } else {
    TORCH_CHECK(x.element_size() == 4, "pad_rows: 2- or 4-byte elements");
    err = kda_pad::launch_pad_rows<uint32_t>(static_cast<const uint32_t*>(x.data_ptr()),
                                             static_cast<uint32_t*>(out.data_ptr()), B, C, T, H, W, To, Ho, Wo,
                                             pad_t, pad_h, pad_w, sms, stream);
  }
  TORCH_CHECK(err == cudaSuccess, "pad_rows: ", cudaGetErrorString(err));
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("pad_rows", &pad_rows, "replicate pad, NCDHW rows (dev)"); }
