// One 16-byte output vector of a replicate pad along W, written so that every lane of a warp runs the same
// instructions whatever the vector's place in its row (pad_vec.cu's first kernel sent row edges and vectors
// across two rows down a scalar path, and on rows up to ~256 wide that path held up nearly every warp).
//
// __host__ __device__ and free of intrinsics, so tests/test_pad_vec_core.py compiles it with g++ and checks it on
// the CPU against a reference pad over every column offset, edge and row straddle; nvcc turns the 64-bit shifts
// into funnel shifts.
//
// The idea: for output columns c0 .. c0 + V - 1 of one row (V = 16 / sizeof(T) elements), the source columns
// needed are clamp(c0 + j - pad_w, 0, W - 1). With W >= V they all lie in the V-element window that starts at
// a = clamp(c0 - pad_w, 0, W - V); element j is window[clamp(j + d, 0, V - 1)] with d = c0 - pad_w - a. So one
// window load (two aligned 16-byte words) and one clamped shift serve the interior (d = 0), the left edge (d < 0:
// shift in copies of the row's first element) and the right edge (d > 0: copies of its last). A vector that runs
// into the next row computes that row's part the same way and merges the two by byte position.
#pragma once
#include <cstdint>

#ifndef __CUDACC__
#ifndef __host__
#define __host__
#endif
#ifndef __device__
#define __device__
#endif
#ifndef __forceinline__
#define __forceinline__ inline
#endif
#endif

namespace kda_pad {

struct Vec16 {
  uint32_t w[4];
};

// n / d for n < 2^31 by multiply-high (the row splits run per vector: a hardware-free 32-bit division costs
// ~20 instructions each).
struct FastDiv {
  uint32_t d, m, s;
  __host__ __device__ FastDiv() : d(1), m(0), s(0) {}
  __host__ __device__ explicit FastDiv(uint32_t divisor) : d(divisor), m(0), s(0) {
    while ((1ull << s) < d) ++s;
    m = static_cast<uint32_t>(((1ull << 32) * ((1ull << s) - d)) / d + 1);
  }
  __host__ __device__ __forceinline__ uint32_t div(uint32_t n) const {
    const uint32_t t = static_cast<uint32_t>((static_cast<uint64_t>(n) * m) >> 32);
    return (t + n) >> s;
  }
};

__host__ __device__ __forceinline__ uint32_t funnel_r(uint32_t lo, uint32_t hi, uint32_t sh) {
  return static_cast<uint32_t>(((static_cast<uint64_t>(hi) << 32) | lo) >> sh);
}

// 16 bytes starting `off` bytes (a multiple of 2, < 16) into the 32-byte window lo:hi
__host__ __device__ __forceinline__ Vec16 shift_window(const Vec16& lo, const Vec16& hi, uint32_t off) {
  const uint32_t k = off >> 2, sh = (off & 3u) * 8u;
  const uint32_t w[8] = {lo.w[0], lo.w[1], lo.w[2], lo.w[3], hi.w[0], hi.w[1], hi.w[2], hi.w[3]};
  uint32_t t[7], u[5];
  for (int j = 0; j < 7; ++j) t[j] = (k & 1u) ? w[j + 1] : w[j];
  for (int j = 0; j < 5; ++j) u[j] = (k & 2u) ? t[j + 2] : t[j];
  Vec16 o;
  for (int j = 0; j < 4; ++j) o.w[j] = funnel_r(u[j], u[j + 1], sh);
  return o;
}

// The V elements src[a .. a + V) (any element alignment), from the two aligned 16-byte words around them. The
// second word is read only when the elements reach into it, so it is always inside x's allocation.
template <typename T, typename Load>
__host__ __device__ __forceinline__ Vec16 load_window(const T* src, int a, Load load) {
  const uintptr_t p = reinterpret_cast<uintptr_t>(src + a);
  const uint32_t off = static_cast<uint32_t>(p & 15u);
  const Vec16* base = reinterpret_cast<const Vec16*>(p - off);
  const Vec16 lo = load(base);
  const Vec16 hi = load(base + (off ? 1 : 0));
  return shift_window(lo, hi, off);
}

template <typename T>
__host__ __device__ __forceinline__ Vec16 broadcast(uint32_t e) {
  Vec16 v;
  const uint32_t word = sizeof(T) == 2 ? ((e & 0xffffu) | (e << 16)) : e;
  for (int j = 0; j < 4; ++j) v.w[j] = word;
  return v;
}

// win[clamp(j + d, 0, V - 1)] for j in [0, V)
template <typename T>
__host__ __device__ __forceinline__ Vec16 clamped_shift(const Vec16& win, int d) {
  constexpr int V = 16 / static_cast<int>(sizeof(T));
  const uint32_t first = sizeof(T) == 2 ? (win.w[0] & 0xffffu) : win.w[0];
  const uint32_t last = sizeof(T) == 2 ? (win.w[3] >> 16) : win.w[3];
  if (d >= 0) {
    const int s = d < V - 1 ? d : V - 1;
    return shift_window(win, broadcast<T>(last), static_cast<uint32_t>(s) * sizeof(T));
  }
  const int s = d > -(V - 1) ? d : -(V - 1);
  return shift_window(broadcast<T>(first), win, static_cast<uint32_t>(V + s) * sizeof(T));
}

// Output columns c .. c + V - 1 of one output row whose source row is `src` (columns past the row's end come out
// as clamped copies: the caller overwrites them with the next row's part). Needs W >= V.
template <typename T, typename Load>
__host__ __device__ __forceinline__ Vec16 row_vector(const T* src, int c, int W, int pad_w, Load load) {
  constexpr int V = 16 / static_cast<int>(sizeof(T));
  const int s0 = c - pad_w;
  const int a = s0 < 0 ? 0 : (s0 > W - V ? W - V : s0);
  return clamped_shift<T>(load_window(src, a, load), s0 - a);
}

// The first n_bytes (a multiple of sizeof(T)) of a, the rest of b
__host__ __device__ __forceinline__ Vec16 merge_bytes(const Vec16& a, const Vec16& b, int n_bytes) {
  Vec16 o;
  for (int j = 0; j < 4; ++j) {
    const int lo = 4 * j;
    uint32_t mask;
    if (n_bytes >= lo + 4) {
      mask = 0xffffffffu;
    } else if (n_bytes <= lo) {
      mask = 0u;
    } else {
      mask = 0xffffffffu >> (8 * (lo + 4 - n_bytes));
    }
    o.w[j] = (a.w[j] & mask) | (b.w[j] & ~mask);
  }
  return o;
}

// The geometry of one pad call: x contiguous [B, C, T, H, W], out contiguous [B, C, To, Ho, Wo], out rows < 2^31.
struct UniformGeom {
  int T_in, H, W, Wo, pad_t, pad_h, pad_w;
  FastDiv ho, to;  // Ho, To
  double inv_wo;
};

template <typename T>
__host__ __device__ __forceinline__ const T* source_row(const T* x, const UniformGeom& g, uint32_t r) {
  const uint32_t q = g.ho.div(r);
  const int ho = static_cast<int>(r - q * g.ho.d);
  const uint32_t bc = g.to.div(q);  // b * C + c: x is contiguous, so (b, c) need not be split
  const int to = static_cast<int>(q - bc * g.to.d);
  const int ts = to < g.pad_t ? 0 : (to - g.pad_t > g.T_in - 1 ? g.T_in - 1 : to - g.pad_t);
  const int hs = ho < g.pad_h ? 0 : (ho - g.pad_h > g.H - 1 ? g.H - 1 : ho - g.pad_h);
  return x + ((static_cast<long long>(bc) * g.T_in + ts) * g.H + hs) * static_cast<long long>(g.W);
}

// Output vector v (elements v * V .. v * V + V - 1 of the flat output). Needs W >= V and Wo >= V (a vector then
// spans at most two rows) and a whole vector inside the output.
struct RowCol {
  long long r;
  int c;
};

// Output row and column of flat output element e, by an fp64 reciprocal of Wo: exact after one correction step
// (e < 2^40 here, so the product's error is far below one row).
__host__ __device__ __forceinline__ RowCol split_row(long long e, const UniformGeom& g) {
  long long r = static_cast<long long>(static_cast<double>(e) * g.inv_wo);
  long long c = e - r * g.Wo;
  if (c < 0) {
    --r;
    c += g.Wo;
  } else if (c >= g.Wo) {
    ++r;
    c -= g.Wo;
  }
  return RowCol{r, static_cast<int>(c)};
}

template <typename T, typename Load>
__host__ __device__ __forceinline__ Vec16 pad_vector(const T* x, const UniformGeom& g, long long v, Load load) {
  constexpr int V = 16 / static_cast<int>(sizeof(T));
  const RowCol rc = split_row(v * V, g);
  const long long r = rc.r;
  const int c0 = rc.c;
  Vec16 out = row_vector(source_row(x, g, static_cast<uint32_t>(r)), c0, g.W, g.pad_w, load);
  const int in_row = g.Wo - c0;
  if (in_row < V) {  // the vector runs into the next row: that row's columns from 0, merged by byte position
    const Vec16 next = row_vector(source_row(x, g, static_cast<uint32_t>(r + 1)), -in_row, g.W, g.pad_w, load);
    out = merge_bytes(out, next, in_row * static_cast<int>(sizeof(T)));
  }
  return out;
}

}  // namespace kda_pad
