// c007: the launcher onepass_rms.cu exports to the torch binding (no torch, no CUDA headers needed to include it).
#pragma once

#include <cstdint>

#include "onepass_contract.h"

namespace kda_onepass {

struct Launch {
  const void* x;  // [S rows, row stride row_stride elements, D]
  const void* w;  // [D]
  void* y;  // [S, D] contiguous
  float eps;
  int32_t device;
  void* stream;  // cudaStream_t
  int32_t force_rows;  // dev knob (dev/host_sweep.py does not use it): 0 the plan's R, else 1 or 2
  int32_t pdl;  // launch with programmatic stream serialization (PDL); 1 by default
};

// Plans and launches the kernel `decision` names (decide() said ok). Returns a cudaError_t value (0: launched).
int launch(const Decision& decision, const Launch& args);

// The plan launch() would use: out[0..3] = R, G, CTAs, resident CTAs per SM of the R = 1 kernel.
int describe(const Decision& decision, const Launch& args, int64_t* out);

}  // namespace kda_onepass
