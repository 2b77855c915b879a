// The index logic of pad_stage.cu (a block per chunk of an output plane, the chunk's source rows staged in shared
// memory with aligned 16-byte copies, the output written as aligned 16-byte vectors gathered from shared memory).
//
// __host__ __device__ and free of intrinsics, so tests/test_pad_stage_core.py builds it with g++ and runs the
// whole chunk loop on the CPU (every work item, every thread's cursor, both vector paths, head and tail scalars)
// against a reference pad. The kernel supplies only what the CPU cannot run: cp.async for the stage, shared
// memory reads, __all_sync to pick the fast path warp by warp.
//
// Shapes: x contiguous [B, C, T, H, W], out contiguous [B, C, To, Ho, Wo]; out rows < 2^31 per launch's work
// items; Wo >= V (V = 16 / sizeof(T)): a 16-byte output vector then spans at most two output rows. Narrower
// outputs go to the launcher's element kernel.
#pragma once
#include <cstdint>

#include "pad_vec_core.cuh"

namespace kda_pad {

// Launch constants, built on the host by make_stage_geom.
struct StageGeom {
  int T_in, H, W, To, Ho, Wo, pad_t, pad_h, pad_w;
  int rows;            // output rows per chunk (the last chunk of a plane may hold fewer)
  int cap_words;       // 16-byte words of one stage buffer: the most any chunk stages
  int step_r, step_c;  // threads * V output elements, as whole rows plus a column remainder
  long long n_work;    // chunks: output planes * chunks per plane
  FastDiv cpp, to, wo;  // chunks per plane, To, Wo
};

template <typename T>
__host__ __device__ constexpr int stage_vec() {
  return 16 / static_cast<int>(sizeof(T));
}

__host__ __device__ __forceinline__ int imin(int a, int b) { return a < b ? a : b; }
__host__ __device__ __forceinline__ int imax(int a, int b) { return a > b ? a : b; }
// written as min(max()) so nvcc emits two IMNMX, not a compare and two selects (lo <= hi everywhere here)
__host__ __device__ __forceinline__ int clamp_i(int v, int lo, int hi) { return imin(imax(v, lo), hi); }

// 0 on success; 1 when Wo < V (the vector path needs Wo >= V), 2 when the launch is outside the int32 index range
// the kernel uses. chunk_bytes is the target staged source bytes per chunk: at least one source row.
template <typename T>
inline int make_stage_geom(StageGeom* g, int B, int C, int T_in, int H, int W, int To, int Ho, int Wo, int pad_t,
                           int pad_h, int pad_w, int chunk_bytes, int threads) {
  constexpr int V = stage_vec<T>();
  if (Wo < V) return 1;
  const long long row_bytes = static_cast<long long>(W) * static_cast<long long>(sizeof(T));
  long long want = chunk_bytes / row_bytes;
  if (want < 1) want = 1;
  if (want > Ho) want = Ho;
  // as many rows per chunk as the target allows, spread evenly so a plane's last chunk is not a sliver
  const long long n_chunks = (Ho + want - 1) / want;
  const long long rows = (Ho + n_chunks - 1) / n_chunks;
  const long long planes = static_cast<long long>(B) * C * To;
  const long long n_work = planes * n_chunks;
  if (n_work >= (1LL << 31) || rows * Wo >= (1LL << 31) || rows * W + 2 * V >= (1LL << 31)) return 2;
  g->T_in = T_in;
  g->H = H;
  g->W = W;
  g->To = To;
  g->Ho = Ho;
  g->Wo = Wo;
  g->pad_t = pad_t;
  g->pad_h = pad_h;
  g->pad_w = pad_w;
  g->rows = static_cast<int>(rows);
  // a staged span of rows * W elements starts anywhere in its first word: at most 2 words beyond rows * W / V
  g->cap_words = static_cast<int>((rows * W + 2 * V - 2) / V);
  g->step_r = threads * V / Wo;
  g->step_c = threads * V % Wo;
  g->n_work = n_work;
  g->cpp = FastDiv(static_cast<uint32_t>(n_chunks));
  g->to = FastDiv(static_cast<uint32_t>(To));
  g->wo = FastDiv(static_cast<uint32_t>(Wo));
  return 0;
}

// One work item: output rows [ho0, ho0 + n_out / Wo) of one output plane, and the x words staged for it.
struct ChunkPlan {
  long long out0;   // flat output index of the chunk's first element
  long long word0;  // first staged 16-byte word of x
  int n_out;        // output elements of the chunk
  int n_words;      // staged words
  int ho0;          // first output row
  int hs0;          // first staged source row
  int lead;         // element offset of source row hs0 in the stage buffer
};

template <typename T>
__host__ __device__ __forceinline__ ChunkPlan plan_chunk(const StageGeom& g, uint32_t w) {
  constexpr int V = stage_vec<T>();
  const uint32_t p = g.cpp.div(w);
  const int k = static_cast<int>(w - p * g.cpp.d);
  const uint32_t bc = g.to.div(p);  // b * C + c: x and out are contiguous, so (b, c) need not be split
  const int to = static_cast<int>(p - bc * g.to.d);
  const int ts = clamp_i(to - g.pad_t, 0, g.T_in - 1);
  const int ho0 = k * g.rows;
  const int nrows = g.Ho - ho0 < g.rows ? g.Ho - ho0 : g.rows;
  // the output rows' source rows are a contiguous, non-decreasing run: stage just that run
  const int hs0 = clamp_i(ho0 - g.pad_h, 0, g.H - 1);
  const int hs1 = clamp_i(ho0 + nrows - 1 - g.pad_h, 0, g.H - 1);
  const long long plane = (static_cast<long long>(bc) * g.T_in + ts) * g.H;
  const long long e0 = (plane + hs0) * g.W, e1 = (plane + hs1 + 1) * g.W;
  ChunkPlan cp;
  cp.word0 = e0 / V;
  cp.n_words = static_cast<int>((e1 + V - 1) / V - cp.word0);
  cp.lead = static_cast<int>(e0 - cp.word0 * V);
  cp.out0 = (static_cast<long long>(p) * g.Ho + ho0) * g.Wo;
  cp.n_out = nrows * g.Wo;
  cp.ho0 = ho0;
  cp.hs0 = hs0;
  return cp;
}

// Stage element index of column 0 of the source row that chunk row lr reads (the H pad is this clamp).
__host__ __device__ __forceinline__ int stage_row(const StageGeom& g, const ChunkPlan& cp, int lr) {
  return (clamp_i(cp.ho0 + lr - g.pad_h, 0, g.H - 1) - cp.hs0) * g.W + cp.lead;
}

// A vector whose V source elements are contiguous in one staged row: two aligned 16-byte stage words and a
// shift (pad_vec_core's shift_window), instead of V scalar reads that conflict 4 ways on the shared-memory banks.
template <typename T, typename Src>
__host__ __device__ __forceinline__ Vec16 vector_fast(const Src& src, int idx0) {
  constexpr int V = stage_vec<T>();
  const int k = idx0 / V;
  const uint32_t off = static_cast<uint32_t>(idx0 - k * V) * static_cast<uint32_t>(sizeof(T));
  const Vec16 lo = src.word(k);
  const Vec16 hi = src.word(k + (off ? 1 : 0));  // only when the elements reach into it: stays inside the stage
  return shift_window(lo, hi, off);
}

// Any vector: element by element, row lr's part then row lr + 1's (the straddle), each column clamped (the W pad).
// Per element: which row (one compare with a constant j), its unclamped column, the clamp, the address: ~8
// instructions with the 2-byte read.
template <typename T, typename Src>
__host__ __device__ __forceinline__ Vec16 vector_general(const StageGeom& g, const Src& src, int row_a, int row_b,
                                                         int c) {
  constexpr int V = stage_vec<T>();
  const int u_a = c - g.pad_w, u_b = u_a - g.Wo;  // source column of element 0, in row lr's and row lr + 1's terms
  const int n_a = g.Wo - c;                      // elements of the vector in row lr (>= 1)
  union {
    Vec16 v;
    T t[V];
  } pack;
  for (int j = 0; j < V; ++j) {
    const bool in_b = j >= n_a;
    const int col = clamp_i((in_b ? u_b : u_a) + j, 0, g.W - 1);
    pack.t[j] = src.elem((in_b ? row_b : row_a) + col);
  }
  return pack.v;
}

// Thread t of nt writes its share of chunk cp from the staged source:
//   - the scalar head (output elements before the chunk's first 16-byte boundary) and tail, one element per
//     thread for threads [0, n_head + n_tail);
//   - aligned vectors t, t + nt, ...: the vector's (row, column) advances by a fixed (step_r, step_c) per step,
//     so the only division is one multiply-high per thread per chunk.
// pick(active, interior) says whether this step takes vector_fast; the kernel makes it warp-uniform
// (__all_sync), the CPU check calls it per lane or forces either path. Every thread of the block must run the
// loop the same number of times (the step count depends only on the chunk).
template <typename T, typename Src, typename Pick, typename StoreVec, typename StoreElem>
__host__ __device__ __forceinline__ void write_chunk(const StageGeom& g, const ChunkPlan& cp, const Src& src, int t,
                                                     int nt, Pick pick, StoreVec store_vec, StoreElem store_elem) {
  constexpr int V = stage_vec<T>();
  const long long out1 = cp.out0 + cp.n_out;
  const long long v_first = (cp.out0 + V - 1) / V, v_end = out1 / V;
  const long long head_end = v_first * V < out1 ? v_first * V : out1;
  const long long tail0 = v_end * V > head_end ? v_end * V : head_end;
  const int n_head = static_cast<int>(head_end - cp.out0), n_tail = static_cast<int>(out1 - tail0);
  if (t < n_head + n_tail) {
    const int el = t < n_head ? t : static_cast<int>(tail0 - cp.out0) + (t - n_head);
    const int lr = static_cast<int>(g.wo.div(static_cast<uint32_t>(el)));
    const int c = el - lr * g.Wo;
    store_elem(cp.out0 + el, src.elem(stage_row(g, cp, lr) + clamp_i(c - g.pad_w, 0, g.W - 1)));
  }
  const int n_vec = v_end > v_first ? static_cast<int>(v_end - v_first) : 0;
  const int e = static_cast<int>(v_first * V - cp.out0) + t * V;
  int lr = static_cast<int>(g.wo.div(static_cast<uint32_t>(e)));
  int c = e - lr * g.Wo;
  for (int q0 = 0; q0 < n_vec; q0 += nt) {
    const int q = q0 + t;
    const bool active = q < n_vec;
    // all V source columns inside [0, W) and no straddle (pad_w + W <= Wo)
    const bool interior = c >= g.pad_w && c <= g.pad_w + g.W - V;
    const int row_a = stage_row(g, cp, lr);
    Vec16 val{};
    if (pick(active, interior)) {
      if (active) val = vector_fast<T>(src, row_a + c - g.pad_w);
    } else if (active) {
      val = vector_general<T>(g, src, row_a, stage_row(g, cp, lr + 1), c);
    }
    if (active) store_vec(v_first + q, val);
    c += g.step_c;
    lr += g.step_r;
    if (c >= g.Wo) {
      c -= g.Wo;
      ++lr;
    }
  }
}

}  // namespace kda_pad
