"""`kda e2e --sp N` / `--tp N` on the CPU (issue 42): worker processes started the way SGLang's launcher
starts its diffusion workers, SGLang's own distributed init over gloo, the overlay off and on in every worker,
the outputs judged against one process, and one ledger row per e2e row with the layout and every worker's
``kda_kernels.status()`` digest. Runs go through the CLI in a subprocess (`python -m kda_lab e2e`), as in
tests/test_e2e.py; conftest.py sets TRITON_INTERPRET=1, under which the HunyuanVideo VAE fast path serves CPU
tensors, so its decline of a spatial-parallel decoder is a real decision, not a device mismatch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.conftest import REPO
from tests.test_e2e import lab_root

pytestmark = pytest.mark.skipif(torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") != "1",
                                reason="CPU test: gloo workers, the Triton interpreter (conftest.py)")
SPLIT = "spatial-parallel decoder (SGLang's own forward)"


def kda_e2e(root: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "KDA_ROOT": str(root), "KDA_GIT_COMMIT": "test", **(env or {})}
    full.pop("OUT", None)
    return subprocess.run([sys.executable, "-m", "kda_lab", "e2e", *args], env=full, cwd=REPO,
                          capture_output=True, text=True, timeout=900)


def results(out: Path) -> dict[str, dict[str, Any]]:
    (path,) = out.glob("e2e-*.json")
    return {r["row"]: r for r in json.loads(path.read_text())}


@pytest.fixture(scope="module")
def sp_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One run of the documented command: two gloo workers at SP 2, the FLUX.1 DiT and the HunyuanVideo
    decode."""
    tmp = tmp_path_factory.mktemp("sp")
    root, out = lab_root(tmp), tmp / "out"
    p = kda_e2e(root, "--sp", "2", "--rows", "flux_dit", "hunyuanvideo_vae_decode", "--tiny", "--trials", "1",
                "--no-profile", "--seed", "3", "--out", str(out))
    assert p.returncode == 0, p.stdout + p.stderr[-4000:]
    rows = results(out)
    return {"root": root, "rows": rows, "workers": {n: json.loads(r["workers"]) for n, r in rows.items()},
            "stdout": p.stdout}


@pytest.mark.slow
def test_every_worker_installs_the_overlay(sp_run: dict[str, Any]) -> None:
    for name, workers in sp_run["workers"].items():
        assert [w["rank"] for w in workers] == [0, 1], name
        assert sp_run["rows"][name]["parallel"] == "sp=2 kv_gather=2"  # SGLang's own pick at SP 2
        for w in workers:
            assert w["status"] == "ok" and w["device"] == "cpu" and w["arch"] == "cpu", w
            assert w["installed"] == workers[0]["installed"] and w["installed"], w
            assert "apply_group_norm_silu" in w["installed"] and not w["unexplained"], w
            # what is not installed on a CPU says why (an SGLang module that does not import here)
            assert all(why for why in w["not_installed"].values()), w
            assert w["rebound"] > 0 and w["call_sites"] > 0, w
    assert "hunyuanvideo_vae_decoder" in sp_run["workers"]["hunyuanvideo_vae_decode"][0]["installed"]


@pytest.mark.slow
def test_the_flux_dit_split_by_sequence_matches_one_process(sp_run: dict[str, Any]) -> None:
    """FLUX.1's 64 tiny image tokens split 32 + 32 by SGLang's ImagePipelineConfig.shard_latents_for_sp, its
    8 text tokens sharded in the model, K/V all-gathered in attention, the noise prediction gathered: every
    worker holds the one-process output (overlay off), and overlay off and on agree in each."""
    row, workers = sp_run["rows"]["flux_dit"], sp_run["workers"]["flux_dit"]
    assert row["status"] == "ok" and row["agree"] == 1, row
    assert "image tokens 64 (32 per worker)" in row["shape"], row["shape"]
    assert workers[0]["one_process"] == "bit for bit", workers[0]
    assert row["tolerance"].endswith("vs one process: bit for bit"), row["tolerance"]
    assert all(w["same_output_as_worker_0"] and w["agree"] == 1 for w in workers), workers


@pytest.mark.slow
def test_the_hunyuanvideo_fast_path_declines_the_spatial_parallel_decoder(sp_run: dict[str, Any]) -> None:
    """Built by SGLang under a two-worker gloo group, the HunyuanVideo VAE turns spatial parallel on in its
    decoder; the fast path (installed, and serving CPU tensors under the interpreter) hands it to SGLang and
    status() says why. In one process the same tiny decode is served and moves the output (tests/test_e2e.py:
    judged at model level); here overlay off and on are bit for bit."""
    row, workers = sp_run["rows"]["hunyuanvideo_vae_decode"], sp_run["workers"]["hunyuanvideo_vae_decode"]
    assert row["status"] == "ok" and row["max_abs_err"] == 0.0, row
    for w in workers:
        assert w["fallbacks"]["hunyuanvideo_vae_decoder"] == {SPLIT: 1}, w["fallbacks"]
    assert workers[0]["one_process"] == "bit for bit", workers[0]


@pytest.mark.slow
def test_the_ledger_row_carries_the_layout_and_validates(sp_run: dict[str, Any]) -> None:
    from kda_lab.e2e.latest import by_row_tier_gpu
    from kda_lab.ledger import e2e as ledger

    recorded = ledger.read(sp_run["root"])
    assert [r["row"] for r in recorded] == ["flux_dit", "hunyuanvideo_vae_decode"]
    assert all(r["parallel"] == "sp=2 kv_gather=2" and len(json.loads(r["workers"])) == 2 for r in recorded)
    assert ledger.validate(sp_run["root"]) == []
    one = {**recorded[0], "parallel": "", "workers": ""}
    assert by_row_tier_gpu(one) != by_row_tier_gpu(recorded[0])  # never supersedes a one-process row
    assert sp_run["stdout"].strip().splitlines()[-1].startswith("hunyuanvideo_vae_decode")


@pytest.mark.slow
def test_a_worker_without_the_overlay_fails_the_run(tmp_path: Path) -> None:
    """The deliberately wrong case: worker 1 of a TP 2 run starts with KDA_KERNELS_DISABLE=1, so install()
    does nothing there. The run exits 1 and its row fails, naming the worker; worker 0 still ran the split
    model, its weights loaded from the one-process weights through SGLang's weight loaders, and its output is
    the one-process output up to TP's reordered sums."""
    root, out = lab_root(tmp_path), tmp_path / "out"
    env = {"KDA_E2E_WORKER_ENV": json.dumps({"1": {"KDA_KERNELS_DISABLE": "1"}})}
    p = kda_e2e(root, "--tp", "2", "--rows", "flux_dit", "--tiny", "--trials", "1", "--no-profile", "--seed",
                "3", "--out", str(out), env=env)
    assert p.returncode == 1, p.stdout + p.stderr[-4000:]
    row = results(out)["flux_dit"]
    w0, w1 = json.loads(row["workers"])
    assert row["status"] == "failed" and row["parallel"] == "tp=2" and row["agree"] == 0, row
    assert "worker 1: overlay not installed" in row["error"] and "KDA_KERNELS_DISABLE" in row["error"], row
    assert "worker 0" not in row["error"], row["error"]
    assert not w0["unexplained"] and w0["installed"] and not w1["installed"] and w1["unexplained"], (w0, w1)
    assert w0["one_process"].startswith("model-level") and " <= 2 x " in w0["one_process"], w0["one_process"]
    from kda_lab.ledger import e2e as ledger

    assert [r["status"] for r in ledger.read(root)] == ["failed"] and ledger.validate(root) == []


def test_bad_layouts_exit_2_and_record_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """Refused before SGLang is imported or any worker starts: one line, exit 2, no ledger."""
    from kda_lab import cli

    root = lab_root(tmp_path)
    monkeypatch.setenv("KDA_ROOT", str(root))
    cases = [
        (["--sp", "0", "--rows", "flux_dit"], "--sp must be a positive number of worker processes, got 0"),
        (["--tp", "-1", "--rows", "flux_dit"], "--tp must be a positive number of worker processes, got -1"),
        (["--sp", "2", "--request", "flux1_dev"], "whole requests (--request, --stage) run in one process"),
        (["--sp", "2", "--rows", "zimage_dit"], "zimage_dit has no sp form"),
        (["--tp", "2", "--rows", "hunyuanvideo_vae_decode"], "hunyuanvideo_vae_decode has no tp form"),
        (["--sp", "2", "--rows", "flux_dit", "--gpu", "0"], "--gpu picks one GPU"),
    ]
    for args, line in cases:
        assert cli.main(["e2e", *args]) == 2, args
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("kda e2e: ") and line in err[0], (args, err)
    assert not (root / "e2e").exists()  # nothing recorded
    assert cli.main(["e2e", "--list", "--sp", "2"]) == 0
    listed = [ln.split()[0] for ln in capsys.readouterr().out.splitlines()]
    assert listed == ["flux_dit", "hunyuanvideo_vae_decode"]


def test_layouts_sglang_refuses_or_a_row_cannot_split_are_refused() -> None:
    """The checks that need SGLang (kda_lab.e2e.multi.check_layout, before any worker starts; the CLI prints
    its line and exits 2 as for the cases above): SGLang's own resolution of the layout, and the heads a row
    splits."""
    import argparse

    from kda_lab.e2e import parallel, runtime, sharded
    from kda_lab.e2e.multi import check_layout

    runtime.cpu_e2e_site()
    args = argparse.Namespace(attention_backend=None)
    flux = {"flux_dit": sharded.FORMS["flux_dit"]}
    assert parallel.label(check_layout(args, parallel.Layout(sp=2), flux, True, "cpu")) == "sp=2 kv_gather=2"
    # SGLang picks Ulysses for 4 workers (ServerArgs._adjust_parallelism): 2 tiny heads do not split 4 ways
    with pytest.raises(parallel.LayoutError, match="flux_dit has 2 attention heads at this size; sp=4 ulys"):
        check_layout(args, parallel.Layout(sp=4), flux, True, "cpu")
    assert parallel.label(check_layout(args, parallel.Layout(sp=8), flux, False, "cpu")) == "sp=8 ulysses=8"
    with pytest.raises(parallel.LayoutError, match="resolves --sp 2 --tp 2 to num_gpus=2, not the 4 workers"):
        check_layout(args, parallel.Layout(sp=2, tp=2), flux, True, "cpu")


def test_rows_written_before_the_layout_columns_still_validate(tmp_path: Path) -> None:
    """e2e/rows.csv is append-only: a file written under the schema before `parallel` and `workers` keeps its
    rows and chain; the next append adds the new header line first; readers see the old rows with the new
    columns empty; the committed ledger validates as it stands."""
    from kda_lab.ledger import e2e as ledger
    from kda_lab.ledger.store import chained_csv

    old = {c: "" for c in ledger.E2E_SCHEMAS[0] if c not in ("ts", "chain")}
    old.update(run_id="r-1", row="flux_dit", status="ok", gpu_name="NVIDIA H200", torch="2.11",
               sglang="0.5.23", git_commit="0" * 40, command="kda e2e", quality="lossless", stage="module")
    path = ledger.path(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text(chained_csv(ledger.E2E_SCHEMAS[0], [old], "", header=True, name="e2e/rows.csv"))
    assert ledger.validate(tmp_path) == []
    new = {**{c: "" for c in ledger.E2E_COLUMNS if c not in ("ts", "chain")}, **old, "run_id": "r-2",
           "parallel": "sp=2 kv_gather=2", "workers": json.dumps([{"rank": 0}, {"rank": 1}])}
    ledger.append(tmp_path, [new])
    text = path.read_text().splitlines()
    assert text[0] == ",".join(ledger.E2E_SCHEMAS[0]) and text[2] == ",".join(ledger.E2E_COLUMNS)
    assert ledger.validate(tmp_path) == []
    rows = ledger.read(tmp_path)
    assert [(r["run_id"], r["parallel"]) for r in rows] == [("r-1", ""), ("r-2", "sp=2 kv_gather=2")]
    bad = {**new, "run_id": "r-3", "workers": ""}  # a multi-worker row without its workers
    with pytest.raises(ledger.LedgerError, match="needs its workers column"):
        ledger.append(tmp_path, [bad])
    assert ledger.validate(REPO) == []


def test_hunyuanvideo_shard_shapes_follow_sglangs_split_rule() -> None:
    """docs/e2e.md's per-worker shapes (kda_lab.e2e.shards) recomputed from SGLang: its own frame alignment
    function, and the split rules it writes inline (read from its source, so a changed rule fails here)."""
    import inspect

    from kda_lab.e2e import runtime, shards

    runtime.cpu_e2e_site()
    from sglang.multimodal_gen.configs.models.vaes.hunyuanvae import HunyuanVAEConfig
    from sglang.multimodal_gen.configs.pipeline_configs.base import PipelineConfig
    from sglang.multimodal_gen.configs.sample.sampling_params import align_num_frames_for_num_gpus
    from sglang.multimodal_gen.runtime.layers.attention.layer import USPAttention
    from sglang.multimodal_gen.runtime.models.dits.hunyuanvideo import HunyuanVideoTransformer3DModel

    def squeeze(fn: Any) -> str:
        return " ".join(inspect.getsource(fn).split())

    dit = squeeze(HunyuanVideoTransformer3DModel.forward)
    shard, usp = squeeze(PipelineConfig.shard_latents_for_sp), squeeze(USPAttention.forward)
    for rule in ("base_text_shard_len = txt_seq_len // sp_size", "extra_text_tokens = txt_seq_len % sp_size",
                 "base_text_shard_len + (1 if rank < extra_text_tokens else 0)", "txt_seq_len >= sp_size",
                 "get_ring_parallel_world_size() == 1", "seq_lens = [img_seq_len + text_len"):
        assert rule in dit, rule
    assert 'rearrange( latents, "b c (n t) h w -> b c n t h w", n=sp_world_size )' in shard
    assert "time_dim % sp_world_size != 0" in shard  # an unaligned latent would not be split at all
    assert usp.index("if seq_lens is not None:") < usp.index('self.sp_attention_mode == "kv_gather"')
    vae = HunyuanVAEConfig()
    assert vae.arch_config.temporal_compression_ratio == shards.TEMPORAL_RATIO
    doc = (REPO / "docs/e2e.md").read_text()
    for degree in (2, 4, 8):
        s = shards.hunyuanvideo(degree)
        frames = align_num_frames_for_num_gpus(65, num_gpus=degree, vae_config=vae, round_down=False)
        assert frames == s.frames
        assert (s.frames - 1) // shards.TEMPORAL_RATIO + 1 == s.latent[2] * degree
        assert sum(s.text_tokens) == shards.TEXT and max(s.text_tokens) - min(s.text_tokens) <= 1
        assert shards.HEADS % degree == 0 and s.attention_heads * degree == shards.HEADS
        for family, production, shapes in shards.rows(degree):
            line = f"| {degree} | `{family}` | `{production}` | {' / '.join(shapes)} |"
            assert line in doc, line
    assert shards.hunyuanvideo(2).text_tokens == (28, 27) and shards.hunyuanvideo(8).text_tokens[-1] == 6
