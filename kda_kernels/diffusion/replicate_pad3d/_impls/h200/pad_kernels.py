"""Replicate padding of [B, C, T, H, W] in Triton: plain NCDHW output, and fused with the NCDHW -> NDHWC
(channels_last_3d) layout change cuDNN's implicit-GEMM conv3d wants.

Byte model and bound (per call; s = element size, N_in = B*C*T*H*W, N_out = B*C*T'*H'*W'):

    bytes = s * (N_in + N_out)          x read once, the padded output written once
    bound = bytes / 4.29 TB/s           the H200's measured streaming-copy ceiling

e.g. x [1,128,17,256,256] fp16, pad (1,1,1,1,2,0): 285 MB read + 324 MB written = 609 MB -> 142 us; the tiled
HunyuanVideo decode's 1485 pads move 214.6 GB (50.0 ms at the bound; SGLang's replication_pad3d took 453 ms in
the profile of issue 23), the untiled decode's 33 pads 93.1 GB (21.7 ms).

Each output element loads its clamped source, so edge rows and planes are read more than once (T' = T + 2 for
the causal pad: 2 of every T' planes re-read plane 0); those re-reads are issued close together and hit L2,
so DRAM traffic stays at the byte model.

- ``_pad_ncdhw_planes`` (the plain pad): program = BLOCK flat positions of one output plane (b, c, t'); each
  lane finds its row with an fp32 reciprocal (one correction step keeps it exact), so no lane is masked off.
  The row-tile kernel it replaced (``_pad_ncdhw``, c003, still the path for planes of 2^23 elements or more)
  padded each row's tile to a power of two: on the 258-, 130- and 82-wide output rows a third to a half of its
  lanes were idle, and it reached sol 0.34-0.73 on the large rows; the plane kernel reaches 0.61-0.69 (H200,
  dev/pad_sweep.py). Both issue scalar 2-byte loads and stores (a row of W' = W + 2 is never 16-byte aligned
  on both sides at once), which is what keeps them under the copy bound's 0.9: the next step is 16-byte
  stores of output-aligned vectors fed from a shared-memory copy of the source row (CUDA, not Triton).
- ``_pad_ncdhw``: program = ROWS output rows (b, c, t', h') x BLOCK_W output columns; a row's loads are a
  contiguous run of one source row except at the two clamped edge columns; stores are contiguous along W'.
- ``_pad_ndhwc``: program = one output row (b, t', h') x BLOCK_W columns x BLOCK_C channels: the tile is loaded
  W-fastest from x (coalesced along W for an NCDHW x) and stored C-fastest to the channels-last output; Triton's
  coalescing pass gives the load and the store their own layouts and converts between them through shared
  memory (the transpose), so both sides stay coalesced.

Offsets are int64: the untiled decode's tensors exceed 2^31 elements ([1,256,35,482,850] = 3.67 G).
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _pad_ncdhw(x_ptr, out_ptr, n_rows, C, T, H, W, To, Ho, Wo, sxb, sxc, sxt, sxh, sxw,
               pad_t, pad_h, pad_w, ROWS: tl.constexpr, BLOCK_W: tl.constexpr):
    pid_r = tl.program_id(0)
    pid_w = tl.program_id(1)
    rows = pid_r.to(tl.int64) * ROWS + tl.arange(0, ROWS).to(tl.int64)  # flat (b, c, t', h') output rows
    wo = pid_w * BLOCK_W + tl.arange(0, BLOCK_W)
    ho = rows % Ho
    q = rows // Ho
    to = q % To
    q = q // To
    c = q % C
    b = q // C
    ts = tl.minimum(tl.maximum(to - pad_t, 0), T - 1)
    hs = tl.minimum(tl.maximum(ho - pad_h, 0), H - 1)
    ws = tl.minimum(tl.maximum(wo - pad_w, 0), W - 1).to(tl.int64)
    src_row = b * sxb + c * sxc + ts * sxt + hs * sxh
    mask = (rows < n_rows)[:, None] & (wo < Wo)[None, :]
    v = tl.load(x_ptr + src_row[:, None] + ws[None, :] * sxw, mask=mask)
    tl.store(out_ptr + rows[:, None] * Wo + wo[None, :].to(tl.int64), v, mask=mask)


@triton.jit
def _pad_ncdhw_planes(x_ptr, out_ptr, C, T, H, W, To, Ho, Wo, inv_wo, sxb, sxc, sxt, sxh, sxw,
                      pad_t, pad_h, pad_w, BLOCK: tl.constexpr):
    # One output plane (b, c, t') per axis-0 index, BLOCK flat positions of it per program: every lane holds a
    # real output element (no lanes masked off by a power-of-two row width, which left 17-50 % of the old row
    # tiles idle on the 850-, 258- and 130-wide rows). A plane has fewer than 2^23 elements (launcher), so the
    # in-plane offsets are int32 and the row is found with an fp32 reciprocal plus one correction step
    # instead of an integer division per element.
    plane = tl.program_id(0)
    to = plane % To
    bc = plane // To
    c = bc % C
    b = bc // C
    ts = tl.minimum(tl.maximum(to - pad_t, 0), T - 1)
    src_plane = b.to(tl.int64) * sxb + c.to(tl.int64) * sxc + ts.to(tl.int64) * sxt
    o = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    ho = ((o.to(tl.float32) + 0.5) * inv_wo).to(tl.int32)
    wo = o - ho * Wo
    ho = tl.where(wo < 0, ho - 1, tl.where(wo >= Wo, ho + 1, ho))
    wo = o - ho * Wo
    hs = tl.minimum(tl.maximum(ho - pad_h, 0), H - 1)
    ws = tl.minimum(tl.maximum(wo - pad_w, 0), W - 1)
    mask = o < Ho * Wo
    v = tl.load(x_ptr + src_plane + (hs * sxh + ws * sxw), mask=mask)
    tl.store(out_ptr + plane.to(tl.int64) * Ho * Wo + o, v, mask=mask)


@triton.jit
def _pad_ndhwc(x_ptr, out_ptr, C, T, H, W, To, Ho, Wo, sxb, sxc, sxt, sxh, sxw,
               pad_t, pad_h, pad_w, BLOCK_W: tl.constexpr, BLOCK_C: tl.constexpr,
               FT: tl.constexpr = 1, FH: tl.constexpr = 1, FW: tl.constexpr = 1):
    # T, H, W are the (nearest-upsampled) extents the pad clamps to; FT, FH, FW map them back to x's: frame 0
    # stays frame 0, the other frames repeat FT times, rows and columns FH and FW times (HunyuanVideo's
    # causal upsample). With factors 1 this is the plain pad.
    row = tl.program_id(0).to(tl.int64)  # flat (b, t', h') output row
    pid_w = tl.program_id(1)
    pid_c = tl.program_id(2)
    ho = row % Ho
    q = row // Ho
    to = q % To
    b = q // To
    ts = tl.minimum(tl.maximum(to - pad_t, 0), T - 1)
    hs = tl.minimum(tl.maximum(ho - pad_h, 0), H - 1)
    wo = pid_w * BLOCK_W + tl.arange(0, BLOCK_W)
    cc = (pid_c * BLOCK_C + tl.arange(0, BLOCK_C)).to(tl.int64)
    ws = tl.minimum(tl.maximum(wo - pad_w, 0), W - 1).to(tl.int64)
    if FT > 1:
        ts = tl.where(ts == 0, 0, 1 + (ts - 1) // FT)
    if FH > 1:
        hs = hs // FH
    if FW > 1:
        ws = ws // FW
    mask = (wo < Wo)[:, None] & (cc < C)[None, :]
    src = b * sxb + ts * sxt + hs * sxh + ws[:, None] * sxw + cc[None, :] * sxc
    v = tl.load(x_ptr + src, mask=mask)
    # channels_last_3d output: element (b, c, t', h', w') at (((b*T' + t')*H' + h')*W' + w')*C + c
    dst = (row * Wo + wo[:, None].to(tl.int64)) * C + cc[None, :]
    tl.store(out_ptr + dst, v, mask=mask)


def _pow2_at_most(n: int, cap: int) -> int:
    return min(cap, triton.next_power_of_2(max(n, 1)))


# The plane kernel finds rows with an fp32 reciprocal: exact (after its correction step) while a plane has
# fewer than 2^23 elements; larger planes, or source offsets past int32, take the row-tile kernel.
_PLANE_MAX = 1 << 23


def launch_ncdhw(x, out, pad, block: int | None = None, num_warps: int | None = None) -> None:
    wl, _, hl, _, tl_, _ = pad
    B, C, T, H, W = x.shape
    _, _, To, Ho, Wo = out.shape
    sxb, sxc, sxt, sxh, sxw = x.stride()
    plane = Ho * Wo
    if plane < _PLANE_MAX and (H - 1) * sxh + (W - 1) * sxw < 2**31 and B * C * To < 2**31:
        # dev/pad_sweep.py on the H200 (2026-11-27, 7 rows of 205 MB to 7.1 GB): 2048 elements and 4 warps per
        # program was the best of six launch shapes, sol geomean 0.655 (1024/4: 0.642, 4096/8: 0.605, 8192/8: 0.508)
        block = block or _pow2_at_most(plane, 2048)
        num_warps = num_warps or 4
        grid = (B * C * To, triton.cdiv(plane, block))
        _pad_ncdhw_planes[grid](x, out, C, T, H, W, To, Ho, Wo, 1.0 / Wo, sxb, sxc, sxt, sxh, sxw, tl_, hl, wl,
                                BLOCK=block, num_warps=num_warps)
        return
    n_rows = B * C * To * Ho
    block_w = _pow2_at_most(Wo, 512)
    rows = max(1, 4096 // block_w)  # ~4 K elements per program
    grid = (triton.cdiv(n_rows, rows), triton.cdiv(Wo, block_w))
    _pad_ncdhw[grid](x, out, n_rows, C, T, H, W, To, Ho, Wo, *x.stride(), tl_, hl, wl,
                     ROWS=rows, BLOCK_W=block_w, num_warps=4)


def launch_ndhwc(x, out, pad, factors=(1, 1, 1)) -> None:
    """out (channels_last_3d) = replicate pad of x nearest-upsampled by ``factors`` (ft, fh, fw): frame 0 once,
    the other frames ft times (so x's T frames become 1 + ft * (T - 1)), rows fh and columns fw times."""
    wl, _, hl, _, tl_, _ = pad
    ft, fh, fw = factors
    B, C, T, H, W = x.shape
    _, _, To, Ho, Wo = out.shape
    block_c = _pow2_at_most(C, 64)
    block_w = _pow2_at_most(Wo, max(16, 4096 // block_c))
    grid = (B * To * Ho, triton.cdiv(Wo, block_w), triton.cdiv(C, block_c))
    _pad_ndhwc[grid](x, out, C, 1 + ft * (T - 1), fh * H, fw * W, To, Ho, Wo, *x.stride(), tl_, hl, wl,
                     BLOCK_W=block_w, BLOCK_C=block_c, FT=ft, FH=fh, FW=fw, num_warps=4)
