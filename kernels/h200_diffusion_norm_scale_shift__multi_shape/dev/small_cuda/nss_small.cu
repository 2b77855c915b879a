// c006: fused_norm_scale_shift / fused_scale_residual_norm_scale_shift for the small rows (<= 2 MiB moved) as a
// CUDA kernel for the H200 (sm_90a): y = norm(r)·(1 + scale) + shift, r = x or r = residual + gate·x
// (residual_out = r), LayerNorm or RMSNorm, fp32 statistics. The contract is nss_small_contract.h; every other
// call stays on c005's Triton kernel (nss_kernel.py).
//
// Byte model (task.toml reads/writes; bf16, D = 3072, one shared D-row each of scale / shift / gate):
//     nss:      bytes = 2·S·D·2 + 2·D·2           bound = bytes / 4.29 TB/s
//     residual: bytes = 4·S·D·2 + (2 | 3)·D·2
//   qwen_nss_L19 0.25 MB (0.06 us at the ceiling), qwen_nss_L47 0.59 MB, hyvideo_nss_L55 0.69 MB, mova_nss_L101
//   (D = 1536) 0.63 MB, qwen_res_nss_L19 0.50 MB, qwen_res_nss_L47 1.17 MB, hyvideo_res_nss_L55 1.37 MB,
//   mova_res_nss_L101_nogate 1.25 MB: the bytes are 0.06-0.32 us of a 1.6-2.2 us call (c005 under the graph).
//   These rows are latency bound: the launch (hidden by PDL behind the previous call in a stream of them), one
//   DRAM round trip for every operand, the row's arithmetic on one SM, one block reduction, the store.
//
// Design: one CTA per token row (19-101 rows: every row on its own SM, all rows in flight at once). W warps of
// VPT 16-byte vectors per thread (nss_small_contract.h make_plan; D = 3072: 4 x 3, D = 1536: 2 x 3); thread t
// takes vectors j·32W + t (each warp access one contiguous 512-byte span). Every operand (x, residual, gate,
// scale, shift, weight, bias) is loaded before any arithmetic: one memory latency for all of them (SGLang's
// CuTe DSL kernel loads scale / shift after its statistics: its second round trip on these rows).
// Statistics in one block reduction instead of two: each thread centers its own 8·VPT values (fp32 two-pass over
// registers: mean_t, then M2_t = sum (v - mean_t)^2), the warp merges (mean, M2) pairs of equal counts with a
// 5-step xor butterfly (Chan: mean = (ma + mb) / 2, M2 = M2a + M2b + (mb - ma)^2 · n/2, symmetric in a and b,
// so every lane holds the same value), lane 0 of each warp writes its pair to shared memory, one __syncthreads,
// and every thread merges the W pairs in warp order (mean = sum mean_w / W, M2 = sum M2_w + n_w · sum
// (mean_w - mean)^2): centered throughout, never E[x^2] - mean^2. RMSNorm: mean_t = 0 and M2 = sum v^2 through
// the same code (every difference of means is 0).
// Rounding points (prompt.md K), as c005's kernel: gate·x rounded to x's dtype (the gate is x's 16-bit dtype
// here: SGLang's same-dtype product), r = that + residual rounded to x's dtype (stored as residual_out, and what
// the statistics read); rstd = rsqrtf(M2 · fp32(1/D) + eps); n = (v - mean)·rstd·w + b rounded to x's dtype;
// y = fma(n, 1 + scale, shift) in fp32, one rounding at the store (allowed by task.toml; closer to the fp64
// oracle than SGLang's three bf16 roundings). No fast-math.
// PDL: launched with programmatic stream serialization; `griddepcontrol.launch_dependents` first (the next PDL
// kernel's CTAs may launch and park at their own wait), `griddepcontrol.wait` before the first load (the inputs
// may be the previous kernel's output; a no-op without a programmatic dependency). norm_infer's c007 measured
// its small rows at 0.87-0.97x of SGLang without PDL and 1.21-1.58x with it (dev/variants.py there).
// No torch headers (tests/test_cuda_sources.py compiles it alone); the torch binding is nss_small_binding.cpp.

// kda: no-spills (tests/test_cuda_sources.py: every instantiation builds for sm_90a without spills)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "nss_small_contract.h"
#include "nss_small_launch.h"

namespace kda_nss {

enum Flag : int32_t { kFlagRms = 1, kFlagRes = 2, kFlagGate = 4, kFlagW = 8, kFlagB = 16 };

struct Params {
  const char* x;
  const char* res;
  const char* gate;
  const char* w;
  const char* b;
  const char* scale;
  const char* shift;
  char* y;
  char* rout;
  int64_t s;  // tokens per batch
  int64_t x_sb, x_ss, r_sb, r_ss;  // strides in bytes (0 for size-1 dims)
  int32_t row_bytes;  // D · 2: the outputs' row stride
  float inv_d;  // 1 / D rounded to fp32 (exact for a power-of-two D)
  float eps;
  int32_t flags;  // Flag bits
};

// 8 elements of a 16-byte vector to fp32 and back (round to nearest even).
template <int XT>
struct Elem;

template <>
struct Elem<kBF16> {
  __device__ __forceinline__ static void unpack(const uint4& v, float* f) {
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      f[2 * i] = __uint_as_float(w[i] << 16);
      f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
  }
  __device__ __forceinline__ static uint32_t pack2(float a, float b) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
  __device__ __forceinline__ static float round(float a) { return __bfloat162float(__float2bfloat16_rn(a)); }
};

template <>
struct Elem<kF16> {
  __device__ __forceinline__ static void unpack(const uint4& v, float* f) {
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 t = __half22float2(*reinterpret_cast<const __half2*>(&w[i]));
      f[2 * i] = t.x;
      f[2 * i + 1] = t.y;
    }
  }
  __device__ __forceinline__ static uint32_t pack2(float a, float b) {
    const __half2 h = __floats2half2_rn(a, b);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
  __device__ __forceinline__ static float round(float a) { return __half2float(__float2half_rn(a)); }
};

template <int XT>
__device__ __forceinline__ uint4 pack(const float* f) {
  return make_uint4(Elem<XT>::pack2(f[0], f[1]), Elem<XT>::pack2(f[2], f[3]), Elem<XT>::pack2(f[4], f[5]),
                    Elem<XT>::pack2(f[6], f[7]));
}

__device__ __forceinline__ uint4 ld16(const char* p) { return __ldg(reinterpret_cast<const uint4*>(p)); }

// Threads per CTA the plan can ask for at each VPT (make_plan over D = 256..8192: VPT 1 up to 31 warps, 2 up to
// 13, 3 up to 10, 4 up to 8); as launch bounds they leave each thread the registers for its 7 x VPT raw vectors
// (a 512-thread bound made ptxas spill the fp16 VPT = 2 kernel at 64 registers).
template <int VPT>
constexpr int kMaxThreads = VPT == 1 ? 992 : (VPT == 2 ? 416 : (VPT == 3 ? 320 : 256));

template <int XT, int VPT>
__global__ void __launch_bounds__(kMaxThreads<VPT>) nss_small_kernel(const __grid_constant__ Params p) {
  using E = Elem<XT>;
  __shared__ float2 part[32];
  const int t = static_cast<int>(threadIdx.x);
  const int nthreads = static_cast<int>(blockDim.x);
  const int lane = t & 31;
  const int warp = t >> 5;
  const int nwarps = nthreads >> 5;
  const bool is_rms = p.flags & kFlagRms, has_res = p.flags & kFlagRes, has_gate = p.flags & kFlagGate;
  const bool has_w = p.flags & kFlagW, has_b = p.flags & kFlagB;
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");

  const int64_t row = blockIdx.x;
  const int64_t bi = row / p.s;
  const int64_t si = row - bi * p.s;
  const char* xp = p.x + bi * p.x_sb + si * p.x_ss;
  const char* rp = p.res + bi * p.r_sb + si * p.r_ss;
  const uint4 zero = make_uint4(0u, 0u, 0u, 0u);

  // every operand before any arithmetic: one memory latency for the row
  uint4 xv[VPT], rv[VPT], gv[VPT], cv[VPT], hv[VPT], wv[VPT], bv[VPT];
#pragma unroll
  for (int j = 0; j < VPT; ++j) {
    const int off = (j * nthreads + t) * 16;
    xv[j] = ld16(xp + off);
    rv[j] = has_res ? ld16(rp + off) : zero;
    gv[j] = has_gate ? ld16(p.gate + off) : zero;
    cv[j] = ld16(p.scale + off);
    hv[j] = ld16(p.shift + off);
    wv[j] = has_w ? ld16(p.w + off) : zero;
    bv[j] = has_b ? ld16(p.b + off) : zero;
  }

  // residual form: r = residual + gate·x (gate·x rounded to x's dtype), rounded to x's dtype, stored as
  // residual_out; xv then holds r, which the statistics read
  if (has_res) {
    char* rop = p.rout + row * p.row_bytes;
#pragma unroll
    for (int j = 0; j < VPT; ++j) {
      float xf[8], rf[8], gf[8];
      E::unpack(xv[j], xf);
      E::unpack(rv[j], rf);
      E::unpack(gv[j], gf);
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const float v = has_gate ? E::round(xf[e] * gf[e]) : xf[e];
        xf[e] = v + rf[e];
      }
      xv[j] = pack<XT>(xf);
      *reinterpret_cast<uint4*>(rop + (j * nthreads + t) * 16) = xv[j];
    }
  }

  // this thread's 8·VPT values, centered on their own mean (RMSNorm: on 0)
  constexpr float kCount = 8.0f * VPT;
  float mean = 0.0f;
  if (!is_rms) {
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < VPT; ++j) {
      float f[8];
      E::unpack(xv[j], f);
#pragma unroll
      for (int e = 0; e < 8; ++e) sum += f[e];
    }
    mean = sum * (1.0f / kCount);
  }
  float m2 = 0.0f;
#pragma unroll
  for (int j = 0; j < VPT; ++j) {
    float f[8];
    E::unpack(xv[j], f);
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const float dv = f[e] - mean;
      m2 = fmaf(dv, dv, m2);
    }
  }
  // the warp: Chan merges of equal counts, symmetric in the two lanes (every lane ends with the same pair)
  float half_count = 0.5f * kCount;
#pragma unroll
  for (int m = 16; m >= 1; m >>= 1) {
    const float mb = __shfl_xor_sync(0xffffffffu, mean, m);
    const float qb = __shfl_xor_sync(0xffffffffu, m2, m);
    const float dm = mb - mean;
    m2 = (m2 + qb) + dm * dm * half_count;
    mean = 0.5f * (mean + mb);
    half_count *= 2.0f;
  }
  if (lane == 0) part[warp] = make_float2(mean, m2);
  __syncthreads();
  // the CTA: W pairs of equal counts (32·8·VPT values each), merged in warp order by every thread alike
  float msum = 0.0f;
  for (int w = 0; w < nwarps; ++w) msum += part[w].x;
  mean = msum / static_cast<float>(nwarps);
  float q = 0.0f, spread = 0.0f;
  for (int w = 0; w < nwarps; ++w) {
    const float2 pw = part[w];
    const float dm = pw.x - mean;
    q += pw.y;
    spread = fmaf(dm, dm, spread);
  }
  q = fmaf(spread, 32.0f * kCount, q);
  const float rstd = rsqrtf(q * p.inv_d + p.eps);

  char* yp = p.y + row * p.row_bytes;
#pragma unroll
  for (int j = 0; j < VPT; ++j) {
    float f[8], c[8], h[8], wf[8], bf[8];
    E::unpack(xv[j], f);
    E::unpack(cv[j], c);
    E::unpack(hv[j], h);
    E::unpack(wv[j], wf);
    E::unpack(bv[j], bf);
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      float n = (f[e] - mean) * rstd;
      if (has_w) n *= wf[e];
      if (has_b) n += bf[e];
      n = E::round(n);  // the normalized value, stored in x's dtype (prompt.md K)
      f[e] = fmaf(n, 1.0f + c[e], h[e]);
    }
    *reinterpret_cast<uint4*>(yp + (j * nthreads + t) * 16) = pack<XT>(f);
  }
}

using KernelFn = void (*)(const Params);

// index = (x dtype (f16, bf16)) * kMaxVpt + VPT - 1
static const KernelFn kKernels[2 * kMaxVpt] = {
    nss_small_kernel<kF16, 1>, nss_small_kernel<kF16, 2>, nss_small_kernel<kF16, 3>, nss_small_kernel<kF16, 4>,
    nss_small_kernel<kBF16, 1>, nss_small_kernel<kBF16, 2>, nss_small_kernel<kBF16, 3>,
    nss_small_kernel<kBF16, 4>,
};
static const int kBound[kMaxVpt] = {kMaxThreads<1>, kMaxThreads<2>, kMaxThreads<3>, kMaxThreads<4>};

int launch(const Decision& d, const Launch& a) {
  const int threads = d.warps * 32;
  if (d.reason != kOk || d.vpt < 1 || d.vpt > kMaxVpt || threads > kBound[d.vpt - 1] ||
      threads * d.vpt * 8 != d.d || d.rows < 1 || d.rows > 0x7fffffff)
    return static_cast<int>(cudaErrorInvalidConfiguration);  // unreachable for decide()'s plans
  const int64_t eb = 2;
  Params p{};
  p.x = static_cast<const char*>(a.x);
  p.res = static_cast<const char*>(d.has_res ? a.residual : a.x);
  p.gate = static_cast<const char*>(d.has_gate ? a.gate : a.x);
  p.w = static_cast<const char*>(d.has_w ? a.weight : a.x);
  p.b = static_cast<const char*>(d.has_b ? a.bias : a.x);
  p.scale = static_cast<const char*>(a.scale);
  p.shift = static_cast<const char*>(a.shift);
  p.y = static_cast<char*>(a.y);
  p.rout = static_cast<char*>(d.has_res ? a.residual_out : a.y);
  p.s = d.s;
  p.x_sb = d.x_sb * eb;
  p.x_ss = d.x_ss * eb;
  p.r_sb = d.r_sb * eb;
  p.r_ss = d.r_ss * eb;
  p.row_bytes = static_cast<int32_t>(d.d * eb);
  p.inv_d = static_cast<float>(1.0 / static_cast<double>(d.d));
  p.eps = a.eps;
  p.flags = (d.is_rms ? kFlagRms : 0) | (d.has_res ? kFlagRes : 0) | (d.has_gate ? kFlagGate : 0) |
            (d.has_w ? kFlagW : 0) | (d.has_b ? kFlagB : 0);
  const int index = (d.x_dtype == kF16 ? 0 : 1) * kMaxVpt + d.vpt - 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(d.rows), 1, 1);
  cfg.blockDim = dim3(static_cast<unsigned>(threads), 1, 1);
  cfg.dynamicSmemBytes = 0;
  cfg.stream = static_cast<cudaStream_t>(a.stream);
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = a.pdl ? 1 : 0;
  const cudaError_t e = cudaLaunchKernelEx(&cfg, kKernels[index], p);
  if (e != cudaSuccess) (void)cudaGetLastError();  // a launch error is not sticky: leave nothing for the fallback
  return static_cast<int>(e);
}

}  // namespace kda_nss
