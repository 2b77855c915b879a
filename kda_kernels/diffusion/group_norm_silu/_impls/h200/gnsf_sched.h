// Path F (c009, src/gns_path_f.cu): the chunk schedule, host-and-device.
//
// The same functions decide, on the GPU, what block b of launch j does (gns_path_f.cu), and, on the CPU, what the
// schedule model in tests/test_path_f.py checks (it builds a small g++ shim around this header), so the model tests
// the kernel's own mapping, not a copy of it.
//
// Terms. x is [N, C, *spatial] contiguous: group gi (= n*G + g) is one contiguous run of D elements, groups in
// memory order. A tile is kThreads x U vectors of one group (32 KB on the 16-byte path); a group has P tiles; stats
// and apply use the same tiles. A chunk is gpc consecutive whole groups (the last chunk may be shorter); K chunks.
//
// Launches j = 0 .. K (K + 1 launches per call):
//   launch j runs the STATS of chunk j (if j < K): one block per tile, each writes its partial (n, mean, M2) to
//   slot part_index(g, t) = g*P + t (written exactly once per call, never read in the same launch), and
//   the APPLY of chunk j-1 (if j >= 1): one block per tile, each merges its group's P partials (slots g*P ..
//   g*P + P - 1, all written by launch j-1) and writes y for its tile.
//   Launch 0 is stats only, launch K apply only.
// Block order inside a launch (order 0, "interleave"): apply, stats, apply, stats, ... in memory order on both
// sides, then the rest of the longer side. The apply of tile i of chunk j-1 is dispatched next to the stats of
// tile i of chunk j, so every x byte is re-read about one launch after its first read (reuse distance ~ one
// chunk of new x + one chunk of y). order 1 ("stats first"): all stats blocks, then all apply blocks (the
// apply blocks come last, so with PDL the early blocks of a launch never wait; reuse distance ~ 1.5 chunks of x).
#pragma once

#include <stdint.h>

#if defined(__CUDACC__)
#define GNSF_HD __host__ __device__ __forceinline__
#else
#define GNSF_HD inline
#endif

namespace gnsf {

struct Sched {
  int64_t total;  // groups (N * G)
  int64_t P;      // tiles per group
  int64_t gpc;    // groups per chunk (>= 1)
  int64_t K;      // chunks = ceil(total / gpc)
  int64_t order;  // 0 interleave, 1 stats first
};

constexpr int kRoleNone = 0;
constexpr int kRoleStats = 1;
constexpr int kRoleApply = 2;

struct Work {
  int role;
  int64_t group;
  int64_t tile;
};

GNSF_HD int64_t cdiv64(int64_t a, int64_t b) { return (a + b - 1) / b; }

GNSF_HD Sched make_sched(int64_t total, int64_t P, int64_t gpc, int64_t order) {
  Sched s;
  s.total = total;
  s.P = P;
  s.gpc = gpc < 1 ? 1 : (gpc > total ? total : gpc);
  s.K = cdiv64(total, s.gpc);
  s.order = order;
  return s;
}

GNSF_HD int64_t launches(const Sched& s) { return s.K + 1; }

GNSF_HD int64_t chunk_first_group(const Sched& s, int64_t k) { return k * s.gpc; }

GNSF_HD int64_t chunk_groups(const Sched& s, int64_t k) {
  if (k < 0 || k >= s.K) return 0;
  const int64_t rest = s.total - k * s.gpc;
  return rest < s.gpc ? rest : s.gpc;
}

// Tiles of each role in launch j.
GNSF_HD int64_t launch_stats_tiles(const Sched& s, int64_t j) { return chunk_groups(s, j) * s.P; }
GNSF_HD int64_t launch_apply_tiles(const Sched& s, int64_t j) { return chunk_groups(s, j - 1) * s.P; }
GNSF_HD int64_t launch_blocks(const Sched& s, int64_t j) {
  return launch_stats_tiles(s, j) + launch_apply_tiles(s, j);
}

// The partial slot of stats tile t of group g (one float4 per tile, whole tensor: no slot is reused in a call).
GNSF_HD int64_t part_index(const Sched& s, int64_t g, int64_t t) { return g * s.P + t; }

// What block b of launch j does.
GNSF_HD Work block_work(const Sched& s, int64_t j, int64_t b) {
  const int64_t S = launch_stats_tiles(s, j);
  const int64_t A = launch_apply_tiles(s, j);
  Work w;
  w.role = kRoleNone;
  w.group = -1;
  w.tile = -1;
  if (b < 0 || b >= S + A) return w;
  int role;
  int64_t i;
  if (s.order == 0) {
    const int64_t m = S < A ? S : A;
    if (b < 2 * m) {
      role = (b & 1) ? kRoleStats : kRoleApply;
      i = b >> 1;
    } else {
      role = S > A ? kRoleStats : kRoleApply;
      i = b - m;
    }
  } else {
    if (b < S) {
      role = kRoleStats;
      i = b;
    } else {
      role = kRoleApply;
      i = b - S;
    }
  }
  const int64_t k = role == kRoleStats ? j : j - 1;  // the chunk this block works on
  const int64_t gl = i / s.P;
  w.role = role;
  w.group = chunk_first_group(s, k) + gl;
  w.tile = i - gl * s.P;
  return w;
}

}  // namespace gnsf
