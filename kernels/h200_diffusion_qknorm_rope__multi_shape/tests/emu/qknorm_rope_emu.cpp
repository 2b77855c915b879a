// CPU emulator of c008's CUDA kernel (src/qknorm_rope_core.cuh), built with g++ into a shared library that
// tests/emu_lib.py loads with ctypes.
//
// It runs the kernel's own thread_body for every thread of the planned grid: a warp's 32 lanes are fibers
// (ucontext) switched round-robin at each shuffle, so shuffles exchange values exactly as a warp does (and a
// shuffle some lanes skip is reported, not hung on). Memory goes through a recording policy that checks every
// access: each q/k row vector loaded once and stored once, cache reads inside the row they start in, weights and
// positions in bounds; and the per-lane order the design promises: the PDL wait before the first load, the
// trigger first (early) or last (late), and (double buffer) the next row's q/k load before the current row's
// store. It counts the cache loads (the speculated cache row: an arange needs no second load).
//
// Also exported: the contract (decide), the plan (make_plan) and the float -> bf16/fp16 roundings, for the
// Python tests.
#include <ucontext.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "qknorm_rope_contract.h"
#include "qknorm_rope_core.cuh"

namespace {

using namespace kda_qkr;

struct EmuCall {
  void* q;
  void* k;
  const void* qw;
  const void* kw;
  const void* cache;
  const void* pos;
  int64_t n, hq, hk, d, q_st, q_sh, k_st, k_sh, cache_rows, cache_width;
  int32_t layout, x_f16, cache_kind, pos_64, rope;
  float eps;
  int32_t resident_ctas, pipe_mode, grid_mode, early_trigger;
  // results
  int32_t plan[5];  // pipe, rounds, n_rows, blocks, step_head
  int32_t pad_;
  int64_t cache_loads;  // read-only loads inside the cache (16 or 8 bytes each)
  int64_t shuffles;
};

struct VecCount {
  int loads = 0, stores = 0;
  bool last = false;  // a vector of the last row (N - 1, Hq + Hk - 1): groups past the end load it (clamped)
};

struct State {
  const EmuCall* call = nullptr;
  std::unordered_map<uintptr_t, VecCount> vecs;  // every q/k row vector of 16 bytes
  uintptr_t cache_lo = 0, cache_hi = 0, qw_lo = 0, kw_lo = 0, w_bytes = 0, row_bytes = 0;
  std::vector<std::string> trace;  // per lane of the running warp
  std::string error;
  int64_t prefetched = 0, shuffles = 0, cache_loads = 0;
  // fibers
  ucontext_t main_ctx{};
  ucontext_t fib[32]{};
  std::vector<char> stacks[32];
  float xch[32]{};
  int64_t coll[32]{};
  std::function<void(int)>* body = nullptr;

  void fail(const char* fmt, ...) {
    if (!error.empty()) return;
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    error = buf;
  }
};

State* g = nullptr;

void yield_from(int lane) { swapcontext(&g->fib[lane], &g->fib[(lane + 1) % 32]); }

float exchange(int lane, float v, int src) {
  g->xch[lane] = v;
  ++g->coll[lane];
  yield_from(lane);  // round 1: every lane has written
  for (int i = 0; i < 32; ++i)
    if (g->coll[i] != g->coll[lane]) g->fail("divergent shuffle: lane %d at shuffle %lld, lane %d at %lld", i,
                                             static_cast<long long>(g->coll[i]), lane,
                                             static_cast<long long>(g->coll[lane]));
  const float r = g->xch[src];
  yield_from(lane);  // round 2: every lane has read
  if (lane == 0) ++g->shuffles;
  return r;
}

struct EmuWarp {
  int lane;
  std::string& tr() { return g->trace[lane]; }

  V4 ld_x(const char* p) {
    auto it = g->vecs.find(reinterpret_cast<uintptr_t>(p));
    if (it == g->vecs.end()) {
      g->fail("lane %d loads q/k at %p: not a row vector", lane, static_cast<const void*>(p));
      return V4{0, 0, 0, 0};
    }
    ++it->second.loads;
    tr() += 'X';
    V4 v;
    std::memcpy(&v, p, 16);
    return v;
  }
  void st_x(char* p, const V4& v) {
    auto it = g->vecs.find(reinterpret_cast<uintptr_t>(p));
    if (it == g->vecs.end()) {
      g->fail("lane %d stores q/k at %p: not a row vector", lane, static_cast<void*>(p));
      return;
    }
    ++it->second.stores;
    tr() += 'S';
    std::memcpy(p, &v, 16);
  }
  void check_ro(const char* p, size_t n) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    if (a >= g->cache_lo && a + n <= g->cache_hi) {
      const uintptr_t off = (a - g->cache_lo) % g->row_bytes;
      if (off + n > g->row_bytes) g->fail("lane %d: a cache load crosses a row end", lane);
      tr() += 'C';
      ++g->cache_loads;
      return;
    }
    for (uintptr_t lo : {g->qw_lo, g->kw_lo})
      if (a >= lo && a + n <= lo + g->w_bytes) {
        tr() += 'W';
        return;
      }
    g->fail("lane %d: a read-only load of %zu bytes outside the weights and the cache", lane, n);
  }
  V4 ld_ro16(const char* p) {
    check_ro(p, 16);
    V4 v{0, 0, 0, 0};
    if (g->error.empty()) std::memcpy(&v, p, 16);
    return v;
  }
  V2 ld_ro8(const char* p) {
    check_ro(p, 8);
    V2 v{0, 0};
    if (g->error.empty()) std::memcpy(&v, p, 8);
    return v;
  }
  void touch(const char* p) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    const bool in_w = (a >= g->qw_lo && a < g->qw_lo + g->w_bytes) || (a >= g->kw_lo && a < g->kw_lo + g->w_bytes);
    if (!in_w) g->fail("lane %d: an L1 touch outside the weights", lane);
    tr() += 'W';
  }
  int64_t ld_pos(const void* pos, uint32_t t, bool is64) {
    if (static_cast<int64_t>(t) >= g->call->n) {
      g->fail("lane %d loads position %u of %lld", lane, t, static_cast<long long>(g->call->n));
      return 0;
    }
    tr() += 'P';
    const int64_t v = is64 ? static_cast<const int64_t*>(pos)[t] : static_cast<const int32_t*>(pos)[t];
    if (v < 0 || v >= g->call->cache_rows) g->fail("position %lld outside the cache", static_cast<long long>(v));
    return v < 0 || v >= g->call->cache_rows ? 0 : v;
  }
  float shfl_xor(float v, uint32_t m) { return exchange(lane, v, lane ^ static_cast<int>(m)); }
  float shfl(float v, uint32_t src) { return exchange(lane, v, static_cast<int>(src)); }
  void pdl_trigger() { tr() += 'T'; }
  void pdl_wait() { tr() += 'A'; }
  void prefetch_l2(const char* p, uint32_t bytes) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    if (a < g->cache_lo || a + bytes > g->cache_hi || a % 16 || bytes % 16 || bytes == 0)
      g->fail("an L2 prefetch outside the cache or not in 16-byte units");
    g->prefetched += bytes;
    tr() += 'F';
  }
};

// Per-lane order: wait before any load; trigger first (early) or last (late); with the double buffer (pipe), at
// least one q/k load between consecutive stores after the first (the next row's load is issued before the
// current row's store) where the lane has a next row.
void check_order(int lane, const std::string& t, bool early, bool pipe) {
  const size_t wait = t.find('A');
  const size_t first_load = t.find_first_of("XCWP");
  if (wait == std::string::npos || (first_load != std::string::npos && first_load < wait))
    g->fail("lane %d: a load before griddepcontrol.wait (%s)", lane, t.substr(0, 40).c_str());
  const size_t trig = t.find('T');
  if (trig == std::string::npos || t.find('T', trig + 1) != std::string::npos)
    g->fail("lane %d: launch_dependents not exactly once", lane);
  else if (early ? trig > wait : trig != t.size() - 1)
    g->fail("lane %d: launch_dependents %s", lane, early ? "after the wait" : "not last");
  if (pipe) {  // X (row 0) X (row 1) S (row 0) X (row 2) S (row 1) ... S (last row)
    int stores = 0;
    for (char c : t) stores += c == 'S';
    int xs = 0, ss = 0;
    for (char c : t) {
      if (c == 'X') ++xs;
      if (c == 'S') {
        ++ss;
        if (xs < ss || (ss < stores && xs < ss + 1)) {
          g->fail("lane %d: row %d stored before the next row was loaded (%s)", lane, ss, t.substr(0, 60).c_str());
          return;
        }
      }
    }
  }
}

// Lane i's fiber, from the top of the body; when it returns, lane i + 1 resumes (lane 31: the main context).
__attribute__((noinline)) void setup_fiber(int i) {
  g->coll[i] = 0;
  getcontext(&g->fib[i]);
  g->fib[i].uc_stack.ss_sp = g->stacks[i].data();
  g->fib[i].uc_stack.ss_size = g->stacks[i].size();
  g->fib[i].uc_link = i == 31 ? &g->main_ctx : &g->fib[i + 1];
  makecontext(&g->fib[i], reinterpret_cast<void (*)()>(+[](int lane) { (*g->body)(lane); }), 1, i);
}

template <int D, int LAYOUT, bool XF16, int CK, int PIPE>
void run_grid(const Params& p, uint32_t blocks, bool early) {
  std::function<void(int)> lane_fn;
  uint32_t cur_block = 0, cur_warp = 0;
  lane_fn = [&](int lane) {
    EmuWarp w{lane};
    thread_body<D, LAYOUT, XF16, CK, PIPE>(p, cur_block, cur_warp * 32 + lane, blocks, w);
  };
  g->body = &lane_fn;
  for (int i = 0; i < 32; ++i)
    if (g->stacks[i].empty()) g->stacks[i].resize(1 << 18);
  for (cur_block = 0; cur_block < blocks && g->error.empty(); ++cur_block) {
    for (cur_warp = 0; cur_warp < static_cast<uint32_t>(kWarps) && g->error.empty(); ++cur_warp) {
      g->trace.assign(32, std::string());
      for (int i = 0; i < 32; ++i) setup_fiber(i);
      swapcontext(&g->main_ctx, &g->fib[0]);
      for (int i = 0; i < 32 && g->error.empty(); ++i) check_order(i, g->trace[i], early, PIPE == 1);
    }
  }
}

using Runner = void (*)(const Params&, uint32_t, bool);

template <int D, int LAYOUT, bool XF16, int CK>
Runner pick_rows(uint32_t r) {
  return r == 1 ? run_grid<D, LAYOUT, XF16, CK, 1> : run_grid<D, LAYOUT, XF16, CK, 0>;
}
template <int D, int LAYOUT, bool XF16>
Runner pick_cache(int ck, uint32_t r) {
  if (ck == kCacheF32) return pick_rows<D, LAYOUT, XF16, kCacheF32>(r);
  return XF16 ? pick_rows<D, LAYOUT, XF16, kCacheF16>(r) : pick_rows<D, LAYOUT, XF16, kCacheBF16>(r);
}
template <int D, int LAYOUT>
Runner pick_dtype(bool f16, int ck, uint32_t r) {
  return f16 ? pick_cache<D, LAYOUT, true>(ck, r) : pick_cache<D, LAYOUT, false>(ck, r);
}
template <int D>
Runner pick_layout(int layout, bool f16, int ck, uint32_t r) {
  switch (layout) {
    case kInterleavedHalf: return pick_dtype<D, kInterleavedHalf>(f16, ck, r);
    case kInterleavedFull: return pick_dtype<D, kInterleavedFull>(f16, ck, r);
    case kNeoxHalf: return pick_dtype<D, kNeoxHalf>(f16, ck, r);
    default: return pick_dtype<D, kNeoxFull>(f16, ck, r);
  }
}

}  // namespace

extern "C" {

// Every q/k row vector is stored exactly once and loaded once (the last row's: at least once, groups past the
// end load it and never store). Runs the kernel in place on host memory. Returns 0, or 1 with a message (a failed check).
int kda_qkr_emulate(EmuCall* c, char* msg, int msg_len) {
  State st;
  g = &st;
  st.call = c;
  const int64_t ce = c->cache_kind == kCacheF32 ? 4 : 2;
  st.cache_lo = reinterpret_cast<uintptr_t>(c->cache);
  st.cache_hi = st.cache_lo + static_cast<uintptr_t>(c->cache_rows * c->cache_width * ce);
  st.row_bytes = static_cast<uintptr_t>(c->cache_width * ce);
  st.qw_lo = reinterpret_cast<uintptr_t>(c->qw);
  st.kw_lo = reinterpret_cast<uintptr_t>(c->kw);
  st.w_bytes = static_cast<uintptr_t>(c->d * 2);
  for (int64_t t = 0; t < c->n; ++t)
    for (int which = 0; which < 2; ++which) {
      const int64_t heads = which ? c->hk : c->hq;
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t v = 0; v < c->d / 8; ++v) {
          const int64_t off = which ? t * c->k_st + h * c->k_sh : t * c->q_st + h * c->q_sh;
          const uintptr_t a = reinterpret_cast<uintptr_t>(which ? c->k : c->q) + static_cast<uintptr_t>((off + 8 * v) * 2);
          if (st.vecs.count(a)) {
            std::snprintf(msg, msg_len, "q/k rows overlap (the test's layout)");
            return 1;
          }
          VecCount vc{};
          vc.last = t == c->n - 1 && (c->hk > 0 ? which == 1 : which == 0) && h == heads - 1;
          st.vecs[a] = vc;
        }
    }
  const Plan plan = make_plan(static_cast<uint32_t>(c->n), static_cast<uint32_t>(c->hq + c->hk),
                              static_cast<int>(c->d), static_cast<uint32_t>(c->resident_ctas),
                              static_cast<uint32_t>(c->resident_ctas), c->pipe_mode, c->grid_mode);
  c->plan[0] = static_cast<int32_t>(plan.pipe);
  c->plan[1] = static_cast<int32_t>(plan.rounds);
  c->plan[2] = static_cast<int32_t>(plan.n_rows);
  c->plan[3] = static_cast<int32_t>(plan.blocks);
  c->plan[4] = static_cast<int32_t>(plan.step_head);
  Params p{};
  p.q = c->q;
  p.k = c->k;
  p.qw = c->qw;
  p.kw = c->kw;
  p.cache = c->cache;
  p.pos = c->pos;
  p.q_stride_t = c->q_st;
  p.q_stride_h = c->q_sh;
  p.k_stride_t = c->k_st;
  p.k_stride_h = c->k_sh;
  p.cache_row = c->cache_width;
  p.cache_rows = static_cast<uint32_t>(c->cache_rows);
  p.n_q_heads = static_cast<uint32_t>(c->hq);
  p.rows_per_token = static_cast<uint32_t>(c->hq + c->hk);
  p.rows_magic = div_magic(p.rows_per_token);
  p.n_rows = plan.n_rows;
  p.step_tok = plan.step_tok;
  p.step_head = plan.step_head;
  p.last_tok = static_cast<uint32_t>(c->n - 1);
  p.last_head = p.rows_per_token - 1;
  p.rope_dim = static_cast<uint32_t>(c->rope);
  p.pos_is_64 = static_cast<uint32_t>(c->pos_64);
  p.flags = c->early_trigger ? kEarlyTrigger : 0u;
  p.eps = c->eps;
  set_derived(p, ce);
  Runner run = nullptr;
  const bool f16 = c->x_f16 != 0;
  switch (c->d) {
    case 64: run = pick_layout<64>(c->layout, f16, c->cache_kind, plan.pipe); break;
    case 128: run = pick_layout<128>(c->layout, f16, c->cache_kind, plan.pipe); break;
    case 256: run = pick_layout<256>(c->layout, f16, c->cache_kind, plan.pipe); break;
    default: std::snprintf(msg, msg_len, "head_dim %lld", static_cast<long long>(c->d)); return 1;
  }
  run(p, plan.blocks, c->early_trigger != 0);
  if (st.error.empty()) {
    for (const auto& kv : st.vecs)
      if (kv.second.stores != 1 || kv.second.loads < 1 || (kv.second.loads > 1 && !kv.second.last)) {
        st.fail("a q/k row vector loaded %d and stored %d times", kv.second.loads, kv.second.stores);
        break;
      }
  }
  if (st.error.empty() && st.prefetched != 0) st.fail("an L2 prefetch (c008 has none)");
  c->cache_loads = st.cache_loads;
  c->shuffles = st.shuffles;
  g = nullptr;
  if (!st.error.empty()) {
    std::snprintf(msg, msg_len, "%s", st.error.c_str());
    return 1;
  }
  return 0;
}

int kda_qkr_decide(const CallDesc* c, Decision* out) {
  *out = decide(*c);
  return out->ok;
}

int kda_qkr_kernel_pays(int64_t n_tokens, int64_t q_heads, int64_t k_heads) {
  return kernel_pays(n_tokens, q_heads, k_heads);
}

void kda_qkr_plan(uint32_t n_tokens, uint32_t rows_per_token, int head_dim, uint32_t resident0, uint32_t resident1,
                  int pipe_mode, int grid_mode, uint32_t* out) {
  const Plan p = make_plan(n_tokens, rows_per_token, head_dim, resident0, resident1, pipe_mode, grid_mode);
  out[0] = p.pipe;
  out[1] = p.rounds;
  out[2] = p.n_rows;
  out[3] = p.blocks;
  out[4] = p.step_head;
  out[5] = p.step_tok;
}

// n[i] / d by the kernel's multiply-high (div_by with div_magic), for the Python tests.
void kda_qkr_div(const uint32_t* n, uint32_t* out, int64_t count, uint32_t d) {
  const uint64_t magic = div_magic(d);
  for (int64_t i = 0; i < count; ++i) out[i] = div_by(n[i], d, magic);
}

// float -> bf16 (kind 0) or fp16 (kind 1) bits, as the kernel's host side rounds (the device's cvt.rn).
void kda_qkr_round(const float* in, uint16_t* out, int64_t n, int kind) {
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<uint16_t>(kind ? f16_rn(in[i]) : bf16_rn(in[i]));
}

// fp16 bits -> float, as the kernel's host side widens.
void kda_qkr_widen_f16(const uint16_t* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = f16_to_f(in[i]);
}

}  // extern "C"
