// Host side of the GroupNorm+SiLU kernels: plan selection and extern "C" launchers.
// Pure CUDA (no torch headers):
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -c gns_kernels.cu
// Every launcher takes raw pointers, sizes, eps and a cudaStream_t, enqueues only kernel
// launches on that stream (no host syncs, no allocations: CUDA-graph capturable) and
// returns a cudaError_t (0 = success) or a negative code for a contract violation.
#include "gns_kernels.cuh"

#include <map>
#include <mutex>
#include <stdio.h>
#include <tuple>
#include <type_traits>

// Path F (c009): chunked stats/apply launches, src/gns_path_f.cu (its own translation unit, namespace gnsf).
extern "C" {
int gnsf_plan(int dtype, int64_t N, int64_t C, int64_t HW, int64_t G, int64_t chunk_bytes, int flags, int aligned,
              int64_t* out10);
int gnsf_forward(const void* x, const void* w, const void* b, void* y, void* ws, int64_t ws_bytes, int dtype,
                 int64_t N, int64_t C, int64_t HW, int64_t G, float eps, int64_t chunk_bytes, int flags,
                 cudaStream_t stream);
}

namespace gns {
namespace {

enum Dtype { kF16 = 0, kBF16 = 1, kF32 = 2 };

constexpr int kErrArgs = -1;        // bad sizes / dtype
constexpr int kErrWorkspace = -2;   // workspace missing or too small
constexpr int kErrForced = -3;      // forced path not possible for this shape
constexpr int kDefaultSmemCap = 200 * 1024;  // bytes of x per CTA on the on-chip path
constexpr int kMaxDevices = 64;
// Path C: stats tiles handed out ahead of the first apply tile, per SM (lag), and default
// L2 hint bits (1 stats loads evict_last, 2 apply loads evict_first, 4 y stores evict_first).
constexpr int kPipeLagPerSm = 4;
// v3 routing thresholds (measured, notes.md): fused path C up to 16 KB groups (0.5 MB row:
// 4.2 us against 5.3 on path A); cluster path A up to 240 KB groups (A beat B and C there).
constexpr int64_t kPipeFusedMaxBytes = 16 * 1024;
constexpr int64_t kOnChipMaxGroupBytes = 240 * 1024;
constexpr int kPipeDefaultHints = 6;
// c004 path D (register-resident group, one barrier): auto routing takes every group up to
// kRegAutoMaxGroupBytes that it can hold (16-byte vectors, HW % VEC == 0); a group is spread
// over more CTAs (cluster) while the grid stays <= 2 CTAs per SM and each CTA keeps
// >= kRegMinSliceBytes of x.  force_path 4 forces it (force_cs = CS, smem_cap = threads);
// force_path 5 is c003's auto routing exactly (no path D), for A/B sweeps.
constexpr int64_t kRegMinSliceBytes = 4 * 1024;
// Auto-routing reach of path D: groups up to this size, clusters up to this size.  H200 sweep of
// c006 (dev/sweep_small.py, 2026-11-27, notes.md): path D beat c003 on the rows with groups up to
// 98 KB and lost on every row with groups of 164-245 KB (10.5-15.7 MB rows: 12.2-14.2 us against
// c003's 11.1-13.6), so those stay on c003's path; clusters of 8 lost to clusters of 4 on every
// row where both ran (3.3-6.3 MB: 6.5-7.9 us against 5.6-7.8), so auto growth stops at 4.
constexpr int64_t kRegAutoMaxGroupBytes = 128 * 1024;
constexpr int kRegAutoMaxCs = 8;
constexpr int kRegAutoGrowCs = 4;
constexpr int kForceRegPath = 4;
constexpr int kForceC003Auto = 5;
// c009: force_path 7 = c007's auto routing exactly (no path F), for A/B sweeps; force_path 8 forces path F
// (src/gns_path_f.cu) with force_cs = chunk MiB (0: kChunkAutoChunkBytes) and smem_cap = flags | 32 (0: the auto
// flags; bit 5 only marks the flags as given, so flags 0 = no PDL, no hints is reachable as smem_cap 32).
constexpr int kForceC007Auto = 7;
constexpr int kForceChunkPath = 8;
// c009 auto route to path F. H200 sweep dev/results/20261127-sweep_path_f_c009draft.json (CUDA-graph replay, us;
// "B" = c007's split path forced, which is what c007 runs on these rows):
//   1x512x2x64x64 fp16 (x 8 MiB, 256 KiB groups): c007 14.2, B 14.2, F 12.7 (F8p = F12p = F24p: one chunk)  -> 0.90x
//   1x512x3x128x40 fp16 (x 15 MiB, 480 KiB groups): c007 21.2, B 21.1, F24p 18.9 (one chunk)               -> 0.89x
//     (F12p, two chunks: 25.4, slower than B: the gain is the PDL-overlapped 2-launch form, not chunking;
//      F12 without PDL, one chunk on the first row: 14.9)
// Groups of >= 2^18 elements measured no gain from one chunk: 1x512x9x48x40 (x 16.9 MiB) F24p 24.0 vs B 23.2,
// 1x512x5x64x64 (x 20 MiB) 24.5 vs 24.4, 1x512x16x32x48 bf16 (x 24 MiB) 27.7 vs 28.8 (spread 27.2-30.2, within
// noise); more chunks lost everywhere (>= 200 MB rows: 0.81-0.91x of c007). So path F takes exactly the measured
// class: 16-bit x on the 16-byte path with HW % 8 == 0, groups c007 sends to path B (> kOnChipMaxGroupBytes) of
// < 2^18 elements, x of 8-16 MiB (the measured 8.0 and 15.0 MiB, all in one chunk of kChunkAutoChunkBytes:
// 2 launches), PDL + all three L2 hints (the F24p flags). Everything else keeps c007's plan.
constexpr int64_t kChunkAutoMaxGroupElems = 1 << 18;
constexpr int64_t kChunkAutoMinXBytes = 8ll << 20;
constexpr int64_t kChunkAutoMaxXBytes = 16ll << 20;
constexpr int64_t kChunkAutoChunkBytes = 24ll << 20;
constexpr int kChunkAutoFlags = 15;  // PDL | stats evict_last | apply loads evict_first | y evict_first
constexpr int kChunkFlagsGiven = 32;

struct Plan {
  int path = 0;      // 1 = cluster/on-chip, 2 = split stats + apply
  int vec = 1;       // elements per vector access
  int cs = 1;        // cluster size (path 1)
  int slice_vec = 0; // vectors per CTA (path 1)
  int threads = 0;   // CTA size (path 1)
  size_t smem = 0;   // dynamic smem bytes (path 1)
  int q = 0;         // stats partials per group (path 2)
  int64_t tiles = 0; // apply tiles per group (path 2)
  int64_t ws_bytes = 0;
  int64_t lp = 0;    // path 3: stats tiles handed out before the first apply tile
  int hints = 0;     // path 3: L2 eviction-hint bits
  int64_t zero_off = 0, zero_bytes = 0;  // path 3: counters to clear before the launch
  int reg_u = 0;     // path 4: vectors per thread (1, 2, 4, 8)
  int64_t f_chunk = 0;  // path 8: chunk bytes of x (groups per chunk = max(1, f_chunk / group bytes))
  int f_flags = 0;      // path 8: gns_path_f.cu flags (1 PDL, 2/4/8 L2 hints, 16 stats-first block order)
  int64_t f_gpc = 0, f_k = 0;  // path 8: groups per chunk, chunks (launches = f_k + 1)
};

struct DevInfo {
  int sms = 0;
  int smem_optin = 0;
};

std::mutex g_mu;
DevInfo g_dev[kMaxDevices];

int current_device() {
  int d = 0;
  cudaGetDevice(&d);
  return d;
}

const DevInfo& dev_info(int dev) {
  DevInfo& di = g_dev[dev];
  if (di.sms == 0) {
    std::lock_guard<std::mutex> lk(g_mu);
    if (di.sms == 0) {
      int smem = 0, sms = 0;
      cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
      di.smem_optin = smem;
      di.sms = sms > 0 ? sms : 1;
    }
  }
  return di;
}

FastDiv make_fastdiv(uint32_t d) {
  uint32_t s = 0;
  while ((1ull << s) < (uint64_t)d) ++s;
  const uint64_t m = ((1ull << 32) * ((1ull << s) - (uint64_t)d)) / (uint64_t)d + 1ull;
  return FastDiv{(uint32_t)m, s};
}

template <typename T, int VEC>
cudaError_t setup_cluster_kernel(int dev) {
  static int done[kMaxDevices] = {0};
  if (done[dev]) return cudaSuccess;
  std::lock_guard<std::mutex> lk(g_mu);
  if (done[dev]) return cudaSuccess;
  auto kern = gns_cluster_kernel<T, VEC>;
  cudaFuncAttributes fa;
  cudaError_t e = cudaFuncGetAttributes(&fa, kern);
  if (e != cudaSuccess) return e;
  int optin = 0;
  cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
  e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           optin - (int)fa.sharedSizeBytes);
  if (e != cudaSuccess) return e;
  e = cudaFuncSetAttribute(kern, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  if (e != cudaSuccess) return e;
  done[dev] = 1;
  return cudaSuccess;
}

template <typename T, int VEC>
int static_smem_cluster(int dev) {
  static int cached[kMaxDevices] = {0};
  if (cached[dev] == 0) {
    cudaFuncAttributes fa;
    if (cudaFuncGetAttributes(&fa, gns_cluster_kernel<T, VEC>) != cudaSuccess) return 1 << 20;
    cached[dev] = (int)fa.sharedSizeBytes + 1;
  }
  return cached[dev] - 1;
}

// Can a cluster of cs CTAs with this much dynamic smem be resident at all? (cached)
template <typename T, int VEC>
bool cluster_fits(int dev, int cs, int threads, size_t smem) {
  static std::map<std::tuple<int, int, int, size_t>, int> cache;
  const size_t bucket = (smem + 4095) / 4096 * 4096;
  const auto key = std::make_tuple(dev, cs, threads, bucket);
  {
    std::lock_guard<std::mutex> lk(g_mu);
    auto it = cache.find(key);
    if (it != cache.end()) return it->second > 0;
  }
  if (setup_cluster_kernel<T, VEC>(dev) != cudaSuccess) return false;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(cs * 64, 1, 1);
  cfg.blockDim = dim3(threads, 1, 1);
  cfg.dynamicSmemBytes = bucket;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = cs;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  int n = 0;
  cudaError_t e = cudaOccupancyMaxActiveClusters(&n, (void*)gns_cluster_kernel<T, VEC>, &cfg);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear
    n = 0;
  }
  std::lock_guard<std::mutex> lk(g_mu);
  cache[key] = n;
  return n > 0;
}

int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

template <typename T, int U>
cudaError_t setup_reg_kernel(int dev) {
  static int done[kMaxDevices] = {0};
  if (done[dev]) return cudaSuccess;
  std::lock_guard<std::mutex> lk(g_mu);
  if (done[dev]) return cudaSuccess;
  cudaError_t e = cudaFuncSetAttribute(gns_reg_kernel<T, U>,
                                       cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  if (e != cudaSuccess) return e;
  done[dev] = 1;
  return cudaSuccess;
}

template <typename T, int U>
bool reg_cluster_fits_u(int dev, int cs, int threads) {
  static std::map<std::tuple<int, int, int>, int> cache;
  const auto key = std::make_tuple(dev, cs, threads);
  {
    std::lock_guard<std::mutex> lk(g_mu);
    auto it = cache.find(key);
    if (it != cache.end()) return it->second > 0;
  }
  if (setup_reg_kernel<T, U>(dev) != cudaSuccess) return false;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(cs * 64, 1, 1);
  cfg.blockDim = dim3(threads, 1, 1);
  cfg.dynamicSmemBytes = 0;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = cs;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  int n = 0;
  cudaError_t e = cudaOccupancyMaxActiveClusters(&n, (void*)gns_reg_kernel<T, U>, &cfg);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear
    n = 0;
  }
  std::lock_guard<std::mutex> lk(g_mu);
  cache[key] = n;
  return n > 0;
}

template <typename T>
bool reg_cluster_fits(int dev, int cs, int threads, int u) {
  switch (u) {
    case 1:
      return reg_cluster_fits_u<T, 1>(dev, cs, threads);
    case 2:
      return reg_cluster_fits_u<T, 2>(dev, cs, threads);
    case 4:
      return reg_cluster_fits_u<T, 4>(dev, cs, threads);
    default:
      return reg_cluster_fits_u<T, 8>(dev, cs, threads);
  }
}

int pow2ceil(int64_t v) {
  int p = 1;
  while (p < v) p <<= 1;
  return p;
}

// Path D plan (see gns_reg_kernel).  Returns false where the group cannot be held (the caller
// then keeps c003's routing).  force_cs / force_nt > 0 pin the cluster size / CTA size.
template <typename T, int VEC>
bool plan_reg(int dev, int64_t dvec, int64_t total, bool uniform, int force_cs, int force_nt,
              Plan* p) {
  if constexpr (sizeof(T) * VEC != 16) {
    return false;
  } else {
    if (!uniform || dvec <= 0) return false;
    const int64_t cap = (int64_t)kRegMaxThreads * kRegMaxU;  // vectors per CTA
    int cs = 0;
    if (force_cs > 0) {
      if (force_cs != 1 && force_cs != 2 && force_cs != 4 && force_cs != 8 && force_cs != 16)
        return false;
      if (cdiv(dvec, force_cs) > cap) return false;
      cs = force_cs;
    } else {
      for (int c = 1; c <= kRegAutoMaxCs; c *= 2) {
        if (cdiv(dvec, c) <= cap) {
          cs = c;
          break;
        }
      }
      if (cs == 0) return false;
      const int64_t sms = dev_info(dev).sms;
      while (cs < kRegAutoGrowCs && total * 2 * cs <= 2 * sms && cdiv(dvec, 2 * cs) * 16 >= kRegMinSliceBytes)
        cs *= 2;
    }
    if (total * cs > 0x7fffffffLL) return false;
    const int64_t slice = cdiv(dvec, cs);
    int nt;
    if (force_nt > 0) {
      if (force_nt % 32 != 0 || force_nt > kRegMaxThreads) return false;
      nt = force_nt;
    } else {
      nt = slice >= kRegMaxThreads ? kRegMaxThreads : (pow2ceil(slice) < 32 ? 32 : pow2ceil(slice));
    }
    const int u = pow2ceil(cdiv(slice, nt));
    if (u > kRegMaxU) return false;
    if (cs >= 8 && !reg_cluster_fits<T>(dev, cs, nt, u)) return false;
    p->path = 4;
    p->vec = VEC;
    p->cs = cs;
    p->slice_vec = (int)slice;
    p->threads = nt;
    p->reg_u = u;
    p->smem = 0;
    p->ws_bytes = 0;
    return true;
  }
}

template <typename T>
constexpr int dtype_code() {
  return std::is_same<T, float>::value ? kF32 : (std::is_same<T, __half>::value ? kF16 : kBF16);
}

// c009: does the auto route send this call to path F? (the measured class, see kChunkAuto*)
template <typename T, int VEC>
bool chunk_auto(int64_t D, int64_t total, bool uniform) {
  if constexpr (sizeof(T) != 2 || VEC != 8) {
    return false;
  } else {
    const int64_t gbytes = D * (int64_t)sizeof(T);
    const int64_t xbytes = total * gbytes;
    return uniform && gbytes > kOnChipMaxGroupBytes && D < kChunkAutoMaxGroupElems &&
           xbytes >= kChunkAutoMinXBytes && xbytes <= kChunkAutoMaxXBytes;
  }
}

// Path F plan through gns_path_f.cu's own planner (gnsf_plan: the launcher plans the same way).
template <typename T, int VEC>
int plan_chunk(int64_t N, int64_t C, int64_t HW, int64_t G, int64_t chunk_bytes, int flags, Plan* p) {
  int64_t o[10] = {0};
  const int rc = gnsf_plan(dtype_code<T>(), N, C, HW, G, chunk_bytes, flags, VEC > 1 ? 1 : 0, o);
  if (rc != 0) return rc < 0 ? rc : kErrArgs;
  p->path = 8;
  p->vec = (int)o[0];
  p->q = (int)o[2];  // P: tiles per group
  p->f_gpc = o[3];
  p->f_k = o[4];
  p->ws_bytes = o[6];
  p->f_chunk = chunk_bytes;
  p->f_flags = flags;
  return 0;
}

template <typename T, int VEC>
int make_plan(int dev, int64_t N, int64_t C, int64_t HW, int64_t G, int64_t D, int64_t total, bool uniform,
              int force_path, int force_cs, int smem_cap, Plan* p) {
  const DevInfo& di = dev_info(dev);
  const int vbytes = (int)sizeof(T) * VEC;
  const int64_t dvec = D / VEC;
  p->vec = VEC;
  if (force_path == kForceChunkPath) {
    const int64_t chunk = force_cs > 0 ? ((int64_t)force_cs << 20) : kChunkAutoChunkBytes;
    const int flags = smem_cap > 0 ? (smem_cap & (kChunkFlagsGiven - 1)) : kChunkAutoFlags;
    return plan_chunk<T, VEC>(N, C, HW, G, chunk, flags, p);
  }
  if (force_path == kForceRegPath) {
    return plan_reg<T, VEC>(dev, dvec, total, uniform, force_cs, smem_cap, p) ? 0 : kErrForced;
  }
  const bool c007_only = force_path == kForceC007Auto;
  if (c007_only) force_path = 0;  // c007's routing from here on
  if (force_path == 0 && dvec * vbytes <= kRegAutoMaxGroupBytes &&
      plan_reg<T, VEC>(dev, dvec, total, uniform, 0, 0, p))
    return 0;  // c004: path D
  if (force_path == 0 && !c007_only && chunk_auto<T, VEC>(D, total, uniform))
    return plan_chunk<T, VEC>(N, C, HW, G, kChunkAutoChunkBytes, kChunkAutoFlags, p);  // c009: path F
  if (force_path == kForceC003Auto) force_path = 0;  // c003's routing from here on
  int cap = smem_cap > 0 ? smem_cap : kDefaultSmemCap;
  const int hw_cap = di.smem_optin - static_smem_cluster<T, VEC>(dev) - 64;
  if (cap > hw_cap) cap = hw_cap;
  // Auto routing (v3, from the H200 measurements in notes.md): groups of at most
  // kPipeFusedMaxBytes that fit one path-C tile -> fused path C (one load round trip, no
  // cluster); other groups up to kOnChipMaxGroupBytes -> cluster path A; larger -> split path B.
  const bool auto_route = force_path == 0;
  if (auto_route) {
    const int64_t gbytes = dvec * vbytes;
    if (dvec <= pipe_tile_vec<T, VEC>() && gbytes <= kPipeFusedMaxBytes) force_path = 3;
    else if (gbytes <= kOnChipMaxGroupBytes) force_path = 1;
    else force_path = 2;
  }
  if (force_path == 3) {
    // Path C (pipe): fused one-tile groups, or lagged stats/apply tiles with L2 reuse.
    const int64_t tv = pipe_tile_vec<T, VEC>();
    const int64_t P = cdiv(dvec, tv);
    if (P > 0x7fffffff || total * P * 2 > 0x7fffffffLL) return kErrArgs;
    p->path = 3;
    p->q = (int)P;
    p->tiles = P;
    p->hints = (smem_cap > 0) ? (smem_cap & 7) : kPipeDefaultHints;
    if (P == 1) {
      p->ws_bytes = 0;
      p->lp = 0;
      return 0;
    }
    const int64_t NS = total * P;
    int64_t lp = force_cs > 0 ? (int64_t)force_cs : (int64_t)kPipeLagPerSm * di.sms;
    if (lp < P) lp = P;  // required for deadlock freedom (see the kernel comment)
    if (lp > NS) lp = NS;
    p->lp = lp;
    const int64_t part_b = NS * (int64_t)sizeof(float4);
    const int64_t fin_b = cdiv(total * (int64_t)sizeof(float2), 16) * 16;
    p->zero_off = part_b + fin_b;
    p->zero_bytes = 16 + cdiv(total * 4, 16) * 16;
    p->ws_bytes = p->zero_off + p->zero_bytes;
    return 0;
  }
  if (force_path == 1) {
    int cs = 0;
    if (force_cs > 0) {
      if (cdiv(dvec, force_cs) * vbytes <= cap) cs = force_cs;
    } else {
      for (int c = 1; c <= 16; c *= 2) {
        if (cdiv(dvec, c) * vbytes <= cap) {
          cs = c;
          break;
        }
      }
      // small groups: spread over more CTAs to fill the machine (latency-bound rows)
      while (cs > 0 && cs < 8 && total * cs < 2 * (int64_t)di.sms &&
             cdiv(dvec, 2 * cs) * vbytes >= 2048)
        cs *= 2;
    }
    if (cs > 0) {
      const int slice = (int)cdiv(dvec, cs);
      const int threads = slice >= 2048 ? 512 : (slice >= 512 ? 256 : (slice >= 128 ? 128 : 64));
      const size_t smem = (size_t)slice * vbytes;
      bool ok = total * cs <= 0x7fffffffLL;
      if (ok && cs >= 8) ok = cluster_fits<T, VEC>(dev, cs, threads, smem);
      if (ok) {
        p->path = 1;
        p->cs = cs;
        p->slice_vec = slice;
        p->threads = threads;
        p->smem = smem;
        p->ws_bytes = 0;
        return 0;
      }
    }
    if (!auto_route) return kErrForced;  // auto: a cluster that cannot be resident -> path B
  }
  const int64_t ntiles1 = cdiv(dvec, (int64_t)kStatsThreads * stats_unroll<T, VEC>());
  p->path = 2;
  p->q = (int)ntiles1;  // partials per group
  p->tiles = cdiv(dvec, (int64_t)kApplyThreads * kApplyUnroll);
  p->ws_bytes = total * ntiles1 * (int64_t)sizeof(float4) + total * (int64_t)sizeof(float2);
  const int64_t q = ntiles1;
  if (total * q > 0x7fffffffLL || total * p->tiles > 0x7fffffffLL) return kErrArgs;
  return 0;
}

template <typename T, int U>
int launch_reg(int dev, const T* xp, const T* wp, const T* bp, T* yp, int64_t D, int64_t G,
               int64_t Cg, FastDiv hw, int64_t total, const Plan& p, float eps,
               cudaStream_t stream) {
  cudaError_t e = setup_reg_kernel<T, U>(dev);
  if (e != cudaSuccess) return (int)e;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3((unsigned)(total * p.cs), 1, 1);
  cfg.blockDim = dim3(p.threads, 1, 1);
  cfg.dynamicSmemBytes = 0;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = p.cs;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = p.cs > 1 ? 1 : 0;
  return (int)cudaLaunchKernelEx(&cfg, gns_reg_kernel<T, U>, xp, wp, bp, yp, D, (int)G, (int)Cg,
                                 hw, p.slice_vec, p.cs, eps);
}

template <typename T, int VEC>
int run(const void* x, const void* w, const void* b, void* y, void* ws, int64_t ws_bytes,
        int64_t N, int64_t C, int64_t HW, int64_t G, float eps, int force_path, int force_cs,
        int smem_cap, cudaStream_t stream, Plan* out_plan, bool launch) {
  const int dev = current_device();
  if (dev < 0 || dev >= kMaxDevices) return kErrArgs;
  const int64_t Cg = C / G;
  const int64_t D = Cg * HW;
  const int64_t total = N * G;
  const int uniform = (HW % VEC) == 0 ? 1 : 0;
  Plan p;
  int rc = make_plan<T, VEC>(dev, N, C, HW, G, D, total, uniform != 0, force_path, force_cs, smem_cap, &p);
  if (rc != 0) return rc;
  if (out_plan) *out_plan = p;
  if (!launch) return 0;
  if (p.path == 8) {
    if (ws == nullptr || ws_bytes < p.ws_bytes) return kErrWorkspace;
    return gnsf_forward(x, w, b, y, ws, ws_bytes, dtype_code<T>(), N, C, HW, G, eps, p.f_chunk, p.f_flags, stream);
  }
  const FastDiv hw = make_fastdiv((uint32_t)HW);
  const T* xp = static_cast<const T*>(x);
  const T* wp = static_cast<const T*>(w);
  const T* bp = static_cast<const T*>(b);
  T* yp = static_cast<T*>(y);
  if (p.path == 4) {
    if constexpr (sizeof(T) * VEC != 16) {
      return kErrArgs;
    } else {
      switch (p.reg_u) {
        case 1:
          return launch_reg<T, 1>(dev, xp, wp, bp, yp, D, G, Cg, hw, total, p, eps, stream);
        case 2:
          return launch_reg<T, 2>(dev, xp, wp, bp, yp, D, G, Cg, hw, total, p, eps, stream);
        case 4:
          return launch_reg<T, 4>(dev, xp, wp, bp, yp, D, G, Cg, hw, total, p, eps, stream);
        case 8:
          return launch_reg<T, 8>(dev, xp, wp, bp, yp, D, G, Cg, hw, total, p, eps, stream);
        default:
          return kErrArgs;
      }
    }
  }
  if (p.path == 1) {
    cudaError_t e = setup_cluster_kernel<T, VEC>(dev);
    if (e != cudaSuccess) return (int)e;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)(total * p.cs), 1, 1);
    cfg.blockDim = dim3(p.threads, 1, 1);
    cfg.dynamicSmemBytes = p.smem;
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = p.cs;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    e = cudaLaunchKernelEx(&cfg, gns_cluster_kernel<T, VEC>, xp, wp, bp, yp, D, (int)G, (int)Cg,
                           hw, p.slice_vec, p.cs, eps, uniform);
    return (int)e;
  }
  if (p.path == 3) {
    float4* part = nullptr;
    float2* fin = nullptr;
    uint32_t* cnt = nullptr;
    unsigned long long* ticket = nullptr;
    unsigned grid = (unsigned)total;
    if (p.q > 1) {
      if (ws == nullptr || ws_bytes < p.ws_bytes) return kErrWorkspace;
      char* base = static_cast<char*>(ws);
      part = reinterpret_cast<float4*>(base);
      fin = reinterpret_cast<float2*>(base + total * p.q * (int64_t)sizeof(float4));
      ticket = reinterpret_cast<unsigned long long*>(base + p.zero_off);
      cnt = reinterpret_cast<uint32_t*>(base + p.zero_off + 16);
      cudaError_t e = cudaMemsetAsync(base + p.zero_off, 0, (size_t)p.zero_bytes, stream);
      if (e != cudaSuccess) return (int)e;
      grid = (unsigned)(2 * total * p.q);
    }
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(grid, 1, 1);
    cfg.blockDim = dim3(kPipeThreads, 1, 1);
    cfg.stream = stream;
    return (int)cudaLaunchKernelEx(&cfg, gns_pipe_kernel<T, VEC>, xp, wp, bp, yp, D, (int)G,
                                   (int)Cg, hw, eps, uniform, total, p.q, p.lp, p.hints, part, fin,
                                   cnt, ticket);
  }
  if (ws == nullptr || ws_bytes < p.ws_bytes) return kErrWorkspace;
  float4* wsp = static_cast<float4*>(ws);
  float2* fin = reinterpret_cast<float2*>(static_cast<char*>(ws) + total * p.q * sizeof(float4));
  {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)(total * p.q), 1, 1);
    cfg.blockDim = dim3(kStatsThreads, 1, 1);
    cfg.stream = stream;
    cudaError_t e = cudaLaunchKernelEx(&cfg, gns_stats_kernel<T, VEC>, xp, D, p.q, wsp);
    if (e != cudaSuccess) return (int)e;
  }
  {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)total, 1, 1);
    cfg.blockDim = dim3(kFinalThreads, 1, 1);
    cfg.stream = stream;
    cudaError_t e = cudaLaunchKernelEx(&cfg, gns_finalize_kernel, (const float4*)wsp, p.q, eps, fin);
    if (e != cudaSuccess) return (int)e;
  }
  {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)(total * p.tiles), 1, 1);
    cfg.blockDim = dim3(kApplyThreads, 1, 1);
    cfg.stream = stream;
    cudaError_t e = cudaLaunchKernelEx(&cfg, gns_apply_kernel<T, VEC>, xp, wp, bp, yp, D, (int)G,
                                       (int)Cg, hw, (const float2*)fin, uniform, p.tiles, total);
    return (int)e;
  }
}

int dispatch(const void* x, const void* w, const void* b, void* y, void* ws, int64_t ws_bytes,
             int dtype, int64_t N, int64_t C, int64_t HW, int64_t G, float eps, int force_path,
             int force_cs, int smem_cap, cudaStream_t stream, Plan* out_plan, bool launch,
             bool query_aligned) {
  if (N <= 0 || C <= 0 || HW <= 0 || G <= 0 || C % G != 0) return kErrArgs;
  const int64_t D = (C / G) * HW;
  if (D >= 0x7fffffffLL) return kErrArgs;
  const int es = dtype == kF32 ? 4 : 2;
  const bool aligned = ((uintptr_t)x % 16 == 0) && ((uintptr_t)y % 16 == 0) &&
                       ((D * es) % 16 == 0);
  // with launch == false the pointers may be null: the caller says whether they will be aligned
  const bool vec_ok = launch ? aligned : (query_aligned && (D * es) % 16 == 0);
  switch (dtype) {
    case kF16:
      return vec_ok ? run<__half, 8>(x, w, b, y, ws, ws_bytes, N, C, HW, G, eps, force_path,
                                     force_cs, smem_cap, stream, out_plan, launch)
                    : run<__half, 1>(x, w, b, y, ws, ws_bytes, N, C, HW, G, eps, force_path,
                                     force_cs, smem_cap, stream, out_plan, launch);
    case kBF16:
      return vec_ok ? run<__nv_bfloat16, 8>(x, w, b, y, ws, ws_bytes, N, C, HW, G, eps,
                                            force_path, force_cs, smem_cap, stream, out_plan,
                                            launch)
                    : run<__nv_bfloat16, 1>(x, w, b, y, ws, ws_bytes, N, C, HW, G, eps,
                                            force_path, force_cs, smem_cap, stream, out_plan,
                                            launch);
    case kF32:
      return vec_ok ? run<float, 4>(x, w, b, y, ws, ws_bytes, N, C, HW, G, eps, force_path,
                                    force_cs, smem_cap, stream, out_plan, launch)
                    : run<float, 1>(x, w, b, y, ws, ws_bytes, N, C, HW, G, eps, force_path,
                                    force_cs, smem_cap, stream, out_plan, launch);
    default:
      return kErrArgs;
  }
}

}  // namespace
}  // namespace gns

extern "C" {

// Bytes of device workspace gns_forward needs (0 on the on-chip path).  x_aligned16: whether
// x and y will be 16-byte aligned (torch allocations are).
int64_t gns_workspace_bytes(int dtype, int64_t N, int64_t C, int64_t HW, int64_t G,
                            int x_aligned16, int force_path, int force_cs, int smem_cap) {
  gns::Plan p;
  int rc;
  rc = gns::dispatch(nullptr, nullptr, nullptr, nullptr, nullptr, 0, dtype, N, C, HW, G, 0.f,
                     force_path, force_cs, smem_cap, 0, &p, false, x_aligned16 != 0);
  if (rc != 0) return rc < 0 ? rc : -100 - rc;
  return p.ws_bytes;
}

// y = silu(group_norm(x)); returns 0 or an error code (cudaError_t > 0, contract < 0).
int gns_forward(const void* x, const void* w, const void* b, void* y, void* ws, int64_t ws_bytes,
                int dtype, int64_t N, int64_t C, int64_t HW, int64_t G, float eps, int force_path,
                int force_cs, int smem_cap, cudaStream_t stream) {
  return gns::dispatch(x, w, b, y, ws, ws_bytes, dtype, N, C, HW, G, eps, force_path, force_cs,
                       smem_cap, stream, nullptr, true, true);
}

// Plan description for dev benches: path, vec, cs, slice_vec, threads, smem (path 4: U), q, tiles;
// path 8 (F): 8, vec, groups per chunk, chunks K, launches K + 1, flags, P (tiles per group), chunk MiB.
int gns_describe(int dtype, int64_t N, int64_t C, int64_t HW, int64_t G, int force_path,
                 int force_cs, int smem_cap, int64_t* out8) {
  gns::Plan p;
  int rc = gns::dispatch(nullptr, nullptr, nullptr, nullptr, nullptr, 0, dtype, N, C, HW, G, 0.f,
                         force_path, force_cs, smem_cap, 0, &p, false, true);
  if (rc != 0) return rc;
  if (p.path == 8) {
    const int64_t f[8] = {8, p.vec, p.f_gpc, p.f_k, p.f_k + 1, p.f_flags, p.q, p.f_chunk >> 20};
    for (int i = 0; i < 8; ++i) out8[i] = f[i];
    return 0;
  }
  out8[0] = p.path;
  out8[1] = p.vec;
  out8[2] = p.cs;
  out8[3] = p.path == 3 ? p.lp : p.slice_vec;
  out8[4] = p.threads;
  out8[5] = p.path == 3 ? p.hints : (p.path == 4 ? p.reg_u : (int64_t)p.smem);
  out8[6] = p.q;
  out8[7] = p.tiles;
  return 0;
}

}  // extern "C"
