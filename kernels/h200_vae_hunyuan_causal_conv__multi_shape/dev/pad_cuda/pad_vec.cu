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
#include <cstdint>
#include <cuda_runtime.h>

#include "pad_vec_core.cuh"

namespace kda_pad {

struct PadGeom {
  int C, T_in, H, W, To, Ho, Wo, pad_t, pad_h, pad_w;
  double inv_wo;
};

// r: an output row, < 2^31 (the launcher checks), so the splits are 32-bit divisions
template <typename T>
__device__ __forceinline__ const T* source_row(const T* x, const PadGeom& g, long long row) {
  const unsigned r = static_cast<unsigned>(row);
  const int ho = static_cast<int>(r % static_cast<unsigned>(g.Ho));
  const unsigned q = r / static_cast<unsigned>(g.Ho);
  const int to = static_cast<int>(q % static_cast<unsigned>(g.To));
  const long long bc = q / static_cast<unsigned>(g.To);  // b * C + c: x is contiguous, so (b, c) need not be split
  const int ts = min(max(to - g.pad_t, 0), g.T_in - 1);
  const int hs = min(max(ho - g.pad_h, 0), g.H - 1);
  return x + ((bc * g.T_in + ts) * static_cast<long long>(g.H) + hs) * g.W;
}

// 16 bytes that start `off` bytes (a multiple of 2) into the aligned 32-byte window lo:hi
__device__ __forceinline__ uint4 shift_window(uint4 lo, uint4 hi, unsigned off) {
  const unsigned k = off >> 2;             // whole words
  const unsigned sh = (off & 3u) * 8u;     // 0 or 16 bits
  const unsigned w[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
  unsigned t[7], u[5];
#pragma unroll
  for (int j = 0; j < 7; ++j) t[j] = (k & 1u) ? w[j + 1] : w[j];
#pragma unroll
  for (int j = 0; j < 5; ++j) u[j] = (k & 2u) ? t[j + 2] : t[j];
  uint4 o;
  o.x = __funnelshift_r(u[0], u[1], sh);
  o.y = __funnelshift_r(u[1], u[2], sh);
  o.z = __funnelshift_r(u[2], u[3], sh);
  o.w = __funnelshift_r(u[3], u[4], sh);
  return o;
}

template <typename T>
__global__ void __launch_bounds__(256)
pad_vec_kernel(const T* __restrict__ x, T* __restrict__ out, long long n_vec, long long n_out, PadGeom g) {
  constexpr int kVec = 16 / sizeof(T);
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long v = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; v < n_vec; v += stride) {
    const long long e0 = v * kVec;
    long long r = static_cast<long long>(static_cast<double>(e0) * g.inv_wo);
    long long c0 = e0 - r * g.Wo;
    if (c0 < 0) { --r; c0 += g.Wo; } else if (c0 >= g.Wo) { ++r; c0 -= g.Wo; }
    const int c = static_cast<int>(c0);
    const int s0 = c - g.pad_w;  // source column of the vector's first element
    union {
      uint4 u;
      T t[kVec];
    } pack;
    if (c + kVec <= g.Wo && s0 >= 0 && s0 + kVec <= g.W) {
      const T* a = source_row(x, g, r) + s0;
      const unsigned off = static_cast<unsigned>(reinterpret_cast<uintptr_t>(a) & 15u);
      const uint4* base = reinterpret_cast<const uint4*>(reinterpret_cast<uintptr_t>(a) - off);
      const uint4 lo = __ldg(base);
      // the second word only when the 16 bytes cross into it: it then holds source bytes, so it is in bounds
      pack.u = off ? shift_window(lo, __ldg(base + 1), off) : lo;
    } else {
      long long rr = r;
      int cc = c;
      const T* src = source_row(x, g, rr);
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        if (e0 + j < n_out) {
          pack.t[j] = __ldg(src + min(max(cc - g.pad_w, 0), g.W - 1));
        }
        if (++cc == g.Wo && j + 1 < kVec) {
          cc = 0;
          ++rr;
          if (e0 + j + 1 < n_out) src = source_row(x, g, rr);
        }
      }
    }
    reinterpret_cast<uint4*>(out)[v] = pack.u;
  }
}

// The last n_out % kVec elements (after the last whole vector), one thread each.
template <typename T>
__global__ void pad_tail_kernel(const T* __restrict__ x, T* __restrict__ out, long long e_start, long long n_out,
                                PadGeom g) {
  const long long e = e_start + threadIdx.x;
  if (e >= n_out) return;
  const long long r = e / g.Wo;
  const int c = static_cast<int>(e - r * g.Wo);
  out[e] = source_row(x, g, r)[min(max(c - g.pad_w, 0), g.W - 1)];
}

// Returns a CUDA error code; cudaErrorMisalignedAddress when out is not 16-byte aligned (torch.empty's is),
// cudaErrorInvalidValue when the output has 2^31 rows or more.
template <typename T>
cudaError_t launch_pad_vec(const T* x, T* out, int B, int C, int T_in, int H, int W, int To, int Ho, int Wo,
                           int pad_t, int pad_h, int pad_w, int sm_count, cudaStream_t stream) {
  constexpr int kVec = 16 / sizeof(T);
  if (reinterpret_cast<uintptr_t>(out) & 15u) return cudaErrorMisalignedAddress;
  const PadGeom g{C, T_in, H, W, To, Ho, Wo, pad_t, pad_h, pad_w, 1.0 / Wo};
  if (static_cast<long long>(B) * C * To * Ho >= (1LL << 31)) return cudaErrorInvalidValue;
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
struct LdgLoad {
  __device__ __forceinline__ Vec16 operator()(const Vec16* p) const {
    const uint4 u = __ldg(reinterpret_cast<const uint4*>(p));
    return Vec16{{u.x, u.y, u.z, u.w}};
  }
};

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
  const PadGeom tail_g{C, T_in, H, W, To, Ho, Wo, pad_t, pad_h, pad_w, 1.0 / Wo};
  const long long n_out = static_cast<long long>(B) * C * To * Ho * Wo;
  const long long n_vec = n_out / kVec;
  if (vpt != 1 && vpt != 2 && vpt != 4) return cudaErrorInvalidValue;
  const long long want = (n_vec + 256LL * vpt - 1) / (256LL * vpt);
  const int blocks = static_cast<int>(want < 8LL * sm_count ? want : 8LL * sm_count);
  if (vpt == 1) pad_vec_uniform_kernel<T, 1><<<blocks, 256, 0, stream>>>(x, out, n_vec, g);
  if (vpt == 2) pad_vec_uniform_kernel<T, 2><<<blocks, 256, 0, stream>>>(x, out, n_vec, g);
  if (vpt == 4) pad_vec_uniform_kernel<T, 4><<<blocks, 256, 0, stream>>>(x, out, n_vec, g);
  if (n_out > n_vec * kVec) pad_tail_kernel<T><<<1, kVec, 0, stream>>>(x, out, n_vec * kVec, n_out, tail_g);
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
