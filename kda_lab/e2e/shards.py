"""The per-worker shapes SGLang 0.5.23's sequence parallelism gives HunyuanVideo's production DiT rows (issue
42, item 3): what the overlay's kernels see in each worker at SP 2, 4 and 8. Derived from SGLang's code, not
measured; tests/test_e2e_multiworker.py recomputes them from SGLang's own functions and source.

The production rows are a 65-frame 480x848 video: latent [1, 16, 17, 60, 106], (1, 2, 2) patches, 27030 video
tokens, 55 text tokens, 24 heads of 128, width 3072. Across N workers SGLang:

1. rounds the frame count up so the latent frames divide by the GPU count
   (``configs/sample/sampling_params.py``: ``align_num_frames_for_num_gpus``, called by
   ``SamplingParams._adjust_visual_fields`` unless the pipeline shards the sequence itself, which
   HunyuanVideo's does not: ``resolve_sequence_shard``): the video tokens are never split with a remainder,
   the video grows instead (17 latent frames become 18, 20, 24);
2. gives each worker an equal run of latent frames (``configs/pipeline_configs/base.py``:
   ``PipelineConfig.shard_latents_for_sp``, ``rearrange(latents, "b c (n t) h w -> b c n t h w")``);
3. splits the 55 text tokens inside the transformer, the first ``55 % N`` workers one token more
   (``models/dits/hunyuanvideo.py``: ``HunyuanVideoTransformer3DModel.forward``, ``text_seq_lens``): the odd
   remainders are here;
4. passes those per-worker lengths to attention (``seq_lens``), and ``USPAttention.forward``
   (``layers/attention/layer.py``) takes its varlen Ulysses all-to-all for any call with ``seq_lens``, before
   it looks at the K/V all-gather ``ServerArgs._adjust_parallelism`` picks at SP 2: at every degree attention
   runs over all tokens with 24 / N heads per worker.

The norm, modulation and QK-norm kernels run on each worker's tokens before the exchange, so their rows are
the production rows with the token count of one worker (the QK norm: tokens x 24 heads rows of 128). Left out:
the image RoPE, which SGLang 0.5.23 applies with its own fused QKV pack on CUDA (``_hunyuan_pack_qkv``) and
whose per-worker cos/sin slicing is not derived here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

LATENT = (1, 16, 17, 60, 106)
PATCH = (1, 2, 2)
TEXT = 55
HEADS = 24
TEMPORAL_RATIO = 4  # HunyuanVAEConfig's temporal_compression_ratio: frames = (latent frames - 1) * 4 + 1


@dataclass(frozen=True)
class Shard:
    degree: int
    frames: int  # video frames after SGLang's alignment to the GPU count
    latent: tuple[int, ...]  # one worker's latent
    video_tokens: int  # one worker's video tokens
    text_tokens: tuple[int, ...]  # per worker
    exchange: str  # the attention exchange HunyuanVideo's calls take
    attention_heads: int  # per worker inside attention

    @property
    def joint_tokens(self) -> tuple[int, ...]:
        """One worker's single-stream sequence (its video tokens and its text tokens)."""
        return tuple(self.video_tokens + t for t in self.text_tokens)


def aligned_latent_frames(latent_frames: int, degree: int) -> int:
    """Step 1: the latent frames rounded up to a multiple of the GPU count (SGLang rounds up by default,
    ``num_frames_round_down=False``)."""
    return math.ceil(latent_frames / degree) * degree


def text_split(tokens: int, degree: int) -> tuple[int, ...]:
    """Step 3: the text tokens of each worker (all on every worker when fewer than the degree)."""
    if tokens < degree:
        return (tokens,) * degree
    base, extra = divmod(tokens, degree)
    return tuple(base + (1 if rank < extra else 0) for rank in range(degree))


def hunyuanvideo(degree: int) -> Shard:
    """HunyuanVideo's production DiT row split over ``degree`` sequence-parallel workers."""
    b, c, t, h, w = LATENT
    frames_latent = aligned_latent_frames(t, degree)
    local = (b, c, frames_latent // degree, h, w)
    tokens = local[2] // PATCH[0] * (h // PATCH[1]) * (w // PATCH[2])
    return Shard(degree, (frames_latent - 1) * TEMPORAL_RATIO + 1, local, tokens, text_split(TEXT, degree),
                 "ulysses (varlen)", HEADS // degree)


def rows(degree: int) -> list[tuple[str, str, list[str]]]:
    """(task family, production row, the shapes one worker runs it at: worker 0's first, then the last
    worker's where it differs) for the HunyuanVideo DiT rows the split changes."""
    s = hunyuanvideo(degree)
    v, t, j = s.video_tokens, s.text_tokens, s.joint_tokens
    per_rank = sorted(set(t), reverse=True)
    joint = sorted(set(j), reverse=True)
    return [
        ("norm_scale_shift", "hyvideo_nss_L27030 / hyvideo_res_nss_L27030", [f"[1, {v}, 3072]"]),
        ("norm_scale_shift", "hyvideo_nss_L55 / hyvideo_res_nss_L55", [f"[1, {n}, 3072]" for n in per_rank]),
        ("norm_scale_shift", "hyvideo_nss_L27085", [f"[1, {n}, 3072]" for n in joint]),
        ("fuse_scale_shift", "hunyuanvideo_muladd_L27030", [f"[1, {v}, 3072]"]),
        ("fuse_scale_shift", "hunyuanvideo_muladd_L55", [f"[1, {n}, 3072]" for n in per_rank]),
        ("fuse_scale_shift", "hunyuanvideo_muladd_L27085", [f"[1, {n}, 3072]" for n in joint]),
        ("norm_infer", "hyvideo_onepass_M648720", [f"[{v * HEADS}, 128]"]),
        ("norm_infer", "hyvideo_onepass_M1320", [f"[{n * HEADS}, 128]" for n in per_rank]),
        ("norm_infer", "hyvideo_onepass_M650040", [f"[{n * HEADS}, 128]" for n in joint]),
    ]
