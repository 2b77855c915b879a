// kda: no-spills
// Path F of the H200 GroupNorm+SiLU candidate (c009, sm_90a): GroupNorm + SiLU as chunked stats/apply launches
// whose apply re-read of x can be served from L2. Pure CUDA (no torch headers), one translation unit of the task's
// extension (register.py builds it with gns_kernels.cu and gns_binding.cpp):
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -c gns_path_f.cu
// gns_kernels.cu reaches it through gnsf_plan / gnsf_forward (force_path 8, and the auto route of make_plan for the
// class the H200 sweep measured; the rule and its numbers are next to kChunkAuto* there). Dev: dev/path_f/pathf.py
// builds this file with the L2-window microbenchmark (dev/path_f/gnsf_l2.cu) for dev/sweep_path_f.py.
//
//   y = silu((x - mean_g) * rstd_g * w_c + b_c), rounded once to x.dtype; w/b optional (1 / 0 when absent).
//
// ---------------------------------------------------------------------------------------------------------------
// Design (the schedule is gnsf_sched.h, shared with the CPU model of tests/test_path_f.py)
//   * A row is cut into K chunks of whole groups (gpc groups each, x bytes of a chunk <= chunk_bytes unless one
//     group is larger). K + 1 launches of ONE kernel, gns_f_step_kernel; launch j's grid is split by blockIdx:
//     stats blocks for the tiles of chunk j (j < K) and apply blocks for the tiles of chunk j-1 (j >= 1).
//   * Stats block (one 32 KB tile): U 16-byte loads back to back, exact two-pass stats per register batch shifted
//     by K = the group's first element, Chan merges (batches -> warp tree -> warp-0 tree), thread 0 writes the
//     tile's partial (n, mean, M2) to part[g*P + t]. No atomics, no counters, no waiting.
//   * Apply block (one tile): issues its U x loads first (x is an input: no dependency), warp 0 prefetches the raw
//     w/b of the tile's channels, then (PDL only) griddepcontrol.wait, then every thread merges the partials
//     p = tid, tid + 256, ... of its group in index order, the fixed warp tree and warp-0 tree (bitwise the same
//     result in every apply block of the group, whatever order the stats blocks finished in: deterministic, no
//     atomics), warp 0 turns (mean, rstd) and w/b into the channel table (a_c = rstd*w_c, c'_c = b_c - mean*a_c),
//     one __syncthreads, then y = silu(fma(x - K, a_c, c'_c)) in fp32, one rounding, 16-byte stores.
//   * PDL (flags & 1): launches 1..K carry cudaLaunchAttributeProgrammaticStreamSerialization. Every block
//     executes griddepcontrol.launch_dependents first: the next launch may then be scheduled once every block of
//     this one has started (so it never takes a slot from a block of this launch) and fills the SMs this launch's
//     tail leaves idle. Its stats blocks need nothing from earlier launches (they read x, write their own slots);
//     its apply blocks wait (griddepcontrol.wait) after issuing their x loads and before reading partials. Launch 0
//     has no PDL attribute: it starts after whatever produced x, by plain stream order.
//   * L2 hints (flags bits 1-3): 2 = stats loads evict_last, 4 = apply loads evict_first (a consumed line goes
//     first), 8 = y stores evict_first. One load instruction with a policy register (evict_normal when off).
//
// Why it is race-free (for any block scheduling, with or without PDL):
//   * Every partial slot is written by exactly one stats block per call (slot g*P + t, chunk of g's launch) and
//     read only by the apply blocks of group g, which all sit in the NEXT launch (gnsf_sched.h; the CPU model
//     checks it for every schedule it builds, and rejects a schedule that applies a chunk in its stats launch).
//   * Without PDL, launch j+1 starts after launch j completed (stream order): its reads see launch j's writes.
//   * With PDL, an apply block of launch j+1 reads partials only after griddepcontrol.wait, which returns once
//     launch j has completed and its memory operations are visible. Stats blocks skip the wait; they touch no
//     memory any other in-flight launch reads or writes (x is read-only, slots of chunk j+1 belong to them).
//     y tiles are disjoint per apply block.
//   * Completion is transitive: every block of launch j+1 >= 1 that is an apply block waits for launch j, and
//     every launch >= 1 has apply blocks (chunk j-1 exists), so launch K (apply only, all blocks wait) completes
//     after launch K-1, which completes after K-2, ...: the next op on the stream (no PDL attribute) sees all of y.
//   * No deadlock: launch j+1 is scheduled only when every block of launch j has started (trigger at block start,
//     or exit), so a waiting block never holds a slot a block of its prerequisite needs.
//   * Graph capture: no host sync, no allocation (the workspace comes from torch, the binding's caller), PDL
//     launches capture as programmatic graph edges (CUDA >= 12.3).
//
// Byte model per call (E = x elements, es = bytes per element, T = 32 KB tiles):
//   HBM: x read once (stats) + y written once + partials (16 B per tile written once, read P times per group by
//   its P apply blocks, L2-resident: 16*E*es/32768 B, 0.05 % of x) + w/b (negligible) = 2*E*es when the apply
//   re-read hits L2. L2: one extra read of x (the apply). If the re-read misses: 3*E*es (path B's 2R + 1W).
//   The reuse distance of a byte of x: about one launch of traffic = one chunk of new x (stats) + one chunk of y
//   (apply) + the rest of its own chunk; with y marked evict_first the x lines that must survive are ~2 chunks.
//   So a chunk's x must stay <= ~window/2 (window = what L2 really holds for reuse, measured by dev/path_f/gnsf_l2.cu:
//   docs/notes.md, "L2 window (measured)").
// Bound per call: t >= (x + y bytes) / 4.29 TB/s (copy rate) + (K + 1) * c_launch, where c_launch is the
//   per-launch fill/drain and launch gap (~1-2 us in a graph without PDL; PDL hides part of it). Rows whose
//   groups exceed window/2 (the 1.14 GB row's 17.8 MB groups if the window is < ~36 MB) fall back towards
//   2R + 1W for the part of each chunk L2 cannot hold.
// ---------------------------------------------------------------------------------------------------------------
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

#include <type_traits>

#include "gns_device.cuh"
#include "gnsf_sched.h"

namespace gnsf {

// The helpers of gns_device.cuh (FastDiv/fdiv, Tr/to_f/ldg_f/from_f, VecT, pack_vec, Stat/stat_merge/
// warp_merge_down/block_merge, the createpolicy wrappers, ldg_hint16/stg_hint16, path C's PipeL/pl_get/pl_load/
// pl_store, kMaxTableCh): the same code paths A-E use.
using namespace gns;

// Programmatic dependent launch (sm_90).
__device__ __forceinline__ void pdl_launch_dependents() {
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }

constexpr int kThreads = 256;
// Blocks per SM the register budget is set for (ptxas -v, checked for 0 spills by the CPU test): 4 x 256 threads
// (<= 64 registers) everywhere but the fp32 16-byte path, which needs 80 registers without spills (3 per SM).
template <typename T, int VEC>
__host__ __device__ constexpr int min_blocks() {
  return (sizeof(T) == 4 && VEC == 4) ? 3 : 4;
}

constexpr int kFlagPdl = 1;
constexpr int kHintStatsLast = 2;
constexpr int kHintApplyFirst = 4;
constexpr int kHintStoreFirst = 8;
constexpr int kFlagStatsFirst = 16;
constexpr int64_t kDefaultChunkBytes = 12ll << 20;

// Vectors per thread per tile: 8 on the 16-byte path (32 KB tiles), 16 elements on the scalar fallback.
// Stats batch (exact two-pass inside, Chan merge between batches): NB vectors = 32 elements in fp16/bf16 (as c007),
// 16 in fp32 and on the scalar path (c007 uses 32 there; the shorter batch keeps those kernels at <= 64 registers
// without spills; any batch size is exact two-pass + Chan, only the rounding pattern differs).
template <int VEC>
__host__ __device__ constexpr int tile_u() {
  return VEC == 1 ? 16 : 8;
}
template <int VEC>
__host__ __device__ constexpr int stats_nb() {
  return VEC == 1 ? 16 : (32 / VEC < 4 ? 32 / VEC : 4);
}

template <typename T, int VEC>
__device__ __forceinline__ void stats_role(const T* __restrict__ x, float4* __restrict__ part, const Sched& s,
                                           int64_t g, int64_t t, int64_t D, int flags, Stat* s_warp) {
  using L = typename PipeL<T, VEC>::L;
  constexpr int NB = stats_nb<VEC>();
  constexpr int U = tile_u<VEC>();
  static_assert(U % NB == 0, "the tile is a whole number of stats batches");
  constexpr int TILE = kThreads * U;
  const int tid = threadIdx.x;
  const int dvec = (int)(D / VEC);  // D < 2^31: in-group indices are 32-bit
  const T* gx = x + g * D;
  const int base = (int)t * TILE + tid;
  const uint64_t pol = (flags & kHintStatsLast) ? pol_evict_last() : pol_evict_normal();
  // clamped (always valid) addresses: the U loads issue back to back; validity is a prefix in k
  L r[U];
#pragma unroll
  for (int k = 0; k < U; ++k) {
    const int v = min(base + k * kThreads, dvec - 1);
    r[k] = pl_load<T, VEC>(gx + v * VEC, pol);
  }
  const int nvalid = base >= dvec ? 0 : min(U, (dvec - 1 - base) / kThreads + 1);
  const float K = ldg_f<T>(gx);
  Stat st = stat_empty();
#pragma unroll
  for (int h = 0; h < U / NB; ++h) {
    const int nb_valid = min(max(nvalid - h * NB, 0), NB);
    if (nb_valid > 0) {
      float s0 = 0.f, s1 = 0.f;
#pragma unroll
      for (int k = 0; k < NB; ++k) {
        if (k < nb_valid) {
#pragma unroll
          for (int i = 0; i < VEC; ++i) {
            const float d = pl_get<T, VEC>(r[h * NB + k], i) - K;
            if ((i & 1) == 0) s0 += d;
            else s1 += d;
          }
        }
      }
      const float nb = (float)(nb_valid * VEC);
      const float m = (nb_valid == NB) ? (s0 + s1) * (1.0f / (float)(NB * VEC)) : (s0 + s1) / nb;
      float q0 = 0.f, q1 = 0.f;
#pragma unroll
      for (int k = 0; k < NB; ++k) {
        if (k < nb_valid) {
#pragma unroll
          for (int i = 0; i < VEC; ++i) {
            const float d = (pl_get<T, VEC>(r[h * NB + k], i) - K) - m;
            if ((i & 1) == 0) q0 = fmaf(d, d, q0);
            else q1 = fmaf(d, d, q1);
          }
        }
      }
      st = stat_merge(st, Stat{nb, m, q0 + q1});
    }
  }
  const Stat cta = block_merge(st, s_warp);
  if (tid == 0) part[part_index(s, g, t)] = make_float4(cta.n, cta.mean, cta.m2, 0.f);
}

template <typename T, int VEC>
__device__ __forceinline__ void apply_role(const T* __restrict__ x, const T* __restrict__ w,
                                           const T* __restrict__ b, T* __restrict__ y,
                                           const float4* __restrict__ part, const Sched& s, int64_t g,
                                           int64_t t, int64_t D, int G, int Cg, FastDiv hw_div, float eps, int uniform,
                                           int flags, Stat* s_warp, float2* s_tab, float* s_ms) {
  using L = typename PipeL<T, VEC>::L;
  constexpr int U = tile_u<VEC>();
  constexpr int TILE = kThreads * U;
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int dvec = (int)(D / VEC);  // D < 2^31: in-group indices are 32-bit
  const T* gx = x + g * D;
  T* gy = y + g * D;
  const int base = (int)t * TILE + tid;
  const uint64_t pol = (flags & kHintApplyFirst) ? pol_evict_first() : pol_evict_normal();
  L r[U];
#pragma unroll
  for (int k = 0; k < U; ++k) {
    const int v = min(base + k * kThreads, dvec - 1);
    r[k] = pl_load<T, VEC>(gx + v * VEC, pol);
  }
  const int nvalid = base >= dvec ? 0 : min(U, (dvec - 1 - base) / kThreads + 1);
  const float K = ldg_f<T>(gx);
  const int g_off = (int)(g % G) * Cg;
  const int t_first = (int)t * TILE;
  const int t_last = min(dvec, t_first + TILE) - 1;
  const int c_lo = (int)fdiv((uint32_t)(t_first * VEC), hw_div);
  const int c_hi = (int)fdiv((uint32_t)(t_last * VEC + VEC - 1), hw_div);
  const int n_ch = c_hi - c_lo + 1;
  const bool use_tab = n_ch <= kMaxTableCh;
  // warp 0: raw (w, b) of the tile's channels into the table, in flight with the x loads; the same lanes finish
  // the entries after the merge (no barrier between: each lane rereads only what it wrote)
  if (warp == 0 && use_tab) {
    for (int i = lane; i < n_ch; i += 32) {
      s_tab[i] = make_float2(w != nullptr ? ldg_f<T>(w + g_off + c_lo + i) : 1.f,
                             b != nullptr ? ldg_f<T>(b + g_off + c_lo + i) : 0.f);
    }
  }
  // The partials of this group were written by the previous launch: wait for it (PDL), then merge them in index
  // order (thread-strided, then the fixed trees): the same bits in every apply block of the group.
  if (flags & kFlagPdl) pdl_wait();
  Stat m = stat_empty();
  const float4* gp = part + part_index(s, g, 0);
  for (int64_t i = tid; i < s.P; i += kThreads) {
    const float4 f = __ldcg(gp + i);
    m = stat_merge(m, Stat{f.x, f.y, f.z});
  }
  const Stat tot = block_merge(m, s_warp);
  if (warp == 0) {
    const float n = __shfl_sync(0xffffffffu, tot.n, 0);
    const float mean = __shfl_sync(0xffffffffu, tot.mean, 0);
    const float m2 = __shfl_sync(0xffffffffu, tot.m2, 0);
    const float rstd = rsqrtf(fmaxf(m2 / n, 0.f) + eps);
    if (use_tab) {
      for (int i = lane; i < n_ch; i += 32) {
        const float2 wb = s_tab[i];
        const float a = rstd * wb.x;
        s_tab[i] = make_float2(a, fmaf(-mean, a, wb.y));
      }
    }
    if (lane == 0) {
      s_ms[0] = mean;
      s_ms[1] = rstd;
    }
  }
  __syncthreads();
  const float mean = s_ms[0];
  const float rstd = s_ms[1];
  const uint64_t spol = (flags & kHintStoreFirst) ? pol_evict_first() : pol_evict_normal();
  const bool uni = uniform != 0;
#pragma unroll
  for (int k = 0; k < U; ++k) {
    const int v = base + k * kThreads;
    if (k < nvalid) {
      const uint32_t e = (uint32_t)(v * VEC);
      float a[VEC], c[VEC];
      if (use_tab) {
        if (uni) {
          const float2 ac = s_tab[(int)fdiv(e, hw_div) - c_lo];
#pragma unroll
          for (int i = 0; i < VEC; ++i) {
            a[i] = ac.x;
            c[i] = ac.y;
          }
        } else {
#pragma unroll
          for (int i = 0; i < VEC; ++i) {
            const float2 ac = s_tab[(int)fdiv(e + (uint32_t)i, hw_div) - c_lo];
            a[i] = ac.x;
            c[i] = ac.y;
          }
        }
      } else {
        // wide channel range (tiny HW): per-element w/b
#pragma unroll
        for (int i = 0; i < VEC; ++i) {
          const int ch = g_off + (int)fdiv(e + (uint32_t)i, hw_div);
          a[i] = rstd * (w != nullptr ? ldg_f<T>(w + ch) : 1.f);
          c[i] = fmaf(-mean, a[i], b != nullptr ? ldg_f<T>(b + ch) : 0.f);
        }
      }
      float o[VEC];
#pragma unroll
      for (int i = 0; i < VEC; ++i) {
        const float tt = fmaf(pl_get<T, VEC>(r[k], i) - K, a[i], c[i]);  // mean is K-shifted
        // silu(t) = t / (1 + exp(-t)): ex2.approx + div.approx, as c007 (no fast-math flag)
        o[i] = __fdividef(tt, 1.0f + __expf(-tt));
      }
      pl_store<T, VEC>(gy + v * VEC, o, spol);
    }
  }
}

// Launch j of a call: blocks [stats of chunk j] and [apply of chunk j-1], mapped by gnsf_sched.h's block_work.
template <typename T, int VEC>
__global__ void __launch_bounds__(kThreads, min_blocks<T, VEC>())
    gns_f_step_kernel(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b, T* __restrict__ y,
                     float4* __restrict__ part, Sched s, int64_t j, int64_t D, int G, int Cg, FastDiv hw_div,
                     float eps, int uniform, int flags) {
  __shared__ Stat s_warp[kThreads / 32];
  __shared__ float2 s_tab[kMaxTableCh];
  __shared__ float s_ms[2];
  if (flags & kFlagPdl) pdl_launch_dependents();
  const Work wk = block_work(s, j, (int64_t)blockIdx.x);
  if (wk.role == kRoleStats) {
    stats_role<T, VEC>(x, part, s, wk.group, wk.tile, D, flags, s_warp);
  } else if (wk.role == kRoleApply) {
    apply_role<T, VEC>(x, w, b, y, part, s, wk.group, wk.tile, D, G, Cg, hw_div, eps, uniform, flags, s_warp,
                       s_tab, s_ms);
  }
}

// ------------------------------------------------------------------------------------------------ host side
namespace {

constexpr int kErrArgs = -1;
constexpr int kErrWorkspace = -2;

enum Dtype { kF16 = 0, kBF16 = 1, kF32 = 2 };

FastDiv make_fastdiv(uint32_t d) {
  uint32_t s = 0;
  while ((1ull << s) < (uint64_t)d) ++s;
  const uint64_t m = ((1ull << 32) * ((1ull << s) - (uint64_t)d)) / (uint64_t)d + 1ull;
  return FastDiv{(uint32_t)m, s};
}

struct PlanF {
  int vec = 1;
  int64_t tile_elems = 0;
  Sched s{};
  int64_t ws_bytes = 0;
  int64_t max_blocks = 0;
  int64_t group_bytes = 0;
};

template <typename T, int VEC>
int make_plan(int64_t N, int64_t C, int64_t HW, int64_t G, int64_t chunk_bytes, int flags, PlanF* p) {
  if (N <= 0 || C <= 0 || HW <= 0 || G <= 0 || C % G != 0) return kErrArgs;
  const int64_t D = (C / G) * HW;
  if (D >= 0x7fffffffLL || D % VEC != 0) return kErrArgs;
  const int64_t total = N * G;
  const int64_t tile_vec = (int64_t)kThreads * tile_u<VEC>();
  const int64_t P = cdiv64(D / VEC, tile_vec);
  const int64_t gbytes = D * (int64_t)sizeof(T);
  const int64_t cb = chunk_bytes > 0 ? chunk_bytes : kDefaultChunkBytes;
  p->vec = VEC;
  p->tile_elems = tile_vec * VEC;
  p->s = make_sched(total, P, cb / gbytes, (flags & kFlagStatsFirst) ? 1 : 0);
  p->group_bytes = gbytes;
  p->max_blocks = 2 * p->s.gpc * P;
  p->ws_bytes = total * P * (int64_t)sizeof(float4);
  if (p->max_blocks > 0x7fffffffLL) return kErrArgs;
  return 0;
}

template <typename T, int VEC>
int run(const void* x, const void* w, const void* b, void* y, void* ws, int64_t ws_bytes, int64_t N, int64_t C,
        int64_t HW, int64_t G, float eps, int64_t chunk_bytes, int flags, cudaStream_t stream, PlanF* out_plan,
        bool launch) {
  PlanF p;
  const int rc = make_plan<T, VEC>(N, C, HW, G, chunk_bytes, flags, &p);
  if (rc != 0) return rc;
  if (out_plan) *out_plan = p;
  if (!launch) return 0;
  if (ws == nullptr || ws_bytes < p.ws_bytes) return kErrWorkspace;
  const int64_t Cg = C / G;
  const int64_t D = Cg * HW;
  const FastDiv hw = make_fastdiv((uint32_t)HW);
  const int uniform = (HW % VEC) == 0 ? 1 : 0;
  const bool pdl = (flags & kFlagPdl) != 0;
  for (int64_t j = 0; j < launches(p.s); ++j) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)launch_blocks(p.s, j), 1, 1);
    cfg.blockDim = dim3(kThreads, 1, 1);
    cfg.dynamicSmemBytes = 0;
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = (pdl && j > 0) ? 1 : 0;  // launch 0 waits for x's producer by plain stream order
    const cudaError_t e = cudaLaunchKernelEx(
        &cfg, gns_f_step_kernel<T, VEC>, static_cast<const T*>(x), static_cast<const T*>(w),
        static_cast<const T*>(b), static_cast<T*>(y), static_cast<float4*>(ws), p.s, j, D, (int)G, (int)Cg, hw,
        eps, uniform, flags);
    if (e != cudaSuccess) return (int)e;
  }
  return 0;
}

int dispatch(const void* x, const void* w, const void* b, void* y, void* ws, int64_t ws_bytes, int dtype, int64_t N,
             int64_t C, int64_t HW, int64_t G, float eps, int64_t chunk_bytes, int flags, cudaStream_t stream,
             PlanF* out_plan, bool launch, bool query_aligned) {
  if (N <= 0 || C <= 0 || HW <= 0 || G <= 0 || C % G != 0) return kErrArgs;
  const int64_t D = (C / G) * HW;
  const int es = dtype == kF32 ? 4 : 2;
  const bool aligned = ((uintptr_t)x % 16 == 0) && ((uintptr_t)y % 16 == 0);
  const bool vec_ok = (launch ? aligned : query_aligned) && (D * es) % 16 == 0;
  switch (dtype) {
    case kF16:
      return vec_ok ? run<__half, 8>(x, w, b, y, ws, ws_bytes, N, C, HW, G, eps, chunk_bytes, flags, stream,
                                     out_plan, launch)
                    : run<__half, 1>(x, w, b, y, ws, ws_bytes, N, C, HW, G, eps, chunk_bytes, flags, stream,
                                     out_plan, launch);
    case kBF16:
      return vec_ok ? run<__nv_bfloat16, 8>(x, w, b, y, ws, ws_bytes, N, C, HW, G, eps, chunk_bytes, flags,
                                            stream, out_plan, launch)
                    : run<__nv_bfloat16, 1>(x, w, b, y, ws, ws_bytes, N, C, HW, G, eps, chunk_bytes, flags,
                                            stream, out_plan, launch);
    case kF32:
      return vec_ok ? run<float, 4>(x, w, b, y, ws, ws_bytes, N, C, HW, G, eps, chunk_bytes, flags, stream,
                                    out_plan, launch)
                    : run<float, 1>(x, w, b, y, ws, ws_bytes, N, C, HW, G, eps, chunk_bytes, flags, stream,
                                    out_plan, launch);
    default:
      return kErrArgs;
  }
}

}  // namespace
}  // namespace gnsf

extern "C" {

// Plan of a call: out10 = [vec, tile_elems, P, gpc, K, launches, ws_bytes, max_blocks, chunk_x_bytes, group_bytes].
// Returns 0 or a negative contract code. aligned: whether x and y will be 16-byte aligned (torch allocations are).
int gnsf_plan(int dtype, int64_t N, int64_t C, int64_t HW, int64_t G, int64_t chunk_bytes, int flags, int aligned,
              int64_t* out10) {
  gnsf::PlanF p;
  const int rc = gnsf::dispatch(nullptr, nullptr, nullptr, nullptr, nullptr, 0, dtype, N, C, HW, G, 0.f,
                                chunk_bytes, flags, 0, &p, false, aligned != 0);
  if (rc != 0) return rc;
  out10[0] = p.vec;
  out10[1] = p.tile_elems;
  out10[2] = p.s.P;
  out10[3] = p.s.gpc;
  out10[4] = p.s.K;
  out10[5] = gnsf::launches(p.s);
  out10[6] = p.ws_bytes;
  out10[7] = p.max_blocks;
  out10[8] = p.s.gpc * p.group_bytes;
  out10[9] = p.group_bytes;
  return 0;
}

// y = silu(group_norm(x)) through K + 1 launches on `stream`; w / b may be null (1 / 0). ws: >= plan's ws_bytes.
// Returns 0, a cudaError_t (> 0) or a negative contract code. flags: 1 PDL, 2/4/8 L2 hints, 16 stats-first order.
int gnsf_forward(const void* x, const void* w, const void* b, void* y, void* ws, int64_t ws_bytes, int dtype,
                 int64_t N, int64_t C, int64_t HW, int64_t G, float eps, int64_t chunk_bytes, int flags,
                 cudaStream_t stream) {
  return gnsf::dispatch(x, w, b, y, ws, ws_bytes, dtype, N, C, HW, G, eps, chunk_bytes, flags, stream, nullptr,
                        true, true);
}

}  // extern "C"
