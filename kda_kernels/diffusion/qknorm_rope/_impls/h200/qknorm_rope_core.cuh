// c008: fused in-place per-head QK RMSNorm + RoPE, the per-thread code of the CUDA kernel (qknorm_rope.cu).
//
// Written once for two compilers: nvcc builds it into the sm_90a kernel, g++ builds the same function into the
// CPU emulator of tests/emu (every lane of a warp a fiber, shuffles exchanged through memory), so the CPU tests
// run the kernel's own indexing, speculation, loop and arithmetic. Device-only instructions (PDL, shuffles, loads
// and stores) go through the policy `W` (DeviceWarp in qknorm_rope.cu; the emulator's EmuWarp checks and records
// them). The device contracts a*b+c into FMAs (nvcc's default; no fast math) and takes rsqrt from MUFU.RSQ as
// SGLang does; the emulator rounds each operation and takes 1/sqrt in double: its results are within a few fp32
// ulps of the device's (far inside the bf16/fp16 tolerance), not bit-equal. bf16/fp16 stores round to nearest
// even on both sides.
//
// Math (prompt.md K, the default path; round_norm_before_rope goes to SGLang): per (token, head) row x of D
// elements, r = rsqrt(sum(x^2)/D + eps) in fp32, e = x * (r * w) kept in fp32, RoPE in fp32 on lanes
// [0, rope_dim), one rounding to the activation dtype on the store.
//
// Byte model (per call; Nq = N*Hq*D and Nk = N*Hk*D elements, e_x the activation size, P x W the cache, e_c its
// entry size, e_p the position size):
//
//     bytes = 2*(Nq + Nk)*e_x   q and k read once and written once, in place
//           + 2*D*e_x           the two weight vectors
//           + P*W*e_c           the whole cache (production: one row per token, every row read)
//           + N*e_p             positions
//     bound = bytes / 4.29 TB/s (the H200's measured copy ceiling); the task's sol is the same-size copy kernel's
//             time over ours (large rows: the copy reaches 3.7-3.9 TB/s at 100-211 MB)
//
//     qwen T4096 H24 D128 bf16, fp32 cache [4096,128], int64 positions:
//       100.66 MB (q, k) + 2.10 MB (cache) + 0.03 MB = 102.8 MB -> 24.0 us at 4.29 TB/s; copy 27.7 us, SGLang 29.7 us
//     qwen-edit T8424 H24: 211.4 MB -> 49.3 us (copy 54.5, SGLang 60.6); zimage T4096/T4128 H30: 128.0/129.0 MB ->
//     29.8/30.1 us (copy 34.2/34.3, SGLang 36.5/36.8); small rows (0.5-4.9 MB): latency bound, SGLang 2.1-3.4 us
//     (the H200 sweep of 2026-11-27), two dependent memory trips plus launch.
//
// Work decomposition (SGLang's, without its division and its second round trip). A *group* of L = D/8 lanes owns
// one (token, head) row at a time, 16 bytes (8 elements) per lane; a warp holds 32/L groups (two rows at D 128).
// Rows are numbered token-major (q's heads, then k's) and dealt grid-stride, adjacent groups on adjacent rows (the
// DRAM stream SGLang's kernel has); a group steps its (token, head) by the grid stride with an add and a compare
// (step_tok, step_head), never a division. The grid: one row per group where the rows fit one wave (small
// launches: SGLang's CTA count), else a persistent grid sized so that every group takes the same number of rows.
//
// One memory round trip per row. Every load of a row is issued before any of them is used: the q/k vector, the
// 16-byte weight vector (an L1 hit), and the cos/sin entries of the row's cache row -- named by the position
// loaded one iteration earlier (the group's next row's position is loaded with the current row's loads), or, for
// a group's first row, guessed as the token index (SGLang's callers pass an arange) and checked when the row's
// own position arrives: a wrong guess reloads (the position -> cache trip SGLang's kernel pays on every row).
// The loop is branch-free around the loads (groups past the end load the last row and skip the store; lanes past
// rope_dim load the row's first entries and rotate by cos 1, sin 0), so ptxas cannot sink a load behind the
// reduction.
//
// PDL: griddepcontrol.wait before the first load, launch_dependents after the last store (SGLang's placement;
// early_trigger is a dev/sweep.py knob). No L2/L1 prefetch (c007's, measured useless).
//
// Registers and occupancy (qknorm_rope.cu, kMinBlocks): the production kernel 40 registers, 6 CTAs of 256
// threads per SM (48 warps, SGLang's), no spill; the loop ~171 SASS instructions per warp iteration (two rows).

#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define KQ_HD __host__ __device__ __forceinline__
#else
#define KQ_HD inline
#endif

namespace kda_qkr {

constexpr int kThreads = 256;  // threads per CTA
constexpr int kWarps = kThreads / 32;
constexpr uint32_t kEarlyTrigger = 1u;  // Params::flags: launch_dependents at the start (else at the end)

enum Layout : int { kInterleavedHalf = 0, kInterleavedFull = 1, kNeoxHalf = 2, kNeoxFull = 3 };
enum CacheKind : int { kCacheF32 = 0, kCacheBF16 = 1, kCacheF16 = 2 };

struct alignas(16) V4 {
  uint32_t a, b, c, d;
};
struct alignas(8) V2 {
  uint32_t a, b;
};

struct Params {
  void* q;  // [N, Hq, D], last stride 1
  void* k;  // [N, Hk, D]
  const void* qw;  // [D]
  const void* kw;  // [D]
  const void* cache;  // [P, W] contiguous
  const void* pos;  // [N] int32 or int64
  int64_t q_stride_t, q_stride_h, k_stride_t, k_stride_h;  // elements
  int64_t cache_row;  // W: entries per cache row
  uint32_t cache_rows;  // P (> 0)
  uint32_t n_q_heads;  // Hq
  uint32_t rows_per_token;  // H = Hq + Hk
  uint64_t rows_magic;  // m / H == umulhi64(m, rows_magic) (div_magic), once per thread
  uint32_t n_rows;  // M = N * H
  uint32_t step_tok, step_head;  // the grid stride G (groups) as G = step_tok * H + step_head
  uint32_t last_tok, last_head;  // the last row (N - 1, H - 1): where a group past the end loads (never stores)
  uint32_t rope_dim;
  uint32_t pos_is_64;
  uint32_t flags;
  float eps;
  // derived by the launcher (set_derived below), byte units: row (t, h) of q at q + t*q_stride_t + h*q_stride_h,
  // of k at k_adj + t*k_stride_t + h*k_stride_h with k_adj = k - Hq*k_stride_h (h counts q's heads first)
  char* k_adj;
  int64_t qb_st, qb_sh, kb_st, kb_sh;
  uint32_t cache_row_bytes;  // W * entry size (< 2^31 * ... checked by the contract's sizes)
};

// The byte-unit fields of p from the element-unit ones (the launcher and the emulator call it).
inline void set_derived(Params& p, int64_t cache_entry_bytes) {
  p.qb_st = p.q_stride_t * 2;
  p.qb_sh = p.q_stride_h * 2;
  p.kb_st = p.k_stride_t * 2;
  p.kb_sh = p.k_stride_h * 2;
  // computed as an integer: the adjusted address may lie before k's allocation (never dereferenced there)
  p.k_adj = reinterpret_cast<char*>(reinterpret_cast<uintptr_t>(p.k) -
                                    static_cast<uintptr_t>(p.n_q_heads) * static_cast<uintptr_t>(p.kb_sh));
  p.cache_row_bytes = static_cast<uint32_t>(p.cache_row * cache_entry_bytes);
}

// ------------------------------------------------------------------------------------------- fp32 arithmetic
// Spelled out so that nvcc contracts nothing (the emulator is built with -ffp-contract=off).

KQ_HD float f_mul(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
KQ_HD float f_add(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
KQ_HD float f_sub(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
KQ_HD float f_fma(float a, float b, float c) {
#ifdef __CUDA_ARCH__
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}
// 1/sqrt(v), correctly rounded (the host computes it in double: a double rounding can differ from the device's
// result only when 1/sqrt(v) lies within 2^-53 relative of a float midpoint, which the emulator accepts).
KQ_HD float f_rsqrt(float v) {
#ifdef __CUDA_ARCH__
  return rsqrtf(v);  // MUFU.RSQ (+ a denormal-argument guard): SGLang's rsqrt, 1 instruction instead of ~20
#else
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(v)));
#endif
}

KQ_HD uint32_t f2u(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}
KQ_HD float u2f(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

// ---------------------------------------------------------------------------------- 16-bit float conversions

// float -> bf16 bits, round to nearest even (NaN stays NaN).
KQ_HD uint32_t bf16_rn(float f) {
  const uint32_t u = f2u(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (u >> 16) | 0x40u;
  return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

// float -> fp16 bits, round to nearest even, overflow to inf, gradual underflow.
KQ_HD uint32_t f16_rn(float f) {
  const uint32_t u = f2u(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t a = u & 0x7fffffffu;
  if (a >= 0x7f800000u) return sign | (a > 0x7f800000u ? 0x7e00u : 0x7c00u);
  if (a >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520: rounds to inf
  if (a >= 0x38800000u) {  // a normal half (>= 2^-14)
    const uint32_t r = a - 0x38000000u;  // exponent rebased from 127 to 15
    return sign | ((r + 0xfffu + ((r >> 13) & 1u)) >> 13);
  }
  if (a <= 0x33000000u) return sign;  // <= 2^-25: rounds to zero (2^-25 is a tie, to even)
  const uint32_t e = a >> 23;  // 102..112
  const uint32_t m = (a & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126u - e;  // value / 2^-24 = m >> shift
  uint32_t q = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (q & 1u))) ++q;
  return sign | q;
}

KQ_HD float f16_to_f(uint32_t h) {
#ifdef __CUDA_ARCH__
  float f;
  const unsigned short hs = static_cast<unsigned short>(h);
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(hs));
  return f;
#else
  const uint32_t sign = (h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  if (exp == 0) {
    const float v = static_cast<float>(man) * 5.9604644775390625e-8f;  // man * 2^-24, exact
    return sign ? -v : v;
  }
  if (exp == 31) return u2f(sign | 0x7f800000u | (man << 13));
  return u2f(sign | ((exp + 112u) << 23) | (man << 13));
#endif
}

// Activation element traits: two elements packed in a uint32 (element 2j in the low half, 2j+1 in the high).
template <bool kF16>
struct Act;

template <>
struct Act<false> {  // bf16
  static KQ_HD float lo(uint32_t u) { return u2f(u << 16); }
  static KQ_HD float hi(uint32_t u) { return u2f(u & 0xffff0000u); }
  static KQ_HD float one(uint32_t h) { return u2f(h << 16); }
  static KQ_HD uint32_t pack(float lo_v, float hi_v) {
#ifdef __CUDA_ARCH__
    uint32_t d;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi_v), "f"(lo_v));
    return d;
#else
    return bf16_rn(lo_v) | (bf16_rn(hi_v) << 16);
#endif
  }
};

template <>
struct Act<true> {  // fp16
  static KQ_HD float lo(uint32_t u) { return f16_to_f(u & 0xffffu); }
  static KQ_HD float hi(uint32_t u) { return f16_to_f(u >> 16); }
  static KQ_HD float one(uint32_t h) { return f16_to_f(h); }
  static KQ_HD uint32_t pack(float lo_v, float hi_v) {
#ifdef __CUDA_ARCH__
    uint32_t d;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi_v), "f"(lo_v));
    return d;
#else
    return f16_rn(lo_v) | (f16_rn(hi_v) << 16);
#endif
  }
};

KQ_HD void unpack8(bool f16, const V4& v, float (&x)[8]) {
  const uint32_t w[4] = {v.a, v.b, v.c, v.d};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    x[2 * j] = f16 ? Act<true>::lo(w[j]) : Act<false>::lo(w[j]);
    x[2 * j + 1] = f16 ? Act<true>::hi(w[j]) : Act<false>::hi(w[j]);
  }
}

// -------------------------------------------------------------------------------------------- cache entries

// N consecutive cache entries (N = 4 or 8) starting at byte address p, as floats; p is 16-byte aligned for fp32
// and 8-byte aligned (N = 4) or 16-byte aligned (N = 8) for 16-bit caches (the contract's rope_dim % 8 rule).
template <int N, int CK, class W>
KQ_HD void load_entries(W& w, const char* p, float (&out)[N]) {
  if constexpr (CK == kCacheF32) {
#pragma unroll
    for (int v = 0; v < N / 4; ++v) {
      const V4 t = w.ld_ro16(p + 16 * v);
      out[4 * v + 0] = u2f(t.a);
      out[4 * v + 1] = u2f(t.b);
      out[4 * v + 2] = u2f(t.c);
      out[4 * v + 3] = u2f(t.d);
    }
  } else {
    uint32_t words[N / 2];
    if constexpr (N == 4) {
      const V2 t = w.ld_ro8(p);
      words[0] = t.a;
      words[1] = t.b;
    } else {
      const V4 t = w.ld_ro16(p);
      words[0] = t.a;
      words[1] = t.b;
      words[2] = t.c;
      words[3] = t.d;
    }
#pragma unroll
    for (int j = 0; j < N / 2; ++j) {
      out[2 * j] = CK == kCacheF16 ? Act<true>::lo(words[j]) : Act<false>::lo(words[j]);
      out[2 * j + 1] = CK == kCacheF16 ? Act<true>::hi(words[j]) : Act<false>::hi(words[j]);
    }
  }
}

// ----------------------------------------------------------------------------------------- division by a constant

// n / d for 32-bit n as the high half of n * M (M = floor(2^64 / d) + 1, d >= 2): M exceeds 2^64 / d by less than
// 1, so n * M / 2^64 exceeds n / d by less than n / 2^64 < 2^-32 <= the gap from n / d up to the next integer
// (>= 1/d). A multiply-high instead of the ~20 dependent instructions of an integer division, on the path to
// the first load. d == 1: M = 0, the quotient is n.
inline uint64_t div_magic(uint32_t d) { return d <= 1 ? 0 : ~uint64_t{0} / d + 1; }

KQ_HD uint32_t div_by(uint32_t n, uint32_t d, uint64_t magic) {
  if (d <= 1) return n;
#ifdef __CUDA_ARCH__
  return static_cast<uint32_t>(__umul64hi(static_cast<uint64_t>(n), magic));
#else
  return static_cast<uint32_t>((static_cast<unsigned __int128>(n) * magic) >> 64);
#endif
}


// ------------------------------------------------------------------------------------------- the per-thread code

// Address of lane l's 16 bytes of row (t, h): q's heads first, then k's (k_adj is pre-offset by Hq heads), so
// a row costs two selects and two 64-bit multiply-adds.
KQ_HD char* row_ptr(const Params& p, uint32_t t, uint32_t h, uint32_t l) {
  const bool is_q = h < p.n_q_heads;
  char* base = is_q ? static_cast<char*>(p.q) : p.k_adj;  // kernel-parameter pointers: global loads/stores
  const int64_t st = is_q ? p.qb_st : p.kb_st;
  const int64_t sh = is_q ? p.qb_sh : p.kb_sh;
  return base + (static_cast<int64_t>(t) * st + static_cast<int64_t>(h) * sh + 16 * static_cast<int64_t>(l));
}

// Everything one row needs from memory, issued together: the lane's 16 bytes of q/k, the token's position and
// the token's cos/sin entries of this lane, loaded from cache row `guess` = the token index (every SGLang
// caller passes an arange) before the position is known. finish_row() checks the guess against the position
// and reloads on a miss, so any position is correct; an arange costs no position -> cache round trip.
template <int NC>
struct RowLoads {
  char* ptr;  // lane's 16 bytes of the row (loaded, then stored)
  V4 x;
  uint32_t pos;  // the low 32 bits (the contract's cache has < 2^31 rows; positions index it)
  uint32_t used;  // the cache row loaded (the guess, or the position when it was known before the loads)
  float cs[NC], sn[NC];
};

// The speculated cache row of token t: t itself (any row inside the cache would do).
KQ_HD uint32_t guess_row(const Params& p, uint32_t t) { return t < p.cache_rows ? t : p.cache_rows - 1; }

template <int D, int LAYOUT, bool XF16, int CK, class W>
struct RowCode {
  static constexpr bool NEOX = LAYOUT == kNeoxHalf || LAYOUT == kNeoxFull;
  static constexpr bool FULL = LAYOUT == kInterleavedFull || LAYOUT == kNeoxFull;
  static constexpr int NC = (!NEOX && !FULL) ? 4 : 8;  // cos (and sin) entries a lane uses
  static constexpr int64_t CE = CK == kCacheF32 ? 4 : 2;  // cache entry bytes
  static constexpr uint32_t L = D / 8;  // lanes per row (16 bytes each)
  using A = Act<XF16>;

  // cache row `row`, this lane's entries: cos at lane_cache (the cache plus this lane's cos offset), sin
  // sin_delta bytes further
  static KQ_HD void load_cache(W& w, const Params& p, uint32_t row, const char* lane_cache, uint32_t sin_delta,
                               RowLoads<NC>& r) {
    const char* c = lane_cache + static_cast<uint64_t>(row) * p.cache_row_bytes;
    load_entries<NC, CK>(w, c, r.cs);
    load_entries<NC, CK>(w, c + sin_delta, r.sn);
  }

  // Branch-free: a group past the last row loads the last row (clamped, never stored; SGLang does the same) and a
  // lane outside [0, rope) loads the row's first entries (in the row; unused), so every load is unconditional and
  // ptxas keeps the loop free of divergent blocks.
  // `used`: the cache row to load (the token index as a guess, or the position loaded an iteration earlier);
  // the row's position is loaded beside it and checked in finish_row (a miss reloads).
  template <bool VERIFY = true>
  static KQ_HD void load_row(W& w, const Params& p, bool valid, uint32_t t, uint32_t h, uint32_t l, uint32_t used,
                             const char* lane_cache, uint32_t sin_delta, RowLoads<NC>& r) {
    const uint32_t tc = valid ? t : p.last_tok;
    const uint32_t hc = valid ? h : p.last_head;
    r.ptr = row_ptr(p, tc, hc, l);
    r.x = w.ld_x(r.ptr);
    r.pos = VERIFY ? static_cast<uint32_t>(w.ld_pos(p.pos, tc, p.pos_is_64 != 0)) : used;
    r.used = used;
    load_cache(w, p, used, lane_cache, sin_delta, r);
  }

  // Normalize, rotate and store one row (every lane of the warp calls it: it shuffles).
  template <bool VERIFY = true>
  static KQ_HD void finish_row(W& w, const Params& p, bool valid, bool rotates, uint32_t t, uint32_t h,
                               uint32_t l, const char* lane_cache, uint32_t sin_delta, uint32_t partner,
                               bool first_half, RowLoads<NC>& r) {
    const bool is_q = h < p.n_q_heads;
    // the row's weight vector: an L1 hit issued first, its latency under the reduction (keeping both weights in
    // registers would cost 8 registers a thread: an occupancy step)
    const V4 wv = w.ld_ro16(static_cast<const char*>(is_q ? p.qw : p.kw) + 16 * l);
    // the speculation's check (a group-uniform branch, no shuffle inside): a position other than the token
    // index costs the position -> cache round trip SGLang's kernel always pays
    // (a one-trip loop, not an if: ptxas would predicate an if's ~20 instructions into every row)
#ifndef KDA_QKR_NO_VERIFY  // (the emulator's wrong variant: the guess never checked)
    uint32_t miss = VERIFY && r.pos != r.used ? 1u : 0u;
#else
    uint32_t miss = 0;
#endif
    (void)t;
#pragma unroll 1
    for (; miss != 0; --miss) load_cache(w, p, r.pos, lane_cache, sin_delta, r);
    float x[8];
    unpack8(XF16, r.x, x);
    float s0 = 0.0f, s1 = 0.0f;  // two chains of 4
#pragma unroll
    for (int i = 0; i < 8; i += 2) {
      s0 = f_fma(x[i], x[i], s0);
      s1 = f_fma(x[i + 1], x[i + 1], s1);
    }
    float ss = f_add(s0, s1);
#pragma unroll
    for (uint32_t m = L / 2; m >= 1; m >>= 1) ss = f_add(ss, w.shfl_xor(ss, m));  // within the group
    const float rn = f_rsqrt(f_fma(ss, 1.0f / D, p.eps));
    float wf[8], e[8];
    unpack8(XF16, wv, wf);
#pragma unroll
    for (int i = 0; i < 8; ++i) e[i] = x[i] * (rn * wf[i]);
    // Branch-free RoPE: a lane outside [0, rope) rotates by cos 1, sin 0 (e * 1 -/+ e' * 0 == e exactly for finite
    // e). With a branch, ptxas sank the cos/sin loads into it, after the reduction: a second round trip per row.
#pragma unroll
    for (int i = 0; i < NC; ++i) {
      r.cs[i] = rotates ? r.cs[i] : 1.0f;
      r.sn[i] = rotates ? r.sn[i] : 0.0f;
    }
    if constexpr (NEOX) {
      float ep[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) ep[i] = w.shfl(e[i], partner);  // every lane takes part (partner: itself outside)
#pragma unroll
      for (int i = 0; i < 8; ++i) e[i] = first_half ? e[i] * r.cs[i] - ep[i] * r.sn[i] : e[i] * r.cs[i] + ep[i] * r.sn[i];
    } else {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float c0 = FULL ? r.cs[2 * j] : r.cs[j], c1 = FULL ? r.cs[2 * j + 1] : r.cs[j];
        const float s0_ = FULL ? r.sn[2 * j] : r.sn[j], s1_ = FULL ? r.sn[2 * j + 1] : r.sn[j];
        const float e0 = e[2 * j], e1 = e[2 * j + 1];
        e[2 * j] = e0 * c0 - e1 * s0_;
        e[2 * j + 1] = e1 * c1 + e0 * s1_;
      }
    }
    const V4 out{A::pack(e[0], e[1]), A::pack(e[2], e[3]), A::pack(e[4], e[5]), A::pack(e[6], e[7])};
    if (valid) w.st_x(r.ptr, out);
  }
};

// (t, h) of the group's next row: G rows on, i.e. step_tok tokens and step_head rows (no division)
KQ_HD void step(const Params& p, uint32_t H, uint32_t& t, uint32_t& h) {
  t += p.step_tok;
  h += p.step_head;
  if (h >= H) {
    h -= H;
    ++t;
  }
}

// One iteration of the PIPE = 0 loop (warp-uniform: every lane runs it): the row's loads (q/k, cache row `used`,
// and with VERIFY the row's own position), the next row's position (an iteration ahead), then the row.
template <class RC, bool VERIFY, class W>
KQ_HD void p0_iteration(W& w, const Params& p, uint32_t& base, uint32_t G, uint32_t g, uint32_t M, bool rotates,
                        uint32_t& t, uint32_t& h, uint32_t l, const char* lane_cache, uint32_t sin_delta,
                        uint32_t partner, bool first_half, uint32_t& used) {
  RowLoads<RC::NC> cur;
  const bool valid = base + g < M;
  RC::template load_row<VERIFY>(w, p, valid, t, h, l, used, lane_cache, sin_delta, cur);
  uint32_t tn = t, hn = h;
  step(p, p.rows_per_token, tn, hn);
  const bool valid_n = static_cast<uint64_t>(base) + G + g < M;
  // the next row's position, an iteration ahead (in bounds: clamped like the loads)
  used = static_cast<uint32_t>(w.ld_pos(p.pos, valid_n ? tn : p.last_tok, p.pos_is_64 != 0));
  RC::template finish_row<VERIFY>(w, p, valid, rotates, t, h, l, lane_cache, sin_delta, partner, first_half, cur);
  t = tn;
  h = hn;
  base += G;
}

// PIPE = 0: each iteration issues its row's loads (x, position, speculated cos/sin: one round trip) and finishes
// it. PIPE = 1: the loads of the group's next row are issued before the current row is finished (double
// buffer): every warp keeps a row's loads in flight while it computes.
template <int D, int LAYOUT, bool XF16, int CK, int PIPE, class W>
KQ_HD void thread_body(const Params& p, uint32_t block, uint32_t tid, uint32_t grid, W& w) {
  static_assert(D == 64 || D == 128 || D == 256, "head_dim 64, 128 or 256");
  static_assert(PIPE == 0 || PIPE == 1, "PIPE 0 or 1");
  using RC = RowCode<D, LAYOUT, XF16, CK, W>;
  constexpr uint32_t L = RC::L;
  constexpr uint32_t GPW = 32 / L;  // groups (rows side by side) per warp
  constexpr bool NEOX = RC::NEOX;
  constexpr bool FULL = RC::FULL;

  const uint32_t lane = tid & 31u;
  const uint32_t warp = tid >> 5;
  const uint32_t g = lane / L;
  const uint32_t l = lane % L;
  const uint32_t rope = p.rope_dim;
  const bool rotates = l < rope / 8;  // this lane's 8 elements are all inside [0, rope) or all outside
  uint32_t cos_off = 0, sin_off = 0;  // entries, within a cache row
  uint32_t partner = lane;  // NeoX: the lane holding e[i + h] (first half) or e[i - h] (second half)
  bool first_half = true;
  if constexpr (!NEOX) {
    cos_off = FULL ? 8 * l : 4 * l;
    sin_off = (FULL ? rope : rope / 2) + cos_off;
  } else {
    const uint32_t hl = rope / 16;  // lanes per NeoX half (rope / 2 elements)
    first_half = l < hl;
    cos_off = FULL ? 8 * l : 8 * (first_half ? l : l - hl);
    sin_off = (FULL ? rope : rope / 2) + cos_off;
    if (rotates) partner = g * L + (first_half ? l + hl : l - hl);
  }

  if (!rotates) cos_off = sin_off = 0;  // loads the row's first entries (unused): no branch around the loads
  const char* lane_cache = static_cast<const char*>(p.cache) + cos_off * RC::CE;
  const uint32_t sin_delta = (sin_off - cos_off) * static_cast<uint32_t>(RC::CE);

  if (p.flags & kEarlyTrigger) w.pdl_trigger();
  w.pdl_wait();  // q, k, the weights, the cache and the positions may come from the previous kernel

  const uint32_t H = p.rows_per_token;
  const uint32_t M = p.n_rows;
  const uint32_t G = grid * kWarps * GPW;  // groups in the grid: the row stride
  uint32_t base = (block * kWarps + warp) * GPW;  // the warp's first row; group g takes base + g
  uint32_t t = div_by(base + g, H, p.rows_magic);  // token and row-in-token of the group's row, stepped by G below
  uint32_t h = base + g - t * H;

  if constexpr (PIPE == 0) {
    // The group's first row speculates its cache row (an arange: one round trip; else the position -> cache trip
    // SGLang always pays); each later row's position is loaded an iteration ahead, so its cache loads go out
    // with its q/k load.
    uint32_t used = guess_row(p, base + g < M ? t : p.last_tok);
    if (base < M) {  // the group's first row: the speculated cache row, checked against its position
      p0_iteration<RC, true>(w, p, base, G, g, M, rotates, t, h, l, lane_cache, sin_delta, partner, first_half,
                             used);
      // later rows: the position loaded an iteration earlier names the cache row, nothing to check
      while (base < M)
        p0_iteration<RC, false>(w, p, base, G, g, M, rotates, t, h, l, lane_cache, sin_delta, partner, first_half,
                                used);
    }
  } else {
    RowLoads<RC::NC> cur;
    RC::load_row(w, p, base + g < M, t, h, l, guess_row(p, base + g < M ? t : p.last_tok), lane_cache, sin_delta,
                 cur);
    for (; base < M; base += G) {  // warp-uniform
      const bool valid = base + g < M;
      uint32_t tn = t, hn = h;
      step(p, H, tn, hn);
      const bool valid_n = static_cast<uint64_t>(base) + G + g < M;
      RowLoads<RC::NC> nxt;
#ifndef KDA_QKR_LATE_NEXT  // (the emulator's wrong variant: next-row loads after the store)
      RC::load_row(w, p, valid_n, tn, hn, l, guess_row(p, valid_n ? tn : p.last_tok), lane_cache, sin_delta,
                   nxt);
      RC::finish_row(w, p, valid, rotates, t, h, l, lane_cache, sin_delta, partner, first_half, cur);
#else
      RC::finish_row(w, p, valid, rotates, t, h, l, lane_cache, sin_delta, partner, first_half, cur);
      RC::load_row(w, p, valid_n, tn, hn, l, guess_row(p, valid_n ? tn : p.last_tok), lane_cache, sin_delta,
                   nxt);
#endif
      cur = nxt;  // register moves (a two-way unrolled swap spills: ptxas keeps both buffers pinned)
      t = tn;
      h = hn;
    }
  }
  if (!(p.flags & kEarlyTrigger)) w.pdl_trigger();
}

// ------------------------------------------------------------------------------------------------- the plan

struct Plan {
  uint32_t pipe;  // 0 or 1 (thread_body's PIPE)
  uint32_t rounds;  // rows per group, at most
  uint32_t n_rows;  // N * (Hq + Hk)
  uint32_t blocks;  // CTAs
  uint32_t step_tok, step_head;  // the grid's group count as step_tok * H + step_head
};

// resident0 / resident1: CTAs of the PIPE = 0 / 1 kernel the GPU holds at once (occupancy x SMs). One row per
// group where the rows fit one wave (small launches: SGLang's grid, the most groups); else a persistent grid
// of the same number of rows per group (no tail round). pipe_mode 0 or 1: PIPE = 0 (the default), 2: the
// double buffer (PIPE = 1); grid_mode 0 auto, 1 one row per group whatever the size (several waves, no
// persistent loop), 2 half the resident CTAs (twice the rows per group).
inline Plan make_plan(uint32_t n_tokens, uint32_t rows_per_token, int head_dim, uint32_t resident0,
                      uint32_t resident1, int pipe_mode, int grid_mode) {
  const uint64_t per_cta = static_cast<uint64_t>(kWarps) * (32 / (head_dim / 8));  // groups per CTA
  const uint64_t rows = static_cast<uint64_t>(n_tokens) * rows_per_token;
  Plan plan{};
  plan.n_rows = static_cast<uint32_t>(rows);
  const bool pipe = pipe_mode == 2;  // the double buffer only on request (dev/sweep.py): see kMinBlocks
  uint64_t resident = pipe ? (resident1 > 0 ? resident1 : 1) : (resident0 > 0 ? resident0 : 1);
  if (grid_mode == 2) resident = resident > 1 ? resident / 2 : 1;
  const uint64_t cap = resident * per_cta;
  uint64_t blocks = 1;
  if (grid_mode == 1 || rows <= cap) {
    blocks = (rows + per_cta - 1) / per_cta;
  } else {
    const uint64_t rounds = (rows + cap - 1) / cap;
    const uint64_t groups = (rows + rounds - 1) / rounds;  // the fewest groups that finish in `rounds`
    blocks = (groups + per_cta - 1) / per_cta;
    if (blocks > resident) blocks = resident;
  }
  if (blocks == 0) blocks = 1;
  const uint64_t groups = blocks * per_cta;
  plan.pipe = pipe ? 1 : 0;
  plan.blocks = static_cast<uint32_t>(blocks);
  plan.rounds = static_cast<uint32_t>((rows + groups - 1) / groups);
  plan.step_tok = rows_per_token > 0 ? static_cast<uint32_t>(groups / rows_per_token) : 0;
  plan.step_head = rows_per_token > 0 ? static_cast<uint32_t>(groups % rows_per_token) : 0;
  return plan;
}

}  // namespace kda_qkr
