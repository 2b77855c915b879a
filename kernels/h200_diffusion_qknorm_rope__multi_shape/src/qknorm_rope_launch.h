// c007: the launcher qknorm_rope.cu exports to the torch binding (no torch, no CUDA headers needed to include it).
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
  // knobs (dev/sweep.py; 0 = the plan's choice): rows per item 1/2/4, prefetch 1 off / 2 on, early trigger 1 off
  int32_t force_rows, prefetch_mode, late_trigger;
};

// Plans and launches the kernel `decision` names (decide() said ok and not empty). Returns a cudaError_t value
// (0: launched).
int launch(const Decision& decision, const Launch& args);

// The plan launch() would use, for dev/sweep.py and the notes: fills out[0..5] with rows_per_item,
// chunks_per_token, n_items, blocks, prefetch_bytes and resident CTAs per SM. Returns a cudaError_t value.
int describe(const Decision& decision, const Launch& args, int64_t* out);

}  // namespace kda_qkr
