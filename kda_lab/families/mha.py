"""Forward multi-head attention (the reference task ``*_fa4_mha__bf16_head128_total32768`` and the diffusion
shapes of ``h200_mha_diffusion__multi_shape``).

Contract: ``mha_forward(q, k, v, causal=False, softmax_scale=None, key_lens=None) -> Tensor``
- q ``[B, Sq, H, D]``, k/v ``[B, Sk, H, D]`` (dense batch, the token-major layout SGLang's diffusion attention
  backends pass to FlashAttention; last dimension contiguous), fp16 or bf16, the same H for q, k and v (MHA);
- ``softmax_scale`` None means ``1/sqrt(D)``; ``causal`` masks key j > query i (only with Sq == Sk here, where
  FlashAttention's bottom-right and SDPA's top-left alignments agree);
- ``key_lens`` None, or one host-side int per batch element: element b attends only to its first
  ``key_lens[b]`` keys (1 <= key_lens[b] <= Sk), a key-padding mask whose valid keys are a prefix. That is the
  joint layout ``[video, text, text padding]`` of a padded prompt (SGLang's HunyuanVideo concatenates image then
  text tokens), the mask SGLang builds from host lengths (layers/attention/layer.py:
  build_varlen_mask_meta_from_lengths) and FlashAttention-3's ``seqused_k``. Every query row is computed (a
  padding query attends to the valid keys, SDPA's semantics); not combined with ``causal``;
- ``out[b, i, h] = sum_{j < L_b} softmax_j(scale * q[b,i,h] . k[b,j,h]) * v[b,j,h]``, ``[B, Sq, H, D]`` in
  q.dtype, ``L_b = key_lens[b]`` or Sk.

The oracle is fp64, computed per batch element over its valid keys, in query blocks sized to the device (a
75600-token row's full score matrix is 1.8 TB in fp64): :func:`score_budget`.

Public peers (``kda bench`` checks each against the oracle on every row before timing it, kda_lab/families/
peers.py): torch SDPA pinned to each fused backend (flash, cuDNN, memory-efficient), FlashInfer's single-request
prefill, FlashAttention-3 from ``sgl_kernel`` called directly, and SageAttention recorded as absent with the
reason (:data:`PEERS`).
"""

from __future__ import annotations

import math
from importlib import metadata
from types import ModuleType
from typing import Any

import torch
import torch.nn.functional as F

from kda_lab import baselines
from kda_lab.families.base import Args, FunctionContract
from kda_lab.families.peers import FLASHINFER, HALF, SGL_KERNEL, Peer

_SCORE_BUDGET = 1 << 25  # fp64 score elements per block on the CPU (256 MB)
_SCORE_BUDGET_CUDA = 1 << 30  # at most 8 GB of fp64 scores per block on a GPU (an H200 has 141 GB)


def score_budget(device: torch.device) -> int:
    """fp64 score elements one query block may hold on ``device``: on a GPU up to 2^30 (8 GB), at most a
    quarter of the free memory (the block's scores are exponentiated in place; P@V and the row sums add
    [H, blk, D] and [H, blk, 1]). Large blocks matter: every block reads the whole fp64 K and V once (6.2 GB
    on Wan 2.2's 75600-token row), so 11-query blocks (the CPU budget there) would read them 6873 times."""
    if device.type != "cuda":
        return _SCORE_BUDGET
    free, _total = torch.cuda.mem_get_info(device)
    return int(max(_SCORE_BUDGET, min(_SCORE_BUDGET_CUDA, free // (8 * 4))))


def valid_lens(key_lens: Any, b: int, sk: int) -> tuple[int, ...]:
    """Each batch element's valid key count (``key_lens``, or Sk for every element when None)."""
    if key_lens is None:
        return (sk,) * b
    lens = tuple(int(n) for n in key_lens)
    if len(lens) != b or any(not 1 <= n <= sk for n in lens):
        raise ValueError(f"key_lens {list(lens)} must give 1..{sk} valid keys for each of the {b} batch elements")
    return lens


def _check(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, key_lens: Any) -> tuple[int, ...]:
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"q, k, v must be [B, S, H, D]; got {list(q.shape)}, {list(k.shape)}, {list(v.shape)}")
    if k.shape[:3] != v.shape[:3] or (q.shape[0], q.shape[2], q.shape[3]) != (k.shape[0], k.shape[2], k.shape[3]):
        raise ValueError(f"incompatible q {list(q.shape)}, k {list(k.shape)}, v {list(v.shape)} (MHA: same B, H, D)")
    if causal and q.shape[1] != k.shape[1]:
        raise ValueError("causal attention is specified here for Sq == Sk only")
    if causal and key_lens is not None:
        raise ValueError("key_lens with causal attention is outside the contract")
    return valid_lens(key_lens, q.shape[0], k.shape[1])


def attention64(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                softmax_scale: float | None = None, key_lens: Any = None) -> torch.Tensor:
    lens = _check(q, k, v, causal, key_lens)
    b, sq, h, d = q.shape
    scale = float(softmax_scale) if softmax_scale is not None else 1.0 / math.sqrt(d)
    out = torch.empty((b, sq, h, v.shape[3]), dtype=torch.float64, device=q.device)
    budget = score_budget(q.device)
    for bi, n in enumerate(lens):
        kb = k[bi, :n].double().transpose(0, 1)  # [H, L, D]: only the valid keys exist for this element
        vb = v[bi, :n].double().transpose(0, 1)
        block = max(1, min(sq, budget // max(1, h * n)))
        for s0 in range(0, sq, block):
            qb = (q[bi, s0: s0 + block].double() * scale).transpose(0, 1)  # [H, blk, D], scaled (a new tensor)
            s = torch.matmul(qb, kb.transpose(1, 2))  # [H, blk, L]
            if causal:
                rows = torch.arange(s0, s0 + qb.shape[1], device=q.device)[:, None]
                cols = torch.arange(n, device=q.device)[None, :]
                s.masked_fill_(cols > rows, float("-inf"))
            s.sub_(s.amax(dim=-1, keepdim=True)).exp_()  # the softmax numerator, in place (no second block)
            out[bi, s0: s0 + block] = (torch.matmul(s, vb) / s.sum(dim=-1, keepdim=True)).transpose(0, 1)
            del s
    return out


def oracle(a: Args) -> tuple[torch.Tensor, ...]:
    return (attention64(a["q"], a["k"], a["v"], bool(a.get("causal", False)), a.get("softmax_scale"),
                        a.get("key_lens")),)


def reference(q, k, v, causal=False, softmax_scale=None, key_lens=None):
    """torch SDPA with its default backend choice (cuDNN / flash / efficient / math): the torch.compile peer.
    ``key_lens`` as a boolean attn_mask of the valid keys."""
    lens = baselines._lens(key_lens)
    mask = None if lens is None else baselines.key_padding_mask(lens, k.shape[1], q.device)
    o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask,
                                       is_causal=causal, scale=softmax_scale)
    return o.transpose(1, 2)


FUNCTIONS = {
    "mha_forward": FunctionContract(name="mha_forward", oracle=oracle, torch_reference=reference),
}

BYTE_MODELS = {
    "mha_forward": (("q", "k", "v"), ("q",)),
}

# SGLang's diffusion facade has no attention entry: `kda new-task --family mha` stamps this baseline, SGLang's
# default diffusion attention on an H200 (FA3 from sgl_kernel through SGLang's own wrapper).
BASELINES = {
    "mha_forward": "kda_lab.baselines:sglang_fa3_mha",
}

# ------------------------------------------------------------------------------------------------ public peers


def _on_gpu_half(a: Args, who: str) -> str | None:
    q = a["q"]
    if q.device.type != "cuda":
        return f"{who} runs on CUDA only"
    if q.dtype not in HALF:
        return f"{who} takes fp16/bf16, not {q.dtype}"
    if any(t.stride(-1) != 1 for t in (a["q"], a["k"], a["v"])):
        return f"{who} needs a unit-stride head dimension"
    return None


def _sdpa_applies(backend: str) -> Any:
    label = {"FLASH_ATTENTION": "SDPA's flash backend", "CUDNN_ATTENTION": "SDPA's cuDNN backend",
             "EFFICIENT_ATTENTION": "SDPA's memory-efficient backend"}[backend]

    def applies(a: Args) -> str | None:
        why = _on_gpu_half(a, label)
        if why:
            return why
        if backend == "FLASH_ATTENTION" and a["q"].shape[-1] > 256:
            return f"{label} takes head_dim <= 256"
        return None

    return applies


def _sdpa_adapt(backend: str) -> Any:
    def adapt(module: ModuleType, a: Args) -> torch.Tensor:
        return baselines.sdpa_mha(a["q"], a["k"], a["v"], bool(a.get("causal", False)), a.get("softmax_scale"),
                                  backends=(backend,), key_lens=a.get("key_lens"))

    return adapt


# The SDPA peers are torch itself: their "pin" is the torch this process runs (whatever it is, the version is
# recorded with the verdict), so Peer.load never refuses them for a version.
_TORCH = metadata.version("torch")


def _sdpa_peer(name: str, backend: str, mapping: str) -> Peer:
    return Peer(name, "torch", _TORCH, "torch.nn.attention", adapt=_sdpa_adapt(backend),
                applies=_sdpa_applies(backend), mapping=mapping)


def flashinfer_prefill(fi: ModuleType, a: Args) -> torch.Tensor:
    """FlashInfer's single-request prefill per batch element (NHD layout ``[S, H, D]`` = one element of SGLang's
    ``[B, S, H, D]``), ``backend="auto"`` (its own FA3 port on sm_90), each element over its valid keys."""
    q, k, v = a["q"], a["k"], a["v"]
    lens = valid_lens(a.get("key_lens"), q.shape[0], k.shape[1])
    outs = [fi.single_prefill_with_kv_cache(q[b], k[b, :n], v[b, :n], causal=bool(a.get("causal", False)),
                                            kv_layout="NHD", sm_scale=a.get("softmax_scale"), backend="auto")
            for b, n in enumerate(lens)]
    return outs[0].unsqueeze(0) if len(outs) == 1 else torch.stack(outs)


def _flashinfer_applies(a: Args) -> str | None:
    why = _on_gpu_half(a, "FlashInfer's prefill")
    if why:
        return why
    if a["q"].shape[-1] not in (64, 128, 256):
        return f"FlashInfer's prefill kernels are built for head_dim 64/128/256, not {a['q'].shape[-1]}"
    return None


def sgl_fa3(fa: ModuleType, a: Args) -> torch.Tensor:
    """sgl_kernel's FlashAttention-3 called directly, as SGLang's FlashAttentionImpl calls it (cu_seqlens None on
    the dense batch), ``key_lens`` as ``seqused_k``."""
    q, k = a["q"], a["k"]
    lens = baselines._lens(a.get("key_lens"))
    return fa.flash_attn_varlen_func(q, k, a["v"], None, None, max_seqlen_q=q.shape[1], max_seqlen_k=k.shape[1],
                                     seqused_k=None if lens is None else baselines.device_lens(lens, q.device),
                                     softmax_scale=a.get("softmax_scale"), causal=bool(a.get("causal", False)))


def _fa3_applies(a: Args) -> str | None:
    why = _on_gpu_half(a, "FlashAttention-3")
    if why:
        return why
    d = a["q"].shape[-1]
    if d > 256 or d % 8:
        return f"FlashAttention-3 takes head_dim <= 256, a multiple of 8, not {d}"
    return None


SAGE_ABSENT = (
    "no SageAttention wheel is staged for the box: PyPI's only wheel, sageattention 1.0.6 (Triton, 2024-11), "
    "predates the API SGLang's sage backend calls (layers/attention/backends/sage_attn.py imports sageattn and "
    "sageattn_qk_int8_pv_fp8_cuda), SageAttention 2 builds from source with nvcc only, and it is lossy by design "
    "(int8 Q/K, fp8 P.V): a lossy peer would need its own tolerance, not this family's oracle bounds")

PEERS = {
    "mha_forward": (
        _sdpa_peer("sdpa_flash", "FLASH_ATTENTION",
                   "F.scaled_dot_product_attention on q/k/v.transpose(1, 2) under sdpa_kernel(FLASH_ATTENTION), "
                   "out transposed back; key_lens: each batch element over k[b, :L] (the flash backend takes no "
                   "attn_mask)"),
        _sdpa_peer("sdpa_cudnn", "CUDNN_ATTENTION",
                   "the same under sdpa_kernel(CUDNN_ATTENTION); key_lens as a boolean attn_mask [B, 1, 1, Sk]"),
        _sdpa_peer("sdpa_efficient", "EFFICIENT_ATTENTION",
                   "the same under sdpa_kernel(EFFICIENT_ATTENTION); key_lens as a boolean attn_mask [B, 1, 1, Sk]"),
        Peer(*FLASHINFER, module="flashinfer.prefill", adapt=flashinfer_prefill, applies=_flashinfer_applies,
             mapping="single_prefill_with_kv_cache(q[b], k[b, :L], v[b, :L], causal, kv_layout='NHD', "
                     "sm_scale=softmax_scale, backend='auto') per batch element b (L: key_lens[b] or Sk), "
                     "stacked to [B, Sq, H, D] when B > 1"),
        Peer(*SGL_KERNEL, module="sgl_kernel.flash_attn", adapt=sgl_fa3, applies=_fa3_applies,
             mapping="sgl_kernel.flash_attn.flash_attn_varlen_func(q, k, v, None, None, max_seqlen_q=Sq, "
                     "max_seqlen_k=Sk, seqused_k=key_lens (int32, on the device), softmax_scale, causal): the "
                     "kernel behind SGLang's default H200 backend, without SGLang's wrapper"),
        Peer("sage", "sageattention", "-", "sageattention", adapt=lambda m, a: None, absent=SAGE_ABSENT,
             mapping="not called: " + SAGE_ABSENT),
    ),
}
