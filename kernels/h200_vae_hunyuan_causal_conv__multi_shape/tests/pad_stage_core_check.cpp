// CPU check of dev/pad_cuda/pad_stage_core.cuh (built with g++ by test_pad_stage_core.py): pad_stage.cu's whole
// chunk loop run on the CPU, every work item and every thread of the block, against a reference replicate pad.
// Widths 1-40, 99, 130 and the production widths (80-848, output 82-850), left/right W pads 0-2, H pads 0-2,
// front T pads 0-2 (and back pads; plus the sweep's check pads (3, 0, 2, 5, 1, 2)), 2- and 4-byte elements, chunk targets from one row to 16 KB, 256 and 96
// threads. Checked per case: every output element written exactly once and equal to the reference; every stage
// within its buffer; every staged word inside x's 16-byte-rounded extent; every shared-memory read inside the
// words the chunk staged. Both vector paths run: once chosen per lane (fast where the vector is interior), once
// with the general path everywhere (the kernel's warp-uniform choice mixes the two per step).
//   pad_stage_core_check               exit 0 when all match, 1 on the first failure (printed)
//   pad_stage_core_check fast-only     the fast path for every vector (no W pad, no straddle): must exit 1 with
//                                      a mismatch (its reads past the stage return zeros instead of failing)
//   pad_stage_core_check stage-short   each chunk stages one word fewer than it plans: must exit 1 with an
//                                      out-of-bounds stage read
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "pad_stage_core.cuh"

using kda_pad::Vec16;

enum class Mode { kNormal, kFastOnly, kStageShort };
static Mode g_mode = Mode::kNormal;
static bool g_bad_read = false;

template <typename T>
struct CheckedStage {
  const Vec16* words;
  int n_words;  // words actually staged
  Vec16 word(int k) const {
    if (k < 0 || k >= n_words) {
      // fast-only reads past its row on purpose: let the value check, not the bounds check, reject it
      g_bad_read = g_bad_read || g_mode != Mode::kFastOnly;
      return Vec16{{0, 0, 0, 0}};
    }
    return words[k];
  }
  T elem(int i) const {
    constexpr int V = kda_pad::stage_vec<T>();
    if (i < 0 || i >= n_words * V) {
      g_bad_read = g_bad_read || g_mode != Mode::kFastOnly;
      return T(0);
    }
    T v;
    std::memcpy(&v, reinterpret_cast<const unsigned char*>(words) + static_cast<size_t>(i) * sizeof(T), sizeof(T));
    return v;
  }
};

struct PickLane {  // per lane: the fast path exactly where the vector is interior
  bool operator()(bool, bool interior) const { return interior; }
};
struct PickGeneral {
  bool operator()(bool, bool) const { return false; }
};
struct PickFast {  // wrong on purpose
  bool operator()(bool, bool) const { return true; }
};

template <typename T>
static T ref_value(const T* x, long long e, int T_in, int H, int W, int To, int Ho, int Wo, int pt, int ph, int pw) {
  const int wo = static_cast<int>(e % Wo);
  const long long r = e / Wo;
  const int ho = static_cast<int>(r % Ho);
  const long long q = r / Ho;
  const int to = static_cast<int>(q % To);
  const long long bc = q / To;
  const int ws = kda_pad::clamp_i(wo - pw, 0, W - 1);
  const int hs = kda_pad::clamp_i(ho - ph, 0, H - 1);
  const int ts = kda_pad::clamp_i(to - pt, 0, T_in - 1);
  return x[((bc * T_in + ts) * H + hs) * W + ws];
}

template <typename T, typename Pick>
static int run_pick(const T* x, long long n_in, const kda_pad::StageGeom& g, int B, int C, int nt, Pick pick,
                    const char* what) {
  constexpr int V = kda_pad::stage_vec<T>();
  const long long n_out = 1LL * B * C * g.To * g.Ho * g.Wo;
  const uintptr_t x_words = ((n_in * sizeof(T) + 15) / 16);
  std::vector<Vec16> out_buf((n_out * sizeof(T) + 15) / 16 + 1);
  std::vector<unsigned char> count(n_out, 0);
  T* out = reinterpret_cast<T*>(out_buf.data());
  std::vector<Vec16> stage(g.cap_words + 1);
  g_bad_read = false;
  for (long long w = 0; w < g.n_work; ++w) {
    const kda_pad::ChunkPlan cp = kda_pad::plan_chunk<T>(g, static_cast<uint32_t>(w));
    if (cp.n_words > g.cap_words || cp.word0 < 0 || cp.word0 + cp.n_words > static_cast<long long>(x_words)) {
      std::printf("stage out of range: work item %lld stages words [%lld, %lld), buffer %d, x has %lld\n", w,
                  cp.word0, cp.word0 + cp.n_words, g.cap_words, static_cast<long long>(x_words));
      return 1;
    }
    const int staged = g_mode == Mode::kStageShort ? cp.n_words - 1 : cp.n_words;
    for (auto& s : stage) s = Vec16{{0xdeadbeefu, 0xdeadbeefu, 0xdeadbeefu, 0xdeadbeefu}};
    std::memcpy(stage.data(), reinterpret_cast<const Vec16*>(x) + cp.word0, static_cast<size_t>(staged) * 16);
    const CheckedStage<T> src{stage.data(), staged};
    for (int t = 0; t < nt; ++t) {
      kda_pad::write_chunk<T>(
          g, cp, src, t, nt, pick,
          [&](long long v, const Vec16& val) {
            std::memcpy(out + v * V, &val, 16);
            for (int j = 0; j < V; ++j) ++count[v * V + j];
          },
          [&](long long e, T val) {
            out[e] = val;
            ++count[e];
          });
    }
  }
  if (g_bad_read) {
    std::printf("out-of-bounds stage read (%s)\n", what);
    return 1;
  }
  for (long long e = 0; e < n_out; ++e) {
    const T want = ref_value(x, e, g.T_in, g.H, g.W, g.To, g.Ho, g.Wo, g.pad_t, g.pad_h, g.pad_w);
    if (count[e] != 1 || out[e] != want) {
      std::printf("mismatch (%s): out element %lld of %lld written %d times, = %u, want %u\n", what, e, n_out,
                  count[e], static_cast<unsigned>(out[e]), static_cast<unsigned>(want));
      return 1;
    }
  }
  return 0;
}

template <typename T>
static int run_case(int B, int C, int T_in, int H, int W, int pwl, int pwr, int phl, int phr, int ptl, int ptr,
                    int chunk_bytes, int nt, long long* cases) {
  const int To = T_in + ptl + ptr, Ho = H + phl + phr, Wo = W + pwl + pwr;
  kda_pad::StageGeom g;
  const int rc = kda_pad::make_stage_geom<T>(&g, B, C, T_in, H, W, To, Ho, Wo, ptl, phl, pwl, chunk_bytes, nt);
  if (rc == 1) return 0;  // Wo < V: the launcher's element kernel
  if (rc != 0) {
    std::printf("make_stage_geom refused a small shape (%d)\n", rc);
    return 1;
  }
  const long long n_in = 1LL * B * C * T_in * H * W;
  // x starts 16-byte aligned (torch's allocations do); planes and rows then start at every element offset
  T* x = static_cast<T*>(std::aligned_alloc(16, ((n_in * sizeof(T) + 15) / 16) * 16));
  for (long long i = 0; i < n_in; ++i) x[i] = static_cast<T>(((i + 1) * 2654435761u) >> 9) ^ static_cast<T>(i);
  int bad = 0;
  if (g_mode == Mode::kFastOnly) {
    bad = run_pick(x, n_in, g, B, C, nt, PickFast{}, "fast path everywhere");
  } else {
    bad = run_pick(x, n_in, g, B, C, nt, PickLane{}, "per-lane pick");
    if (!bad) bad = run_pick(x, n_in, g, B, C, nt, PickGeneral{}, "general path everywhere");
  }
  if (bad) {
    std::printf("  case: %d-byte x[%d,%d,%d,%d,%d] pads w(%d,%d) h(%d,%d) t(%d,%d), chunk %d B, %d threads, "
                "%d rows per chunk\n", static_cast<int>(sizeof(T)), B, C, T_in, H, W, pwl, pwr, phl, phr, ptl, ptr,
                chunk_bytes, nt, g.rows);
  }
  std::free(x);
  ++*cases;
  return bad;
}

template <typename T>
static int sweep(long long* cases) {
  std::vector<int> widths;
  for (int w = 1; w <= 40; ++w) widths.push_back(w);
  for (int w : {80, 99, 128, 130, 212, 256, 424, 848}) widths.push_back(w);
  const int h_pads[][2] = {{0, 0}, {1, 1}, {2, 0}, {0, 2}};
  for (int W : widths) {
    const int H = W > 100 ? 3 : 5;
    for (int pwl = 0; pwl <= 2; ++pwl) {
      for (int pwr = 0; pwr <= 2; ++pwr) {
        for (const auto& ph : h_pads) {
          for (int ptl : {0, 2}) {
            for (int chunk : {1, 300, 16384}) {
              if (run_case<T>(1, 2, 2, H, W, pwl, pwr, ph[0], ph[1], ptl, 0, chunk, 256, cases)) return 1;
            }
          }
        }
      }
    }
  }
  // odd block sizes, a T pad of 1 at both ends, a batch of 2, an H of 1, the sweep's pads (3, 0, 2, 5, 1, 2)
  for (int W : {7, 13, 82, 99, 848}) {
    if (run_case<T>(2, 3, 3, 4, W, 1, 1, 1, 1, 1, 1, 500, 96, cases)) return 1;
    if (run_case<T>(1, 3, 2, 1, W, 2, 1, 0, 2, 2, 0, 1, 96, cases)) return 1;
    if (run_case<T>(1, 2, 1, 41, W, 3, 0, 2, 5, 1, 2, 2000, 256, cases)) return 1;
  }
  return 0;
}

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "fast-only") == 0) g_mode = Mode::kFastOnly;
  if (argc > 1 && std::strcmp(argv[1], "stage-short") == 0) g_mode = Mode::kStageShort;
  long long cases = 0;
  if (sweep<uint16_t>(&cases) || sweep<uint32_t>(&cases)) return 1;
  std::printf("ok: %lld pad cases\n", cases);
  return 0;
}
