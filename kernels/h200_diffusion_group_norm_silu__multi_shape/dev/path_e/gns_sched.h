// Host-and-device pieces of the GroupNorm+SiLU kernels that the CPU tests run as they are:
// the Chan merge every path uses, and path E's (c008) ticket schedule.  Plain C++ when not
// compiled by nvcc, so tests/stream_model.cpp (g++) checks the exact functions the kernel runs.
#pragma once

#include <math.h>
#include <stdint.h>

#if defined(__CUDACC__)
#define GNS_HD __host__ __device__ __forceinline__
#else
#define GNS_HD inline
#endif

namespace gns {

// Chan/Welford partial: count, mean, sum of squared deviations from the mean.
struct Stat {
  float n;
  float mean;
  float m2;
};

// n_b / n with the device's approximate divide (~2 ulp; n < 2^126) and IEEE division on the
// host model: the merge weights differ by <= 2 ulp, far inside every tolerance the model checks.
GNS_HD float merge_frac(float nb, float n) {
#if defined(__CUDA_ARCH__)
  return __fdividef(nb, n);
#else
  return nb / n;
#endif
}

// Chan et al. pairwise merge; exact for empty operands, no cancellation for offset data
// (only the difference of two means is squared, never E[x^2] - mean^2).
GNS_HD Stat stat_merge(Stat a, Stat b) {
  const float n = a.n + b.n;
  const float fb = (n > 0.f) ? merge_frac(b.n, n) : 0.f;
  const float d = b.mean - a.mean;
  Stat r;
  r.n = n;
  r.mean = fmaf(d, fb, a.mean);
  r.m2 = a.m2 + b.m2 + d * d * a.n * fb;
  return r;
}

namespace sched {

// Path E work items.  Group gi has P tiles; k = gi * P + t numbers tile t of group gi, and
// NS = total * P.  Every tile is handed out twice through one ticket counter: once as a stats
// item (S_k: partial (n, mean, M2) of the tile) and once as an apply item (A_k: y of the tile,
// which needs the whole group's statistics).
enum Kind : int { kEnd = 0, kStats = 1, kApply = 2 };

struct Item {
  int kind;
  int64_t k;
};

// Ticket order with lag LP (P <= LP <= NS):
//   tickets [0, LP)                 S_0 .. S_{LP-1}
//   then 2*(NS-LP) tickets          S_{LP+j} (even offset 2j) and A_j (odd offset 2j+1)
//   then the last LP tickets        A_{NS-LP} .. A_{NS-1}
// so A_k comes 2*LP+1 tickets after S_k for LP <= k < NS-LP (fewer outside): the apply re-read
// of a tile comes at most LP stats tiles (x) and LP apply tiles (x hit + y) after its first read.
GNS_HD Item decode(int64_t i, int64_t NS, int64_t LP) {
  Item it;
  if (i < 0 || i >= 2 * NS) {
    it.kind = kEnd;
    it.k = 0;
    return it;
  }
  if (i < LP) {
    it.kind = kStats;
    it.k = i;
    return it;
  }
  const int64_t j = i - LP;
  const int64_t M = NS - LP;
  if (j < 2 * M) {
    it.kind = (j & 1) ? kApply : kStats;
    it.k = (j & 1) ? (j >> 1) : LP + (j >> 1);
  } else {
    it.kind = kApply;
    it.k = M + (j - 2 * M);
  }
  return it;
}

// The inverse of decode (tests and the window arithmetic below).
GNS_HD int64_t stats_ticket(int64_t k, int64_t NS, int64_t LP) {
  (void)NS;
  return k < LP ? k : LP + 2 * (k - LP);
}
GNS_HD int64_t apply_ticket(int64_t k, int64_t NS, int64_t LP) {
  const int64_t M = NS - LP;
  return k < M ? LP + 2 * k + 1 : LP + 2 * M + (k - M);
}

// Deadlock freedom needs every stats tile of A_k's group handed out before A_k:
//   stats_ticket(gi*P + P-1) < apply_ticket(gi*P), which holds for every gi iff LP >= P-1
// (the worst case is the first apply tile of a group against the last stats tile of the same
// group: 2(gP+P-1) - LP < LP + 2gP + 1); choose_lag keeps LP >= P.  The kernel's argument (next to gns_stream_kernel)
// builds on this: the smallest unfinished ticket never waits.
//
// Lag choice.  A CTA takes the ticket of its item i+2 when it starts item i, so an item starts
// about two item-times after its ticket was taken and ends about one item-time later; with R
// resident CTAs, R tickets are taken per item-time.  A_k of a group then finds the group's
// last stats tile finished (no spin) when the ticket gap 2*(LP-P)+3 >= R, i.e. LP >= P + R/2.
// The default slack is 3R/4 (margin for uneven item times).  The x that must stay in L2 until
// its apply re-read is LP tiles: (P + 3R/4) * 16 KB = one group + ~6 MB at R = 528.
// slack_req > 0: LP = P + slack_req tiles; slack_req < 0: LP = NS (all stats before any apply).
GNS_HD int64_t choose_lag(int64_t P, int64_t NS, int64_t resident, int64_t slack_req) {
  int64_t lp;
  if (slack_req < 0) lp = NS;
  else if (slack_req > 0) lp = P + slack_req;
  else lp = P + (3 * resident) / 4;
  if (lp > NS) lp = NS;
  if (lp < P) lp = P;
  return lp;
}

}  // namespace sched
}  // namespace gns
