// c007: fused in-place per-head QK RMSNorm + RoPE for the H200 (sm_90a), CUDA.
//
// The per-thread code, its byte model and bound are in qknorm_rope_core.cuh (shared with the CPU emulator of
// tests/emu); this file holds the device policy (loads, stores, shuffles, PDL, the L2 prefetch), the kernels
// (one per head_dim x RoPE layout x activation dtype x cache dtype; rope_dim, R and the position dtype are
// runtime values) and the launcher: the plan from the kernel's occupancy, then cudaLaunchKernelEx with
// programmatic stream serialization (PDL) on the caller's stream. No torch headers (tests/test_cuda_sources.py
// compiles it alone); the torch binding is qknorm_rope_binding.cpp.
//
// Bound (H200, 4.29 TB/s copy ceiling; the byte model is in qknorm_rope_core.cuh):
//   qwen T4096 H24   102.8 MB  24.0 us     qwen-edit T8424 H24  211.4 MB  49.3 us
//   zimage T4096 H30 128.0 MB  29.8 us     zimage T4128 H30     129.0 MB  30.1 us
//   qwen T19/T47, zimage T32, qwen-edit T189/T195: 0.48-4.9 MB, latency bound (~1.2-2.3 us of bytes and chain)

#include <cuda_runtime.h>

#include <cstdint>

#include "qknorm_rope_core.cuh"
#include "qknorm_rope_launch.h"

namespace kda_qkr {

struct DeviceWarp {
  __device__ __forceinline__ V4 ld_x(const char* p) const {  // a q/k row vector (read, then written back)
    const uint4 v = *reinterpret_cast<const uint4*>(p);
    return V4{v.x, v.y, v.z, v.w};
  }
  __device__ __forceinline__ void st_x(char* p, const V4& v) const {
    *reinterpret_cast<uint4*>(p) = make_uint4(v.a, v.b, v.c, v.d);
  }
  __device__ __forceinline__ V4 ld_ro16(const char* p) const {  // weights, cache: read-only for the kernel
    const uint4 v = __ldg(reinterpret_cast<const uint4*>(p));
    return V4{v.x, v.y, v.z, v.w};
  }
  __device__ __forceinline__ V2 ld_ro8(const char* p) const {
    const uint2 v = __ldg(reinterpret_cast<const uint2*>(p));
    return V2{v.x, v.y};
  }
  __device__ __forceinline__ void touch(const char* p) const {  // brings a line into L1 (no register result)
    asm volatile("prefetch.global.L1 [%0];" ::"l"(p));
  }
  __device__ __forceinline__ int64_t ld_pos(const void* pos, uint32_t t, bool is64) const {
    return is64 ? static_cast<int64_t>(__ldg(static_cast<const long long*>(pos) + t))
                : static_cast<int64_t>(__ldg(static_cast<const int*>(pos) + t));
  }
  __device__ __forceinline__ float shfl_xor(float v, uint32_t m) const {
    return __shfl_xor_sync(0xffffffffu, v, static_cast<int>(m));
  }
  __device__ __forceinline__ float shfl(float v, uint32_t src) const {
    return __shfl_sync(0xffffffffu, v, static_cast<int>(src));
  }
  __device__ __forceinline__ void pdl_trigger() const { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
  __device__ __forceinline__ void pdl_wait() const { asm volatile("griddepcontrol.wait;" ::: "memory"); }
  __device__ __forceinline__ void prefetch_l2(const char* p, uint32_t bytes) const {
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
  }
};

// The production layout (interleaved, half-width cache) keeps 4 CTAs of 256 threads per SM (64 registers): 32
// warps x 32 lanes x R=4 rows x 16 B = 64 KB of q/k loads in flight per SM on the persistent large rows.
// Other layouts and fp16 (more registers for the conversions) keep 3.
template <int LAYOUT, bool XF16>
constexpr int kMinBlocks = LAYOUT == kInterleavedHalf && !XF16 ? 4 : 3;

template <int D, int LAYOUT, bool XF16, int CK, int R>
__global__ void __launch_bounds__(kThreads, kMinBlocks<LAYOUT, XF16>) qknorm_rope_kernel(const __grid_constant__ Params p) {
  DeviceWarp w;
  thread_body<D, LAYOUT, XF16, CK, R>(p, blockIdx.x, threadIdx.x, gridDim.x, w);
}

using KernelFn = void (*)(const Params);

// index = (((dim_index * 4 + layout) * 2 + x_f16) * 2 + (cache is 16-bit)) * 3 + (rows per item 1, 2, 4)
#define KQ_R(D, LAYOUT, F16, CK) \
  qknorm_rope_kernel<D, LAYOUT, F16, CK, 1>, qknorm_rope_kernel<D, LAYOUT, F16, CK, 2>, qknorm_rope_kernel<D, LAYOUT, F16, CK, 4>
#define KQ_K(D, LAYOUT, F16) KQ_R(D, LAYOUT, F16, kCacheF32), KQ_R(D, LAYOUT, F16, (F16) ? kCacheF16 : kCacheBF16)
#define KQ_LAYOUT(D, LAYOUT) KQ_K(D, LAYOUT, false), KQ_K(D, LAYOUT, true)
#define KQ_DIM(D)                                                                                         \
  KQ_LAYOUT(D, kInterleavedHalf), KQ_LAYOUT(D, kInterleavedFull), KQ_LAYOUT(D, kNeoxHalf),             \
      KQ_LAYOUT(D, kNeoxFull)

constexpr int kNumKernels = 3 * 4 * 2 * 2 * 3;
static const KernelFn kKernels[kNumKernels] = {KQ_DIM(64), KQ_DIM(128), KQ_DIM(256)};

static int kernel_index(const Decision& d, uint32_t rows_per_item) {
  const int dim = d.head_dim == 64 ? 0 : (d.head_dim == 128 ? 1 : 2);
  const int r = rows_per_item == 1 ? 0 : (rows_per_item == 2 ? 1 : 2);
  return (((dim * 4 + d.layout) * 2 + d.x_f16) * 2 + (d.cache_kind != kCacheF32 ? 1 : 0)) * 3 + r;
}

static int g_occupancy[kNumKernels];  // resident CTAs per SM of each kernel (0: not asked yet)
static int g_sms[64];  // multiprocessors per device (0: not asked yet)

static cudaError_t resident_ctas(int index, int device, uint32_t* out) {
  if (g_occupancy[index] == 0) {
    int blocks = 0;
    const cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kKernels[index], kThreads, 0);
    if (e != cudaSuccess) return e;
    g_occupancy[index] = blocks > 0 ? blocks : 1;
  }
  if (device < 0 || device >= 64) return cudaErrorInvalidDevice;
  if (g_sms[device] == 0) {
    int sms = 0;
    const cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    if (e != cudaSuccess) return e;
    g_sms[device] = sms;
  }
  *out = static_cast<uint32_t>(g_occupancy[index] * g_sms[device]);
  return cudaSuccess;
}

// The plan sizes waves by the R = 4 kernel's occupancy (the most registers of the three): a grid it calls one
// wave is one wave for the R = 1 or 2 kernel too.
static cudaError_t plan_for(const Decision& d, const Launch& a, Params* p, Plan* plan, int* index) {
  uint32_t resident = 0;
  const cudaError_t e = resident_ctas(kernel_index(d, kRowsMax), a.device, &resident);
  if (e != cudaSuccess) return e;
  const int64_t cache_entry = d.cache_kind == kCacheF32 ? 4 : 2;
  const uint64_t cache_bytes = static_cast<uint64_t>(a.cache_rows * a.cache_width * cache_entry);
  const uint64_t qk_bytes = static_cast<uint64_t>(a.n_tokens * (a.n_q_heads + a.n_k_heads) * d.head_dim * 2);
  *plan = make_plan(static_cast<uint32_t>(a.n_tokens), static_cast<uint32_t>(a.n_q_heads + a.n_k_heads),
                    d.head_dim, resident, cache_bytes, qk_bytes, a.force_rows, a.prefetch_mode);
  *index = kernel_index(d, plan->rows_per_item);
  Params& q = *p;
  q.q = a.q;
  q.k = a.k;
  q.qw = a.qw;
  q.kw = a.kw;
  q.cache = a.cache;
  q.pos = a.pos;
  q.q_stride_t = a.q_stride_t;
  q.q_stride_h = a.q_stride_h;
  q.k_stride_t = a.k_stride_t;
  q.k_stride_h = a.k_stride_h;
  q.cache_row = a.cache_width;
  q.cache_bytes = cache_bytes;
  q.n_q_heads = static_cast<uint32_t>(a.n_q_heads);
  q.n_k_heads = static_cast<uint32_t>(a.n_k_heads);
  q.chunks_per_token = plan->chunks_per_token;
  q.chunks_magic = div_magic(q.chunks_per_token);
  q.n_items = plan->n_items;
  q.rope_dim = static_cast<uint32_t>(d.rope);
  q.pos_is_64 = static_cast<uint32_t>(d.pos_64);
  q.prefetch_bytes = plan->prefetch_bytes;
  q.flags = a.late_trigger ? 0u : kEarlyTrigger;
  q.eps = a.eps;
  return cudaSuccess;
}

int launch(const Decision& d, const Launch& a) {
  Params p{};
  Plan plan{};
  int index = 0;
  cudaError_t e = plan_for(d, a, &p, &plan, &index);
  if (e != cudaSuccess) return static_cast<int>(e);
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(plan.blocks, 1, 1);
  cfg.blockDim = dim3(kThreads, 1, 1);
  cfg.dynamicSmemBytes = 0;
  cfg.stream = static_cast<cudaStream_t>(a.stream);
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  e = cudaLaunchKernelEx(&cfg, kKernels[index], p);
  return static_cast<int>(e);
}

int describe(const Decision& d, const Launch& a, int64_t* out) {
  Params p{};
  Plan plan{};
  int index = 0;
  const cudaError_t e = plan_for(d, a, &p, &plan, &index);
  if (e != cudaSuccess) return static_cast<int>(e);
  out[0] = plan.rows_per_item;
  out[1] = plan.chunks_per_token;
  out[2] = plan.n_items;
  out[3] = plan.blocks;
  out[4] = plan.prefetch_bytes;
  out[5] = g_occupancy[kernel_index(d, kRowsMax)];
  return 0;
}

}  // namespace kda_qkr
