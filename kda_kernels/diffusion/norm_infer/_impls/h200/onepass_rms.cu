// c007: triton_one_pass_rms_norm as a CUDA kernel for the H200 (sm_90a): y = x * rsqrt(mean(x^2) + eps) * w per
// row of D elements, fp32 math, one rounding to x's dtype on the store.
//
// Byte model (task.toml reads/writes): x read once, w once per call (L2 hits after the first CTAs), y written once:
//     bytes = 2 * S * D * sizeof(x) + D * sizeof(w);  bound = bytes / 4.29 TB/s (the H200's measured copy ceiling)
//     HunyuanVideo [648720, 128] bf16: 332.1 MB -> 77.4 us (SGLang 80.3 us = 4.14 TB/s, a same-size copy ~84 us);
//     [650040, 128]: 332.8 MB -> 77.6 us (SGLang 80.3 us)
//     Z-Image [16384, 128]: 8.4 MB -> 2.0 us of bytes at the ceiling (SGLang 3.42 us: L2-resident under the
//     graph replay, launch + one round trip + a one-wave tail); [4096, 128]: 2.1 MB (SGLang 2.09 us);
//     HunyuanVideo [1320, 128]: 0.68 MB (SGLang 2.14 us): latency bound: launch, one x load round trip, a
//     4-step shuffle tree, rsqrt, the store; the bytes are 0.2-0.5 us of it.
//
// Design (onepass_contract.h has the plan): a group of L lanes owns a row, lane i its i-th 16-byte vector
// (D = 128 bf16: 16 lanes, 2 rows per warp, each warp access one contiguous 512-byte span). A CTA of 128 threads
// covers R x G rows. R = 1 where that grid fills at most half a wave (the small rows: every thread issues one
// 16-byte load, then the sum of squares, log2(L) xor shuffles, rsqrt, the scaled store: the fewest dependent
// steps); R = 2 otherwise (two 16-byte loads in flight per thread: 64 KB per SM at 16 CTAs of 128 threads, SGLang's 16 rows
// per 4-warp program on D = 128, which holds 4.14 TB/s on the huge rows, launched as ~40.6k CTAs: no
// persistent loop, so no partial-wave tail larger than one CTA's 4 KB). <= 32 registers (launch bounds 128 x 16):
// 2048 resident threads per SM (the fp32-weight R = 2 tiles of 16-bit x: 12 CTAs, <= 40). The weight vector of a lane is loaded once and reused for its R rows.
//
// PDL: launched with programmatic stream serialization; `griddepcontrol.launch_dependents` first (the next PDL
// kernel's CTAs may launch and park at their own wait), `griddepcontrol.wait` before the first load (x and w may
// be the previous kernel's output; the wait is a no-op when the launch has no programmatic dependency).
//
// Numerics: fp32 sum of squares (each lane its 8 (bf16/fp16) or 4 (fp32) elements in order, then an xor tree
// over the lanes), mean = sum * (1/D) (1/D rounded to fp32 on the host: exact for
// D = 128 and every power of two, within 1 ulp of SGLang's sum / D otherwise; an IEEE division's slow path cost
// the R = 2 bf16 tile registers it does not have), rstd = rsqrtf(mean + eps) (MUFU.RSQ, as SGLang's
// tl.math.rsqrt), y = (x * rstd) * w in fp32, one round-to-nearest-even conversion to x's dtype. No fast-math.
// No torch headers (tests/test_cuda_sources.py compiles it alone); the torch binding is onepass_binding.cpp.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "onepass_contract.h"
#include "onepass_launch.h"

namespace kda_onepass {

struct Params {
  const char* x;
  const char* w;
  char* y;
  int64_t rows;
  int64_t x_row_bytes;  // x's row stride in bytes
  int32_t y_row_bytes;  // D * sizeof(x)
  int32_t vecs;  // 16-byte vectors per row
  float inv_d;  // 1 / D rounded to fp32 (exact for a power-of-two D: then mean = sum / D exactly)
  float eps;
};

// Per 32-bit word of a 16-byte vector: PW elements (2 for bf16/fp16, 1 for fp32) to fp32 and back (the store's
// one rounding: round to nearest even). Working a word at a time keeps only raw vectors live (<= 32 registers).
template <int XT>
struct Elem;

template <>
struct Elem<kBF16> {
  static constexpr int V = 8, PW = 2;
  __device__ __forceinline__ static void to_f32(uint32_t u, float* f) {
    f[0] = __uint_as_float(u << 16);
    f[1] = __uint_as_float(u & 0xffff0000u);
  }
  __device__ __forceinline__ static uint32_t from_f32(const float* f) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(f[0], f[1]);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
};

template <>
struct Elem<kF16> {
  static constexpr int V = 8, PW = 2;
  __device__ __forceinline__ static void to_f32(uint32_t u, float* f) {
    const float2 t = __half22float2(*reinterpret_cast<const __half2*>(&u));
    f[0] = t.x;
    f[1] = t.y;
  }
  __device__ __forceinline__ static uint32_t from_f32(const float* f) {
    const __half2 h = __floats2half2_rn(f[0], f[1]);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
};

template <>
struct Elem<kF32> {
  static constexpr int V = 4, PW = 1;
  __device__ __forceinline__ static void to_f32(uint32_t u, float* f) { f[0] = __uint_as_float(u); }
  __device__ __forceinline__ static uint32_t from_f32(const float* f) { return __float_as_uint(f[0]); }
};

__device__ __forceinline__ uint32_t word(const uint4& v, int i) {
  return i == 0 ? v.x : (i == 1 ? v.y : (i == 2 ? v.z : v.w));
}


__device__ __forceinline__ uint4 ld_nc16(const char* p) { return __ldg(reinterpret_cast<const uint4*>(p)); }

// 16 resident CTAs (<= 32 registers); the fp32-weight R = 2 tile of 16-bit x (8 weight floats a lane live across
// both rows; LingBot-Video's rows only) spilled 20 bytes at 32 and keeps 12 (<= 40 registers).
template <int XT, bool WF32, int R>
constexpr int kMinCtas = WF32 && XT != kF32 && R == 2 ? 12 : 16;

template <int XT, bool WF32, int L, int R>
__global__ void __launch_bounds__(kThreads, kMinCtas<XT, WF32, R>) onepass_rms_kernel(const __grid_constant__ Params p) {
  using E = Elem<XT>;
  constexpr int V = E::V;
  constexpr int G = kThreads / L;
  constexpr bool kWF32 = WF32 && XT != kF32;
  const int lane = static_cast<int>(threadIdx.x) & (L - 1);
  const int g = static_cast<int>(threadIdx.x) / L;
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");

  const bool lane_ok = lane < p.vecs;
  const uint32_t first = blockIdx.x * (R * G) + g;  // rows < 2^31 (the contract): no wrap
  const uint32_t left = p.rows > first ? static_cast<uint32_t>(p.rows - first) : 0u;  // rows from `first` on
  const char* xp = p.x + static_cast<int64_t>(first) * p.x_row_bytes + lane * 16;
  uint4 v[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    v[r] = lane_ok && r * G < left ? ld_nc16(xp + r * G * p.x_row_bytes) : make_uint4(0u, 0u, 0u, 0u);
  }
  // the lane's weights, raw (after the wait; in flight with x): 16 bytes, or 32 for an fp32 weight of 16-bit x
  uint4 wa = make_uint4(0u, 0u, 0u, 0u), wb = make_uint4(0u, 0u, 0u, 0u);
  if (lane_ok) {
    wa = ld_nc16(p.w + lane * (kWF32 ? 32 : 16));
    if (kWF32) wb = ld_nc16(p.w + lane * 32 + 16);
  }

  float ss[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float f[E::PW];
      E::to_f32(word(v[r], i), f);
#pragma unroll
      for (int j = 0; j < E::PW; ++j) s = fmaf(f[j], f[j], s);
    }
    ss[r] = s;
  }
#pragma unroll
  for (int m = L / 2; m >= 1; m >>= 1) {
#pragma unroll
    for (int r = 0; r < R; ++r) ss[r] += __shfl_xor_sync(0xffffffffu, ss[r], m);
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const float rstd = rsqrtf(ss[r] * p.inv_d + p.eps);
    uint32_t o[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float f[E::PW], wf[E::PW];
      E::to_f32(word(v[r], i), f);
      if (kWF32) {  // element 2i and 2i + 1 of the lane's 8 fp32 weights
        wf[0] = __uint_as_float(word(i < 2 ? wa : wb, (2 * i) & 3));
        wf[E::PW - 1] = __uint_as_float(word(i < 2 ? wa : wb, (2 * i + 1) & 3));
      } else {
        E::to_f32(word(wa, i), wf);
      }
#pragma unroll
      for (int j = 0; j < E::PW; ++j) f[j] = (f[j] * rstd) * wf[j];
      o[i] = E::from_f32(f);
    }
    if (lane_ok && r * G < left) {
      char* yp = p.y + static_cast<int64_t>(first + r * G) * p.y_row_bytes + lane * 16;
      *reinterpret_cast<uint4*>(yp) = make_uint4(o[0], o[1], o[2], o[3]);
    }
  }
  (void)V;
}

using KernelFn = void (*)(const Params);

// index = ((x dtype (f16, bf16, f32) * 2 + w is fp32) * 4 + log2(L) - 2) * 2 + R - 1
#define OP_R(XT, WF, L) onepass_rms_kernel<XT, WF, L, 1>, onepass_rms_kernel<XT, WF, L, 2>
#define OP_L(XT, WF) OP_R(XT, WF, 4), OP_R(XT, WF, 8), OP_R(XT, WF, 16), OP_R(XT, WF, 32)
#define OP_X(XT) OP_L(XT, false), OP_L(XT, true)

constexpr int kNumKernels = 3 * 2 * 4 * 2;
static const KernelFn kKernels[kNumKernels] = {OP_X(kF16), OP_X(kBF16), OP_X(kF32)};

static int kernel_index(const Decision& d, int rows_per_group) {
  const int xt = d.x_dtype == kF16 ? 0 : (d.x_dtype == kBF16 ? 1 : 2);
  const int li = d.lanes == 4 ? 0 : (d.lanes == 8 ? 1 : (d.lanes == 16 ? 2 : 3));
  return ((xt * 2 + (d.w_f32 ? 1 : 0)) * 4 + li) * 2 + (rows_per_group - 1);
}

static int g_occupancy[kNumKernels];  // resident CTAs per SM (0: not asked yet)
static int g_sms[64];  // multiprocessors per device (0: not asked yet)

static cudaError_t resident_ctas(int index, int device, int64_t* per_sm, int64_t* total) {
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
  *per_sm = g_occupancy[index];
  *total = static_cast<int64_t>(g_occupancy[index]) * g_sms[device];
  return cudaSuccess;
}

static cudaError_t plan_for(const Decision& d, const Launch& a, Plan* plan, int* index, int64_t* per_sm) {
  int64_t total = 0;
  const cudaError_t e = resident_ctas(kernel_index(d, 1), a.device, per_sm, &total);
  if (e != cudaSuccess) return e;
  *plan = make_plan(d, total);
  if (a.force_rows == 1 || a.force_rows == 2) {
    plan->rows_per_group = a.force_rows;
    const int64_t per_cta = static_cast<int64_t>(plan->groups) * a.force_rows;
    plan->ctas = (d.rows + per_cta - 1) / per_cta;
  }
  *index = kernel_index(d, plan->rows_per_group);
  return cudaSuccess;
}

int launch(const Decision& d, const Launch& a) {
  Plan plan{};
  int index = 0;
  int64_t per_sm = 0;
  cudaError_t e = plan_for(d, a, &plan, &index, &per_sm);
  if (e != cudaSuccess) return static_cast<int>(e);
  const int32_t eb = elem_bytes(d.x_dtype);
  Params p{};
  p.x = static_cast<const char*>(a.x);
  p.w = static_cast<const char*>(a.w);
  p.y = static_cast<char*>(a.y);
  p.rows = d.rows;
  p.x_row_bytes = d.row_stride * eb;
  p.y_row_bytes = d.d * eb;
  p.vecs = d.vecs;
  p.inv_d = static_cast<float>(1.0 / static_cast<double>(d.d));
  p.eps = a.eps;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(plan.ctas), 1, 1);
  cfg.blockDim = dim3(kThreads, 1, 1);
  cfg.dynamicSmemBytes = 0;
  cfg.stream = static_cast<cudaStream_t>(a.stream);
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = a.pdl ? 1 : 0;
  e = cudaLaunchKernelEx(&cfg, kKernels[index], p);
  return static_cast<int>(e);
}

int describe(const Decision& d, const Launch& a, int64_t* out) {
  Plan plan{};
  int index = 0;
  int64_t per_sm = 0;
  const cudaError_t e = plan_for(d, a, &plan, &index, &per_sm);
  if (e != cudaSuccess) return static_cast<int>(e);
  out[0] = plan.rows_per_group;
  out[1] = plan.groups;
  out[2] = plan.ctas;
  out[3] = per_sm;
  return 0;
}

}  // namespace kda_onepass
