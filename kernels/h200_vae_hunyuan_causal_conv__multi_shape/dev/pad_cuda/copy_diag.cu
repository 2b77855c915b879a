// Ceiling diagnostics for the plain pad (dev/pad_sweep.py --cuda times them against torch's copy_ of the same
// bytes, over buffers the size of each sweep row's output). Not pads: they answer "what can a kernel whose
// loads and stores are misaligned by one element reach on this GPU at all?"
//
//   copy16       out[i] = in[i] in aligned 16-byte words: our own launch style's copy, to tell a kernel-style loss
//                from a shift loss.
//   shift ldg2   out[i] = in[i + 1] for 2-byte elements: aligned 16-byte stores; each thread loads the two aligned
//                16-byte words around its 16 source bytes (the second is the next lane's first, an L1 hit) and
//                funnel-shifts them by 2 bytes. The cheapest form of the shift every fp16 pad row needs.
//   shift shfl   the same, the next word's first 4 bytes taken from the next lane with a shuffle instead of a
//                second load (the warp's last lane loads its own): one 16-byte load per output word.
// Byte model: 16 * n bytes read and written (+16 read by the shifts); bound = 32 * n / 4.29 TB/s. If the shifts
// stay well under 0.9 of torch's copy_, no pad whose load and store alignments differ reaches 0.9 on the H200;
// if they are at ~0.95, the pads lose elsewhere.
// kda: no-spills (tests/test_cuda_sources.py: every instantiation builds for sm_90a without spills)
#include <cstdint>
#include <cuda_runtime.h>

namespace kda_pad {

constexpr int kDiagThreads = 256;
constexpr int kDiagUnroll = 4;  // words per thread step, all loads before the stores (as the pad kernels do)

__global__ void __launch_bounds__(kDiagThreads)
copy16_kernel(const uint4* __restrict__ in, uint4* __restrict__ out, long long n) {
  const long long step = static_cast<long long>(gridDim.x) * kDiagThreads * kDiagUnroll;
  for (long long b = static_cast<long long>(blockIdx.x) * kDiagThreads * kDiagUnroll + threadIdx.x; b < n;
       b += step) {
    uint4 v[kDiagUnroll];
#pragma unroll
    for (int k = 0; k < kDiagUnroll; ++k) {
      const long long i = b + k * kDiagThreads;
      if (i < n) v[k] = __ldg(in + i);
    }
#pragma unroll
    for (int k = 0; k < kDiagUnroll; ++k) {
      const long long i = b + k * kDiagThreads;
      if (i < n) out[i] = v[k];
    }
  }
}

__device__ __forceinline__ uint4 shift2(const uint4& lo, uint32_t hi_x) {
  return make_uint4(__funnelshift_r(lo.x, lo.y, 16), __funnelshift_r(lo.y, lo.z, 16), __funnelshift_r(lo.z, lo.w, 16),
                    __funnelshift_r(lo.w, hi_x, 16));
}

// A whole 16-byte load kept whole (__ldg(p).x would let nvcc narrow it to 4 bytes): the diagnostic measures the
// two-word form the pad kernels use.
__device__ __forceinline__ uint4 load16(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

// in holds n + 1 words; out n words: out as 2-byte elements = in's elements from 1 on
template <bool kShfl>
__global__ void __launch_bounds__(kDiagThreads)
shift_copy_kernel(const uint4* __restrict__ in, uint4* __restrict__ out, long long n) {
  const long long step = static_cast<long long>(gridDim.x) * kDiagThreads * kDiagUnroll;
  const int lane = threadIdx.x & 31;
  for (long long b = static_cast<long long>(blockIdx.x) * kDiagThreads * kDiagUnroll + threadIdx.x; b < n;
       b += step) {
    uint4 lo[kDiagUnroll];
    uint32_t hi[kDiagUnroll];
#pragma unroll
    for (int k = 0; k < kDiagUnroll; ++k) {
      const long long i = b + k * kDiagThreads;
      if (kShfl) {
        // every lane shuffles (the loop bound is warp-uniform only up to n, so inactive lanes still take part);
        // a lane whose neighbour is the warp's next one or past n loads the word itself
        lo[k] = i < n ? __ldg(in + i) : make_uint4(0, 0, 0, 0);
        const uint32_t nb = __shfl_down_sync(0xffffffffu, lo[k].x, 1);
        hi[k] = (lane < 31 && i + 1 < n) ? nb : (i < n ? __ldg(reinterpret_cast<const uint32_t*>(in + i + 1)) : 0u);
      } else if (i < n) {
        lo[k] = __ldg(in + i);
        hi[k] = load16(in + i + 1).x;
      }
    }
#pragma unroll
    for (int k = 0; k < kDiagUnroll; ++k) {
      const long long i = b + k * kDiagThreads;
      if (i < n) out[i] = shift2(lo[k], hi[k]);
    }
  }
}

// One wave of resident blocks: a grid-stride grid larger than what fits (8 blocks per SM at 40 registers is 1.33
// waves) leaves its last blocks running at a fraction of the occupancy.
template <typename K>
static int diag_blocks(K kernel, long long n, int sm_count) {
  int per_sm = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kDiagThreads, 0) != cudaSuccess || per_sm < 1) {
    per_sm = 1;
  }
  const long long want = (n + kDiagThreads * kDiagUnroll - 1) / (kDiagThreads * kDiagUnroll);
  const long long full = static_cast<long long>(per_sm) * sm_count;
  return static_cast<int>(want < full ? want : full);
}

// n 16-byte words; in and out 16-byte aligned (cudaErrorMisalignedAddress otherwise).
cudaError_t launch_copy16(const void* in, void* out, long long n, int sm_count, cudaStream_t stream) {
  if ((reinterpret_cast<uintptr_t>(in) | reinterpret_cast<uintptr_t>(out)) & 15u) return cudaErrorMisalignedAddress;
  if (n <= 0) return cudaSuccess;
  copy16_kernel<<<diag_blocks(copy16_kernel, n, sm_count), kDiagThreads, 0, stream>>>(static_cast<const uint4*>(in),
                                                                        static_cast<uint4*>(out), n);
  return cudaGetLastError();
}

// in holds n + 1 words, out n; shfl selects the shuffle form.
cudaError_t launch_shift_copy(const void* in, void* out, long long n, bool shfl, int sm_count, cudaStream_t stream) {
  if ((reinterpret_cast<uintptr_t>(in) | reinterpret_cast<uintptr_t>(out)) & 15u) return cudaErrorMisalignedAddress;
  if (n <= 0) return cudaSuccess;
  const uint4* i4 = static_cast<const uint4*>(in);
  uint4* o4 = static_cast<uint4*>(out);
  if (shfl) {
    shift_copy_kernel<true><<<diag_blocks(shift_copy_kernel<true>, n, sm_count), kDiagThreads, 0, stream>>>(i4, o4, n);
  } else {
    shift_copy_kernel<false><<<diag_blocks(shift_copy_kernel<false>, n, sm_count), kDiagThreads, 0, stream>>>(i4, o4, n);
  }
  return cudaGetLastError();
}

}  // namespace kda_pad
