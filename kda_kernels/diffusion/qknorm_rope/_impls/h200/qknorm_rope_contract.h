// c007-c009: which calls the CUDA kernel takes (prompt.md K); everything else goes to SGLang's function.
//
// Plain C++ (no CUDA, no torch): the torch binding (qknorm_rope_binding.cpp) describes a call's six tensors
// here and launches only when decide() says ok; the CPU emulator (tests/emu) exposes the same function to the
// Python tests, which walk every fallback branch with it.
#pragma once

#include <cstdint>

namespace kda_qkr {

enum DType : int32_t { kOther = 0, kF16 = 1, kBF16 = 2, kF32 = 3, kI32 = 4, kI64 = 5 };

struct TensorDesc {
  int32_t dim;
  int32_t dtype;  // DType
  int32_t is_cuda;
  int32_t device;  // CUDA device index
  int32_t requires_grad;
  int32_t pad_;
  int64_t sizes[3];
  int64_t strides[3];
  uint64_t addr;  // data pointer
};

enum Slot : int { kQ = 0, kK = 1, kQW = 2, kKW = 3, kCache = 4, kPos = 5 };

struct CallDesc {
  TensorDesc t[6];  // q, k, q_weight, k_weight, cos_sin_cache, positions
  int64_t head_dim, rope_dim;
  int32_t is_neox, full_width;
  int32_t current_device;  // torch's current CUDA device
  int32_t cc_major, cc_minor;  // of the tensors' device
  int32_t grad_mode;  // autograd recording on
};

struct Decision {
  int32_t ok;  // the kernel takes the call
  int32_t empty;  // ok, and there is nothing to do (N == 0 or Hq + Hk == 0)
  int32_t layout;  // Layout
  int32_t rope;
  int32_t head_dim;
  int32_t x_f16;
  int32_t cache_kind;  // CacheKind
  int32_t pos_64;
};

// Rows of one tensor ([N, H, D], last stride 1) lie apart and every row starts on 16 bytes. A stride of a dim of
// size <= 1 is never used (the kernel multiplies it by 0).
inline bool rows_ok(const TensorDesc& t, int64_t d) {
  const int64_t n = t.sizes[0], h = t.sizes[1], st = t.strides[0], sh = t.strides[1];
  if (t.strides[2] != 1 || t.addr % 16 != 0) return false;
  if (h > 1 && (sh < d || sh % 8 != 0)) return false;
  const int64_t span = h > 1 ? (h - 1) * sh + d : d;  // elements a token's rows cover
  if (n > 1 && (st < span || st % 8 != 0)) return false;
  return true;
}

// Which in-contract calls the kernel should take (speed, not correctness). H200, 2026-11-27 (c008, bench run
// 20261127-110033-3ff0a0): calls of >= 196608 rows (N x (Hq + Hk)) ran 0.998-1.034x of SGLang's kernel at 0.95-0.96
// of the same-size copy, calls of <= 9360 rows 0.955-0.969x: a group's first row guesses its token and pays one
// more dependent round trip when the guess misses, which launches one or two rounds long cannot hide. Smaller
// calls go to SGLang (the binding returns False); the dev knobs force the kernel.
constexpr int64_t kMinKernelRows = int64_t{1} << 16;

inline bool kernel_pays(int64_t n_tokens, int64_t q_heads, int64_t k_heads) {
  return n_tokens * (q_heads + k_heads) >= kMinKernelRows;
}

inline Decision decide(const CallDesc& c) {
  Decision no{};
  const TensorDesc &q = c.t[kQ], &k = c.t[kK], &qw = c.t[kQW], &kw = c.t[kKW], &cache = c.t[kCache],
                   &pos = c.t[kPos];
  // activations
  if (q.dim != 3 || k.dim != 3 || (q.dtype != kF16 && q.dtype != kBF16) || k.dtype != q.dtype) return no;
  const int64_t n = q.sizes[0], hq = q.sizes[1], hk = k.sizes[1], d = q.sizes[2];
  if (k.sizes[0] != n || k.sizes[2] != d || (d != 64 && d != 128 && d != 256)) return no;
  if (c.head_dim != 0 && c.head_dim != d) return no;
  if (!rows_ok(q, d) || !rows_ok(k, d)) return no;
  if (hq > 1 && hk > 1 && q.strides[1] != k.strides[1]) return no;  // SGLang's one head stride
  if (n >= (int64_t{1} << 31) || n * (hq + hk) >= (int64_t{1} << 31)) return no;
  // weights: [D] contiguous, q's dtype, 16-byte aligned
  for (const TensorDesc* w : {&qw, &kw})
    if (w->dim != 1 || w->sizes[0] != d || w->dtype != q.dtype || w->strides[0] != 1 || w->addr % 16 != 0)
      return no;
  // positions: [N] int32/int64 contiguous
  if (pos.dim != 1 || pos.sizes[0] != n || (pos.dtype != kI32 && pos.dtype != kI64)) return no;
  if (n > 1 && pos.strides[0] != 1) return no;
  // cache: [P, W] contiguous, fp32 or q's dtype, 16-byte aligned
  if (cache.dim != 2 || (cache.dtype != kF32 && cache.dtype != q.dtype) || cache.sizes[0] <= 0 ||
      cache.sizes[0] >= (int64_t{1} << 31))
    return no;
  const int64_t width = cache.sizes[1];
  if (cache.addr % 16 != 0 || (width > 1 && cache.strides[1] != 1) ||
      (cache.sizes[0] > 1 && cache.strides[0] != width))
    return no;
  // rope width: SGLang's default and template asserts, then this kernel's lane rule (8 elements a lane)
  const int64_t rope = c.rope_dim != 0 ? c.rope_dim : (c.full_width ? width / 2 : width);
  const int64_t lane = d / 32;
  if (rope <= 0 || rope > d || rope % lane != 0 || width != (c.full_width ? 2 * rope : rope)) return no;
  if (c.is_neox && (rope / lane < 2 || (rope / lane) % 2 != 0)) return no;
  if (c.is_neox ? (rope / 2) % 8 != 0 : rope % 8 != 0) return no;
  // devices: one CUDA device, the current one, compute capability 9.0 (the build is sm_90a); no autograd
  for (const TensorDesc& t : c.t)
    if (!t.is_cuda || t.device != q.device) return no;
  if (q.device != c.current_device || c.cc_major != 9 || c.cc_minor != 0) return no;
  if (c.grad_mode)
    for (const TensorDesc& t : c.t)
      if (t.requires_grad) return no;

  Decision yes{};
  yes.ok = 1;
  yes.empty = n == 0 || hq + hk == 0;
  yes.layout = (c.is_neox ? 2 : 0) + (c.full_width ? 1 : 0);
  yes.rope = static_cast<int32_t>(rope);
  yes.head_dim = static_cast<int32_t>(d);
  yes.x_f16 = q.dtype == kF16;
  yes.cache_kind = cache.dtype == kF32 ? 0 : (q.dtype == kF16 ? 2 : 1);
  yes.pos_64 = pos.dtype == kI64;
  return yes;
}

}  // namespace kda_qkr
