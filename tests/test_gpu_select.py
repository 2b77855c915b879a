"""`--gpu INDEX|UUID` / `--allow-busy` of kda check, bench and e2e (kda_lab.measure.gpu_select), and the
ledger's gpu_uuid column (schema v4)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kda_lab import ledger
from kda_lab.cli import build_parser
from kda_lab.measure import gpu_select
from kda_lab.measure.gpu_select import GpuSelectError, check_idle, normalize_uuid, resolve

REPO = Path(__file__).resolve().parents[1]
FSS = "h200_diffusion_fuse_scale_shift__multi_shape"
UUIDS = ["GPU-8c2f0a1e-1111-2222-3333-444455556666", "GPU-8c2f9b7d-aaaa-bbbb-cccc-ddddeeeeffff"]


def test_an_index_or_a_uuid_names_one_device() -> None:
    assert resolve("1", UUIDS) == 1
    assert resolve("GPU-8c2f9b7d-aaaa-bbbb-cccc-ddddeeeeffff", UUIDS) == 1
    assert resolve("8C2F0A1E", UUIDS) == 0  # no GPU- prefix, upper case, a unique prefix
    assert normalize_uuid("GPU-ABCD-12") == "GPU-abcd-12"


@pytest.mark.parametrize(("spec", "needle"), [
    ("2", "has 2 CUDA device(s)"), ("GPU-8c2f", "more than one"), ("GPU-ffff", "matches no"),
    ("cuda:1", "device index or a GPU UUID"),
])
def test_a_gpu_that_is_not_here_or_not_unique_is_refused(spec: str, needle: str) -> None:
    with pytest.raises(GpuSelectError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        resolve(spec, UUIDS)


def test_a_busy_gpu_is_refused_unless_allowed() -> None:
    with pytest.raises(GpuSelectError, match="in use by process.*4242"):
        check_idle(UUIDS[0], allow_busy=False, busy_pids=lambda uuid: [4242])
    check_idle(UUIDS[0], allow_busy=False, busy_pids=lambda uuid: [])  # idle: fine
    check_idle(UUIDS[0], allow_busy=True, busy_pids=lambda uuid: [4242])  # --allow-busy
    with pytest.raises(GpuSelectError, match="NVML is not importable.*--allow-busy"):
        check_idle(UUIDS[0], allow_busy=False, busy_pids=lambda uuid: None)


def test_without_pynvml_the_busy_check_says_so() -> None:
    if importlib.util.find_spec("pynvml") is not None:
        pytest.skip("pynvml is installed here (a GPU environment)")
    assert gpu_select.nvml_busy_pids(UUIDS[0]) is None
    with pytest.raises(GpuSelectError, match="pip install nvidia-ml-py"):
        check_idle(UUIDS[0], allow_busy=False)


def test_check_bench_and_e2e_take_the_flags() -> None:
    p = build_parser()
    for argv in (["check", FSS, "--gpu", "1"], ["bench", FSS, "--gpu", "GPU-8c2f", "--allow-busy"],
                 ["e2e", "--gpu", "0", "--allow-busy"]):
        args = p.parse_args(argv)
        assert args.gpu == argv[argv.index("--gpu") + 1] and args.allow_busy == ("--allow-busy" in argv)


def kda(*argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "KDA_ROOT"}
    return subprocess.run([sys.executable, "-m", "kda_lab", *argv], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=600)


def test_the_cli_refuses_gpu_where_it_cannot_apply() -> None:
    r = kda("check", FSS, "--interpret", "--gpu", "0")
    assert r.returncode == 2 and "--gpu does not apply" in r.stderr, r.stderr
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU host")
    r = kda("bench", FSS, "--gpu", "0", "--no-record")
    assert r.returncode == 2 and "no CUDA GPU" in r.stderr, r.stderr


def _row(**kw: str) -> dict[str, str]:
    row = dict.fromkeys(ledger.BENCHMARK_COLUMNS, "1")
    row.update(ts="2026-12-07T00:00:00Z", run_id="r1", task=FSS, arch="h200", mode="bench", row="r",
               row_kind="production", gpu_name="NVIDIA H200", overlay="off", peers="", best_peer="",
               best_peer_us="", speedup_vs_best_peer="", supersedes="", note="", chain="")
    row.update(kw)
    return row


def test_ledger_rows_carry_the_gpu_uuid_and_old_rows_read_without_one(tmp_path: Path) -> None:
    cols = ledger.BENCHMARK_COLUMNS
    assert cols[cols.index("gpu_cc") + 1] == "gpu_uuid" and "gpu_uuid" not in ledger.BENCHMARK_SCHEMAS[-2]
    committed = (REPO / "kernels" / FSS / "benchmark.csv").read_text()
    assert ledger.header_line() not in committed  # the committed ledgers predate the column
    (tmp_path / "benchmark.csv").write_text(committed)
    n_old = len(ledger.read_benchmark_rows(tmp_path))
    ledger.append_benchmark_rows(tmp_path, [_row(gpu_uuid=UUIDS[1])])
    assert ledger.validate_benchmark_csv(tmp_path / "benchmark.csv") == []
    rows = ledger.read_benchmark_rows(tmp_path)
    assert rows[-1]["gpu_uuid"] == UUIDS[1] and all(r["gpu_uuid"] == "" for r in rows[:n_old])


@pytest.mark.gpu
def test_select_gpu_makes_it_the_current_device() -> None:
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    last = torch.cuda.device_count() - 1
    uuid = gpu_select.torch_uuids()[last]
    dev = gpu_select.select_gpu(uuid, allow_busy=True)
    assert dev == torch.device("cuda", last) and torch.cuda.current_device() == last
    assert gpu_select.gpu_uuid(dev) == uuid
