// c006: the replicate pad of a contiguous NCDHW tensor into a contiguous NCDHW output, a block per chunk of an
// output plane (dev/pad_cuda/pad_stage.cu's kernel and launcher, byte for byte from the #include on:
// tests/test_pad_stage_cuda.py keeps the two copies equal; pad_stage_binding.cpp runs it with the "2x16K" plan:
// two stage buffers, ~16 KB of source rows per chunk).
//
// Byte model (per call; s = element size): s * (N_in + N_out) bytes, x read once, the padded output written once.
// The stage reads each chunk's source rows as whole aligned 16-byte words: at most 32 bytes more per chunk
// (< 0.2 % at 16 KB chunks), and the T pad's repeated plane comes back from L2 (its readers are a plane's worth
// of work items apart, a few MB). Bound = bytes / 4.29 TB/s, the H200's measured copy ceiling.
//
// Design (docs/notes.md, "The staged-plane CUDA pad" and "c006"):
//   - a chunk's source rows go to shared memory with cp.async 16-byte copies, double-buffered: the next chunk's
//     copy is in flight while the block writes this one, so the reads in flight do not live in registers;
//   - DRAM sees aligned 16-byte loads and stores on every row width: the one-element shift between a source row
//     and its output row is taken in shared memory (two LDS.128 and a funnel shift for a vector inside one row,
//     eight clamped 2-byte reads at a row edge or across two rows, chosen per warp with __all_sync);
//   - persistent blocks sized by the occupancy API, row and column advanced by a fixed step per vector.
// H200 (dev/pad_sweep.py --cuda, 2026-11-27, dev/results/20261127-pad_sweep_stage.json): sol 0.78-0.85 of the
// same-size copy_ on the sweep's seven rows (205 MB to 7.1 GB), c004's Triton plane kernel 0.62-0.68 in the same
// session; an aligned shifted copy (copy_diag.cu "shift ldg2") reaches 0.86-0.94 there, which caps any pad
// whose loads and stores are misaligned against each other.
// kda: no-spills (tests/test_cuda_sources.py: every instantiation builds for sm_90a without spills)
#include <cstdint>
#include <cuda_runtime.h>

#include "pad_stage_core.cuh"

namespace kda_pad {

constexpr int kStageThreads = 256;

template <typename T>
struct SmemStage {
  const uint4* w;
  __device__ __forceinline__ Vec16 word(int k) const {
    const uint4 u = w[k];
    return Vec16{{u.x, u.y, u.z, u.w}};
  }
  __device__ __forceinline__ T elem(int i) const { return reinterpret_cast<const T*>(w)[i]; }
};

// One choice per warp: the fast path only when every active lane's vector is interior, so no warp runs both.
struct WarpAllInterior {
  __device__ __forceinline__ bool operator()(bool active, bool interior) const {
    return __all_sync(0xffffffffu, !active || interior);
  }
};

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  // .cg: the stage is read once from shared memory, so keep it out of L1
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

template <typename T>
__device__ __forceinline__ void stage_chunk(const uint4* __restrict__ xw, const ChunkPlan& cp, uint4* buf) {
  for (int i = threadIdx.x; i < cp.n_words; i += kStageThreads) cp_async16(buf + i, xw + cp.word0 + i);
  cp_async_commit();
}

template <typename T>
__device__ __forceinline__ void write_staged(const StageGeom& g, const ChunkPlan& cp, const uint4* buf,
                                             T* __restrict__ out) {
  uint4* ow = reinterpret_cast<uint4*>(out);
  write_chunk<T>(
      g, cp, SmemStage<T>{buf}, static_cast<int>(threadIdx.x), kStageThreads, WarpAllInterior{},
      [ow](long long v, const Vec16& val) { ow[v] = make_uint4(val.w[0], val.w[1], val.w[2], val.w[3]); },
      [out](long long e, T val) { out[e] = val; });
}

// STAGES = 1: stage, wait, write (other blocks on the SM overlap the waits); STAGES = 2: the next chunk's stage is
// in flight while this one is written.
// 8 blocks per SM (2048 threads, <= 32 registers: the fp16 single-stage build otherwise takes 40 and 6 blocks)
template <typename T, int STAGES>
__global__ void __launch_bounds__(kStageThreads, 8)
pad_stage_kernel(const T* __restrict__ x, T* __restrict__ out, StageGeom g) {
  extern __shared__ uint4 stage[];
  const uint4* xw = reinterpret_cast<const uint4*>(x);
  long long w = blockIdx.x;
  if (w >= g.n_work) return;
  if (STAGES == 1) {
    for (; w < g.n_work; w += gridDim.x) {
      const ChunkPlan cp = plan_chunk<T>(g, static_cast<uint32_t>(w));
      stage_chunk<T>(xw, cp, stage);
      cp_async_wait<0>();
      __syncthreads();
      write_staged<T>(g, cp, stage, out);
      __syncthreads();  // the next stage overwrites the buffer
    }
  } else {
    ChunkPlan cur = plan_chunk<T>(g, static_cast<uint32_t>(w));
    stage_chunk<T>(xw, cur, stage);
    int buf = 0;
    for (; w < g.n_work; w += gridDim.x) {
      const long long wn = w + gridDim.x;
      ChunkPlan next = cur;
      if (wn < g.n_work) {
        next = plan_chunk<T>(g, static_cast<uint32_t>(wn));
        stage_chunk<T>(xw, next, stage + (buf ^ 1) * g.cap_words);
      } else {
        cp_async_commit();  // an empty group, so wait_group<1> below still means "all but the newest"
      }
      cp_async_wait<1>();
      __syncthreads();
      write_staged<T>(g, cur, stage + buf * g.cap_words, out);
      __syncthreads();  // the stage issued next step overwrites this buffer
      cur = next;
      buf ^= 1;
    }
  }
}

// Outputs narrower than a vector (Wo < 16 / sizeof(T)): one element per thread, divisions and all; only the
// sweep's odd check shapes come here.
template <typename T>
__global__ void pad_elem_kernel(const T* __restrict__ x, T* __restrict__ out, long long n_out, int T_in, int H,
                                int W, int To, int Ho, int Wo, int pad_t, int pad_h, int pad_w) {
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long e = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; e < n_out; e += stride) {
    const int wo = static_cast<int>(e % Wo);
    const long long r = e / Wo;
    const int ho = static_cast<int>(r % Ho);
    const long long q = r / Ho;
    const int to = static_cast<int>(q % To);
    const long long bc = q / To;
    const int ts = clamp_i(to - pad_t, 0, T_in - 1), hs = clamp_i(ho - pad_h, 0, H - 1);
    out[e] = x[((bc * T_in + ts) * H + hs) * W + clamp_i(wo - pad_w, 0, W - 1)];
  }
}

// Returns a CUDA error code: cudaErrorMisalignedAddress when x or out is not 16-byte aligned (torch's are),
// cudaErrorInvalidValue for stages other than 1 or 2, a shape outside the int32 index range, or a chunk that does
// not fit shared memory (one source row over ~113 KB).
template <typename T>
cudaError_t launch_pad_stage(const T* x, T* out, int B, int C, int T_in, int H, int W, int To, int Ho, int Wo,
                             int pad_t, int pad_h, int pad_w, int sm_count, cudaStream_t stream, int chunk_bytes,
                             int stages) {
  if ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(out)) & 15u) return cudaErrorMisalignedAddress;
  if (stages != 1 && stages != 2) return cudaErrorInvalidValue;
  StageGeom g;
  const int rc = make_stage_geom<T>(&g, B, C, T_in, H, W, To, Ho, Wo, pad_t, pad_h, pad_w, chunk_bytes,
                                    kStageThreads);
  if (rc == 1) {
    const long long n_out = static_cast<long long>(B) * C * To * Ho * Wo;
    const long long want = (n_out + 255) / 256;
    const int blocks = static_cast<int>(want < 8LL * sm_count ? want : 8LL * sm_count);
    pad_elem_kernel<T><<<blocks, 256, 0, stream>>>(x, out, n_out, T_in, H, W, To, Ho, Wo, pad_t, pad_h, pad_w);
    return cudaGetLastError();
  }
  if (rc != 0) return cudaErrorInvalidValue;
  const size_t smem = static_cast<size_t>(stages) * g.cap_words * 16;
  if (smem > 227 * 1024) return cudaErrorInvalidValue;
  void (*kernel)(const T*, T*, StageGeom) = stages == 1 ? pad_stage_kernel<T, 1> : pad_stage_kernel<T, 2>;
  if (smem > 48 * 1024) {
    const cudaError_t e =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (e != cudaSuccess) return e;
  }
  int per_sm = 0;
  const cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kStageThreads, smem);
  if (e != cudaSuccess) return e;
  if (per_sm < 1) return cudaErrorInvalidValue;
  // persistent blocks: one wave, each walking the work items gridDim apart (neighbouring planes, and so the T
  // pad's repeated source plane, are in flight together)
  const long long full = static_cast<long long>(per_sm) * sm_count;
  const int blocks = static_cast<int>(g.n_work < full ? g.n_work : full);
  kernel<<<blocks, kStageThreads, smem, stream>>>(x, out, g);
  return cudaGetLastError();
}

template cudaError_t launch_pad_stage<uint16_t>(const uint16_t*, uint16_t*, int, int, int, int, int, int, int, int,
                                                int, int, int, int, cudaStream_t, int, int);
template cudaError_t launch_pad_stage<uint32_t>(const uint32_t*, uint32_t*, int, int, int, int, int, int, int, int,
                                                int, int, int, int, cudaStream_t, int, int);

}  // namespace kda_pad
