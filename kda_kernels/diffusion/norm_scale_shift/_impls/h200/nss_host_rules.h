// c008: the size pre-check of register.py (_surely_handed_back_nss / _surely_handed_back_srnss) for the C++ host
// path (nss_host.cpp), plain C++ so a CPU test can hold it to the Python rule (tests/test_host_ext.py).
//
// A call for which these return true goes to SGLang whatever the rest of it is: inside the kernel's contract the
// dispatch rule (register.py _hands_back, from c004's H200 run 20261127-073525-0d53a3) hands it back, because the
// bytes counted here are a lower bound of the bytes the rule counts; outside the contract SGLang runs it anyway.
#pragma once

#include <cstdint>

namespace kda_nss_host {

// fused_norm_scale_shift: x read and y written (2 x bytes); the same-width clause only (modulation not wider).
inline bool surely_handed_back_nss(int64_t x_numel, int64_t x_elem, int64_t scale_elem, int64_t shift_elem,
                                   int64_t same_width_limit) {
  if (scale_elem > x_elem && shift_elem > x_elem) return false;  // fp32 modulation on 16-bit x: always the kernel
  return 2 * x_numel * x_elem >= same_width_limit;
}

// fused_scale_residual_norm_scale_shift: x and residual read, y and residual_out (x's dtype) written.
inline bool surely_handed_back_srnss(int64_t x_numel, int64_t x_elem, int64_t res_numel, int64_t res_elem,
                                     int64_t residual_limit) {
  return 3 * x_numel * x_elem + res_numel * res_elem >= residual_limit;
}

}  // namespace kda_nss_host
