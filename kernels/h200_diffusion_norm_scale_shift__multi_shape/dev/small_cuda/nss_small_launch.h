// c006: the launcher nss_small.cu exports to the torch binding (no torch, no CUDA headers needed to include it).
#pragma once

#include <cstdint>

#include "nss_small_contract.h"

namespace kda_nss {

struct Launch {
  const void* x;  // [B, S, D], strides in the Decision
  const void* residual;  // residual form only (else unused)
  const void* gate;  // nullptr: gate None
  const void* weight;  // nullptr: None
  const void* bias;  // nullptr: None (or RMSNorm: ignored)
  const void* scale;  // one D-row
  const void* shift;
  void* y;  // [B*S, D] contiguous
  void* residual_out;  // [B*S, D] contiguous (residual form)
  float eps;
  void* stream;  // cudaStream_t
  int32_t pdl;  // launch with programmatic stream serialization (PDL); 1 unless KDA_NSS_SMALL_NO_PDL is set
};

// Launches the kernel `decision` (reason kOk) names. Returns a cudaError_t value (0: launched); a failed launch's
// error is cleared from the runtime's last-error slot, so the caller's fallback does not inherit it.
int launch(const Decision& decision, const Launch& args);

}  // namespace kda_nss
