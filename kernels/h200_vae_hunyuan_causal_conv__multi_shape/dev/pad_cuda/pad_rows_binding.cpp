// torch binding of pad_rows.cu, pad_vec.cu, pad_stage.cu and copy_diag.cu for dev/pad_sweep.py --cuda (built there
// with torch.utils.cpp_extension).
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/extension.h>

#include <cstdint>

namespace kda_pad {
template <typename T>
cudaError_t launch_pad_rows(const T* x, T* out, int B, int C, int T_in, int H, int W, int To, int Ho, int Wo,
                            int pad_t, int pad_h, int pad_w, int sm_count, cudaStream_t stream);
template <typename T>
cudaError_t launch_pad_vec(const T* x, T* out, int B, int C, int T_in, int H, int W, int To, int Ho, int Wo,
                           int pad_t, int pad_h, int pad_w, int sm_count, cudaStream_t stream);
template <typename T>
cudaError_t launch_pad_vec_uniform(const T* x, T* out, int B, int C, int T_in, int H, int W, int To, int Ho, int Wo,
                                   int pad_t, int pad_h, int pad_w, int sm_count, cudaStream_t stream, int vpt);
template <typename T>
cudaError_t launch_pad_stage(const T* x, T* out, int B, int C, int T_in, int H, int W, int To, int Ho, int Wo,
                             int pad_t, int pad_h, int pad_w, int sm_count, cudaStream_t stream, int chunk_bytes,
                             int stages);
cudaError_t launch_copy16(const void* in, void* out, long long n, int sm_count, cudaStream_t stream);
cudaError_t launch_shift_copy(const void* in, void* out, long long n, bool shfl, int sm_count, cudaStream_t stream);
}

// out = F.pad(x, (pad_w, *, pad_h, *, pad_t, *), "replicate"); the right pads are read off out's shape.
// launch: a generic callable (launch)(const T* x, T* out, B, C, T, H, W, To, Ho, Wo, pad_t, pad_h, pad_w, sms, stream)
template <typename Launch>
void pad_with(const char* name, Launch launch, const torch::Tensor& x, torch::Tensor& out, int64_t pad_w,
              int64_t pad_h, int64_t pad_t) {
  TORCH_CHECK(x.is_cuda() && out.is_cuda() && x.dim() == 5 && out.dim() == 5, name, ": 5-D CUDA tensors");
  TORCH_CHECK(x.is_contiguous() && out.is_contiguous() && x.dtype() == out.dtype(), name, ": contiguous, one dtype");
  TORCH_CHECK(x.size(0) == out.size(0) && x.size(1) == out.size(1), name, ": B and C must match");
  for (int d = 2; d < 5; ++d) TORCH_CHECK(x.size(d) > 0 && x.size(d) < (1LL << 31), name, ": sizes");
  TORCH_CHECK(out.size(0) * out.size(1) < (1LL << 31), name, ": B * C");
  const c10::cuda::CUDAGuard guard(x.device());
  int sms = 0;
  TORCH_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, x.get_device()) == cudaSuccess,
              name, ": multiprocessor count");
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  const int B = x.size(0), C = x.size(1), T = x.size(2), H = x.size(3), W = x.size(4);
  const int To = out.size(2), Ho = out.size(3), Wo = out.size(4);
  cudaError_t err;
  if (x.element_size() == 2) {
    err = launch(static_cast<const uint16_t*>(x.data_ptr()), static_cast<uint16_t*>(out.data_ptr()), B, C, T, H, W,
                 To, Ho, Wo, static_cast<int>(pad_t), static_cast<int>(pad_h), static_cast<int>(pad_w), sms, stream);
  } else {
    TORCH_CHECK(x.element_size() == 4, name, ": 2- or 4-byte elements");
    err = launch(static_cast<const uint32_t*>(x.data_ptr()), static_cast<uint32_t*>(out.data_ptr()), B, C, T, H, W,
                 To, Ho, Wo, static_cast<int>(pad_t), static_cast<int>(pad_h), static_cast<int>(pad_w), sms, stream);
  }
  TORCH_CHECK(err == cudaSuccess, name, ": ", cudaGetErrorString(err));
}

void pad_rows(const torch::Tensor& x, torch::Tensor& out, int64_t pad_w, int64_t pad_h, int64_t pad_t) {
  pad_with("pad_rows", [](auto... a) { return kda_pad::launch_pad_rows(a...); }, x, out, pad_w, pad_h, pad_t);
}
void pad_vec(const torch::Tensor& x, torch::Tensor& out, int64_t pad_w, int64_t pad_h, int64_t pad_t) {
  pad_with("pad_vec", [](auto... a) { return kda_pad::launch_pad_vec(a...); }, x, out, pad_w, pad_h, pad_t);
}
void pad_vec_uniform(const torch::Tensor& x, torch::Tensor& out, int64_t pad_w, int64_t pad_h, int64_t pad_t,
                     int64_t vpt) {
  const int n = static_cast<int>(vpt);
  pad_with("pad_vec_uniform", [n](auto... a) { return kda_pad::launch_pad_vec_uniform(a..., n); }, x, out, pad_w,
           pad_h, pad_t);
}

void pad_stage(const torch::Tensor& x, torch::Tensor& out, int64_t pad_w, int64_t pad_h, int64_t pad_t,
               int64_t chunk_bytes, int64_t stages) {
  const int cb = static_cast<int>(chunk_bytes), st = static_cast<int>(stages);
  pad_with("pad_stage", [cb, st](auto... a) { return kda_pad::launch_pad_stage(a..., cb, st); }, x, out, pad_w,
           pad_h, pad_t);
}

// The copy diagnostics work on raw bytes: uint8 CUDA tensors, 16-byte aligned, out a whole number of 16-byte words.
static void check_bytes(const char* name, const torch::Tensor& src, const torch::Tensor& dst, int64_t need_src) {
  TORCH_CHECK(src.is_cuda() && dst.is_cuda() && src.is_contiguous() && dst.is_contiguous(), name,
              ": contiguous CUDA tensors");
  TORCH_CHECK(src.scalar_type() == torch::kUInt8 && dst.scalar_type() == torch::kUInt8, name, ": uint8 tensors");
  TORCH_CHECK(dst.numel() % 16 == 0 && src.numel() >= need_src, name, ": sizes");
}

static int sm_count_of(const torch::Tensor& t) {
  int sms = 0;
  TORCH_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, t.get_device()) == cudaSuccess,
              "multiprocessor count");
  return sms;
}

void copy16(const torch::Tensor& src, torch::Tensor& dst) {
  check_bytes("copy16", src, dst, dst.numel());
  const c10::cuda::CUDAGuard guard(dst.device());
  const cudaError_t err = kda_pad::launch_copy16(src.data_ptr(), dst.data_ptr(), dst.numel() / 16, sm_count_of(dst),
                                                 c10::cuda::getCurrentCUDAStream());
  TORCH_CHECK(err == cudaSuccess, "copy16: ", cudaGetErrorString(err));
}

// dst[i] = src[i + 2] (bytes): one 2-byte element of shift; src needs 16 bytes more than dst.
void shift_copy(const torch::Tensor& src, torch::Tensor& dst, bool shfl) {
  check_bytes("shift_copy", src, dst, dst.numel() + 16);
  const c10::cuda::CUDAGuard guard(dst.device());
  const cudaError_t err = kda_pad::launch_shift_copy(src.data_ptr(), dst.data_ptr(), dst.numel() / 16, shfl,
                                                     sm_count_of(dst), c10::cuda::getCurrentCUDAStream());
  TORCH_CHECK(err == cudaSuccess, "shift_copy: ", cudaGetErrorString(err));
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("pad_rows", &pad_rows, "replicate pad, NCDHW, a warp per output row (dev)");
  m.def("pad_vec", &pad_vec, "replicate pad, NCDHW, 16-byte output vectors (dev)");
  m.def("pad_vec_uniform", &pad_vec_uniform, "replicate pad, NCDHW, 16-byte vectors, no divergent path (dev)",
        py::arg("x"), py::arg("out"), py::arg("pad_w"), py::arg("pad_h"), py::arg("pad_t"), py::arg("vpt") = 1);
  m.def("pad_stage", &pad_stage, "replicate pad, NCDHW, plane chunks staged in shared memory (dev)", py::arg("x"),
        py::arg("out"), py::arg("pad_w"), py::arg("pad_h"), py::arg("pad_t"), py::arg("chunk_bytes") = 8192,
        py::arg("stages") = 2);
  m.def("copy16", &copy16, "diagnostic: aligned 16-byte copy of dst.numel() bytes (dev)");
  m.def("shift_copy", &shift_copy, "diagnostic: dst[i] = src[i + 2], aligned 16-byte stores (dev)", py::arg("src"),
        py::arg("dst"), py::arg("shfl") = false);
}
