// c008: the launcher qknorm_rope.cu exports to the torch binding (no torch, no CUDA headers needed to include it).
#pragma once

#include <cstdint>

#include "qknorm_rope_contract.h"

namespace kda_qkr {

struct Launch {
  // from the binding
  void* q;
  void* k;
  const void* qw;
  const void* kw;
  const void* cache;
  const void* pos;
  int64_t q_stride_t, q_stride_h, k_stride_t, k_stride_h;
  int64_t n_tokens, n_q_heads, n_k_heads, cache_rows, cache_width;
  float eps;
  int32_t device;
  void* stream;  // cudaStream_t
  // knobs (dev/sweep.py; 0 = the plan's choice): pipe_mode 1 off / 2 on (double buffer), grid_mode 1 one row per
  // group / 2 half the resident CTAs, early_trigger 1 (launch_dependents first instead of last)
  int32_t pipe_mode, grid_mode, early_trigger;
};

// Plans and launches the kernel `decision` names (decide() said ok and not empty). Returns a cudaError_t value
// (0: launched).
int launch(const Decision& decision, const Launch& args);

// The plan launch() would use, for dev/sweep.py and the notes: fills out[0..5] with pipe, rounds (rows per group),
// n_rows, blocks, resident CTAs per SM of the launched kernel and its step_head. Returns a cudaError_t value.
int describe(const Decision& decision, const Launch& args, int64_t* out);

}  // namespace kda_qkr
