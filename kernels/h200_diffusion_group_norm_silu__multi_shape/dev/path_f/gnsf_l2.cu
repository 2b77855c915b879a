// kda: no-spills
// L2 reuse-window microbenchmark for path F (dev only, H200 / sm_90a): dev/sweep_path_f.py's "l2" step. Path F itself
// is src/gns_path_f.cu (c009); dev/path_f/pathf.py builds that file together with this one and
// gns_path_f_binding.cpp into one dev extension. Results of the 2026-11-27 run: docs/notes.md, "L2 window (measured)".
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -I../../src -c gnsf_l2.cu
#include <cuda_runtime.h>
#include <stdint.h>

#include "gns_device.cuh"

namespace gnsf_l2 {

constexpr int kThreads = 256;  // as path F's blocks

// the createpolicy / hinted 16-byte load and store wrappers path F uses (src/gns_device.cuh; the builds of this
// file, dev/path_f/pathf.py and tests/test_cuda_sources.py, put the task's src/ on the include path)
using gns::ldg_hint16;
using gns::pol_evict_first;
using gns::pol_evict_last;
using gns::pol_evict_normal;
using gns::stg_hint16;

// One streaming kernel. Reads a (n16 16-byte vectors, policy pa), optionally reads
// c (same size, policy pc) and optionally writes wr = a ^ c (policy pw). 256 threads x 8 vectors (32 KB of each
// stream) per block, as path F's tiles. The loaded words are folded into one value that is stored only if it
// equals a constant (never in practice), so no load can be dropped. Policy codes: 0 evict_normal, 1 evict_last,
// 2 evict_first.
constexpr int kL2U = 8;

__device__ __forceinline__ uint64_t policy_of(int code) {
  return code == 1 ? pol_evict_last() : (code == 2 ? pol_evict_first() : pol_evict_normal());
}

__global__ void __launch_bounds__(kThreads) gnsf_l2_stream_kernel(const uint4* __restrict__ a,
                                                                  const uint4* __restrict__ c, uint4* __restrict__ wr,
                                                                  int64_t n16, int pa, int pc, int pw,
                                                                  uint32_t* __restrict__ sink) {
  const uint64_t pola = policy_of(pa);
  const int64_t base = (int64_t)blockIdx.x * (kThreads * kL2U) + threadIdx.x;
  uint4 ra[kL2U];
#pragma unroll
  for (int k = 0; k < kL2U; ++k) ra[k] = ldg_hint16(a + min(base + (int64_t)k * kThreads, n16 - 1), pola);
  if (c != nullptr) {
    const uint64_t polc = policy_of(pc);
    uint4 rc[kL2U];
#pragma unroll
    for (int k = 0; k < kL2U; ++k) rc[k] = ldg_hint16(c + min(base + (int64_t)k * kThreads, n16 - 1), polc);
#pragma unroll
    for (int k = 0; k < kL2U; ++k) {
      ra[k].x ^= rc[k].x;
      ra[k].y ^= rc[k].y;
      ra[k].z ^= rc[k].z;
      ra[k].w ^= rc[k].w;
    }
  }
  uint32_t acc = 0;
  const uint64_t polw = policy_of(pw);
#pragma unroll
  for (int k = 0; k < kL2U; ++k) {
    const int64_t v = base + (int64_t)k * kThreads;
    if (v < n16) {
      if (wr != nullptr) stg_hint16(wr + v, ra[k], polw);
      acc ^= ra[k].x ^ ra[k].y ^ ra[k].z ^ ra[k].w;
    }
  }
  if (acc == 0x9e3779b9u) sink[blockIdx.x & 255] = acc;
}

}  // namespace gnsf_l2

extern "C" {

// L2 microbenchmark stream over nbytes (a multiple of 16; a, c, wr 16-byte aligned; c / wr may be null).
int gnsf_l2_stream(const void* a, const void* c, void* wr, int64_t nbytes, int pa, int pc, int pw, void* sink,
                   cudaStream_t stream) {
  if (a == nullptr || sink == nullptr || nbytes <= 0 || nbytes % 16 != 0) return -1;
  const int64_t n16 = nbytes / 16;
  const int64_t per_block = (int64_t)gnsf_l2::kThreads * gnsf_l2::kL2U;
  const int64_t blocks = (n16 + per_block - 1) / per_block;
  if (blocks > 0x7fffffffLL) return -1;
  gnsf_l2::gnsf_l2_stream_kernel<<<(unsigned)blocks, gnsf_l2::kThreads, 0, stream>>>(
      static_cast<const uint4*>(a), static_cast<const uint4*>(c), static_cast<uint4*>(wr), n16, pa, pc, pw,
      static_cast<uint32_t*>(sink));
  return (int)cudaGetLastError();
}

}  // extern "C"
