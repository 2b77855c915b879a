// c007: which triton_one_pass_rms_norm calls the CUDA kernel takes (prompt.md K), and its launch plan.
//
// Plain C++ (no CUDA, no torch): the torch binding (onepass_binding.cpp) describes x and w here and launches
// only when decide() says ok; the CPU tests (tests/test_onepass_cuda_model.py) compile this header with g++ and
// walk every branch of decide() and make_plan() through ctypes, and check the per-thread indexing of the plan
// against the fp64 oracle with a Python model of the kernel. A call outside the contract goes to c006's Triton
// path (register.py), which itself sends what it does not take to SGLang.
//
// Contract: x of 1 to 8 dims, fp16 / bf16 / fp32, D = x.size(-1), last stride 1, leading dims that collapse to
// one row stride RS >= D (contiguous x, a row-padded 2-D view, the packed-qkv slice), RS a multiple of one
// 16-byte vector, x 16-byte aligned; w 1-D [D], unit stride, x's dtype or fp32, 16-byte aligned;
// D x sizeof(x) a multiple of 16 bytes and 3..32 vectors (D = 24..256 bf16/fp16, 12..128 fp32); 1 <= S < 2^31;
// both on one CUDA device that is the current one, compute capability 9.0 (the build is sm_90a); no autograd
// recording (grad mode on and x or w requiring grad).
#pragma once

#include <cstdint>

namespace kda_onepass {

enum DType : int32_t { kOther = 0, kF16 = 1, kBF16 = 2, kF32 = 3 };

constexpr int kMaxDims = 8;
constexpr int kThreads = 128;  // threads per CTA (4 warps, SGLang's one-pass geometry)

struct TensorDesc {
  int32_t dim;
  int32_t dtype;  // DType
  int32_t is_cuda;
  int32_t device;
  int32_t requires_grad;
  int32_t pad_;
  int64_t sizes[kMaxDims];
  int64_t strides[kMaxDims];
  uint64_t addr;
};

struct CallDesc {
  TensorDesc x, w;
  int32_t current_device;
  int32_t cc_major, cc_minor;
  int32_t grad_mode;
};

struct Decision {
  int32_t ok;
  int32_t x_dtype;  // DType of x (and of y)
  int32_t w_f32;  // w is fp32 (else x's dtype)
  int32_t lanes;  // L: lanes per row, a power of two in 4..32 (lane i holds the row's 16-byte vector i)
  int32_t vecs;  // 16-byte vectors per row (lanes >= vecs idle)
  int32_t d;  // row length in elements
  int64_t rows;  // S
  int64_t row_stride;  // x's row stride in elements (y is contiguous: D)
};

inline int32_t elem_bytes(int32_t dtype) { return dtype == kF32 ? 4 : 2; }

inline Decision decide(const CallDesc& c) {
  Decision no{};
  const TensorDesc &x = c.x, &w = c.w;
  if (x.dim < 1 || x.dim > kMaxDims || (x.dtype != kF16 && x.dtype != kBF16 && x.dtype != kF32)) return no;
  const int64_t d = x.sizes[x.dim - 1];
  const int32_t eb = elem_bytes(x.dtype);
  if (d <= 0 || (d * eb) % 16 != 0) return no;
  const int64_t vecs = d * eb / 16;
  if (vecs < 3 || vecs > 32) return no;
  if (x.strides[x.dim - 1] != 1 || x.addr % 16 != 0) return no;
  // rows: the leading dims must collapse to one row stride (size-1 dims never move the address)
  int64_t rows = 1;
  int64_t rs = 0;  // stride of the innermost leading dim of size > 1 (0: a single row)
  int64_t expect = 0;  // the stride the next outer dim of size > 1 must have
  for (int i = x.dim - 2; i >= 0; --i) {
    const int64_t n = x.sizes[i];
    if (n <= 0) return no;  // empty: SGLang's answer (an empty tensor) through the fallback
    rows *= n;
    if (rows >= (int64_t{1} << 31)) return no;  // row indices in uint32 (the kernel), < 2^29 CTAs
    if (n == 1) continue;
    if (rs == 0) {
      rs = x.strides[i];
      if (rs < d || rs % (16 / eb) != 0) return no;  // rows apart, every row on 16 bytes
    } else if (x.strides[i] != expect) {
      return no;
    }
    expect = x.strides[i] * n;
  }
  if (rs == 0) rs = d;
  // weight: [D], unit stride, x's dtype or fp32, 16-byte aligned
  if (w.dim != 1 || w.sizes[0] != d || (w.dtype != x.dtype && w.dtype != kF32) || w.addr % 16 != 0) return no;
  if (d > 1 && w.strides[0] != 1) return no;
  // devices, arch, autograd
  if (!x.is_cuda || !w.is_cuda || w.device != x.device || x.device != c.current_device) return no;
  if (c.cc_major != 9 || c.cc_minor != 0) return no;
  if (c.grad_mode && (x.requires_grad || w.requires_grad)) return no;

  Decision yes{};
  yes.ok = 1;
  yes.x_dtype = x.dtype;
  yes.w_f32 = w.dtype == kF32 && x.dtype != kF32;
  int32_t lanes = 4;
  while (lanes < vecs) lanes *= 2;
  yes.lanes = lanes;
  yes.vecs = static_cast<int32_t>(vecs);
  yes.d = static_cast<int32_t>(d);
  yes.rows = rows;
  yes.row_stride = rs;
  return yes;
}

// Launch plan. A group of L lanes owns a row (lane i: the row's i-th 16-byte vector); a CTA of kThreads threads
// holds G = kThreads / L groups and covers R x G consecutive rows: row (cta * R + r) * G + g for r < R, so at
// each r the CTA's groups read G consecutive rows (one contiguous span per warp). R = 1 while the R = 1 grid
// fills at most half of one wave (<= 8 CTAs of 128 threads per SM: every thread one load, the fewest dependent
// steps for the latency-bound rows; [4096, 128] -> 512 CTAs, SGLang's 512 programs), else R = 2 (two 16-byte
// loads in flight per thread, 16 rows per CTA for D = 128 bf16: SGLang's tile and CTA count on [16384, 128]
// (1024) and on the huge rows, where it holds 4.14 TB/s; fewer, fuller CTAs than R = 1's 2048 for 16384 rows).
struct Plan {
  int32_t rows_per_group;  // R
  int32_t groups;  // G
  int64_t ctas;
};

inline Plan make_plan(const Decision& d, int64_t resident_ctas_r1) {
  Plan p{};
  p.groups = kThreads / d.lanes;
  const int64_t ctas1 = (d.rows + p.groups - 1) / p.groups;
  p.rows_per_group = 2 * ctas1 <= resident_ctas_r1 ? 1 : 2;
  const int64_t per_cta = static_cast<int64_t>(p.groups) * p.rows_per_group;
  p.ctas = (d.rows + per_cta - 1) / per_cta;
  return p;
}

}  // namespace kda_onepass
