// c007: fused in-place per-head QK RMSNorm + RoPE, the per-thread code of the CUDA kernel (qknorm_rope.cu).
//
// Written once for two compilers: nvcc builds it into the sm_90a kernel, g++ builds the same function into the
// CPU emulator of tests/emu (every lane of a warp a fiber, shuffles exchanged through memory), so the CPU tests
// run the kernel's own indexing, pipelining and arithmetic. Device-only instructions (PDL, the L2 bulk
// prefetch, shuffles, loads and stores) go through the policy `W` (DeviceWarp in qknorm_rope.cu; the emulator's
// EmuWarp checks and records them). Every fp32 operation is spelled out (no contraction on either side), 1/sqrt
// is correctly rounded (the host computes it in double) and the bf16/fp16 conversions round to nearest even on
// both sides: the emulator computes the device's bits.
//
// Math (prompt.md K, the default path; round_norm_before_rope goes to SGLang): per (token, head) row x of D
// elements, r = 1/sqrt(sum(x^2)/D + eps) in fp32, e = x * (r * w) kept in fp32, RoPE in fp32 on lanes
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
//       100.66 MB (q, k) + 2.10 MB (cache) + 0.03 MB = 102.8 MB -> 24.0 us at 4.29 TB/s; copy 27.7 us, SGLang 29.3 us
//     qwen-edit T8424 H24: 211.4 MB -> 49.3 us (copy 54.5, SGLang 58.3); zimage T4128 H30: 129.0 MB -> 30.1 us
//     (copy 34.4, SGLang 35.8); small rows (0.5-4.9 MB): latency bound, SGLang 1.96-3.06 us in the graph
//
// Work decomposition. A *group* of L = D/8 lanes owns one row at a time, 16 bytes (8 elements) per lane; a warp
// holds 32/L groups. An *item* is R consecutive rows of one token (rows 0..Hq-1 are q's heads, Hq..Hq+Hk-1 k's;
// R = 1, 2 or 4, a template parameter): a group loads all R rows (R 16-byte loads per lane in flight at once),
// the token's cos/sin entries for its lane once, and normalizes and rotates the R rows. Items are dealt to groups
// grid-stride; the grid is one wave (make_plan below): on small rows every group takes one item, on large rows
// the same number of items each (persistent). The position of a group's *next* item is loaded during the
// current one, so each iteration issues its q/k loads and its cache loads together: one memory round trip per
// item where a position -> cache chain takes two (SGLang's kernel: positions and q/k, then weights and cache).
//
// PDL: `griddepcontrol.launch_dependents` first (flag kEarlyTrigger; the next PDL kernel's CTAs launch and park at
// their own wait while this one runs, which hides the next launch), `griddepcontrol.wait` before the first load.
// Small launches (one wave, cache small next to q/k) prefetch the whole cache into L2 (cp.async.bulk.prefetch,
// one slice per CTA) beside the position loads: the dependent cache loads then hit L2 instead of HBM.

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
constexpr int kRowsMax = 4;  // rows per item, the most a lane keeps in flight
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
  int64_t cache_row;  // W: elements per cache row
  uint64_t cache_bytes;  // P * W * e_c
  uint32_t n_q_heads, n_k_heads;
  uint32_t chunks_per_token;  // ceil((Hq + Hk) / R)
  uint64_t chunks_magic;  // item / chunks_per_token == umulhi64(item, chunks_magic) (div_magic)
  uint32_t n_items;  // N * chunks_per_token
  uint32_t rope_dim;
  uint32_t pos_is_64;
  uint32_t prefetch_bytes;  // bytes of the cache each CTA prefetches into L2 (0: none)
  uint32_t flags;
  float eps;
};

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
  return __frsqrt_rn(v);
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

// Lane l's 16 bytes of row `row` (q's heads, then k's) of token `tok`.
KQ_HD char* row_ptr(const Params& p, uint32_t tok, uint32_t row, uint32_t l) {
  const bool is_q = row < p.n_q_heads;
  const int64_t off = is_q ? tok * p.q_stride_t + static_cast<int64_t>(row) * p.q_stride_h
                           : tok * p.k_stride_t + static_cast<int64_t>(row - p.n_q_heads) * p.k_stride_h;
  return static_cast<char*>(is_q ? p.q : p.k) + (off + 8 * static_cast<int64_t>(l)) * 2;
}

template <int D, int LAYOUT, bool XF16, int CK, int R, class W>
KQ_HD void thread_body(const Params& p, uint32_t block, uint32_t tid, uint32_t grid, W& w) {
  static_assert(D == 64 || D == 128 || D == 256, "head_dim 64, 128 or 256");
  static_assert(R == 1 || R == 2 || R == kRowsMax, "rows per item 1, 2 or 4");
  constexpr uint32_t L = D / 8;  // lanes per row (16 bytes each)
  constexpr uint32_t GPW = 32 / L;  // groups (rows in flight side by side) per warp
  constexpr bool NEOX = LAYOUT == kNeoxHalf || LAYOUT == kNeoxFull;
  constexpr bool FULL = LAYOUT == kInterleavedFull || LAYOUT == kNeoxFull;
  constexpr int NC = (!NEOX && !FULL) ? 4 : 8;  // cos (and sin) entries a lane uses
  constexpr int64_t CE = CK == kCacheF32 ? 4 : 2;  // cache entry bytes
  using A = Act<XF16>;

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

  if (p.flags & kEarlyTrigger) w.pdl_trigger();
  w.pdl_wait();  // q, k, the weights, the cache and the positions may come from the previous kernel

  const uint32_t rows = p.n_q_heads + p.n_k_heads;
  const uint32_t cpt = p.chunks_per_token;
  const uint64_t magic = p.chunks_magic;
  const uint32_t n_items = p.n_items;
  const uint32_t stride = grid * kWarps * GPW;
  uint32_t base = (block * kWarps + warp) * GPW;  // the warp's first item; its group g takes base + g

  // The first item's position (its cache row), then the L2 prefetch and the weights.
  uint32_t tok = div_by(base + g, cpt, magic);
#ifndef KDA_QKR_NO_PIPELINE
  int64_t pos_cur = base + g < n_items ? w.ld_pos(p.pos, tok, p.pos_is_64 != 0) : 0;
#endif
  if (p.prefetch_bytes != 0 && tid == 0) {
    const uint64_t start = static_cast<uint64_t>(block) * p.prefetch_bytes;
    if (start < p.cache_bytes) {
      const uint64_t left = p.cache_bytes - start;
      w.prefetch_l2(static_cast<const char*>(p.cache) + start,
                    static_cast<uint32_t>(left < p.prefetch_bytes ? left : p.prefetch_bytes));
    }
  }
  // the weights' first touch (from HBM in the same round trip as the position); the rows re-read them from L1
  w.touch(static_cast<const char*>(p.qw) + 16 * l);
  w.touch(static_cast<const char*>(p.kw) + 16 * l);

  for (; base < n_items; base += stride) {  // warp-uniform: every lane runs every iteration and every shuffle
    const uint32_t item = base + g;
    const bool valid = item < n_items;
    const uint32_t r0 = (item - tok * cpt) * R;
#ifdef KDA_QKR_NO_PIPELINE  // the variant the emulator's ordering check must reject: position -> cache in-line
    const int64_t pos_cur = valid ? w.ld_pos(p.pos, tok, p.pos_is_64 != 0) : 0;
#endif

    // 1. every load of the item at once: R rows of q/k, then the token's cos/sin entries of this lane
    V4 xv[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const uint32_t row = r0 + r;
      xv[r] = V4{0, 0, 0, 0};
      if (valid && row < rows) xv[r] = w.ld_x(row_ptr(p, tok, row, l));
    }
    float cs[NC], sn[NC];
#pragma unroll
    for (int i = 0; i < NC; ++i) cs[i] = sn[i] = 0.0f;
    if (valid && rotates) {
      const char* crow = static_cast<const char*>(p.cache) + pos_cur * p.cache_row * CE;
      load_entries<NC, CK>(w, crow + cos_off * CE, cs);
      load_entries<NC, CK>(w, crow + sin_off * CE, sn);
    }

    // 2. the next item's position, one iteration ahead (its cache loads then need no round trip of their own)
    const uint32_t next = item + stride;
    const uint32_t tok_next = div_by(next, cpt, magic);
#ifndef KDA_QKR_NO_PIPELINE
    const int64_t pos_next = next < n_items ? w.ld_pos(p.pos, tok_next, p.pos_is_64 != 0) : 0;
#endif

    // 3. the R rows' sums of squares side by side: their butterflies overlap instead of running one row after
    // another
    float ss[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      float x[8];
      unpack8(XF16, xv[r], x);
      ss[r] = 0.0f;
#pragma unroll
      for (int i = 0; i < 8; ++i) ss[r] = f_fma(x[i], x[i], ss[r]);
    }
#pragma unroll
    for (uint32_t m = L / 2; m >= 1; m >>= 1) {  // within the group
#pragma unroll
      for (int r = 0; r < R; ++r) ss[r] = f_add(ss[r], w.shfl_xor(ss[r], m));
    }

    // 4. normalize, rotate, store each row
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const uint32_t row = r0 + r;
      const bool is_q = row < p.n_q_heads;
      const V4 wv = w.ld_ro16(static_cast<const char*>(is_q ? p.qw : p.kw) + 16 * l);  // an L1 hit
      float x[8], wf[8], e[8];
      unpack8(XF16, xv[r], x);
      unpack8(XF16, wv, wf);
      const float rn = f_rsqrt(f_add(f_mul(ss[r], 1.0f / D), p.eps));
#pragma unroll
      for (int i = 0; i < 8; ++i) e[i] = f_mul(x[i], f_mul(rn, wf[i]));
      if constexpr (NEOX) {
        float ep[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) ep[i] = w.shfl(e[i], partner);  // every lane takes part
        if (rotates) {
#pragma unroll
          for (int i = 0; i < 8; ++i) {
            const float a = f_mul(e[i], cs[i]);
            const float b = f_mul(ep[i], sn[i]);
            e[i] = first_half ? f_sub(a, b) : f_add(a, b);
          }
        }
      } else if (rotates) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const float c0 = FULL ? cs[2 * j] : cs[j], c1 = FULL ? cs[2 * j + 1] : cs[j];
          const float s0 = FULL ? sn[2 * j] : sn[j], s1 = FULL ? sn[2 * j + 1] : sn[j];
          const float e0 = e[2 * j], e1 = e[2 * j + 1];
          e[2 * j] = f_sub(f_mul(e0, c0), f_mul(e1, s0));
          e[2 * j + 1] = f_add(f_mul(e1, c1), f_mul(e0, s1));
        }
      }
      const V4 out{A::pack(e[0], e[1]), A::pack(e[2], e[3]), A::pack(e[4], e[5]), A::pack(e[6], e[7])};
      if (valid && row < rows) w.st_x(row_ptr(p, tok, row, l), out);
    }
#ifndef KDA_QKR_NO_PIPELINE
    pos_cur = pos_next;
#endif
    tok = tok_next;
  }
  if (!(p.flags & kEarlyTrigger)) w.pdl_trigger();
}

// ------------------------------------------------------------------------------------------------- the plan

struct Plan {
  uint32_t rows_per_item, chunks_per_token, n_items, blocks, prefetch_bytes;
};

// resident_ctas: CTAs of this kernel the GPU holds at once (occupancy x SMs). R is the fewest rows per item that
// still fits every item into one wave (small launches spread over the most groups), else kRowsMax (persistent
// loop, the most bytes in flight). force_rows (1, 2 or 4) overrides; prefetch_mode 0 auto, 1 off, 2 on.
inline Plan make_plan(uint32_t n_tokens, uint32_t rows_per_token, int head_dim, uint32_t resident_ctas,
                      uint64_t cache_bytes, uint64_t qk_bytes, int force_rows, int prefetch_mode) {
  const uint64_t gpw = 32 / (head_dim / 8);
  const uint64_t capacity = static_cast<uint64_t>(resident_ctas) * kWarps * gpw;  // groups resident at once
  uint32_t r = 0;
  if (force_rows == 1 || force_rows == 2 || force_rows == 4) {
    r = static_cast<uint32_t>(force_rows);
  } else {
    for (uint32_t c = 1; c <= kRowsMax && r == 0; c *= 2)
      if (static_cast<uint64_t>(n_tokens) * ((rows_per_token + c - 1) / c) <= capacity) r = c;
    if (r == 0) r = kRowsMax;
  }
  Plan plan{};
  plan.rows_per_item = r;
  plan.chunks_per_token = (rows_per_token + r - 1) / r;
  const uint64_t items = static_cast<uint64_t>(n_tokens) * plan.chunks_per_token;
  plan.n_items = static_cast<uint32_t>(items);
  // Rounds of items per group; then the fewest CTAs that still finish in that many rounds, so the last round
  // is (nearly) full instead of a tail where a few groups work alone (zimage T4096: 8 rounds on 480 CTAs, not
  // 7.3 on 528).
  const uint64_t rounds = capacity > 0 ? (items + capacity - 1) / capacity : 1;
  const uint64_t groups = rounds > 0 ? (items + rounds - 1) / rounds : 1;
  uint64_t blocks = (groups + kWarps * gpw - 1) / (kWarps * gpw);
  if (blocks > resident_ctas) blocks = resident_ctas;
  if (blocks == 0) blocks = 1;
  plan.blocks = static_cast<uint32_t>(blocks);
  const bool one_wave = items <= capacity;
  const bool prefetch = prefetch_mode == 2 || (prefetch_mode == 0 && one_wave && cache_bytes * 8 <= qk_bytes);
  const uint64_t slice = ((cache_bytes + blocks - 1) / blocks + 15) / 16 * 16;
  plan.prefetch_bytes = prefetch && slice > 0 && slice < (1ull << 31) ? static_cast<uint32_t>(slice) : 0;
  return plan;
}

}  // namespace kda_qkr
