// Device helpers of the H200 GroupNorm+SiLU extension, shared by its two translation units: gns_kernels.cu (paths
// A-E through gns_kernels.cuh) and gns_path_f.cu (path F). Everything here is a template, a struct or a
// __forceinline__ device function, so both units can include it. Moved out of gns_kernels.cuh unchanged in c010
// (c009 had path F carry its own copies).
//
// fp32 statistics with Chan's pairwise merge (n, mean, M2), exact two-pass batches shifted by K, no E[x^2]-mu^2;
// the per-channel table form of the apply; L2 cache-policy loads/stores; path C's raw-uint4 register form.
#pragma once

#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <stdint.h>
#include <type_traits>

namespace gns {

// ---------------------------------------------------------------------------------------
// small helpers
// ---------------------------------------------------------------------------------------

// n / d for 0 <= n < 2^31, 1 <= d < 2^31 (Granlund-Montgomery round-up multiplier).
struct FastDiv {
  uint32_t m;
  uint32_t s;
};

__device__ __forceinline__ uint32_t fdiv(uint32_t n, FastDiv f) {
  return (__umulhi(n, f.m) + n) >> f.s;
}

// Element storage: 16-bit types are carried as raw uint16_t (trivial copies, no class
// operators in the hot loops); conversions are exact widenings / one IEEE rounding.
template <typename T>
struct Tr;
template <>
struct Tr<float> {
  using S = float;
};
template <>
struct Tr<__half> {
  using S = uint16_t;
};
template <>
struct Tr<__nv_bfloat16> {
  using S = uint16_t;
};

template <typename T>
__device__ __forceinline__ float to_f(typename Tr<T>::S v);
template <>
__device__ __forceinline__ float to_f<float>(float v) { return v; }
template <>
__device__ __forceinline__ float to_f<__half>(uint16_t v) { return __half2float(__ushort_as_half(v)); }
template <>
__device__ __forceinline__ float to_f<__nv_bfloat16>(uint16_t v) {
  return __uint_as_float(((uint32_t)v) << 16);  // exact widening
}

// Read-only scalar load widened to fp32 (raw 16-bit load + exact widening).
template <typename T>
__device__ __forceinline__ float ldg_f(const T* p);
template <>
__device__ __forceinline__ float ldg_f<float>(const float* p) { return __ldg(p); }
template <>
__device__ __forceinline__ float ldg_f<__half>(const __half* p) {
  return __half2float(__ushort_as_half(__ldg(reinterpret_cast<const unsigned short*>(p))));
}
template <>
__device__ __forceinline__ float ldg_f<__nv_bfloat16>(const __nv_bfloat16* p) {
  return __uint_as_float(((uint32_t)__ldg(reinterpret_cast<const unsigned short*>(p))) << 16);
}

template <typename T>
__device__ __forceinline__ typename Tr<T>::S from_f(float v);
template <>
__device__ __forceinline__ float from_f<float>(float v) { return v; }
template <>
__device__ __forceinline__ uint16_t from_f<__half>(float v) { return __half_as_ushort(__float2half_rn(v)); }
template <>
__device__ __forceinline__ uint16_t from_f<__nv_bfloat16>(float v) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(v));
}

template <typename T, int VEC>
struct alignas(sizeof(typename Tr<T>::S) * VEC) VecT {
  typename Tr<T>::S v[VEC];
};

// Read-only global vector load (16-byte LDG.E.128.CONSTANT when the vector is 16 bytes).
template <typename T, int VEC>
__device__ __forceinline__ VecT<T, VEC> ldg_vec(const VecT<T, VEC>* p) {
  if constexpr (sizeof(VecT<T, VEC>) == 16) {
    const uint4 u = __ldg(reinterpret_cast<const uint4*>(p));
    VecT<T, VEC> r;
    static_assert(sizeof(r) == sizeof(u), "size");
    memcpy(&r, &u, 16);
    return r;
  } else {
    return *p;
  }
}

// Chan/Welford partial: count, mean, sum of squared deviations from the mean.
struct Stat {
  float n;
  float mean;
  float m2;
};

__device__ __forceinline__ Stat stat_empty() { return Stat{0.f, 0.f, 0.f}; }

// Chan et al. pairwise merge; exact for empty operands, no cancellation for offset data.
__device__ __forceinline__ Stat stat_merge(Stat a, Stat b) {
  const float n = a.n + b.n;
  const float fb = (n > 0.f) ? __fdividef(b.n, n) : 0.f;  // ~2 ulp; n < 2^126
  const float d = b.mean - a.mean;
  Stat r;
  r.n = n;
  r.mean = fmaf(d, fb, a.mean);
  r.m2 = a.m2 + b.m2 + d * d * a.n * fb;
  return r;
}

// Tree merge down to lane 0 (fixed order: identical result wherever the same inputs are merged).
__device__ __forceinline__ Stat warp_merge_down(Stat s) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    Stat o;
    o.n = __shfl_down_sync(0xffffffffu, s.n, off);
    o.mean = __shfl_down_sync(0xffffffffu, s.mean, off);
    o.m2 = __shfl_down_sync(0xffffffffu, s.m2, off);
    s = stat_merge(s, o);
  }
  return s;
}

// Block-wide merge; result valid in thread 0.  s_warp needs blockDim/32 entries.
__device__ __forceinline__ Stat block_merge(Stat s, Stat* s_warp) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int nwarps = (blockDim.x + 31) >> 5;
  s = warp_merge_down(s);
  if (lane == 0) s_warp[warp] = s;
  __syncthreads();
  Stat r = stat_empty();
  if (warp == 0) {
    r = (lane < nwarps) ? s_warp[lane] : stat_empty();
    r = warp_merge_down(r);
  }
  return r;
}

// Exact two-pass stats of NB register vectors (the first nvalid of them), merged into st.
// Values enter shifted by K (the group's first element): x - K is exact when x ~ K, so an
// offset-dominated group (mean 1e4, spread 1e-2) keeps full fp32 precision in mean and M2.
template <typename T, int VEC, int NB>
__device__ __forceinline__ void batch_stats(const VecT<T, VEC> (&r)[NB], int nvalid, float K,
                                            Stat& st) {
  if (nvalid <= 0) return;
  float s0 = 0.f, s1 = 0.f;
#pragma unroll
  for (int k = 0; k < NB; ++k) {
    if (k < nvalid) {
#pragma unroll
      for (int i = 0; i < VEC; ++i) {
        if ((i & 1) == 0) s0 += to_f<T>(r[k].v[i]) - K;
        else s1 += to_f<T>(r[k].v[i]) - K;
      }
    }
  }
  const float nb = (float)(nvalid * VEC);
  const float m = (nvalid == NB) ? (s0 + s1) * (1.0f / (float)(NB * VEC)) : (s0 + s1) / nb;
  float q0 = 0.f, q1 = 0.f;
#pragma unroll
  for (int k = 0; k < NB; ++k) {
    if (k < nvalid) {
#pragma unroll
      for (int i = 0; i < VEC; ++i) {
        const float d = (to_f<T>(r[k].v[i]) - K) - m;
        if ((i & 1) == 0) q0 = fmaf(d, d, q0);
        else q1 = fmaf(d, d, q1);
      }
    }
  }
  st = stat_merge(st, Stat{nb, m, q0 + q1});
}

// Round VEC floats once to T (pairs use the packed cvt.rn.{f16,bf16}x2.f32).
template <typename T, int VEC>
__device__ __forceinline__ VecT<T, VEC> pack_vec(const float (&o)[VEC]) {
  VecT<T, VEC> r;
  if constexpr (std::is_same<T, __half>::value && (VEC % 2) == 0) {
#pragma unroll
    for (int i = 0; i < VEC; i += 2) {
      const __half2 h = __floats2half2_rn(o[i], o[i + 1]);
      const uint32_t u = *reinterpret_cast<const uint32_t*>(&h);
      r.v[i] = (uint16_t)(u & 0xffffu);
      r.v[i + 1] = (uint16_t)(u >> 16);
    }
  } else if constexpr (std::is_same<T, __nv_bfloat16>::value && (VEC % 2) == 0) {
#pragma unroll
    for (int i = 0; i < VEC; i += 2) {
      const __nv_bfloat162 h = __floats2bfloat162_rn(o[i], o[i + 1]);
      const uint32_t u = *reinterpret_cast<const uint32_t*>(&h);
      r.v[i] = (uint16_t)(u & 0xffffu);
      r.v[i + 1] = (uint16_t)(u >> 16);
    }
  } else {
#pragma unroll
    for (int i = 0; i < VEC; ++i) r.v[i] = from_f<T>(o[i]);
  }
  return r;
}

// silu(fma(x - mean, a_c, b_c)) for one vector; e = in-group index of its first element.
template <typename T, int VEC>
__device__ __forceinline__ VecT<T, VEC> apply_vec(const VecT<T, VEC>& xv, float K, float mean,
                                                  float rstd,
                                                  uint32_t e, const T* __restrict__ w,
                                                  const T* __restrict__ b, int g_off, FastDiv hw,
                                                  bool uniform) {
  float a[VEC], c[VEC];
  if (uniform) {
    const int ch = g_off + (int)fdiv(e, hw);
    const float aw = rstd * ldg_f<T>(w + ch);
    const float bb = ldg_f<T>(b + ch);
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      a[i] = aw;
      c[i] = bb;
    }
  } else {
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      const int ch = g_off + (int)fdiv(e + (uint32_t)i, hw);
      a[i] = rstd * ldg_f<T>(w + ch);
      c[i] = ldg_f<T>(b + ch);
    }
  }
  float o[VEC];
#pragma unroll
  for (int i = 0; i < VEC; ++i) {
    const float t = fmaf((to_f<T>(xv.v[i]) - K) - mean, a[i], c[i]);  // mean is K-shifted
    // silu(t) = t / (1 + exp(-t)); ex2.approx + div.approx (same class as Triton's tl.sigmoid),
    // error ~1e-7 relative, far below one rounding to fp16/bf16; t -> -inf gives -0.
    o[i] = __fdividef(t, 1.0f + __expf(-t));
  }
  return pack_vec<T, VEC>(o);
}

// Per-channel table: (a_c, c'_c) = (rstd*w_c, b_c - mean_s*a_c), so that
//   t = fma(x - K, a_c, c'_c) = (x - K - mean_s) * rstd * w_c + b_c.
constexpr int kMaxTableCh = 64;

// Raw w/b of channels [c_lo, c_lo + n_ch) into the table (issued before the x data lands).
template <typename T>
__device__ __forceinline__ void table_load(float2* tab, const T* __restrict__ w,
                                           const T* __restrict__ b, int ch0, int n_ch) {
  for (int i = threadIdx.x; i < n_ch; i += blockDim.x)
    tab[i] = make_float2(ldg_f<T>(w + ch0 + i), ldg_f<T>(b + ch0 + i));
}
__device__ __forceinline__ void table_finish(float2* tab, int n_ch, float mean_s, float rstd) {
  for (int i = threadIdx.x; i < n_ch; i += blockDim.x) {
    const float2 wb = tab[i];
    const float a = rstd * wb.x;
    tab[i] = make_float2(a, fmaf(-mean_s, a, wb.y));
  }
}

template <typename T, int VEC>
__device__ __forceinline__ VecT<T, VEC> apply_vec_tab(const VecT<T, VEC>& xv, float K,
                                                      uint32_t e, int c_lo,
                                                      const float2* __restrict__ tab,
                                                      FastDiv hw, bool uniform) {
  float a[VEC], c[VEC];
  if (uniform) {
    const float2 ac = tab[(int)fdiv(e, hw) - c_lo];
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      a[i] = ac.x;
      c[i] = ac.y;
    }
  } else {
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      const float2 ac = tab[(int)fdiv(e + (uint32_t)i, hw) - c_lo];
      a[i] = ac.x;
      c[i] = ac.y;
    }
  }
  float o[VEC];
#pragma unroll
  for (int i = 0; i < VEC; ++i) {
    const float t = fmaf(to_f<T>(xv.v[i]) - K, a[i], c[i]);
    o[i] = __fdividef(t, 1.0f + __expf(-t));
  }
  return pack_vec<T, VEC>(o);
}

// ---------------------------------------------------------------------------------------
// L2 cache policies and path C's register form of a vector
// ---------------------------------------------------------------------------------------
__device__ __forceinline__ uint64_t pol_evict_last() {
  uint64_t p;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\n" : "=l"(p));
  return p;
}
__device__ __forceinline__ uint64_t pol_evict_first() {
  uint64_t p;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(p));
  return p;
}
__device__ __forceinline__ uint4 ldg_hint16(const void* p, uint64_t pol) {
  uint4 r;
  asm("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], %5;\n"
      : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
      : "l"(p), "l"(pol));
  return r;
}
__device__ __forceinline__ void stg_hint16(void* p, uint4 v, uint64_t pol) {
  asm volatile("st.global.L2::cache_hint.v4.u32 [%0], {%1,%2,%3,%4}, %5;\n" ::"l"(p), "r"(v.x),
               "r"(v.y), "r"(v.z), "r"(v.w), "l"(pol)
               : "memory");
}
__device__ __forceinline__ uint32_t ld_acquire_u32(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ uint64_t pol_evict_normal() {
  uint64_t p;
  asm volatile("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;\n" : "=l"(p));
  return p;
}

// Register form of one vector in path C.  16-byte vectors stay as a raw uint4 (one LDG.128
// straight into four registers; elements are unpacked only at use, so the U loads of a tile
// are all in flight before the first use -- the VecT<uint16_t> form made the compiler repack
// halves right after each load, which serialised the loads: v3 first call, 1 TB/s).
template <typename T, int VEC>
struct PipeL {
  using L = typename std::conditional<sizeof(VecT<T, VEC>) == 16, uint4, VecT<T, VEC>>::type;
};

template <typename T, int VEC>
__device__ __forceinline__ float pl_get(const typename PipeL<T, VEC>::L& l, int i) {
  if constexpr (sizeof(VecT<T, VEC>) == 16) {
    const uint32_t wd = (&l.x)[(i * (int)sizeof(T)) >> 2];
    if constexpr (std::is_same<T, float>::value) {
      return __uint_as_float(wd);
    } else if constexpr (std::is_same<T, __half>::value) {
      return __half2float(__ushort_as_half((unsigned short)((i & 1) ? (wd >> 16) : (wd & 0xffffu))));
    } else {
      return __uint_as_float((i & 1) ? (wd & 0xffff0000u) : (wd << 16));
    }
  } else {
    return to_f<T>(l.v[i]);
  }
}

template <typename T, int VEC>
__device__ __forceinline__ typename PipeL<T, VEC>::L pl_load(const T* p, uint64_t pol) {
  if constexpr (sizeof(VecT<T, VEC>) == 16) {
    return ldg_hint16(p, pol);
  } else {
    return *reinterpret_cast<const VecT<T, VEC>*>(p);
  }
}

template <typename T, int VEC>
__device__ __forceinline__ void pl_store(T* p, const float (&o)[VEC], uint64_t pol) {
  if constexpr (sizeof(VecT<T, VEC>) == 16) {
    uint4 u;
    uint32_t* wd = &u.x;
    if constexpr (std::is_same<T, float>::value) {
#pragma unroll
      for (int i = 0; i < 4; ++i) wd[i] = __float_as_uint(o[i]);
    } else if constexpr (std::is_same<T, __half>::value) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const __half2 h = __floats2half2_rn(o[2 * i], o[2 * i + 1]);
        wd[i] = *reinterpret_cast<const uint32_t*>(&h);
      }
    } else {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const __nv_bfloat162 h = __floats2bfloat162_rn(o[2 * i], o[2 * i + 1]);
        wd[i] = *reinterpret_cast<const uint32_t*>(&h);
      }
    }
    stg_hint16(p, u, pol);
  } else {
    *reinterpret_cast<VecT<T, VEC>*>(p) = pack_vec<T, VEC>(o);
  }
}

}  // namespace gns
