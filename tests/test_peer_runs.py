"""The harness side of the public peers: verdicts before timing, the ledger's peer columns, tables and report.

The adapters themselves (QuACK, Liger, FlashInfer) are tested in tests/test_peers.py. Here a peer is any
installed package (torch itself, at its installed version), so the verdict machinery runs for real on CPU
through the same ``check_row`` the candidate goes through.
"""

from __future__ import annotations

import json
import re
import shutil
from importlib import metadata
from pathlib import Path
from types import ModuleType

import pytest
import torch

from kda_lab import ledger, report
from kda_lab.families import family_module
from kda_lab.families.fuse_scale_shift import fuse_scale_shift_reference
from kda_lab.families.peers import Peer, PeerUnavailable
from kda_lab.measure import run
from kda_lab.task import load_task
from tests.conftest import FSS, REPO
from tests.test_report import bench_rows, lab_root

TASK = load_task(FSS)
ROW = next(w for w in TASK.workloads if w.name == "test_tail_bc_modulation")
TORCH_VERSION = metadata.version("torch")


def torch_peer(name: str, adapt, applies=None, package: str = "torch", version: str = TORCH_VERSION) -> Peer:
    return Peer(name=name, package=package, version=version, module="torch", adapt=adapt,
                **({"applies": applies} if applies else {}))


def right(mod: ModuleType, a: dict) -> torch.Tensor:
    return fuse_scale_shift_reference(**a)


def off_by_a_bit(mod: ModuleType, a: dict) -> torch.Tensor:
    return fuse_scale_shift_reference(**a) * 1.05


def refuses(mod: ModuleType, a: dict) -> torch.Tensor:
    raise AssertionError("headdim must be divisible by 8")


@pytest.fixture
def peers(monkeypatch: pytest.MonkeyPatch):
    def install(*ps: Peer) -> None:
        monkeypatch.setattr(family_module(TASK.family), "PEERS", {ROW.fn: ps}, raising=False)
    return install


def test_each_peer_gets_its_verdict_and_only_correct_ones_are_timed(peers) -> None:
    peers(torch_peer("good", right), torch_peer("bad", off_by_a_bit), torch_peer("strict", refuses),
          torch_peer("narrow", right, applies=lambda a: "takes 4-D x only"),
          torch_peer("absent", right, package="kda-no-such-package", version="1.0"),
          torch_peer("old", right, version="0.0.1"))
    args = run.make_inputs(ROW, torch.device("cpu"), 3)
    verdicts, timed = run.checked_peers(TASK, ROW, 3, torch.device("cpu"), args)
    assert sorted(timed) == ["good"]
    assert {n: v["verdict"] for n, v in verdicts.items()} == {
        "good": "ok", "bad": "wrong", "strict": "n/a", "narrow": "n/a", "absent": "unavailable", "old": "unavailable"}
    assert verdicts["bad"]["max_err"] > 0 and "tolerance" in verdicts["bad"]["why"]
    assert "divisible by 8" in verdicts["strict"]["why"] and verdicts["narrow"]["why"] == "takes 4-D x only"
    assert "not installed" in verdicts["absent"]["why"] and "pins 0.0.1" in verdicts["old"]["why"]
    out = timed["good"](**run.make_inputs(ROW, torch.device("cpu"), 4))
    assert out.shape == tuple(ROW.args["x"].shape)


def test_the_compile_peer_gets_an_oracle_verdict_before_it_is_timed() -> None:
    """kda bench checks torch.compile of the reference like a public peer (run.compile_verdict): the report counts
    a compile time only beside an ok verdict. Here the callables stand in for the compiled reference on CPU."""
    def fn(**a: object) -> torch.Tensor:
        return right(torch, a)

    def wrong(**a: object) -> torch.Tensor:
        return off_by_a_bit(torch, a)

    def raising(**a: object) -> torch.Tensor:
        return refuses(torch, a)

    cpu = torch.device("cpu")
    ok = run.compile_verdict(TASK, ROW, fn, 3, cpu)
    assert {k: ok[k] for k in ("version", "verdict")} == {"version": torch.__version__, "verdict": "ok"}
    bad = run.compile_verdict(TASK, ROW, wrong, 3, cpu)
    assert bad["verdict"] == "wrong" and bad["max_err"] > 0 and "tolerance" in bad["why"]
    assert 0 <= ok["max_err"] < bad["max_err"]  # the error against the oracle is recorded for an ok verdict too
    assert run.compile_verdict(TASK, ROW, raising, 3, cpu)["verdict"] == "n/a"
    # the verdict's key is the one the report reads, and best_peer counts compile only when it is ok
    assert run.best_peer({ledger.COMPILE_PEER: {"verdict": "ok", "us": 5.0}, "quack": {"verdict": "ok", "us": 6.0}}) \
        == (ledger.COMPILE_PEER, 5.0)
    assert run.best_peer({ledger.COMPILE_PEER: {**bad, "us": 1.0}, "quack": {"verdict": "ok", "us": 6.0}}) \
        == ("quack", 6.0)


def test_one_oracle_evaluation_serves_every_peer_of_a_row(peers, monkeypatch: pytest.MonkeyPatch) -> None:
    """kda bench checks compile and each public peer on a row separately; with the row's oracle cache the fp64
    oracle runs once for all of them (an attention oracle of a 75600-token row is seconds on an H200), and every
    verdict is still the oracle's."""
    import dataclasses

    from kda_lab.families import contract

    c = contract(TASK.family, ROW.fn)
    calls = []

    def counting(args):
        calls.append(1)
        return c.oracle(args)

    counted = dataclasses.replace(c, oracle=counting)
    monkeypatch.setattr(run, "contract", lambda family, fn: counted)
    peers(torch_peer("good", right), torch_peer("bad", off_by_a_bit), torch_peer("also_good", right))
    cpu, cache = torch.device("cpu"), {}
    verdicts, timed = run.checked_peers(TASK, ROW, 3, cpu, run.make_inputs(ROW, cpu, 3), cache)
    assert sorted(timed) == ["also_good", "good"] and verdicts["bad"]["verdict"] == "wrong"
    assert run.compile_verdict(TASK, ROW, lambda **a: right(torch, a), 3, cpu, cache)["verdict"] == "ok"
    assert len(calls) == 1 and list(cache) == [(ROW.name, 3, "cpu")]
    run.checked_peers(TASK, ROW, 4, cpu, run.make_inputs(ROW, cpu, 4), cache)  # another seed: its own oracle
    assert len(calls) == 2


def test_load_refuses_a_missing_or_other_version_package() -> None:
    with pytest.raises(PeerUnavailable, match="not installed"):
        torch_peer("x", right, package="kda-no-such-package", version="1.0").load()
    with pytest.raises(PeerUnavailable, match=re.escape(f"{TORCH_VERSION} is installed; the lab pins 9.9")):
        torch_peer("x", right, version="9.9").load()
    broken = Peer(name="x", package="torch", version=TORCH_VERSION, module="torch.kda_no_such_module", adapt=right)
    with pytest.raises(PeerUnavailable, match="import torch.kda_no_such_module failed"):
        broken.load()


def test_best_peer_is_the_fastest_correct_one() -> None:
    v = {"a": {"verdict": "ok", "us": 12.0}, "b": {"verdict": "ok", "us": 9.5}, "c": {"verdict": "wrong"},
         "d": {"verdict": "ok", "us": None}}
    assert run.best_peer(v) == ("b", 9.5)
    assert run.best_peer({"c": {"verdict": "wrong", "us": 1.0}}) is None


def table_row(peers: dict, best: tuple[str, float] | None, measured: float = 10.0) -> dict:
    return {"row": "r1", "bytes": 1e6, "baseline_us": measured, "candidate_us": None, "speedup": None,
            "compile_us": None, "candidate_tbps": None, "baseline_tbps": 0.1, "sol": 0.5, "host_baseline_us": 20.0,
            "host_candidate_us": None, "peers": json.dumps(peers),
            "speedup_vs_best_peer": best[1] / measured if best else None}


def test_bench_table_has_a_column_per_peer_and_vs_peer() -> None:
    text = run.format_table([table_row({"quack": {"verdict": "ok", "us": 8.0}, "liger": {"verdict": "wrong"},
                                        "flashinfer": {"verdict": "unavailable"}}, ("quack", 8.0))], "baseline-only")
    head, _, line = text.splitlines()
    assert [c in head for c in ("flashinfer", "liger", "quack", "vs peer")] == [True] * 4
    assert "absent" in line and "WRONG" in line and "8.00" in line and "0.800" in line
    plain = run.format_table([{**table_row({}, None), "peers": ""}], "baseline-only")
    assert "vs peer" not in plain


def peer_json(quack_us: float | None, verdict: str = "ok") -> str:
    info = {"version": "0.6.5", "verdict": verdict}
    if quack_us is not None:
        info["us"] = quack_us
    return json.dumps({"quack": info, "liger": {"version": "0.8.5", "verdict": "n/a", "why": "fp32 weight only"}})


def test_ledger_keeps_peer_columns_and_rejects_a_bad_peers_cell(tmp_path: Path) -> None:
    root = lab_root(tmp_path, real_ledgers=True)
    task_dir = root / "kernels" / FSS
    rows = bench_rows(task_dir, run_id="r-peers", mode="baseline-only", cand="c000", factors=1.0,
                      ts="2026-11-25T10:00:00Z")
    for r in rows:
        r.update(peers=peer_json(r["baseline_us"] / 1.25), best_peer="quack", best_peer_us=r["baseline_us"] / 1.25,
                 speedup_vs_best_peer=1 / 1.25)
    ledger.append_benchmark_rows(task_dir, rows)
    assert ledger.validate_ledgers(task_dir) == []  # old v1/v2 rows above the v3 header stay valid
    text = (task_dir / ledger.BENCHMARK_FILE).read_text()
    assert text.count(ledger.header_line()) == 1  # one migration line to the current schema
    bad = task_dir.parent / "bad"
    shutil.copytree(task_dir, bad)
    bad_rows = bench_rows(task_dir, run_id="r-bad", mode="baseline-only", cand="c000", factors=1.0,
                          ts="2026-11-25T11:00:00Z")[:1]
    bad_rows[0]["peers"] = "quack fast"
    ledger.append_benchmark_rows(bad, bad_rows)
    assert any("peers is not a JSON object" in p for p in ledger.validate_ledgers(bad))


def test_report_shows_peers_flags_rows_a_peer_wins_and_writes_docs_peers(tmp_path: Path) -> None:
    root = lab_root(tmp_path, real_ledgers=False)
    task_dir = root / "kernels" / FSS
    ledger.append_benchmark_rows(task_dir, bench_rows(task_dir, run_id="r-aa", mode="aa", cand="c000", factors=1.0,
                                                      ts="2026-11-25T09:00:00Z", compile_factor=None))
    rows = bench_rows(task_dir, run_id="r-c001", mode="bench", cand="c001", factors=1.3, ts="2026-11-25T10:00:00Z")
    winner = rows[0]["row"]
    for i, r in enumerate(rows):
        peer_us = r["candidate_us"] * (0.8 if i == 0 else 1.5)  # the peer wins the first row only
        r.update(peers=peer_json(peer_us), best_peer="quack", best_peer_us=peer_us,
                 speedup_vs_best_peer=peer_us / r["candidate_us"])
    ledger.append_benchmark_rows(task_dir, rows)
    (t,) = report.collect(root)
    run_ = t.peer_run()
    assert run_ is not None and run_.run_id == "r-c001" and run_.peer_names == ["liger", "quack"]
    q = run_.peer_summary("quack")
    assert q["timed"] == len(rows) and q["wrong"] == [] and q["version"] == "0.6.5"
    assert run_.peer_summary("liger")["not_applied"] == len(rows)
    (beaten,) = run_.beaten_by_peers()
    assert beaten[0] == winner and beaten[1] == "quack" and beaten[2] == pytest.approx(1.25)
    section = report.task_section(t)
    assert f"A peer beats the candidate c001 on 1 row:** `{winner}`" in section
    report.write(root, plots=False)
    doc = (root / "docs" / "peers.md").read_text()
    assert "| quack 0.6.5 |" in doc and "| liger 0.8.5 |" in doc
    assert "worst" in (root / "README.md").read_text().split(report.START_MARKER)[1]
    assert report.check(root) == [] or all(p.endswith(".png") for p in report.check(root))
    (root / "docs" / "peers.md").write_text("stale\n")
    assert "docs/peers.md" in report.check(root)


def test_a_run_where_every_peer_was_unavailable_does_not_hide_one_that_measured_them(tmp_path: Path) -> None:
    root = lab_root(tmp_path, real_ledgers=False)
    task_dir = root / "kernels" / FSS
    measured = bench_rows(task_dir, run_id="r-base", mode="baseline-only", cand="c000", factors=1.0,
                          ts="2026-11-25T09:00:00Z")
    for r in measured:
        r.update(peers=peer_json(r["baseline_us"] / 1.25), best_peer="quack", best_peer_us=r["baseline_us"] / 1.25,
                 speedup_vs_best_peer=1 / 1.25)
    ledger.append_benchmark_rows(task_dir, measured)
    later = bench_rows(task_dir, run_id="r-c001", mode="bench", cand="c001", factors=1.3, ts="2026-11-25T10:00:00Z")
    absent = json.dumps({"quack": {"verdict": "unavailable", "version": "0.6.5", "why": "not installed"}})
    for r in later:
        r.update(peers=absent)
    ledger.append_benchmark_rows(task_dir, later)
    (t,) = report.collect(root)
    assert t.headline()[0].run_id == "r-c001" and not t.headline()[0].peers_checked
    assert t.peer_run().run_id == "r-base"
    assert t.peer_run().peer_summary("quack")["timed"] == len(measured)
    # with no run that measured a peer, the run naming them is still shown (its verdicts say why none ran)
    root = lab_root(tmp_path / "only-unavailable", real_ledgers=False)
    ledger.append_benchmark_rows(root / "kernels" / FSS, later)
    (t,) = report.collect(root)
    assert t.peer_run().run_id == "r-c001" and t.peer_run().peer_summary("quack")["not_applied"] == len(later)


def test_the_repo_peers_doc_is_current() -> None:
    assert (REPO / "docs" / "peers.md").read_text() == report.markdown.peers_doc(report.collect(REPO))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (the box, with .gpu-stage-a)")
def test_bench_checks_compile_before_timing_it_on_the_gpu() -> None:
    """The real torch.compile of the reference through kda bench, nothing recorded: the row carries compile's
    oracle verdict under ledger.COMPILE_PEER beside its time, and the report counts it (compile_state "ok")."""
    from kda_lab.report.model import compile_state

    (r,) = run.run_bench(TASK, mode="baseline-only", rows=[ROW.name], trials=3, seed=1, public_peers=False,
                         record=False, include_test_rows=True, allow_other_arch=True, show=lambda s: None)
    info = json.loads(r["peers"])[ledger.COMPILE_PEER]
    assert info["verdict"] == "ok" and info["version"] == torch.__version__, info
    assert info["us"] == r["compile_us"] > 0 and r["best_peer"] == ledger.COMPILE_PEER
    assert compile_state({"peers": json.loads(r["peers"]), "compile_us": r["compile_us"]}) == "ok"
