// Replicate pad of a contiguous NCDHW tensor into a contiguous NCDHW output, one 16-byte output vector per
// thread step: a dev variant (dev/pad_sweep.py --cuda times it beside the Triton plane kernel and pad_rows.cu).
// Measured on the H200 as candidate c005 (2026-11-27): slower than the Triton plane kernel on every large row but
// the 7.1 GB one (sol 0.40-0.76 against 0.62-0.66); see docs/notes.md for why.
//
// Byte model (per call; s = element size): s * (N_in + N_out) bytes, x read once, the padded output written
// once (the rows and planes the pad repeats are re-read from L2); bound = bytes / 4.29 TB/s, the H200's
// measured copy ceiling.
//
// Why this shape: the output is written as the flat array it is, in aligned 16-byte stores, so every warp
// store is 512 contiguous bytes whatever the row width (pad_rows.cu's warp-per-row leaves most lanes idle on
// the 82- and 130-wide rows). An output vector inside one row and away from the row's edges needs 16
// contiguous source bytes that start at any element offset: the thread loads the two aligned 16-byte words
// around them (the second is the neighbour lane's first, an L1 hit) and shifts them into place in registers
// (funnel shifts: no shared memory, no scalar loads). Vectors that touch a row edge or straddle two rows take
// the element path (clamped scalar loads); on the 850-wide rows that is 2 of 106 vectors a row, on the
// 82-wide rows 3 of 10.
//
// Row arithmetic: the flat output index e of a vector's first element is < 2^40 here, so its row is found
// with an fp64 reciprocal of Wo and one correction step (exact: the product's error is far below one row).
// kda: no-spills (tests/test_cuda_sources.py: every instantiation builds for sm_90a without spills)
#include <cstdint>
#include <cuda_runtime.h>

#include "pad_vec_core.cuh"

namespace kda_pad {

struct LdgLoad {
  __device__ __forceinline__ Vec16 operator()(const Vec16* p) const {
    const uint4 u = __ldg(reinterpret_cast<const uint4*>(p));
    return Vec16{{u.x, u.y, u.z, u.w}};
  }
};

// The first kernel, as measured (c005): pad_vec_core.cuh's window load for vectors inside a row away from its
// edges, a scalar element path for the rest. (Measured before it shared the core: then it loaded the second
// aligned word only when the window crossed into it, where load_window re-reads the first, an L1 hit.)
template <typename T>
__global__ void __launch_bounds__(256)
pad_vec_kernel(const T* __restrict__ x, T* __restrict__ out, long long n_vec, long long n_out, UniformGeom g) {
  constexpr int kVec = 16 / sizeof(T);
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long v = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; v < n_vec; v += stride) {
    const long long e0 = v * kVec;
    const RowCol rc = split_row(e0, g);
    const int s0 = rc.c - g.pad_w;  // source column of the vector's first element
    union {
      Vec16 v;
      T t[kVec];
    } pack;
    if (rc.c + kVec <= g.Wo && s0 >= 0 && s0 + kVec <= g.W) {
      pack.v = load_window(source_row(x, g, static_cast<uint32_t>(rc.r)), s0, LdgLoad{});
    } else {
      long long rr = rc.r;
      int cc = rc.c;
      const T* src = source_row(x, g, static_cast<uint32_t>(rr));
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        if (e0 + j < n_out) {
          pack.t[j] = __ldg(src + min(max(cc - g.pad_w, 0), g.W - 1));
        }
        if (++cc == g.Wo && j + 1 < kVec) {
          cc = 0;
          ++rr;
          if (e0 + j + 1 < n_out) src = source_row(x, g, static_cast<uint32_t>(rr));
        }
      }
    }
    reinterpret_cast<uint4*>(out)[v] = make_uint4(pack.v.w[0], pack.v.w[1], pack.v.w[2], pack.v.w[3]);
  }
}

// The last n_out % kVec elements (after the last whole vector), one thread each.
template <typename T>
__global__ void pad_tail_kernel(const T* __restrict__ x, T* __restrict__ out, long long e_start, long long n_out,
                                UniformGeom g) {
  const long long e = e_start + threadIdx.x;
  if (e >= n_out) return;
  const RowCol rc = split_row(e, g);
  out[e] = source_row(x, g, static_cast<uint32_t>(rc.r))[min(max(rc.c - g.pad_w, 0), g.W - 1)];
}

// Returns a CUDA error code; cudaErrorMisalignedAddress when out is not 16-byte aligned (torch.empty's is),
// cudaErrorInvalidValue when the output has 2^31 rows or more.
template <typename T>
cudaError_t launch_pad_vec(const T* x, T* out, int B, int C, int T_in, int H, int W, int To, int Ho, int Wo,
                           int pad_t, int pad_h, int pad_w, int sm_count, cudaStream_t stream) {
  constexpr int kVec = 16 / sizeof(T);
  if (reinterpret_cast<uintptr_t>(out) & 15u) return cudaErrorMisalignedAddress;
  if (static_cast<long long>(B) * C * To * Ho >= (1LL << 31)) return cudaErrorInvalidValue;
  const UniformGeom g{T_in, H, W, Wo, pad_t, pad_h, pad_w, FastDiv(Ho), FastDiv(To), 1.0 / Wo};
  const long long n_out = static_cast<long long>(B) * C * To * Ho * Wo;
  const long long n_vec = n_out / kVec;
  if (n_vec > 0) {
    // grid-stride: 8 blocks of 256 threads per SM fill it; more blocks only add tail waves
    const long long want = (n_vec + 255) / 256;
    const int blocks = static_cast<int>(want < 8LL * sm_count ? want : 8LL * sm_count);
    pad_vec_kernel<T><<<blocks, 256, 0, stream>>>(x, out, n_vec, n_out, g);
  }
  if (n_out > n_vec * kVec) pad_tail_kernel<T><<<1, kVec, 0, stream>>>(x, out, n_vec * kVec, n_out, g);
  return cudaGetLastError();
}

// Second kernel (launch_pad_vec_uniform): the same stores, every vector through pad_vec_core.cuh's pad_vector, so
// edges and row straddles cost a few selects and one more window load instead of a divergent scalar path.
// Prediction (2026-11-27, not yet run): ~0.85-0.95 of the copy yardstick on every production row.
template <typename T, int VPT>
__global__ void __launch_bounds__(256)
pad_vec_uniform_kernel(const T* __restrict__ x, T* __restrict__ out, long long n_vec, UniformGeom g) {
  // VPT vectors per thread step, 256 apart (each warp store stays 512 contiguous bytes): every load of the step
  // is issued before the first store, so VPT times the bytes are in flight per thread
  const long long step = static_cast<long long>(gridDim.x) * blockDim.x * VPT;
  for (long long v0 = static_cast<long long>(blockIdx.x) * blockDim.x * VPT + threadIdx.x; v0 < n_vec; v0 += step) {
    Vec16 o[VPT];
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const long long v = v0 + static_cast<long long>(k) * blockDim.x;
      if (v < n_vec) o[k] = pad_vector(x, g, v, LdgLoad{});
    }
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const long long v = v0 + static_cast<long long>(k) * blockDim.x;
      if (v < n_vec) reinterpret_cast<uint4*>(out)[v] = make_uint4(o[k].w[0], o[k].w[1], o[k].w[2], o[k].w[3]);
    }
  }
}

// As launch_pad_vec, with vpt (1, 2 or 4) vectors per thread step; rows narrower than a vector (W or Wo < 16 /
// sizeof(T)) take launch_pad_vec's kernel.
template <typename T>
cudaError_t launch_pad_vec_uniform(const T* x, T* out, int B, int C, int T_in, int H, int W, int To, int Ho, int Wo,
                                   int pad_t, int pad_h, int pad_w, int sm_count, cudaStream_t stream, int vpt) {
  constexpr int kVec = 16 / sizeof(T);
  if (W < kVec || Wo < kVec) {
    return launch_pad_vec<T>(x, out, B, C, T_in, H, W, To, Ho, Wo, pad_t, pad_h, pad_w, sm_count, stream);
  }
  if (reinterpret_cast<uintptr_t>(out) & 15u) return cudaErrorMisalignedAddress;
  if (static_cast<long long>(B) * C * To * Ho >= (1LL << 31)) return cudaErrorInvalidValue;
  const UniformGeom g{T_in, H, W, Wo, pad_t, pad_h, pad_w, FastDiv(Ho), FastDiv(To), 1.0 / Wo};
  const long long n_out = static_cast<long long>(B) * C * To * Ho * Wo;
  const long long n_vec = n_out / kVec;
  if (vpt != 1 && vpt != 2 && vpt != 4) return cudaErrorInvalidValue;
  const long long want = (n_vec + 256LL * vpt - 1) / (256LL * vpt);
  const int blocks = static_cast<int>(want < 8LL * sm_count ? want : 8LL * sm_count);
  if (vpt == 1) pad_vec_uniform_kernel<T, 1><<<blocks, 256, 0, stream>>>(x, out, n_vec, g);
  if (vpt == 2) pad_vec_uniform_kernel<T, 2><<<blocks, 256, 0, stream>>>(x, out, n_vec, g);
  if (vpt == 4) pad_vec_uniform_kernel<T, 4><<<blocks, 256, 0, stream>>>(x, out, n_vec, g);
  if (n_out > n_vec * kVec) pad_tail_kernel<T><<<1, kVec, 0, stream>>>(x, out, n_vec * kVec, n_out, g);
  return cudaGetLastError();
}

template cudaError_t launch_pad_vec_uniform<uint16_t>(const uint16_t*, uint16_t*, int, int, int, int, int, int, int,
                                                      int, int, int, int, int, cudaStream_t, int);
template cudaError_t launch_pad_vec_uniform<uint32_t>(const uint32_t*, uint32_t*, int, int, int, int, int, int, int,
                                                      int, int, int, int, int, cudaStream_t, int);
template cudaError_t launch_pad_vec<uint16_t>(const uint16_t*, uint16_t*, int, int, int, int, int, int, int, int,
                                              int, int, int, int, cudaStream_t);
template cudaError_t launch_pad_vec<uint32_t>(const uint32_t*, uint32_t*, int, int, int, int, int, int, int, int,
                                              int, int, int, int, cudaStream_t);

}  // namespace kda_pad
