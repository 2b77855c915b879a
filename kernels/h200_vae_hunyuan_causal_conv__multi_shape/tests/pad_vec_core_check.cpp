// CPU check of dev/pad_cuda/pad_vec_core.cuh (built with g++ by test_pad_vec_core.py): every output vector of a
// replicate pad, over row widths 4-40 and the production widths, left/right pads 0-5, H and T pads, 2- and 4-byte
// elements, against a reference pad; every 16-byte word the core loads must lie inside x's 16-byte-rounded extent.
//   pad_vec_core_check            exit 0 when all match, 1 on the first mismatch (printed)
//   pad_vec_core_check no-merge   the same with the next-row merge left out: must exit 1 (the check can fail)
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "pad_vec_core.cuh"

using kda_pad::Vec16;

static bool g_no_merge = false;
static uintptr_t g_lo = 0, g_hi = 0;  // x's bytes, rounded out to 16
static bool g_oob = false;

struct CheckedLoad {
  Vec16 operator()(const Vec16* p) const {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    if (a < g_lo || a + 16 > g_hi) {
      g_oob = true;
      return Vec16{{0, 0, 0, 0}};
    }
    Vec16 v;
    std::memcpy(&v, p, 16);
    return v;
  }
};

template <typename T>
static int run_case(int B, int C, int T_in, int H, int W, int pwl, int pwr, int phl, int phr, int ptl) {
  constexpr int V = 16 / static_cast<int>(sizeof(T));
  const int To = T_in + ptl, Ho = H + phl + phr, Wo = W + pwl + pwr;
  if (W < V || Wo < V) return 0;
  const long long n_in = 1LL * B * C * T_in * H * W, n_out = 1LL * B * C * To * Ho * Wo;
  // x starts 16-byte aligned (as torch's allocations do); rows then start at every element offset
  T* x = static_cast<T*>(std::aligned_alloc(16, ((n_in * sizeof(T) + 15) / 16) * 16));
  for (long long i = 0; i < n_in; ++i) x[i] = static_cast<T>((i * 2654435761u) >> 7) ^ static_cast<T>(i);
  g_lo = reinterpret_cast<uintptr_t>(x);
  g_hi = g_lo + ((n_in * sizeof(T) + 15) / 16) * 16;
  kda_pad::UniformGeom g{T_in, H, W, Wo, ptl, phl, pwl, kda_pad::FastDiv(Ho), kda_pad::FastDiv(To), 1.0 / Wo};
  int bad = 0;
  const long long n_vec = n_out / V;
  for (long long v = 0; v < n_vec && !bad; ++v) {
    Vec16 got;
    if (g_no_merge) {
      const long long e0 = v * V, r = e0 / Wo;
      got = kda_pad::row_vector(kda_pad::source_row(x, g, static_cast<uint32_t>(r)), static_cast<int>(e0 - r * Wo),
                                W, pwl, CheckedLoad{});
    } else {
      got = kda_pad::pad_vector(x, g, v, CheckedLoad{});
    }
    T vals[V];
    std::memcpy(vals, &got, 16);
    for (int j = 0; j < V; ++j) {
      const long long e = v * V + j;
      const int wo = static_cast<int>(e % Wo);
      const long long r = e / Wo;
      const int ho = static_cast<int>(r % Ho);
      const long long q = r / Ho;
      const int to = static_cast<int>(q % To);
      const long long bc = q / To;
      const int ws = wo - pwl < 0 ? 0 : (wo - pwl > W - 1 ? W - 1 : wo - pwl);
      const int hs = ho - phl < 0 ? 0 : (ho - phl > H - 1 ? H - 1 : ho - phl);
      const int ts = to - ptl < 0 ? 0 : to - ptl;
      const T want = x[((bc * T_in + ts) * H + hs) * W + ws];
      if (vals[j] != want) {
        std::printf("mismatch: %d-byte x[%d,%d,%d,%d,%d] pads w(%d,%d) h(%d,%d) t%d: out element %lld "
                    "(row %lld col %d) = %u, want %u\n", static_cast<int>(sizeof(T)), B, C, T_in, H, W, pwl, pwr,
                    phl, phr, ptl, e, r, wo, static_cast<unsigned>(vals[j]), static_cast<unsigned>(want));
        bad = 1;
        break;
      }
    }
  }
  std::free(x);
  if (g_oob) {
    std::printf("out-of-bounds load: %d-byte x[%d,%d,%d,%d,%d]\n", static_cast<int>(sizeof(T)), B, C, T_in, H, W);
    return 1;
  }
  return bad;
}

template <typename T>
static int sweep(long long* cases) {
  std::vector<int> widths;
  for (int w = 4; w <= 40; ++w) widths.push_back(w);
  for (int w : {80, 128, 212, 256, 424, 848}) widths.push_back(w);
  for (int W : widths) {
    for (int pwl : {0, 1, 2, 3, 5}) {
      for (int pwr : {0, 1, 2}) {
        for (int ph : {0, 1}) {
          for (int ptl : {0, 2}) {
            const int H = W > 100 ? 2 : 3;
            if (run_case<T>(1, 2, 2, H, W, pwl, pwr, ph, ph, ptl)) return 1;
            ++*cases;
          }
        }
      }
    }
  }
  return 0;
}

int main(int argc, char** argv) {
  g_no_merge = argc > 1 && std::strcmp(argv[1], "no-merge") == 0;
  // FastDiv against the hardware division on divisors and numerators around every power of two
  for (uint32_t d = 1; d < 5000; ++d) {
    const kda_pad::FastDiv f(d);
    for (uint32_t n : {0u, 1u, d - 1, d, d + 1, 2 * d - 1, 12345u * d + d - 1, 0x7fffffffu, 0x7ffffffeu}) {
      if (n <= 0x7fffffffu && f.div(n) != n / d) {
        std::printf("FastDiv(%u).div(%u) = %u, want %u\n", d, n, f.div(n), n / d);
        return 1;
      }
    }
  }
  long long cases = 0;
  if (sweep<uint16_t>(&cases) || sweep<uint32_t>(&cases)) return 1;
  std::printf("ok: %lld pad cases\n", cases);
  return 0;
}
