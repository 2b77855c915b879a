// CPU model of path E (c008, gns_stream_kernel; negative on the H200, not in src/: the kernel is at
// commit d0dea7a, its schedule/merge header kept as dev/path_e/gns_sched.h): the ticket schedule and
// the Chan merges are the functions that kernel ran (dev/path_e/gns_sched.h, compiled here by g++);
// the per-thread two-pass, the shfl trees and the fixed-order group merge are re-enacted with those
// merges in the kernel's order.  Built and run by tests/test_stream_model.py:
//   g++ -std=c++17 -O2 -I../dev/path_e stream_model.cpp -o stream_model && ./stream_model
// Exit status 0 = every check passed, including the rejection of each deliberately wrong variant.
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include <algorithm>
#include <random>
#include <vector>

#include "gns_sched.h"

using gns::Stat;
using gns::stat_merge;
namespace sched = gns::sched;

static int g_fail = 0;
#define CHECK(cond, ...)                 \
  do {                                   \
    if (!(cond)) {                       \
      ++g_fail;                          \
      printf("FAIL %s:%d: ", __FILE__, __LINE__); \
      printf(__VA_ARGS__);               \
      printf("\n");                      \
    }                                    \
  } while (0)

// ------------------------------------------------------------------ schedule
// Every S_k and A_k exactly once, tickets past 2*NS are End, the inverse maps agree, every
// apply ticket comes after all stats tickets of its group, and the re-read distance is <= 2*LP+1.
static bool schedule_ok(int64_t total, int64_t P, int64_t LP, bool quiet) {
  const int64_t NS = total * P;
  std::vector<int> seen_s(NS, 0), seen_a(NS, 0);
  std::vector<int64_t> last_stats(total, -1);
  bool ok = true;
  for (int64_t i = 0; i < 2 * NS + 5; ++i) {
    const sched::Item it = sched::decode(i, NS, LP);
    if (i >= 2 * NS) {
      ok &= it.kind == sched::kEnd;
      continue;
    }
    if (it.kind == sched::kStats) {
      ok &= it.k >= 0 && it.k < NS && sched::stats_ticket(it.k, NS, LP) == i;
      if (it.k >= 0 && it.k < NS) ++seen_s[it.k];
      last_stats[it.k / P] = std::max(last_stats[it.k / P], i);
    } else if (it.kind == sched::kApply) {
      ok &= it.k >= 0 && it.k < NS && sched::apply_ticket(it.k, NS, LP) == i;
      if (it.k >= 0 && it.k < NS) ++seen_a[it.k];
    } else {
      ok = false;
    }
  }
  for (int64_t k = 0; k < NS; ++k) ok &= seen_s[k] == 1 && seen_a[k] == 1;
  bool deps = true;
  for (int64_t k = 0; k < NS; ++k) {
    const int64_t a = sched::apply_ticket(k, NS, LP);
    deps &= last_stats[k / P] < a;
    // re-read distance: at most 2*LP+1 tickets, exactly that in the steady state
    const int64_t dist = a - sched::stats_ticket(k, NS, LP);
    ok &= dist <= 2 * LP + 1 && (k < LP || k >= NS - LP || dist == 2 * LP + 1);
  }
  if (!quiet && !(ok && deps))
    printf("schedule total=%lld P=%lld LP=%lld: cover/inverse %d deps %d\n", (long long)total,
           (long long)P, (long long)LP, (int)ok, (int)deps);
  return ok && deps;
}

// ------------------------------------------------------------------ execution
// The kernel's protocol with an adversarial scheduler: CTAs become resident in any order, at
// most `slots` at once (a CTA leaves its slot only when it exits), each resident CTA holds the
// tickets of its current item and of the next two (thread 0 takes ticket i+2 while item i runs),
// processes them in order, and an apply item blocks until its group's stats are published (the
// last stats tile of a group publishes as part of finishing).  Returns true when every item
// finished, false on a deadlock (every resident CTA blocked, none can take a slot).
struct Cta {
  std::vector<int64_t> held;  // tickets in processing order; held[0] is the current item
  bool done = false;
};

static bool simulate(int64_t total, int64_t P, int64_t LP, int grid, int slots, uint32_t seed,
                     int64_t (*decode_k)(int64_t, int64_t, int64_t, int*)) {
  std::mt19937 rng(seed);
  const int64_t NS = total * P;
  int64_t ticket = 0;
  std::vector<int64_t> cnt(total, 0);  // stats tiles finished per group; P -> published
  std::vector<Cta> ctas(grid);
  std::vector<int> waiting(grid), resident;
  for (int i = 0; i < grid; ++i) waiting[i] = i;
  std::shuffle(waiting.begin(), waiting.end(), rng);
  int64_t finished = 0;
  for (;;) {
    while ((int)resident.size() < slots && !waiting.empty()) {  // launch in the shuffled order
      const int c = waiting.back();
      waiting.pop_back();
      ctas[c].held = {ticket, ticket + 1};  // prologue: two tickets
      ticket += 2;
      resident.push_back(c);
    }
    if (resident.empty()) break;
    std::vector<int> runnable;
    for (int c : resident) {
      const int64_t cur = ctas[c].held[0];
      int kind;
      const int64_t k = decode_k(cur, NS, LP, &kind);
      if (kind == sched::kApply && cnt[k / P] < P) continue;  // spins
      runnable.push_back(c);
    }
    if (runnable.empty()) return false;  // deadlock
    const int c = runnable[rng() % runnable.size()];
    Cta& a = ctas[c];
    const int64_t cur = a.held[0];
    int kind;
    const int64_t k = decode_k(cur, NS, LP, &kind);
    if (kind == sched::kEnd) {  // the kernel breaks out: the CTA exits and frees its slot
      a.done = true;
      resident.erase(std::find(resident.begin(), resident.end(), c));
      continue;
    }
    a.held.push_back(ticket++);  // ticket of item i+2, taken while item i runs
    if (kind == sched::kStats) ++cnt[k / P];
    ++finished;
    a.held.erase(a.held.begin());
  }
  return finished == 2 * NS;
}

static int64_t decode_right(int64_t i, int64_t NS, int64_t LP, int* kind) {
  const sched::Item it = sched::decode(i, NS, LP);
  *kind = it.kind;
  return it.k;
}

// WRONG on purpose: applies handed out first, stats after (no lag at all).
static int64_t decode_applies_first(int64_t i, int64_t NS, int64_t LP, int* kind) {
  (void)LP;
  if (i >= 2 * NS) {
    *kind = sched::kEnd;
    return 0;
  }
  *kind = i < NS ? sched::kApply : sched::kStats;
  return i < NS ? i : i - NS;
}

// ------------------------------------------------------------------ statistics
constexpr int kThreads = 256, kU = 4;

// shfl_down tree of the kernel's warp_merge_down: lanes past the end read their own value.
static Stat warp_merge_down(std::vector<Stat> v) {
  for (int off = 16; off > 0; off >>= 1) {
    std::vector<Stat> o(32);
    for (int l = 0; l < 32; ++l) o[l] = stat_merge(v[l], l + off < 32 ? v[l + off] : v[l]);
    v = o;
  }
  return v[0];
}

// Tile t of a group: the kernel's per-thread two-pass (4 accumulators, shifted by K), warp
// trees, CTA tree over the 8 warp partials.
static Stat tile_partial(const std::vector<float>& g, int VEC, int t, float K) {
  const int64_t dvec = (int64_t)g.size() / VEC;
  std::vector<Stat> warps(32, Stat{0.f, 0.f, 0.f});
  for (int w = 0; w < kThreads / 32; ++w) {
    std::vector<Stat> lanes(32);
    for (int l = 0; l < 32; ++l) {
      const int64_t base = (int64_t)t * kThreads * kU + w * 32 + l;
      const int nvalid = base >= dvec ? 0 : (int)std::min<int64_t>(kU, (dvec - 1 - base) / kThreads + 1);
      Stat st{0.f, 0.f, 0.f};
      if (nvalid > 0) {
        float s[4] = {0.f, 0.f, 0.f, 0.f}, q[4] = {0.f, 0.f, 0.f, 0.f};
        for (int k = 0; k < nvalid; ++k)
          for (int i = 0; i < VEC; ++i) s[i & 3] += g[(base + (int64_t)k * kThreads) * VEC + i] - K;
        const float n = (float)(nvalid * VEC);
        const float m = ((s[0] + s[1]) + (s[2] + s[3])) / n;
        for (int k = 0; k < nvalid; ++k)
          for (int i = 0; i < VEC; ++i) {
            const float d = (g[(base + (int64_t)k * kThreads) * VEC + i] - K) - m;
            q[i & 3] = fmaf(d, d, q[i & 3]);
          }
        st = Stat{n, m, (q[0] + q[1]) + (q[2] + q[3])};
      }
      lanes[l] = st;
    }
    warps[w] = warp_merge_down(lanes);
  }
  return warp_merge_down(warps);  // lanes 8..31 of warp 0 hold empty partials
}

// The last CTA's fixed-order merge: lane l takes partials l, l+32, ... in index order, then the tree.
static Stat group_merge_fixed(const std::vector<Stat>& part) {
  std::vector<Stat> lanes(32, Stat{0.f, 0.f, 0.f});
  for (int l = 0; l < 32; ++l)
    for (size_t i = l; i < part.size(); i += 32) lanes[l] = stat_merge(lanes[l], part[i]);
  return warp_merge_down(lanes);
}

// WRONG on purpose: merge in the order the tiles finished (what an atomic accumulator would do).
static Stat group_merge_completion_order(const std::vector<Stat>& part, const std::vector<int>& order) {
  Stat m{0.f, 0.f, 0.f};
  for (int i : order) m = stat_merge(m, part[i]);
  return m;
}

// WRONG on purpose: single-pass fp32 E[x^2] - mean^2 (what SGLang does).
static Stat naive_moments(const std::vector<float>& g) {
  float s = 0.f, s2 = 0.f;
  for (float v : g) {
    s += v;
    s2 += v * v;
  }
  const float n = (float)g.size();
  const float m = s / n;
  return Stat{n, m, (s2 / n - m * m) * n};
}

struct Ref {
  double mean, var;
};
static Ref ref64(const std::vector<float>& g) {
  double s = 0;
  for (float v : g) s += v;
  const double m = s / g.size();
  double q = 0;
  for (float v : g) q += ((double)v - m) * ((double)v - m);
  return Ref{m, q / g.size()};
}

// The error that reaches y: |mean error| / std and the relative error of rstd.
static double stat_err(Stat st, float K, const Ref& r, bool shifted) {
  const double mean = (double)st.mean + (shifted ? (double)K : 0.0);
  const double var = std::max(0.0, (double)st.m2 / st.n);
  const double sd = sqrt(r.var);
  const double e_mean = fabs(mean - r.mean) / std::max(sd, 1e-30);
  const double e_rstd = var > 0 ? fabs(sqrt(r.var / var) - 1.0) : 1.0;  // var 0: rstd = 1/sqrt(eps)
  return std::min(1e30, std::max(e_mean, e_rstd));
}

int main() {
  // 1. schedule: coverage, inverse, dependencies, constant re-read distance
  int n_sched = 0;
  for (int64_t total : {1, 2, 3, 32, 64})
    for (int64_t P : {1, 2, 5, 34, 137})
      for (int64_t slack : {0, 1, 7, 100, -1}) {
        const int64_t NS = total * P;
        for (int64_t R : {1, 8, 396, 528}) {
          const int64_t LP = sched::choose_lag(P, NS, R, slack);
          CHECK(LP >= P && LP <= std::max(NS, P), "choose_lag P=%lld LP=%lld", (long long)P, (long long)LP);
          CHECK(schedule_ok(total, P, LP, false), "schedule total=%lld P=%lld LP=%lld", (long long)total,
                (long long)P, (long long)LP);
          ++n_sched;
        }
      }
  // the wrong lag LP = P-2 breaks the dependency order (rejected); P-1 is the exact limit
  CHECK(!schedule_ok(4, 8, 6, true), "LP = P-2 must violate the dependency order");
  CHECK(schedule_ok(4, 8, 7, true), "LP = P-1 is still ordered (the limit)");
  printf("schedule: %d configurations ok; LP = P-2 rejected\n", n_sched);

  // 2. execution under adversarial residency: completes for LP >= P whatever the slots
  int n_sim = 0;
  for (uint32_t seed = 1; seed <= 40; ++seed)
    for (int slots : {1, 2, 3, 7, 64})
      for (int64_t P : {1, 3, 16}) {
        const int64_t total = 1 + seed % 5, NS = total * P;
        const int grid = 1 + (int)(seed * 7 % 24);
        const int64_t LP = sched::choose_lag(P, NS, grid, seed % 3 == 0 ? 0 : (seed % 3 == 1 ? 1 : -1));
        CHECK(simulate(total, P, LP, grid, slots, seed, decode_right), "deadlock total=%lld P=%lld LP=%lld grid=%d slots=%d",
              (long long)total, (long long)P, (long long)LP, grid, slots);
        ++n_sim;
      }
  // wrong variants: applies first, and LP = P-2, deadlock with one resident CTA (rejected)
  CHECK(!simulate(3, 8, 8, 4, 1, 5, decode_applies_first), "applies-first schedule must deadlock");
  CHECK(!simulate(2, 8, 6, 1, 1, 5, decode_right), "LP = P-2 must deadlock with one CTA");
  printf("execution: %d adversarial runs complete; applies-first and LP = P-2 deadlock (rejected)\n", n_sim);

  // 3. statistics against fp64: offset rows (1e4 + N(0, s)), plain rows, ragged last tiles
  std::mt19937 rng(12345);
  struct Case {
    int64_t n;
    int VEC;
    double off, sd;
  };
  const Case cases[] = {{8192 * 3 + 8 * 37, 8, 0.0, 1.0},  {16384 * 5, 8, 1e4, 100.0},
                        {16384 * 5 + 8, 8, 1e4, 0.01},     {4096 * 9 + 4 * 3, 4, 1e4, 0.01},
                        {300006, 2, -3.0, 0.5},            {524288, 8, 0.0, 1e-3}};
  double worst = 0, worst_naive = 0;
  int n_det = 0;
  bool order_bits_differ = false;
  for (const Case& c : cases) {
    std::normal_distribution<float> nd(0.f, 1.f);
    std::vector<float> g(c.n);
    for (auto& v : g) v = (float)(c.off + c.sd * nd(rng));
    const float K = g[0];
    const int64_t dvec = c.n / c.VEC;
    const int P = (int)((dvec + kThreads * kU - 1) / (kThreads * kU));
    std::vector<Stat> part(P);
    for (int t = 0; t < P; ++t) part[t] = tile_partial(g, c.VEC, t, K);
    const Stat st = group_merge_fixed(part);
    const Ref r = ref64(g);
    const double e = stat_err(st, K, r, true);
    worst = std::max(worst, e);
    CHECK(st.n == (float)c.n, "count %g != %lld", st.n, (long long)c.n);
    CHECK(e < 2e-5, "two-pass/Chan error %.3g (n=%lld off=%g sd=%g)", e, (long long)c.n, c.off, c.sd);
    // determinism: any completion order gives the same bits (the merge reads partials by index)
    std::vector<int> order(P);
    for (int i = 0; i < P; ++i) order[i] = i;
    for (int rep = 0; rep < 8; ++rep) {
      std::shuffle(order.begin(), order.end(), rng);
      std::vector<Stat> shuffled_arrival = part;  // the values do not depend on arrival
      const Stat again = group_merge_fixed(shuffled_arrival);
      CHECK(again.mean == st.mean && again.m2 == st.m2 && again.n == st.n, "fixed-order merge not deterministic");
      ++n_det;
      const Stat wrong = group_merge_completion_order(part, order);
      if (P > 2 && (wrong.mean != st.mean || wrong.m2 != st.m2)) order_bits_differ = true;
    }
    const Stat nv = naive_moments(g);
    worst_naive = std::max(worst_naive, stat_err(nv, 0.f, r, false));
  }
  CHECK(order_bits_differ, "the completion-order merge should change the bits for some order");
  CHECK(worst_naive > 1e-2, "E[x^2]-mean^2 in fp32 must miss the offset rows (error %.3g)", worst_naive);
  printf("stats: worst error %.3g (limit 2e-5) over %zu groups; %d shuffled completions bitwise equal; "
         "completion-order merge changes bits (rejected); E[x^2]-mean^2 error %.3g (rejected)\n",
         worst, sizeof(cases) / sizeof(cases[0]), n_det, worst_naive);

  if (g_fail) {
    printf("FAILED: %d checks\n", g_fail);
    return 1;
  }
  printf("ALL OK\n");
  return 0;
}
