// c008: fused in-place per-head QK RMSNorm + RoPE for the H200 (sm_90a), CUDA.
//
// The per-thread code, its byte model and bound are in qknorm_rope_core.cuh (shared with the CPU emulator of
// tests/emu); this file holds the device policy (loads, stores, shuffles, PDL), the kernels
// (one per head_dim x RoPE layout x activation dtype x cache dtype x PIPE; rope_dim and the position dtype
// are runtime values) and the launcher: the plan from the kernel's occupancy, then cudaLaunchKernelEx with
// programmatic stream serialization (PDL) on the caller's stream. No torch headers (tests/test_cuda_sources.py
// compiles it alone); the torch binding is qknorm_rope_binding.cpp.
//
// Bound (H200, 4.29 TB/s copy ceiling; the byte model is in qknorm_rope_core.cuh):
//   qwen T4096 H24   102.8 MB  24.0 us     qwen-edit T8424 H24  211.4 MB  49.3 us
//   zimage T4096 H30 128.0 MB  29.8 us     zimage T4128 H30     129.0 MB  30.1 us
//   qwen T19/T47, zimage T32, qwen-edit T189/T195: 0.48-4.9 MB, latency bound (launch + one memory trip for an
//   arange, two for other positions; SGLang always two)

#include <cuda_runtime.h>

#include <cstdint>

#include "qknorm_rope_core.cuh"
#include "qknorm_rope_launch.h"

namespace kda_qkr {

// Loads are volatile inline PTX: the compiler keeps them where the per-thread code issues them (all of a row's
// loads before its first use). As plain loads, NVVM sank the cos/sin loads into the RoPE block, after the
// reduction: a second round trip per row. Stores stay plain C++ (nothing moves a store before its data).
struct DeviceWarp {
  __device__ __forceinline__ V4 ld_x(const char* p) const {  // a q/k row vector (read, then written back)
    V4 v;
    asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.a), "=r"(v.b), "=r"(v.c), "=r"(v.d) : "l"(p));
    return v;
  }
  __device__ __forceinline__ void st_x(char* p, const V4& v) const {
    *reinterpret_cast<uint4*>(p) = make_uint4(v.a, v.b, v.c, v.d);
  }
  __device__ __forceinline__ V4 ld_ro16(const char* p) const {  // weights, cache: read-only for the kernel
    V4 v;
    asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.a), "=r"(v.b), "=r"(v.c), "=r"(v.d)
                 : "l"(p));
    return v;
  }
  __device__ __forceinline__ V2 ld_ro8(const char* p) const {
    V2 v;
    asm volatile("ld.global.nc.v2.u32 {%0, %1}, [%2];" : "=r"(v.a), "=r"(v.b) : "l"(p));
    return v;
  }
  // the position's low 32 bits (little endian: an int64's first word), one load for either dtype; the kernel uses
  // only those (cache rows < 2^31)
  __device__ __forceinline__ int64_t ld_pos(const void* pos, uint32_t t, bool is64) const {
    const char* a = static_cast<const char*>(pos) + (static_cast<uint64_t>(t) << (is64 ? 3 : 2));
    uint32_t v;
    asm volatile("ld.global.nc.u32 %0, [%1];" : "=r"(v) : "l"(a));
    return static_cast<int64_t>(v);
  }
  __device__ __forceinline__ float shfl_xor(float v, uint32_t m) const {
    return __shfl_xor_sync(0xffffffffu, v, static_cast<int>(m));
  }
  __device__ __forceinline__ float shfl(float v, uint32_t src) const {
    return __shfl_sync(0xffffffffu, v, static_cast<int>(src));
  }
  __device__ __forceinline__ void pdl_trigger() const { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
  __device__ __forceinline__ void pdl_wait() const { asm volatile("griddepcontrol.wait;" ::: "memory"); }
};

// Occupancy (__launch_bounds__ minimum CTAs of 256 threads per SM), each the most that compiles without a spill.
// The production layout (interleaved, half-width fp32 cache, bf16, head_dim 64/128) without the double buffer:
// 6 CTAs (<= 40 registers: SGLang's 48 warps per SM). Other interleaved half-width kernels (fp16 conversions, a
// 16-bit cache) 5, 4 at head_dim 256; NeoX and full-width caches (16 cos/sin entries a lane, the partner shuffles) 4,
// 3 at head_dim 256. The double-buffered kernels (PIPE = 1, a dev/sweep.py knob) two CTAs fewer (two rows'
// loads live at once; the production one: 64 registers, 32 warps).
template <int D, int LAYOUT, bool XF16, int CK, int PIPE>
constexpr int kMinBlocks =
    (LAYOUT == kInterleavedHalf ? (!XF16 && CK == kCacheF32 && D <= 128 ? 6 : (D == 256 ? 4 : 5))
                                : (D == 256 ? 3 : 4)) -
    2 * PIPE;

template <int D, int LAYOUT, bool XF16, int CK, int PIPE>
__global__ void __launch_bounds__(kThreads, kMinBlocks<D, LAYOUT, XF16, CK, PIPE>)
    qknorm_rope_kernel(const __grid_constant__ Params p) {
  DeviceWarp w;
  thread_body<D, LAYOUT, XF16, CK, PIPE>(p, blockIdx.x, threadIdx.x, gridDim.x, w);
}

using KernelFn = void (*)(const Params);

// index = (((dim_index * 4 + layout) * 2 + x_f16) * 2 + (cache is 16-bit)) * 2 + PIPE
#define KQ_R(D, LAYOUT, F16, CK) qknorm_rope_kernel<D, LAYOUT, F16, CK, 0>, qknorm_rope_kernel<D, LAYOUT, F16, CK, 1>
#define KQ_K(D, LAYOUT, F16) KQ_R(D, LAYOUT, F16, kCacheF32), KQ_R(D, LAYOUT, F16, (F16) ? kCacheF16 : kCacheBF16)
#define KQ_LAYOUT(D, LAYOUT) KQ_K(D, LAYOUT, false), KQ_K(D, LAYOUT, true)
#define KQ_DIM(D)                                                                                         \
  KQ_LAYOUT(D, kInterleavedHalf), KQ_LAYOUT(D, kInterleavedFull), KQ_LAYOUT(D, kNeoxHalf),             \
      KQ_LAYOUT(D, kNeoxFull)

constexpr int kNumKernels = 3 * 4 * 2 * 2 * 2;
static const KernelFn kKernels[kNumKernels] = {KQ_DIM(64), KQ_DIM(128), KQ_DIM(256)};

static int kernel_index(const Decision& d, uint32_t pipe) {
  const int dim = d.head_dim == 64 ? 0 : (d.head_dim == 128 ? 1 : 2);
  return (((dim * 4 + d.layout) * 2 + d.x_f16) * 2 + (d.cache_kind != kCacheF32 ? 1 : 0)) * 2 + (pipe ? 1 : 0);
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

static cudaError_t plan_for(const Decision& d, const Launch& a, Params* p, Plan* plan, int* index) {
  uint32_t resident0 = 0, resident1 = 0;
  cudaError_t e = resident_ctas(kernel_index(d, 0), a.device, &resident0);
  if (e != cudaSuccess) return e;
  e = resident_ctas(kernel_index(d, 1), a.device, &resident1);
  if (e != cudaSuccess) return e;
  const uint32_t rows_per_token = static_cast<uint32_t>(a.n_q_heads + a.n_k_heads);
  *plan = make_plan(static_cast<uint32_t>(a.n_tokens), rows_per_token, d.head_dim, resident0, resident1,
                    a.pipe_mode, a.grid_mode);
  *index = kernel_index(d, plan->pipe);
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
  q.cache_rows = static_cast<uint32_t>(a.cache_rows);
  q.n_q_heads = static_cast<uint32_t>(a.n_q_heads);
  q.rows_per_token = rows_per_token;
  q.rows_magic = div_magic(rows_per_token);
  q.n_rows = plan->n_rows;
  q.step_tok = plan->step_tok;
  q.step_head = plan->step_head;
  q.last_tok = static_cast<uint32_t>(a.n_tokens - 1);
  q.last_head = rows_per_token - 1;
  q.rope_dim = static_cast<uint32_t>(d.rope);
  q.pos_is_64 = static_cast<uint32_t>(d.pos_64);
  q.flags = a.early_trigger ? kEarlyTrigger : 0u;
  q.eps = a.eps;
  set_derived(q, d.cache_kind == kCacheF32 ? 4 : 2);
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
  out[0] = plan.pipe;
  out[1] = plan.rounds;
  out[2] = plan.n_rows;
  out[3] = plan.blocks;
  out[4] = g_occupancy[index];
  out[5] = plan.step_head;
  return 0;
}

}  // namespace kda_qkr
