// GroupNorm + SiLU for contiguous NC... tensors, H200 (sm_90a).
//
//   y = silu((x - mu_g) * rsqrt(var_g + eps) * w_c + b_c), rounded once to x.dtype
//
// x is [N, C, *spatial] contiguous, so group gi = n*G + g is one contiguous run of
// D = (C/G) * HW elements starting at gi*D; element e of the group has channel g*Cg + e/HW.
//
// Statistics are fp32 and numerically safe: every thread computes exact two-pass (centered)
// stats of a register batch of 32 elements, batches/threads/warps/CTAs/cluster ranks are
// combined with Chan's pairwise merge (n, mean, M2).  No E[x^2]-mu^2 anywhere.
//
// Two paths (byte model: x read, y written, w/b negligible; floor = bytes / 4.29 TB/s copy):
//  A. gns_cluster_kernel  -- group held on chip.  A thread-block cluster of CS (1..16) CTAs
//     owns one group; each CTA cp.async's its slice into shared memory (one HBM read),
//     computes its slice stats while the slice lands, the CTAs exchange (n, mean, M2)
//     through distributed shared memory, and each CTA applies the normalisation + SiLU
//     from shared memory (one HBM write).  Bytes: 1R + 1W of x.  Bound: HBM copy rate.
//  B. gns_stats_kernel + gns_apply_kernel -- groups larger than a cluster's shared memory.
//     Stats: Q CTAs per group stream the group once and write Q partials (n, mean, M2)
//     to a workspace.  Apply: each CTA merges its group's Q partials (Chan, fixed order),
//     re-reads x (in reverse order, so the tail the stats pass left in L2 is hit first)
//     and writes y.  Bytes: 2R + 1W of x (minus what L2 serves).  Bound: HBM at 3 bytes
//     of traffic per 2 of copy.
//  C. gns_pipe_kernel (v3) -- one kernel: groups that fit one 32 KB tile are fused (registers,
//     1R + 1W); larger groups get lagged stats/apply tiles from a ticket counter so the apply
//     re-read can hit L2 (byte model and bound next to the kernel).
//  D. gns_reg_kernel (c004) -- group held in registers by one CTA or one cluster (<= 32 KB per
//     CTA), one launch, one barrier, affine loads issued with the x loads (byte model, bound and
//     dependent chain next to the kernel).
//  Auto routing (gns_kernels.cu): D for every group <= 240 KB it can hold (16-byte vectors,
//  HW % VEC == 0); otherwise c003's: C fused for groups <= 16 KB, A up to 240 KB, B above.
#pragma once

#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <stdint.h>
#include <type_traits>

#include "gns_device.cuh"  // helpers shared with gns_path_f.cu

namespace gns {

// ---------------------------------------------------------------------------------------
// PTX wrappers
// ---------------------------------------------------------------------------------------
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const uint32_t s = (uint32_t)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
__device__ __forceinline__ void cluster_arrive_release() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void cluster_wait_acquire() {
  asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
__device__ __forceinline__ uint32_t cluster_ctarank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
__device__ __forceinline__ float ld_dsmem_f32(const float* local_ptr, uint32_t rank) {
  const uint32_t l = (uint32_t)__cvta_generic_to_shared(local_ptr);
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(l), "r"(rank));
  float v;
  asm volatile("ld.shared::cluster.f32 %0, [%1];\n" : "=f"(v) : "r"(r) : "memory");
  return v;
}

template <typename T, int VEC>
__device__ __forceinline__ void copy_to_smem(VecT<T, VEC>* s, const VecT<T, VEC>* g) {
  if constexpr (sizeof(VecT<T, VEC>) == 16) {
    cp_async16(s, g);
  } else {
    *s = *g;  // scalar fallback (unaligned / odd sizes): synchronous through registers
  }
}

// ---------------------------------------------------------------------------------------
// Path A: one cluster of CS CTAs per group, group held in shared memory.
// grid.x = num_groups_total * CS, cluster = (CS,1,1), dynamic smem = slice_vec * sizeof(V).
// ---------------------------------------------------------------------------------------
constexpr int kClusterMaxThreads = 512;
constexpr int kStages = 4;

template <typename T, int VEC>
__global__ void __launch_bounds__(kClusterMaxThreads, 2)
gns_cluster_kernel(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b,
                   T* __restrict__ y, int64_t D, int G, int Cg, FastDiv hw_div, int slice_vec,
                   int CS, float eps, int uniform) {
  using V = VecT<T, VEC>;
  constexpr int NB = (32 / VEC) > 0 ? (32 / VEC) : 1;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  V* sdata = reinterpret_cast<V*>(smem_raw);
  __shared__ Stat s_warp[kClusterMaxThreads / 32];
  __shared__ float s_part[3];  // this CTA's (n, mean, M2), read by the whole cluster
  __shared__ float s_mean_rstd[2];
  __shared__ float2 s_tab[kMaxTableCh];

  const int tid = threadIdx.x;
  const int NT = blockDim.x;
  const uint32_t rank = cluster_ctarank();
  const int64_t gi = (int64_t)(blockIdx.x / (unsigned)CS);
  const int64_t dvec = D / VEC;
  const int64_t v0 = (int64_t)rank * slice_vec;
  const int64_t rem = dvec - v0;
  const int nv = rem <= 0 ? 0 : (rem < slice_vec ? (int)rem : slice_vec);
  const V* gx = reinterpret_cast<const V*>(x + gi * D) + v0;
  V* gy = reinterpret_cast<V*>(y + gi * D) + v0;
  const float K = ldg_f<T>(x + gi * D);  // shift shared by every CTA of the group
  const int g_off = (int)(gi % G) * Cg;
  const uint32_t e0 = (uint32_t)(v0 * VEC);
  // channels this CTA touches: [c_lo, c_hi]; small ranges go through a shared-memory table
  const int c_lo = nv > 0 ? (int)fdiv(e0, hw_div) : 0;
  const int c_hi = nv > 0 ? (int)fdiv(e0 + (uint32_t)(nv * VEC) - 1u, hw_div) : 0;
  const int n_ch = c_hi - c_lo + 1;
  const bool use_tab = n_ch <= kMaxTableCh;

  // ---- load the slice (kStages commit groups), stats of each stage as it lands ----
  const int J = (nv + NT - 1) / NT;  // per-thread vector count (upper bound)
  int jb[kStages + 1];
#pragma unroll
  for (int s = 0; s <= kStages; ++s) jb[s] = (J * s) / kStages;
#pragma unroll
  for (int s = 0; s < kStages; ++s) {
    for (int j = jb[s]; j < jb[s + 1]; ++j) {
      const int v = tid + j * NT;
      if (v < nv) copy_to_smem<T, VEC>(sdata + v, gx + v);
    }
    cp_async_commit();
  }
  if (use_tab) table_load<T>(s_tab, w, b, g_off + c_lo, n_ch);

  Stat st = stat_empty();
#pragma unroll
  for (int s = 0; s < kStages; ++s) {
    if (s == 0) cp_async_wait<kStages - 1>();
    else if (s == 1) cp_async_wait<kStages - 2>();
    else if (s == 2) cp_async_wait<kStages - 3>();
    else cp_async_wait<0>();
    for (int j = jb[s]; j < jb[s + 1]; j += NB) {
      V r[NB];
      int nvalid = 0;
#pragma unroll
      for (int k = 0; k < NB; ++k) {
        const int v = tid + (j + k) * NT;
        if (j + k < jb[s + 1] && v < nv) {
          r[k] = sdata[v];  // own cp.async data: visible after wait_group, no barrier needed
          ++nvalid;
        }
      }
      batch_stats<T, VEC, NB>(r, nvalid, K, st);
    }
  }

  // ---- CTA merge, then cluster merge through DSMEM ----
  Stat cta = block_merge(st, s_warp);
  if (tid == 0) {
    s_part[0] = cta.n;
    s_part[1] = cta.mean;
    s_part[2] = cta.m2;
  }
  if (CS > 1) {
    cluster_arrive_release();
    cluster_wait_acquire();
    if (tid < 32) {
      Stat p = stat_empty();
      if (tid < CS) {
        p.n = ld_dsmem_f32(&s_part[0], (uint32_t)tid);
        p.mean = ld_dsmem_f32(&s_part[1], (uint32_t)tid);
        p.m2 = ld_dsmem_f32(&s_part[2], (uint32_t)tid);
      }
      p = warp_merge_down(p);
      if (tid == 0) {
        s_mean_rstd[0] = p.mean;
        s_mean_rstd[1] = rsqrtf(fmaxf(p.m2 / p.n, 0.f) + eps);
      }
    }
  } else if (tid == 0) {
    s_mean_rstd[0] = cta.mean;
    s_mean_rstd[1] = rsqrtf(fmaxf(cta.m2 / cta.n, 0.f) + eps);
  }
  __syncthreads();
  if (CS > 1) cluster_arrive_release();  // remote reads done; peers may exit after the final wait

  // ---- apply from shared memory ----
  const float mean = s_mean_rstd[0];  // K-shifted
  const float rstd = s_mean_rstd[1];
  if (use_tab) {
    table_finish(s_tab, n_ch, mean, rstd);
    __syncthreads();
#pragma unroll 4
    for (int j = 0; j < J; ++j) {
      const int v = tid + j * NT;
      if (v < nv) {
        const V xv = sdata[v];
        gy[v] = apply_vec_tab<T, VEC>(xv, K, e0 + (uint32_t)(v * VEC), c_lo, s_tab, hw_div,
                                      uniform != 0);
      }
    }
  } else {
#pragma unroll 4
    for (int j = 0; j < J; ++j) {
      const int v = tid + j * NT;
      if (v < nv) {
        const V xv = sdata[v];
        gy[v] = apply_vec<T, VEC>(xv, K, mean, rstd, e0 + (uint32_t)(v * VEC), w, b, g_off,
                                  hw_div, uniform != 0);
      }
    }
  }
  if (CS > 1) cluster_wait_acquire();
}

// ---------------------------------------------------------------------------------------
// Path B: stats per tile (P partials per group) -> finalize (one CTA per group) -> apply.
// ---------------------------------------------------------------------------------------
constexpr int kStatsThreads = 256;
constexpr int kStatsUnroll = 8;
constexpr int kApplyThreads = 256;
constexpr int kApplyUnroll = 8;
constexpr int kFinalThreads = 256;

template <typename T, int VEC>
__host__ __device__ constexpr int stats_unroll() {
  return (kStatsUnroll > 32 / VEC) ? kStatsUnroll : 32 / VEC;
}

// grid.x = num_groups_total * P; CTA (gi, t) reduces tile t of group gi to ws[gi*P + t].
template <typename T, int VEC>
__global__ void __launch_bounds__(kStatsThreads, 3)
gns_stats_kernel(const T* __restrict__ x, int64_t D, int P, float4* __restrict__ ws) {
  using V = VecT<T, VEC>;
  constexpr int NB = (32 / VEC) > 0 ? (32 / VEC) : 1;
  constexpr int U = stats_unroll<T, VEC>();  // multiple of NB
  constexpr int TILE = kStatsThreads * U;
  __shared__ Stat s_warp[kStatsThreads / 32];
  const int tid = threadIdx.x;
  const int64_t gi = blockIdx.x / P;
  const int t = blockIdx.x % P;
  const int64_t dvec = D / VEC;
  const V* gx = reinterpret_cast<const V*>(x + gi * D);
  const float K = ldg_f<T>(x + gi * D);
  const int64_t base = (int64_t)t * TILE + tid;
  V r[U];
  int nvalid = 0;
#pragma unroll
  for (int k = 0; k < U; ++k) {
    const int64_t v = base + (int64_t)k * kStatsThreads;
    if (v < dvec) {
      r[k] = ldg_vec<T, VEC>(gx + v);
      ++nvalid;
    }
  }
  Stat st = stat_empty();
#pragma unroll
  for (int h = 0; h < U / NB; ++h) {
    V rb[NB];
#pragma unroll
    for (int k = 0; k < NB; ++k) rb[k] = r[h * NB + k];
    const int nb_valid = min(max(nvalid - h * NB, 0), NB);
    batch_stats<T, VEC, NB>(rb, nb_valid, K, st);
  }
  Stat cta = block_merge(st, s_warp);
  if (tid == 0) ws[gi * P + t] = make_float4(cta.n, cta.mean, cta.m2, 0.f);
}

// grid.x = num_groups_total; merges the P partials of one group -> fin[gi] = (mean_s, rstd).
__global__ void __launch_bounds__(kFinalThreads)
gns_finalize_kernel(const float4* __restrict__ ws, int P, float eps, float2* __restrict__ fin) {
  __shared__ Stat s_warp[kFinalThreads / 32];
  const int64_t gi = blockIdx.x;
  Stat st = stat_empty();
  for (int i = threadIdx.x; i < P; i += kFinalThreads) {
    const float4 f = ws[gi * P + i];
    st = stat_merge(st, Stat{f.x, f.y, f.z});
  }
  Stat r = block_merge(st, s_warp);
  if (threadIdx.x == 0) fin[gi] = make_float2(r.mean, rsqrtf(fmaxf(r.m2 / r.n, 0.f) + eps));
}

// grid.x = num_groups_total * tiles; reverse order so the first CTAs re-read the group tails
// the stats pass read last (still in L2).
template <typename T, int VEC>
__global__ void __launch_bounds__(kApplyThreads, 3)
gns_apply_kernel(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b,
                 T* __restrict__ y, int64_t D, int G, int Cg, FastDiv hw_div,
                 const float2* __restrict__ fin, int uniform, int64_t tiles_per_group,
                 int64_t num_groups_total) {
  using V = VecT<T, VEC>;
  constexpr int U = kApplyUnroll;
  constexpr int TILE = kApplyThreads * U;
  __shared__ float2 s_tab[kMaxTableCh];
  const int tid = threadIdx.x;
  const int64_t j = (int64_t)blockIdx.x;
  const int64_t gi = j % num_groups_total;
  const int64_t tile = tiles_per_group - 1 - j / num_groups_total;
  const int64_t dvec = D / VEC;
  const V* gx = reinterpret_cast<const V*>(x + gi * D);
  V* gy = reinterpret_cast<V*>(y + gi * D);
  const int64_t base = tile * TILE + tid;
  const float K = ldg_f<T>(x + gi * D);

  V r[U];
#pragma unroll
  for (int k = 0; k < U; ++k) {
    const int64_t v = base + (int64_t)k * kApplyThreads;
    if (v < dvec) r[k] = ldg_vec<T, VEC>(gx + v);
  }
  const float2 ms = fin[gi];
  const int g_off = (int)(gi % G) * Cg;
  const int64_t t_first = tile * TILE;
  const int64_t t_last = min(dvec, t_first + TILE) - 1;
  const int c_lo = (int)fdiv((uint32_t)(t_first * VEC), hw_div);
  const int c_hi = (int)fdiv((uint32_t)(t_last * VEC + VEC - 1), hw_div);
  const int n_ch = c_hi - c_lo + 1;
  const bool use_tab = n_ch <= kMaxTableCh;
  if (use_tab) {
    for (int i = tid; i < n_ch; i += kApplyThreads) {
      const float a = ms.y * ldg_f<T>(w + g_off + c_lo + i);
      s_tab[i] = make_float2(a, fmaf(-ms.x, a, ldg_f<T>(b + g_off + c_lo + i)));
    }
  }
  __syncthreads();
#pragma unroll
  for (int k = 0; k < U; ++k) {
    const int64_t v = base + (int64_t)k * kApplyThreads;
    if (v < dvec) {
      if (use_tab)
        gy[v] = apply_vec_tab<T, VEC>(r[k], K, (uint32_t)(v * VEC), c_lo, s_tab, hw_div,
                                      uniform != 0);
      else
        gy[v] = apply_vec<T, VEC>(r[k], K, ms.x, ms.y, (uint32_t)(v * VEC), w, b, g_off, hw_div,
                                  uniform != 0);
    }
  }
}


// ---------------------------------------------------------------------------------------
// Path C (v3): one kernel, stats and apply tiles handed out in a lagged order by a ticket
// counter, so the apply re-read of a group hits L2.
//
// Work items (32 KB tiles of x, kPipeThreads x kPipeUnroll vectors):
//   * P == 1 (group fits one tile): fused.  CTA gi loads its group into registers, block
//     stats, applies from registers.  Bytes: 1R + 1W.  One launch, no workspace.
//   * P > 1: 2*total*P items.  Ticket order: the first LP stats tiles, then stats tile LP+j
//     and apply tile j alternately, then the last LP apply tiles.  LP >= P, so every stats
//     tile an apply tile needs was handed out earlier to a CTA that is already running and
//     never waits: no deadlock whatever the block scheduler does (tickets, not blockIdx).
//     A stats tile writes its partial (n, mean, M2); the group's last stats tile (atomic
//     count) merges the P partials in fixed order (deterministic), writes (mean_s, rstd) and
//     bumps the count to P+1.  An apply tile issues its x loads first, then spins on the
//     count (acquire), then applies from registers.
//   Bytes: HBM 1R + 1W of x when the apply re-read hits L2, + 1R of L2.  The reuse distance
//   is about LP tiles of x reads and LP tiles of y writes (<= 2 x 17.8 MB on the production
//   table), inside the 60 MB L2 when y stores and apply loads are marked evict_first.
//   Bound: HBM copy rate (1R + 1W), 4.29 TB/s.
// ---------------------------------------------------------------------------------------
constexpr int kPipeThreads = 256;
constexpr int kPipeUnroll = 8;

// hint bits: 1 = stats loads evict_last, 2 = apply loads evict_first, 4 = y stores evict_first
template <typename T, int VEC>
__global__ void __launch_bounds__(kPipeThreads, 2)
gns_pipe_kernel(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b,
                T* __restrict__ y, int64_t D, int G, int Cg, FastDiv hw_div, float eps,
                int uniform, int64_t total, int P, int64_t LP, int hints,
                float4* __restrict__ part, float2* __restrict__ fin, uint32_t* __restrict__ cnt,
                unsigned long long* __restrict__ ticket) {
  constexpr int NB = (32 / VEC) > 0 ? (32 / VEC) : 1;
  constexpr int U = kPipeUnroll > NB ? kPipeUnroll : NB;  // multiple of NB
  constexpr int TILE = kPipeThreads * U;                   // vectors per tile
  __shared__ Stat s_warp[kPipeThreads / 32];
  __shared__ float2 s_tab[kMaxTableCh];
  __shared__ float s_ms[2];
  __shared__ int64_t s_item;
  __shared__ int s_last;
  const int tid = threadIdx.x;

  int64_t gi, t;
  int kind;  // 0 fused, 1 stats, 2 apply
  if (P == 1) {
    kind = 0;
    gi = blockIdx.x;
    t = 0;
  } else {
    if (tid == 0) s_item = (int64_t)atomicAdd(ticket, 1ull);
    __syncthreads();
    const int64_t i = s_item;
    const int64_t NS = total * P;
    int64_t k;
    if (i < LP) {
      kind = 1;
      k = i;
    } else {
      const int64_t j = i - LP;
      const int64_t M = NS - LP;
      if (j < 2 * M) {
        kind = (j & 1) ? 2 : 1;
        k = (j & 1) ? (j >> 1) : LP + (j >> 1);
      } else {
        kind = 2;
        k = M + (j - 2 * M);
      }
    }
    gi = k / P;
    t = k - gi * P;
  }
  using L = typename PipeL<T, VEC>::L;
  const int64_t dvec = D / VEC;
  const T* gx = x + gi * D;
  T* gy = y + gi * D;
  const int64_t base = t * TILE + tid;
  // one policy register, no branch per load: evict_last / evict_first / evict_normal
  const uint64_t pol = (kind == 1 && (hints & 1))   ? pol_evict_last()
                       : (kind == 2 && (hints & 2)) ? pol_evict_first()
                                                    : pol_evict_normal();
  // clamped (always valid) addresses: U loads issue back to back; validity is a prefix in k
  L r[U];
#pragma unroll
  for (int k = 0; k < U; ++k) {
    const int64_t v = min(base + (int64_t)k * kPipeThreads, dvec - 1);
    r[k] = pl_load<T, VEC>(gx + v * VEC, pol);
  }
  const int nvalid =
      base >= dvec ? 0 : (int)min((int64_t)U, (dvec - 1 - base) / kPipeThreads + 1);
  const float K = ldg_f<T>(gx);

  // channel table for this tile: raw w/b loads issued while the x loads are in flight
  const int g_off = (int)(gi % G) * Cg;
  const int64_t t_first = t * TILE;
  const int64_t t_last = min(dvec, t_first + TILE) - 1;
  const int c_lo = (int)fdiv((uint32_t)(t_first * VEC), hw_div);
  const int c_hi = (int)fdiv((uint32_t)(t_last * VEC + VEC - 1), hw_div);
  const int n_ch = c_hi - c_lo + 1;
  const bool use_tab = n_ch <= kMaxTableCh;
  if (kind != 1 && use_tab) table_load<T>(s_tab, w, b, g_off + c_lo, n_ch);

  if (kind != 2) {
    // exact two-pass stats per NB-vector register batch (as batch_stats), Chan-merged
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
    Stat cta = block_merge(st, s_warp);
    if (kind == 1) {
      if (tid == 0) {
        part[gi * P + t] = make_float4(cta.n, cta.mean, cta.m2, 0.f);
        __threadfence();
        const uint32_t old = atomicAdd(cnt + gi, 1u);
        s_last = (old == (uint32_t)(P - 1)) ? 1 : 0;
      }
      __syncthreads();
      if (!s_last) return;
      __threadfence();
      Stat m = stat_empty();
      for (int i = tid; i < P; i += kPipeThreads) {
        const float4 f = __ldcg(part + gi * P + i);
        m = stat_merge(m, Stat{f.x, f.y, f.z});
      }
      __syncthreads();  // s_warp reuse
      Stat rr = block_merge(m, s_warp);
      if (tid == 0) {
        fin[gi] = make_float2(rr.mean, rsqrtf(fmaxf(rr.m2 / rr.n, 0.f) + eps));
        __threadfence();
        atomicAdd(cnt + gi, 1u);  // P -> P+1: stats ready
      }
      return;
    }
    if (tid == 0) {
      s_ms[0] = cta.mean;
      s_ms[1] = rsqrtf(fmaxf(cta.m2 / cta.n, 0.f) + eps);
    }
  } else if (tid == 0) {
    const uint32_t want = (uint32_t)P + 1u;
    while (ld_acquire_u32(cnt + gi) < want) __nanosleep(64);
    const float2 ms = __ldcg(fin + gi);
    s_ms[0] = ms.x;
    s_ms[1] = ms.y;
  }
  __syncthreads();  // s_ms and the raw table are in place
  const float mean = s_ms[0];
  const float rstd = s_ms[1];
  if (use_tab) {
    table_finish(s_tab, n_ch, mean, rstd);
    __syncthreads();
  }
  const uint64_t spol = (hints & 4) ? pol_evict_first() : pol_evict_normal();
  const bool uni = uniform != 0;
#pragma unroll
  for (int k = 0; k < U; ++k) {
    const int64_t v = base + (int64_t)k * kPipeThreads;
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
        // wide channel range (tiny HW): per-element global w/b, (x-K-mean)*rstd*w + b
#pragma unroll
        for (int i = 0; i < VEC; ++i) {
          const int ch = g_off + (int)fdiv(e + (uint32_t)i, hw_div);
          a[i] = rstd * ldg_f<T>(w + ch);
          c[i] = fmaf(-mean, a[i], ldg_f<T>(b + ch));
        }
      }
      float o[VEC];
#pragma unroll
      for (int i = 0; i < VEC; ++i) {
        const float tt = fmaf(pl_get<T, VEC>(r[k], i) - K, a[i], c[i]);
        o[i] = __fdividef(tt, 1.0f + __expf(-tt));
      }
      pl_store<T, VEC>(gy + v * VEC, o, spol);
    }
  }
}

template <typename T, int VEC>
__host__ __device__ constexpr int pipe_tile_vec() {
  return kPipeThreads * (kPipeUnroll > (32 / VEC) ? kPipeUnroll : (32 / VEC));
}


// ---------------------------------------------------------------------------------------
// Path D (c004 design, docs/notes.md "c004 register path"): group held in REGISTERS by one
// CTA or one thread-block cluster of CS in {1,2,4,8,16} CTAs; one launch, one barrier.
//
//   grid.x = total * CS, cluster (CS,1,1) when CS > 1, blockDim NT in {32,...,256} (multiple
//   of 32).  CTA (gi, rank) owns vectors [rank*slice_vec, min(dvec, (rank+1)*slice_vec)) of
//   group gi; thread tid holds vectors rank*slice_vec + tid + k*NT, k < U (coalesced per k),
//   as raw uint4 (16-byte LDG, no repack between loads; addresses clamped to the group's last
//   vector so the U loads are unpredicated and issue back to back).
//
//   Dependent chain per call (c003 path A had: K -> cp.async stages -> block merge (bar) ->
//   cluster barrier -> DSMEM -> merge -> bar -> table finish (bar) -> apply from smem):
//     1. issue together: U x loads, the shift K (the group's first element), and the w_c/b_c
//        of each of the thread's U vectors (a vector never straddles a channel: HW % VEC == 0
//        is required, so one channel per vector) -- the affine loads are off the chain;
//     2. per-thread exact two-pass (centered) stats of its <= U*VEC registers, shifted by K;
//     3. warp merge (Chan, shfl tree), lane 0 stores (n, mean, M2) to s_part[warp];
//     4. ONE barrier: barrier.cluster arrive.release/wait.acquire (CS > 1) or __syncthreads;
//     5. every warp merges all CS*nwarps partials (DSMEM ld.shared::cluster.v4 for CS > 1) in
//        a fixed order and a canonically ordered xor-butterfly, so every thread of every CTA
//        of the group holds the bitwise-same (mean_s, rstd) -- no broadcast barrier;
//     6. apply from registers: t = fma(x - K, rstd*w_c, b_c - mean_s*rstd*w_c), silu, one
//        rounding, 16-byte stores; arrive on the cluster barrier after the DSMEM reads and
//        wait on it only before exit (peers' s_part must outlive their readers).
//
//   Byte model: x read once (1R), y written once (1W), w/b 2*C*sizeof(T) (L2/L1 hits after
//   the first CTA), K one extra 2-byte read per CTA (L2).  Bound: HBM copy rate 4.29 TB/s on
//   2*numel*sizeof(T) bytes, plus the fixed launch/ramp cost a same-size copy also pays
//   (~1.9-2.0 us on the H200 for 0.5-2 MB, docs/notes.md table): size-aware bound
//   ~= 2 us + bytes / 4.3 TB/s.  Capacity: NT*U*16 B <= 32 KB per CTA (U <= 8, NT <= 256),
//   so groups up to CS*32 KB (256 KB at CS 8; 512 KB at the non-portable CS 16).
//   ALU per element: ~7 (stats, two passes) + ~9 (apply) instructions and 2 MUFU (ex2, rcp),
//   e.g. the 15.7 MB row (3.9 M elements): ~1.9 us of MUFU per SM spread over 132 SMs, partly
//   hidden under the 1W drain (stats cannot overlap the group's own load).
// ---------------------------------------------------------------------------------------
constexpr int kRegMaxThreads = 256;
constexpr int kRegMaxU = 8;

__device__ __forceinline__ float4 ld_dsmem_f4(const float4* local_ptr, uint32_t rank) {
  const uint32_t l = (uint32_t)__cvta_generic_to_shared(local_ptr);
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(l), "r"(rank));
  float4 v;
  asm volatile("ld.shared::cluster.v4.f32 {%0,%1,%2,%3}, [%4];\n"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(r)
               : "memory");
  return v;
}

// Xor butterfly with a canonical operand order (the lane whose bit is clear is the left
// operand): both partners compute stat_merge(low, high) on identical inputs, so after the
// 5 levels every lane holds the bitwise-same result (the same tree as a pairwise reduction
// of lanes 0..31 in index order).
__device__ __forceinline__ Stat warp_merge_all(Stat s) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    Stat o;
    o.n = __shfl_xor_sync(0xffffffffu, s.n, off);
    o.mean = __shfl_xor_sync(0xffffffffu, s.mean, off);
    o.m2 = __shfl_xor_sync(0xffffffffu, s.m2, off);
    const bool hi = (lane & off) != 0;  // operands swapped by select: one merge per level
    const Stat l{hi ? o.n : s.n, hi ? o.mean : s.mean, hi ? o.m2 : s.m2};
    const Stat r{hi ? s.n : o.n, hi ? s.mean : o.mean, hi ? s.m2 : o.m2};
    s = stat_merge(l, r);
  }
  return s;
}

__device__ __forceinline__ uint4 ldg_nc_na16(const void* p) {
  uint4 r;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
      : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
      : "l"(p));
  return r;
}

// 16 bytes of VEC = 16/sizeof(T) outputs, one rounding each (packed cvt for 16-bit types).
template <typename T>
__device__ __forceinline__ uint4 pack16(const float (&o)[16 / sizeof(T)]) {
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
  return u;
}

// Requirements (checked by the planner, gns_kernels.cu plan_reg): x, y 16-byte aligned,
// HW % VEC == 0 (so D % VEC == 0 and each vector lies in one channel), slice_vec <= NT*U,
// NT % 32 == 0, NT <= kRegMaxThreads, D < 2^31.
template <typename T, int U>
__global__ void __launch_bounds__(kRegMaxThreads, 2)
gns_reg_kernel(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b,
               T* __restrict__ y, int64_t D, int G, int Cg, FastDiv hw_div, int slice_vec,
               int CS, float eps) {
  constexpr int VEC = 16 / (int)sizeof(T);
  __shared__ float4 s_part[kRegMaxThreads / 32];
  const int tid = threadIdx.x;
  const int NT = blockDim.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int nwarps = NT >> 5;
  const uint32_t rank = CS > 1 ? cluster_ctarank() : 0u;
  const int64_t gi = (int64_t)(blockIdx.x / (unsigned)CS);
  const int64_t dvec = D / VEC;
  const int64_t v0 = (int64_t)rank * slice_vec;
  const int64_t rem = dvec - v0;
  const int nv = rem <= 0 ? 0 : (rem < slice_vec ? (int)rem : slice_vec);
  const T* gx = x + gi * D;
  const int g_off = (int)(gi % G) * Cg;

  // 1. every global load of the call, issued before any of them is used
  uint4 r[U];
#pragma unroll
  for (int k = 0; k < U; ++k) {
    const int64_t v = min(v0 + tid + (int64_t)k * NT, dvec - 1);
    r[k] = ldg_nc_na16(gx + v * VEC);
  }
  const float K = ldg_f<T>(gx);
  float wk[U], bk[U];
#pragma unroll
  for (int k = 0; k < U; ++k) {
    const int64_t v = min(v0 + tid + (int64_t)k * NT, dvec - 1);
    const int ch = g_off + (int)fdiv((uint32_t)(v * VEC), hw_div);
    wk[k] = ldg_f<T>(w + ch);
    bk[k] = ldg_f<T>(b + ch);
  }
  const int nvalid = tid < nv ? min(U, (nv - 1 - tid) / NT + 1) : 0;  // valid k: a prefix

  // 2. exact two-pass stats of this thread's registers (shifted by K), four accumulators
  Stat st = stat_empty();
  if (nvalid > 0) {
    float s0 = 0.f, s1 = 0.f, s2 = 0.f, s3 = 0.f;
#pragma unroll
    for (int k = 0; k < U; ++k) {
      if (k < nvalid) {
#pragma unroll
        for (int i = 0; i < VEC; i += 4) {
          s0 += pl_get<T, VEC>(r[k], i) - K;
          s1 += pl_get<T, VEC>(r[k], i + 1) - K;
          s2 += pl_get<T, VEC>(r[k], i + 2) - K;
          s3 += pl_get<T, VEC>(r[k], i + 3) - K;
        }
      }
    }
    const float n = (float)(nvalid * VEC);
    const float m = ((s0 + s1) + (s2 + s3)) / n;
    float q0 = 0.f, q1 = 0.f, q2 = 0.f, q3 = 0.f;
#pragma unroll
    for (int k = 0; k < U; ++k) {
      if (k < nvalid) {
#pragma unroll
        for (int i = 0; i < VEC; i += 4) {
          const float d0 = (pl_get<T, VEC>(r[k], i) - K) - m;
          const float d1 = (pl_get<T, VEC>(r[k], i + 1) - K) - m;
          const float d2 = (pl_get<T, VEC>(r[k], i + 2) - K) - m;
          const float d3 = (pl_get<T, VEC>(r[k], i + 3) - K) - m;
          q0 = fmaf(d0, d0, q0);
          q1 = fmaf(d1, d1, q1);
          q2 = fmaf(d2, d2, q2);
          q3 = fmaf(d3, d3, q3);
        }
      }
    }
    st = Stat{n, m, (q0 + q1) + (q2 + q3)};
  }

  // 3. warp merge; 4. the one barrier
  st = warp_merge_down(st);
  if (lane == 0) s_part[warp] = make_float4(st.n, st.mean, st.m2, 0.f);
  if (CS > 1) {
    cluster_arrive_release();
    cluster_wait_acquire();
  } else {
    __syncthreads();
  }

  // 5. every warp merges the CS*nwarps partials: lane-sequential in index order, then the
  //    canonical butterfly -> the same bits in every thread of the group
  const int E = CS * nwarps;
  Stat a = stat_empty();
  for (int e = lane; e < E; e += 32) {
    const float4 f = CS > 1 ? ld_dsmem_f4(&s_part[e % nwarps], (uint32_t)(e / nwarps)) : s_part[e];
    a = stat_merge(a, Stat{f.x, f.y, f.z});
  }
  a = warp_merge_all(a);
  // this CTA is done reading its peers' s_part (the values are consumed above, so the reads
  // are complete): relaxed arrive, no second MEMBAR.ALL.GPU (the release arrive emits one)
  if (CS > 1) asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
  const float mean = a.mean;              // K-shifted
  const float rstd = rsqrtf(fmaxf(a.m2 / a.n, 0.f) + eps);

  // 6. apply from registers, 16-byte stores
  T* gy = y + gi * D;
#pragma unroll
  for (int k = 0; k < U; ++k) {
    if (k < nvalid) {
      const int64_t v = v0 + tid + (int64_t)k * NT;
      const float ak = rstd * wk[k];
      const float ck = fmaf(-mean, ak, bk[k]);
      float o[VEC];
#pragma unroll
      for (int i = 0; i < VEC; ++i) {
        const float t = fmaf(pl_get<T, VEC>(r[k], i) - K, ak, ck);
        o[i] = __fdividef(t, 1.0f + __expf(-t));
      }
      *reinterpret_cast<uint4*>(gy + v * VEC) = pack16<T>(o);
    }
  }
  if (CS > 1) cluster_wait_acquire();  // peers may still read this CTA's s_part until here
}

}  // namespace gns
