// c006: which fused_norm_scale_shift / fused_scale_residual_norm_scale_shift calls the CUDA small-row kernel
// (nss_small.cu) takes, and its launch plan.
//
// Plain C++ (no CUDA, no torch): the torch binding (nss_small_binding.cpp) describes the call here and launches
// only when decide() returns kOk; tests/test_nss_small_cuda.py compiles this header with g++, drives every
// branch through ctypes and checks the plan's indexing with a model of the kernel. Any other reason code sends
// the call to c005's Triton path (register.py), which hands what it does not take to SGLang, so SGLang's errors
// stay SGLang's.
//
// Contract (a strict subset of prompt.md K: the production rows under 2 MB and their neighbours):
//   x [B, S, D] fp16 / bf16, D % 256 == 0, D <= 8192, B*S >= 1, last stride 1, batch / token strides >= 0 and
//   multiples of one 16-byte vector (size-1 dims: any stride), 16-byte aligned;
//   residual (residual form) x's shape and dtype, the same layout rules;
//   gate (residual form: None or), scale, shift: x's dtype, one D-row shared by every token: [D], or [.., D]
//   with every leading size 1 ([1, D], [1, 1, D], [B, D] / [B, 1, D] / [B, S, D] at B = S = 1 ...; a 4-D
//   per-frame [B, F, 1, D] only at B = F = 1), last stride 1, 16-byte aligned;
//   weight / bias None or [D] of x's dtype, stride 1, 16-byte aligned; LayerNorm with exactly one of them goes
//   elsewhere (SGLang's kernel applies neither: prompt.md's quirk); RMSNorm ignores the bias (as SGLang);
//   norm "layer" or "rms";
//   bytes moved (the task's byte model: every given tensor's numel x element size, plus the outputs) <= 2 MiB;
//   every tensor on one CUDA device that is the current one, compute capability 9.0 (the build is sm_90a), no
//   Python-dispatch (fake / functional) tensors, no autograd recording.
#pragma once

#include <cstdint>

namespace kda_nss {

enum DType : int32_t { kOther = 0, kF16 = 1, kBF16 = 2, kF32 = 3 };

// Why a call is not the kernel's (0: it is). The binding returns None for every nonzero code; dev / tests read
// the code itself (``reason_nss`` / ``reason_srnss``).
enum Reason : int32_t {
  kOk = 0,
  kNorm = 1,  // norm_type neither "layer" nor "rms"
  kXDtype = 2,  // x not fp16 / bf16
  kXShape = 3,  // x not [B, S, D] with D % 256 == 0, D <= 8192, B*S >= 1
  kXLayout = 4,  // x's last stride != 1, a negative or unaligned row stride, an unaligned address
  kResidual = 5,  // residual: other shape / dtype / layout
  kGate = 6,  // gate: not one shared D-row of x's dtype
  kScale = 7,
  kShift = 8,
  kAffine = 9,  // weight / bias: not [D] of x's dtype, stride 1, aligned
  kOneSided = 10,  // LayerNorm with exactly one of weight / bias
  kTooLarge = 11,  // more than kMaxBytes moved: c005's Triton path (or its hand-back rule) decides
  kDevice = 12,  // not all on one CUDA device that is the current one
  kArch = 13,  // not compute capability 9.0
  kGrad = 14,  // autograd would record
  kSpecial = 15,  // a Python-dispatch / functional / conjugate / negative-bit tensor
};

constexpr int kMaxDims = 4;
constexpr int64_t kMaxBytes = int64_t{2} << 20;  // 2 MiB: the production rows up to 1.4 MB and their neighbours
constexpr int kMaxVpt = 4;  // 16-byte vectors per thread and operand (VPT)

struct TensorDesc {
  int32_t present;  // 0: None (optional argument absent)
  int32_t dim;
  int32_t dtype;  // DType
  int32_t is_cuda;
  int32_t device;
  int32_t requires_grad;
  int32_t special;  // Python-dispatch key, functionalization, conj / neg bit
  int32_t pad_;
  int64_t sizes[kMaxDims];
  int64_t strides[kMaxDims];
  uint64_t addr;
};

struct CallDesc {
  TensorDesc x, residual, gate, weight, bias, scale, shift;
  int32_t residual_form;  // 1: fused_scale_residual_norm_scale_shift
  int32_t norm;  // 0 "layer", 1 "rms", anything else: not the kernel's
  int32_t current_device;
  int32_t cc_major, cc_minor;
  int32_t grad_mode;
};

struct Decision {
  int32_t reason;  // Reason
  int32_t x_dtype;  // DType of x (and of the outputs)
  int32_t is_rms;
  int32_t has_res;
  int32_t has_gate;  // gate·x is rounded to x's dtype (the gate is x's dtype: SGLang's same-dtype product)
  int32_t has_w;
  int32_t has_b;  // a bias that is applied (LayerNorm only)
  int32_t d;
  int32_t warps;  // W: warps per CTA
  int32_t vpt;  // VPT: 16-byte vectors per thread (one CTA per row: W * 32 * VPT * 8 == D)
  int64_t rows;  // B * S (= CTAs)
  int64_t s;  // S
  int64_t x_sb, x_ss, r_sb, r_ss;  // batch / token strides in elements (0 for size-1 dims)
  int64_t bytes;  // bytes moved, the task's byte model
};

inline int32_t elem_bytes(int32_t dtype) { return dtype == kF32 ? 4 : (dtype == kOther ? 0 : 2); }

inline int64_t numel(const TensorDesc& t) {
  int64_t n = 1;
  for (int i = 0; i < t.dim; ++i) n *= t.sizes[i];
  return n;
}

// Launch plan for D = 256·k columns of a 16-bit dtype (32·k 16-byte vectors, one CTA per row): W warps of VPT
// vectors per thread, W·VPT = k. Four warps wherever that leaves 1-4 vectors a thread (D = 1024-4096: one warp
// per SM sub-partition, c005's Triton plan for D = 3072: 4 warps x 3 vectors); else the fewest warps that keep
// VPT <= 4 (D = 1536: 2 x 3, 5120: 5 x 4, 8192: 8 x 4, 256: 1 x 1), so every thread holds its whole share of
// the row, every operand loaded before the statistics, within the launch bounds' registers (nss_small.cu).
inline void make_plan(int32_t k, int32_t* warps, int32_t* vpt) {
  if (k % 4 == 0 && k / 4 <= kMaxVpt) {
    *warps = 4;
    *vpt = k / 4;
    return;
  }
  for (int32_t w = 1; w <= k; ++w) {
    if (k % w == 0 && k / w <= kMaxVpt) {
      *warps = w;
      *vpt = k / w;
      return;
    }
  }
  *warps = k;  // unreachable: w = k divides k with VPT = 1
  *vpt = 1;
}

namespace detail {

// x or residual: [B, S, D], last stride 1; (sb, ss) the strides of the dims of size > 1 (else 0), each >= 0 and
// a multiple of 8 elements (16 bytes); 16-byte aligned.
inline bool rows_ok(const TensorDesc& t, int64_t* sb, int64_t* ss) {
  if (t.strides[2] != 1 || t.addr % 16 != 0) return false;
  *sb = t.sizes[0] > 1 ? t.strides[0] : 0;
  *ss = t.sizes[1] > 1 ? t.strides[1] : 0;
  return *sb >= 0 && *ss >= 0 && *sb % 8 == 0 && *ss % 8 == 0;
}

// One D-row shared by every token (SGLang's BSFD modes that collapse to it at this x), x's dtype, aligned.
inline bool shared_row_ok(const TensorDesc& t, int32_t x_dtype, int64_t b, int64_t d) {
  if (!t.present || t.special || t.dim < 1 || t.dim > kMaxDims || t.dtype != x_dtype) return false;
  if (t.sizes[t.dim - 1] != d || t.strides[t.dim - 1] != 1 || t.addr % 16 != 0) return false;
  for (int i = 0; i + 1 < t.dim; ++i) {
    if (t.sizes[i] != 1) return false;
  }
  return t.dim != 4 || b == 1;  // [B, F, 1, D] must have B = x's batch (SGLang checks it)
}

inline bool affine_ok(const TensorDesc& t, int32_t x_dtype, int64_t d) {
  return !t.special && t.dim == 1 && t.sizes[0] == d && t.strides[0] == 1 && t.dtype == x_dtype &&
         t.addr % 16 == 0;
}

inline bool on_device(const TensorDesc& t, int32_t device) { return !t.present || (t.is_cuda && t.device == device); }

}  // namespace detail

inline Decision decide(const CallDesc& c) {
  Decision out{};
  const TensorDesc& x = c.x;
  auto no = [&out](Reason r) {
    out.reason = r;
    return out;
  };
  if (c.norm != 0 && c.norm != 1) return no(kNorm);
  if (!x.present || x.special) return no(kSpecial);
  if (x.dtype != kF16 && x.dtype != kBF16) return no(kXDtype);
  if (x.dim != 3) return no(kXShape);
  const int64_t b = x.sizes[0], s = x.sizes[1], d = x.sizes[2];
  if (b < 1 || s < 1 || d < 256 || d > 8192 || d % 256 != 0) return no(kXShape);
  if (!detail::rows_ok(x, &out.x_sb, &out.x_ss)) return no(kXLayout);
  const int64_t eb = elem_bytes(x.dtype);
  int64_t bytes = numel(x) * eb * (c.residual_form ? 2 : 1);  // the outputs: y (and residual_out)
  bytes += numel(x) * eb;
  if (c.residual_form) {
    const TensorDesc& r = c.residual;
    if (!r.present || r.special || r.dim != 3 || r.dtype != x.dtype || r.sizes[0] != b || r.sizes[1] != s ||
        r.sizes[2] != d || !detail::rows_ok(r, &out.r_sb, &out.r_ss))
      return no(kResidual);
    bytes += numel(r) * eb;
    if (c.gate.present) {
      if (!detail::shared_row_ok(c.gate, x.dtype, b, d)) return no(kGate);
      bytes += numel(c.gate) * eb;
    }
  }
  if (!detail::shared_row_ok(c.scale, x.dtype, b, d)) return no(kScale);
  if (!detail::shared_row_ok(c.shift, x.dtype, b, d)) return no(kShift);
  bytes += (numel(c.scale) + numel(c.shift)) * eb;
  if (c.norm == 0 && c.weight.present != c.bias.present) return no(kOneSided);
  if (c.weight.present) {
    if (!detail::affine_ok(c.weight, x.dtype, d)) return no(kAffine);
    bytes += d * eb;
  }
  if (c.bias.present) {  // RMSNorm ignores a given bias but SGLang still takes it: the same [D] rules
    if (!detail::affine_ok(c.bias, x.dtype, d)) return no(kAffine);
    bytes += d * eb;
  }
  if (bytes > kMaxBytes) return no(kTooLarge);
  const int32_t dev = x.device;
  if (!x.is_cuda || dev != c.current_device) return no(kDevice);
  const TensorDesc* all[] = {&c.residual, &c.gate, &c.weight, &c.bias, &c.scale, &c.shift};
  for (const TensorDesc* t : all) {
    if (!detail::on_device(*t, dev)) return no(kDevice);
  }
  if (c.cc_major != 9 || c.cc_minor != 0) return no(kArch);
  if (c.grad_mode) {
    bool grad = x.requires_grad;
    for (const TensorDesc* t : all) grad = grad || (t->present && t->requires_grad);
    if (grad) return no(kGrad);
  }
  out.reason = kOk;
  out.x_dtype = x.dtype;
  out.is_rms = c.norm;
  out.has_res = c.residual_form;
  out.has_gate = c.residual_form && c.gate.present;
  out.has_w = c.weight.present;
  out.has_b = c.bias.present && c.norm == 0;
  out.d = static_cast<int32_t>(d);
  make_plan(static_cast<int32_t>(d / 256), &out.warps, &out.vpt);
  out.rows = b * s;
  out.s = s;
  out.bytes = bytes;
  return out;
}

}  // namespace kda_nss
