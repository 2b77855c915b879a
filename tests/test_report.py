"""`kda report`: leaderboard, plots and README task table from the ledgers only; `--check` for staleness.

The real repository is checked as it stands (test_readme_table_is_current, test_leaderboard_is_current).
Everything else runs on temporary lab roots: copies of the real ledgers, or synthetic ledgers appended with
the harness's own ledger writer (so hash chains and the schema are the real ones).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kda_lab import ledger, report
from kda_lab.report import markdown, model, peers
from kda_lab.task import load_task
from tests.conftest import FSS, REPO

README_TEXT = (
    "# Lab\n\nintro\n\n## Tasks\n\n"
    f"{report.START_MARKER}\n| old table |\n{report.END_MARKER}\n\n## After\n\ntext kept as is\n"
)
ENV = {
    "gpu_name": "NVIDIA H200", "gpu_cc": "9.0", "driver": "580.159.04", "torch": "2.11.0+cu130",
    "triton": "3.6.0", "cuda": "13.0", "sglang": "0.5.23", "overlay": "off", "git_commit": "0" * 40, "git_dirty": "0",
    "command": "kda bench synthetic",
}


# ------------------------------------------------------------------------------------------------ helpers

def lab_root(tmp_path: Path, *, real_ledgers: bool) -> Path:
    """A lab root with the fuse_scale_shift task, order.txt, a README with markers and an empty docs/."""
    root = tmp_path / "lab"
    (root / "kernels").mkdir(parents=True)
    (root / "kda_lab").mkdir()
    (root / "docs").mkdir()
    (root / "scripts" / "launch_kernels").mkdir(parents=True)
    order = REPO / report.ORDER_FILE
    if order.exists():
        shutil.copy(order, root / report.ORDER_FILE)
    task = root / "kernels" / FSS
    task.mkdir()
    shutil.copy(REPO / "kernels" / FSS / "task.toml", task / "task.toml")
    if real_ledgers:
        for name in (ledger.BENCHMARK_FILE, ledger.SOLUTIONS_FILE):
            shutil.copy(REPO / "kernels" / FSS / name, task / name)
    (root / "README.md").write_text(README_TEXT)
    return root


def bench_rows(task_dir: Path, *, run_id: str, mode: str, cand: str, factors: dict[str, float] | float,
               ts: str, compile_factor: float | None = 1.1, supersedes: str = "", arch: str = "h200",
               gpu: str = "NVIDIA H200") -> list[dict]:
    """Synthetic ledger rows for every production row: candidate = SGLang time / factor."""
    t = load_task(task_dir)
    rows = []
    for w in t.workloads:
        if w.kind != "production":
            continue
        nbytes = t.functions[w.fn].byte_model.bytes(w)
        base = 2.0 + nbytes / 4.0e6  # µs: ~4 TB/s plus 2 µs launch
        f = factors if isinstance(factors, float) else factors.get(w.name, 1.0)
        cand_us = base / f if mode != "baseline-only" else None
        measured = cand_us or base
        copy_us = 2.0 + nbytes / 4.2e6
        comp = base * compile_factor if compile_factor else None
        rows.append({
            "ts": ts, "run_id": run_id, "task": FSS, "arch": arch, "mode": mode,
            "candidate_id": cand if mode == "bench" else "baseline", "source_hash": f"{cand}hash".ljust(16, "0"),
            "function": w.fn, "row": w.name, "row_kind": "production", "model": w.model, "preset": w.preset,
            "dtype": w.primary().dtype, "shape": w.shape_signature(), "bytes": nbytes,
            "baseline_us": base, "baseline_p10_us": base * 0.99, "baseline_p90_us": base * 1.01,
            "candidate_us": cand_us, "speedup": base / cand_us if cand_us else None,
            "compile_us": comp, "speedup_vs_compile": comp / measured if comp else None,
            "copy_us": copy_us, "sol": copy_us / measured,
            "candidate_tbps": nbytes / cand_us / 1e6 if cand_us else None, "baseline_tbps": nbytes / base / 1e6,
            "host_baseline_us": 30.0, "host_candidate_us": 25.0 if cand_us else None, "trials": 15,
            "input_sets": 2, "seed": 1, **ENV, "gpu_name": gpu, "supersedes": supersedes,
        })
    return rows


def solution(task_dir: Path, cid: str, status: str, event: str, ts: str, parent: str | None = None,
             evidence: dict | None = None) -> None:
    ledger.append_solution(task_dir, ts=ts, id=cid, parent=parent, status=status, event=event,
                           source_hash=f"{cid}hash".ljust(16, "0"), arch="h200", gpu="NVIDIA H200",
                           evidence=evidence or {}, git_commit="0" * 40, command="kda synthetic", note="")


def synthetic_history(task_dir: Path) -> None:
    """A/A, baseline-only, then candidates c001 (1.30x), c002 (1.20x, promoted), c003 (0.9x), a superseded
    bench run of c003 that claimed 3x, and a CPU-only row that must be ignored."""
    solution(task_dir, "c000", "baseline", "register", "2026-11-20T10:00:00Z")
    ledger.append_benchmark_rows(task_dir, bench_rows(task_dir, run_id="r-aa", mode="aa", cand="c000",
                                                      factors={"qwen_muladd_L19": 1.004, "qwen_muladd_L47": 0.997},
                                                      ts="2026-11-20T10:05:00Z", compile_factor=None))
    ledger.append_benchmark_rows(task_dir, bench_rows(task_dir, run_id="r-base", mode="baseline-only", cand="c000",
                                                      factors=1.0, ts="2026-11-20T10:10:00Z"))
    solution(task_dir, "c001", "proposed", "register", "2026-11-21T09:00:00Z", parent="c000")
    ledger.append_benchmark_rows(task_dir, bench_rows(task_dir, run_id="r-c001", mode="bench", cand="c001",
                                                      factors=1.3, ts="2026-11-21T09:30:00Z"))
    solution(task_dir, "c001", "benchmarked", "bench", "2026-11-21T09:31:00Z", evidence={"run_id": "r-c001"})
    solution(task_dir, "c002", "proposed", "register", "2026-11-22T09:00:00Z", parent="c001")
    ledger.append_benchmark_rows(task_dir, bench_rows(task_dir, run_id="r-c002", mode="bench", cand="c002",
                                                      factors={"qwen_muladd_L19": 0.98}, ts="2026-11-22T09:30:00Z"))
    ledger.append_benchmark_rows(task_dir, bench_rows(task_dir, run_id="r-c002b", mode="bench", cand="c002",
                                                      factors=1.2, ts="2026-11-22T11:30:00Z"))
    solution(task_dir, "c002", "promoted", "promote", "2026-11-22T12:00:00Z", evidence={"run_id": "r-c002b"})
    solution(task_dir, "c003", "proposed", "register", "2026-11-23T09:00:00Z", parent="c002")
    ledger.append_benchmark_rows(task_dir, bench_rows(task_dir, run_id="r-c003-bad", mode="bench", cand="c003",
                                                      factors=3.0, ts="2026-11-23T09:30:00Z"))
    ledger.append_benchmark_rows(task_dir, bench_rows(task_dir, run_id="r-c003", mode="bench", cand="c003",
                                                      factors=0.9, ts="2026-11-23T10:30:00Z",
                                                      supersedes="r-c003-bad"))
    ledger.append_benchmark_rows(task_dir, bench_rows(task_dir, run_id="r-cpu", mode="bench", cand="c003",
                                                      factors=5.0, ts="2026-11-23T11:00:00Z", arch="cpu",
                                                      gpu="cpu"))


def task_report(root: Path) -> report.TaskReport:
    (t,) = report.collect(root)
    return t


# ------------------------------------------------------------------------------------------------ real repo

def test_leaderboard_is_current() -> None:
    stale = [s for s in report.check(REPO) if s != "README.md"]
    assert not stale, f"stale: {stale}; run `kda report` and commit docs/leaderboard.md and docs/plots/"


def test_readme_table_is_current() -> None:
    text = (REPO / "README.md").read_text() if (REPO / "README.md").exists() else ""
    if report.splice_readme(text, "") is None:
        pytest.skip("README.md has no kda:tasks markers yet")
    assert "README.md" not in report.check(REPO), "README task table is stale: run `kda report` and commit README.md"


def test_check_through_the_cli_on_the_repo() -> None:
    from kda_lab.cli import main

    assert main(["report", "--check"]) == 0


# ------------------------------------------------------------------------------------------------ staleness

def test_check_detects_an_appended_run_and_report_fixes_it(tmp_path: Path, capsys) -> None:
    root = lab_root(tmp_path, real_ledgers=True)
    assert set(report.check(root)) >= {"README.md", "docs/leaderboard.md"}  # never written yet
    report.write(root)
    assert report.check(root) == []
    assert report.main(["--check", "--root", str(root)]) == 0
    task_dir = root / "kernels" / FSS
    ledger.append_benchmark_rows(task_dir, bench_rows(task_dir, run_id="r-extra-aa", mode="aa", cand="c000",
                                                      factors={"qwen_muladd_L19": 1.02}, ts="2026-12-01T00:00:00Z",
                                                      compile_factor=None))
    assert set(report.check(root)) == {"README.md", "docs/leaderboard.md"}
    capsys.readouterr()
    assert report.main(["--check", "--root", str(root)]) == 1
    assert "stale" in capsys.readouterr().err
    report.write(root, plots=False)
    assert report.check(root) == []
    assert "r-extra-aa" in (root / report.LEADERBOARD).read_text()


def test_missing_plot_is_stale(tmp_path: Path) -> None:
    root = lab_root(tmp_path, real_ledgers=True)
    report.write(root)
    (root / report.PLOTS / FSS / "tbps.png").unlink()
    assert report.check(root) == [f"docs/plots/{FSS}/tbps.png"]


def test_output_is_deterministic_and_readme_outside_markers_is_kept(tmp_path: Path) -> None:
    root = lab_root(tmp_path, real_ledgers=True)
    report.write(root, plots=False)
    first = (root / report.LEADERBOARD).read_text(), (root / "README.md").read_text()
    report.write(root, plots=False)
    assert ((root / report.LEADERBOARD).read_text(), (root / "README.md").read_text()) == first
    readme = first[1]
    assert readme.startswith("# Lab\n\nintro\n\n## Tasks\n\n" + report.START_MARKER + "\n| task | arch |")
    assert readme.endswith(report.END_MARKER + "\n\n## After\n\ntext kept as is\n")
    assert "| old table |" not in readme


def test_readme_without_markers_is_left_alone(tmp_path: Path, capsys) -> None:
    root = lab_root(tmp_path, real_ledgers=True)
    (root / "README.md").write_text("# Lab\n\nno markers here\n")
    report.write(root, plots=False)
    assert (root / "README.md").read_text() == "# Lab\n\nno markers here\n"
    assert [s for s in report.check(root) if not s.endswith(".png")] == []
    report.write(root)
    assert report.main(["--check", "--root", str(root)]) == 0
    assert "no <!-- kda:tasks:start -->" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------ content

def test_promoted_candidate_is_the_headline_and_superseded_runs_are_dropped(tmp_path: Path) -> None:
    root = lab_root(tmp_path, real_ledgers=False)
    synthetic_history(root / "kernels" / FSS)
    t = task_report(root)
    run_ids = [r.run_id for r in t.runs]
    assert "r-c003-bad" not in run_ids and "r-cpu" not in run_ids
    assert ("r-c003-bad", "r-c003") in t.superseded and t.ignored_rows == 15
    head, kind = t.headline()
    assert (head.run_id, head.candidate_id, kind) == ("r-c002b", "c002", "promoted")
    assert head.geomean == pytest.approx(1.2)
    assert t.status == "promoted c002"
    assert t.latest_aa.run_id == "r-aa"
    best = {c.id: (c.best.geomean if c.best else None) for c in t.lineage}
    assert best["c001"] == pytest.approx(1.3) and best["c003"] == pytest.approx(0.9) and best["c000"] is None

    report.write(root)
    lb = (root / report.LEADERBOARD).read_text()
    assert "candidate **c002** (promoted), run `r-c002b`, 2026-11-22, NVIDIA H200" in lb
    assert "| geomean vs SGLang | **1.200×** over 15 production rows |" in lb
    assert "| geomean vs torch.compile | 1.320×" in lb  # compile 1.1x SGLang, candidate 1.2x
    assert "Superseded: `r-c003-bad` by `r-c003`." in lb
    assert "15 ledger rows measured on a CPU or another architecture are not shown." in lb
    assert "3.000×" not in lb and "5.000×" not in lb
    assert "A/A 1.0000" in lb or "A/A 1.000" in lb
    readme = (root / "README.md").read_text()
    assert f"| [{FSS}](kernels/{FSS}/) | h200 | fuse_scale_shift | promoted c002 | 1.200× (c002) |" in readme
    # `kda tasks` prints the same headline, not the best bench run (c001's 1.30x)
    from tests.test_cli import kda

    line = next(ln for ln in kda("tasks", root=root).stdout.splitlines() if ln.startswith(FSS + " "))
    assert " 1.200x " in line and "1.300x" not in line, line
    for name in ("speedup.png", "tbps.png", "lineage.png"):
        png = root / report.PLOTS / FSS / name
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
        assert f"(plots/{FSS}/{name})" in lb


def test_best_benchmarked_is_the_headline_when_nothing_is_promoted(tmp_path: Path) -> None:
    root = lab_root(tmp_path, real_ledgers=False)
    task_dir = root / "kernels" / FSS
    ledger.append_benchmark_rows(task_dir, bench_rows(task_dir, run_id="r1", mode="bench", cand="c001",
                                                      factors={"qwen_muladd_L19": 0.95}, ts="2026-11-21T09:00:00Z"))
    ledger.append_benchmark_rows(task_dir, bench_rows(task_dir, run_id="r2", mode="bench", cand="c002", factors=1.1,
                                                      ts="2026-11-22T09:00:00Z", compile_factor=None))
    t = task_report(root)
    head, kind = t.headline()
    assert (head.run_id, kind) == ("r2", "best benchmarked, not promoted")
    assert t.status == "benchmarked (best c002)"
    lb = report.render_leaderboard([t])
    assert "| vs torch.compile | not measured in this run |" in lb
    worst = report.collect(root)[0].bench_runs[0].summary()
    assert worst["worst_row"] == "qwen_muladd_L19" and worst["worst"] == pytest.approx(0.95)


def test_task_without_gpu_rows_says_so_and_draws_nothing(tmp_path: Path) -> None:
    root = lab_root(tmp_path, real_ledgers=False)
    task_dir = root / "kernels" / FSS
    ledger.append_benchmark_rows(task_dir, bench_rows(task_dir, run_id="r-cpu", mode="bench", cand="c001",
                                                      factors=2.0, ts="2026-11-21T09:00:00Z", arch="cpu", gpu="cpu"))
    stale_png = root / report.PLOTS / FSS / "speedup.png"
    stale_png.parent.mkdir(parents=True)
    stale_png.write_bytes(b"old")
    written, _ = report.write(root)
    lb = (root / report.LEADERBOARD).read_text()
    assert "**No GPU measurements in benchmark.csv yet**: nothing to plot." in lb
    assert not (root / report.PLOTS / FSS).exists()  # the stale plot was removed with its folder
    assert not [p for p in written if p.suffix == ".png"]
    t = task_report(root)
    assert report.plot_names(t) == [] and t.status == "no runs yet"
    assert "| no runs yet | – | – | – | – |" in (root / "README.md").read_text()


def test_launcher_numbers_come_from_order_txt(tmp_path: Path) -> None:
    root = lab_root(tmp_path, real_ledgers=True)
    (root / report.ORDER_FILE).write_text("a\nb\n" + FSS + "\n")
    assert task_report(root).launcher == "k03"
    (root / report.ORDER_FILE).unlink()
    assert task_report(root).launcher == ""


def test_aa_spread_and_sol_cells(tmp_path: Path) -> None:
    root = lab_root(tmp_path, real_ledgers=False)
    synthetic_history(root / "kernels" / FSS)
    t = task_report(root)
    spread = t.latest_aa.aa()
    assert spread["max_dev"] == pytest.approx(0.004)
    assert markdown._aa_text(t) == f"{spread['geomean']:.4f}, max 0.40%"
    head, _ = t.headline()
    sols = head.large_sol()
    assert sols and all(b >= report.LARGE_ROW_BYTES for b in
                        (r["bytes"] for r in head.rows if r["row"] in dict(sols)))
    lo, hi = min(v for _, v in sols), max(v for _, v in sols)
    assert markdown._sol_text(head) == f"{lo:.2f}–{hi:.2f}!"


def test_unreadable_task_toml_is_reported_not_fatal(tmp_path: Path) -> None:
    root = lab_root(tmp_path, real_ledgers=True)
    broken = root / "kernels" / "h200_broken__x"
    broken.mkdir()
    (broken / "task.toml").write_text("slug = [unclosed\n")
    report.write(root)
    by_slug = {t.slug: t for t in report.collect(root)}
    assert by_slug["h200_broken__x"].status == "invalid task.toml"
    assert "**task.toml unreadable:" in (root / report.LEADERBOARD).read_text()
    assert not (root / report.PLOTS / "h200_broken__x").exists()
    assert report.check(root) == []


# ------------------------------------------------------------------------------------------------ plots

GN = "h200_diffusion_group_norm_silu__multi_shape"
SCREEN = (1920, 1080)


def png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


def test_size_classes_end_where_the_report_counts_sol() -> None:
    from kda_lab.report import plots

    bounds = [b for b, _ in plots.SIZE_CLASSES]
    assert bounds == sorted(bounds) and bounds[-2] == report.LARGE_ROW_BYTES and bounds[-1] == float("inf")
    assert plots.size_class(report.LARGE_ROW_BYTES - 1) != plots.size_class(report.LARGE_ROW_BYTES)
    assert plots.size_class(None) == plots.SIZE_CLASSES[0][1]


def test_groupnorm_plots_are_a_grid_by_function_and_size_class_that_fits_a_screen(tmp_path: Path) -> None:
    """The 102-row GroupNorm task (real ledgers): every row once, in the panel of its function and size class,
    smallest first; both per-row PNGs fit a 1920×1080 screen (one column of bars was 1486×8233)."""
    from kda_lab.report import plots

    root = lab_root(tmp_path, real_ledgers=False)
    shutil.copytree(REPO / "kernels" / GN, root / "kernels" / GN, ignore=shutil.ignore_patterns("src", "__pycache__"))
    t = next(t for t in report.collect(root) if t.slug == GN)
    task = load_task(root / "kernels" / GN)
    fn_of = {w.name: w.fn for w in task.workloads if w.kind == "production"}
    runs = [*plots.candidate_series(t), t.latest_aa]
    g = plots.grid(t, runs)
    assert g.functions == ["apply_group_norm_silu", "triton_group_norm_silu"]
    assert g.classes == [label for _, label in plots.SIZE_CLASSES]
    assert sorted(g.rows()) == sorted(fn_of) and len(g.rows()) == len(set(g.rows())) == 102
    nbytes = {r["row"]: r["bytes"] for run in runs for r in run.rows}
    for (fn, cls), rows in g.cells.items():
        assert {fn_of[r] for r in rows} == {fn}
        assert {plots.size_class(nbytes[r]) for r in rows} == {cls}
        assert [nbytes[r] for r in rows] == sorted(nbytes[r] for r in rows)
    assert max(len(rows) for rows in g.cells.values()) <= 24  # the tallest panel: 22 rows
    assert g.labels["flux_vae_apply_1x128x1024x1024"] == "flux_vae_apply_1x128x1024x1024  (536.9 MB)"

    written = plots.draw_all(root / report.PLOTS, [t])
    assert {p.name for p in written} == {"speedup.png", "tbps.png", "lineage.png"}
    for p in written:
        w, h = png_size(p)
        assert w <= SCREEN[0] and h <= SCREEN[1], f"{p.name} is {w}x{h}"
        if p.name != "lineage.png":
            assert p.stat().st_size > 50_000  # 102 labelled rows drawn, not an empty frame


def test_a_task_with_one_function_and_one_size_class_is_one_panel(tmp_path: Path) -> None:
    from kda_lab.report import plots

    root = lab_root(tmp_path, real_ledgers=False)
    task_dir = root / "kernels" / FSS
    ledger.append_benchmark_rows(task_dir, bench_rows(task_dir, run_id="r1", mode="bench", cand="c001", factors=1.1,
                                                      ts="2026-11-21T09:00:00Z"))
    t = task_report(root)
    (run,) = t.bench_runs
    run.rows = [r for r in run.rows if r["function"] == "fuse_scale_shift_kernel" and r["bytes"] >= 64e6]
    g = plots.grid(t, [run])
    assert g.functions == ["fuse_scale_shift_kernel"] and g.classes == [plots.SIZE_CLASSES[-1][1]]
    assert len(g.cells) == 1 and len(g.rows()) == len(run.rows) > 1
    w, h = png_size(plots.draw_speedup(t, tmp_path / "speedup.png"))
    assert w < 1000 and h < 600


def test_h100_rows_are_not_results_for_an_h200_task(tmp_path: Path) -> None:
    """An H100 is (9, 0) like the H200: rows it recorded as arch h200 (the old harness) or h100 (now) are not
    the task's results in `kda report` nor in `kda tasks` (#10 item 1)."""
    root = lab_root(tmp_path, real_ledgers=False)
    task_dir = root / "kernels" / FSS
    h100 = "NVIDIA H100 80GB HBM3"
    ledger.append_benchmark_rows(task_dir, bench_rows(task_dir, run_id="r-h200", mode="bench", cand="c001",
                                                      factors=1.1, ts="2026-11-21T09:00:00Z"))
    ledger.append_benchmark_rows(task_dir, bench_rows(task_dir, run_id="r-h100-old", mode="bench", cand="c002",
                                                      factors=2.0, ts="2026-11-21T10:00:00Z", gpu=h100))
    ledger.append_benchmark_rows(task_dir, bench_rows(task_dir, run_id="r-h100", mode="bench", cand="c003",
                                                      factors=3.0, ts="2026-11-21T11:00:00Z", gpu=h100, arch="h100"))
    t = task_report(root)
    assert [r.run_id for r in t.runs] == ["r-h200"] and t.ignored_rows == 30
    head, _ = t.headline()
    assert head.run_id == "r-h200" and head.geomean == pytest.approx(1.1)
    from kda_lab.cli import latest_row_numbers

    task = load_task(task_dir)
    assert {r["run_id"] for r in latest_row_numbers(task).values()} == {"r-h200"}


def test_an_h100_check_and_bench_do_not_change_an_h200_candidates_status(tmp_path: Path) -> None:
    """The LTX-2 glue task's first GPU session got an H100 (2026-12-08): its check and bench rows (arch h100) made
    the tasks table read "c003 benchmarked, no GPU timing". Rows of another arch are not the task's results."""
    root = lab_root(tmp_path, real_ledgers=False)
    task_dir = root / "kernels" / FSS
    solution(task_dir, "c000", "baseline", "register", "2026-11-20T10:00:00Z")
    solution(task_dir, "c001", "proposed", "register", "2026-11-21T09:00:00Z", parent="c000")
    for event, status in (("check", "correct"), ("bench", "benchmarked")):
        ledger.append_solution(task_dir, ts="2026-11-22T09:00:00Z", id="c001", parent="c000", status=status,
                               event=event, source_hash="c001hash".ljust(16, "0"), arch="h100",
                               gpu="NVIDIA H100 80GB HBM3", evidence={}, git_commit="0" * 40, command="kda bench",
                               note="")
    # the old harness recorded an H100 as arch h200: the GPU's name decides
    ledger.append_solution(task_dir, ts="2026-11-22T10:00:00Z", id="c001", parent="c000", status="benchmarked",
                           event="bench", source_hash="c001hash".ljust(16, "0"), arch="h200",
                           gpu="NVIDIA H100 80GB HBM3", evidence={}, git_commit="0" * 40, command="kda bench",
                           note="")
    t = task_report(root)
    assert t.status == "c001 proposed, no GPU timing"
    assert {c.id: c.status for c in t.lineage}["c001"] == "proposed"
    solution(task_dir, "c001", "correct", "check", "2026-11-23T09:00:00Z", parent="c000")
    assert {c.id: c.status for c in task_report(root).lineage}["c001"] == "correct"


def test_a_later_promotion_supersedes_the_earlier_one(tmp_path: Path) -> None:
    """The exporter keeps one copy per task and arch: after c003 is promoted over c002, the status names c003
    alone and the lineage shows c002 as superseded (the ledger rows stay as they were)."""
    root = lab_root(tmp_path, real_ledgers=False)
    task_dir = root / "kernels" / FSS
    synthetic_history(task_dir)
    ledger.append_benchmark_rows(task_dir, bench_rows(task_dir, run_id="r-c004", mode="bench", cand="c004",
                                                      factors=1.25, ts="2026-11-24T09:30:00Z"))
    solution(task_dir, "c004", "promoted", "promote", "2026-11-24T10:00:00Z", evidence={"run_id": "r-c004"})
    t = task_report(root)
    assert t.status == "promoted c004"
    status = {c.id: c.status for c in t.lineage}
    assert status["c002"] == "superseded" and status["c004"] == "promoted"
    head, kind = t.headline()
    assert (head.run_id, kind) == ("r-c004", "promoted")
    assert [r["status"] for r in ledger.read_solutions(task_dir) if r["id"] == "c002"][-1] == "promoted"


def test_a_candidate_newer_than_the_baseline_runs_shows_in_the_status(tmp_path: Path) -> None:
    root = lab_root(tmp_path, real_ledgers=False)
    task_dir = root / "kernels" / FSS
    solution(task_dir, "c000", "baseline", "register", "2026-11-20T10:00:00Z")
    ledger.append_benchmark_rows(task_dir, bench_rows(task_dir, run_id="r-base", mode="baseline-only", cand="c000",
                                                      factors=1.0, ts="2026-11-20T10:10:00Z"))
    assert task_report(root).status == "baseline measured"
    solution(task_dir, "c001", "proposed", "register", "2026-11-21T09:00:00Z", parent="c000")
    assert task_report(root).status == "baseline measured; c001 proposed, no GPU timing"


def test_a_later_subset_bench_of_the_promoted_candidate_keeps_it_promoted(tmp_path: Path) -> None:
    """The H200 GroupNorm ledger, 2026-11-27: after c007's promotion, an 11-row bench of c007 against the compile
    peer (geomean 1.96x over those rows) turned the task into "benchmarked (best c007)" with the subset as its
    headline. A check or bench of the promoted sources keeps it promoted and its evidence run the headline; with
    nothing promoted, a `--rows` subset is never the headline while a full-table run exists."""
    root = lab_root(tmp_path, real_ledgers=False)
    task_dir = root / "kernels" / FSS
    synthetic_history(task_dir)
    subset = bench_rows(task_dir, run_id="r-c002-rows", mode="bench", cand="c002", factors=2.0,
                        ts="2026-11-24T09:00:00Z")[:3]
    ledger.append_benchmark_rows(task_dir, subset)
    solution(task_dir, "c002", "benchmarked", "bench", "2026-11-24T09:01:00Z", evidence={"run_id": "r-c002-rows"})
    solution(task_dir, "c002", "correct", "check", "2026-11-24T09:02:00Z")
    t = task_report(root)
    assert t.status == "promoted c002"
    head, kind = t.headline()
    assert (head.run_id, kind) == ("r-c002b", "promoted") and head.geomean == pytest.approx(1.2)
    assert "| geomean vs torch.compile | 1.320× over 15 rows |" in report.render_leaderboard([t])

    bare = lab_root(tmp_path / "bare", real_ledgers=False)
    bare_dir = bare / "kernels" / FSS
    ledger.append_benchmark_rows(bare_dir, bench_rows(bare_dir, run_id="full", mode="bench", cand="c001",
                                                      factors=1.1, ts="2026-11-21T09:00:00Z", compile_factor=None))
    ledger.append_benchmark_rows(bare_dir, bench_rows(bare_dir, run_id="rows", mode="bench", cand="c001",
                                                      factors=2.0, ts="2026-11-22T09:00:00Z")[:3])
    head, kind = task_report(bare).headline()
    assert (head.run_id, kind) == ("full", "best benchmarked, not promoted")
    # the headline run timed no compile peer: the leaderboard names the run of the same sources that did
    solution(bare_dir, "c001", "promoted", "promote", "2026-11-22T10:00:00Z", evidence={"run_id": "full"})
    lb = report.render_leaderboard([task_report(bare)])
    assert "| vs torch.compile | not measured in this run; run `rows` (same sources): 2.200× over 3 rows" in lb


# ------------------------------------------------------------------------------------------------ peers, compile counted

QUACK_EDGE = 1.02  # QuACK's time / the candidate's on every row: the candidate beats it by 2 %


def peer_rows(task_dir: Path, *, run_id: str, ts: str, compile_peer: dict[str, tuple[float, str | None]],
              cand: str = "c001", factors: float = 1.2) -> list[dict]:
    """Bench rows of ``cand`` as the harness writes them: QuACK ok on every row at QUACK_EDGE × the candidate's
    time, and the ledger's best_peer columns computed without compile (as every run before issue 41 was).
    ``compile_peer``: row -> (compile time / candidate time, its verdict or None for no verdict recorded); other
    rows keep bench_rows' compile at 1.1× SGLang's time with no verdict."""
    rows = bench_rows(task_dir, run_id=run_id, mode="bench", cand=cand, factors=factors, ts=ts)
    for r in rows:
        peers = {"quack": {"version": "0.6.5", "verdict": "ok", "us": r["candidate_us"] * QUACK_EDGE}}
        if r["row"] in compile_peer:
            factor, verdict = compile_peer[r["row"]]
            r["compile_us"] = r["candidate_us"] * factor
            r["speedup_vs_compile"] = factor
            if verdict is not None:
                peers[ledger.COMPILE_PEER] = {"version": ENV["torch"], "verdict": verdict, "us": r["compile_us"]}
        r.update(peers=json.dumps(peers), best_peer="quack", best_peer_us=peers["quack"]["us"],
                 speedup_vs_best_peer=QUACK_EDGE)
    return rows


def promoted_with_peers(tmp_path: Path, compile_peer: dict[str, tuple[float, str | None]]) -> report.TaskReport:
    root = lab_root(tmp_path, real_ledgers=False)
    task_dir = root / "kernels" / FSS
    ledger.append_benchmark_rows(task_dir, peer_rows(task_dir, run_id="r-c001", ts="2026-12-01T10:00:00Z",
                                                     compile_peer=compile_peer))
    solution(task_dir, "c001", "promoted", "promote", "2026-12-01T11:00:00Z", evidence={"run_id": "r-c001"})
    return task_report(root)


def test_compile_faster_on_one_row_is_listed_and_the_family_is_not_won(tmp_path: Path, capsys,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The ledger's own best-peer columns (QuACK only) say the candidate wins every row; torch.compile, checked
    ok by the oracle, is twice as fast on one row: that row is listed with compile's name and ratio, and the
    geomean against the best peer per row drops below 1×, so the family is not won."""
    row = "qwen_muladd_L19"
    t = promoted_with_peers(tmp_path, {row: (0.5, "ok")})
    head, kind = t.headline()
    assert kind == "promoted" and head.summary("speedup_vs_best_peer")["geomean"] == pytest.approx(QUACK_EDGE)
    f = peers.family_vs_peers(t)
    n = len(head.rows)
    assert f.beaten == [(row, ledger.COMPILE_PEER, pytest.approx(2.0, rel=1e-4))]
    assert f.geomean == pytest.approx((0.5 * QUACK_EDGE ** (n - 1)) ** (1 / n), rel=1e-4) and f.geomean < 1
    assert (f.worst, f.worst_row, f.worst_peer) == (pytest.approx(0.5, rel=1e-4), row, ledger.COMPILE_PEER)
    assert f.won is False and peers.won(t) is False
    lb = report.render_leaderboard([t])
    assert f"| fuse_scale_shift | c001 | run `r-c001` | `{row}` | torch.compile | 2.000× |" in lb
    assert f"**A peer beats the candidate c001 on 1 row:** `{row}` (torch.compile 2.000× faster)." in lb
    cell = peers.vs_best_peer_cell(t)
    assert cell.startswith(f"{f.geomean:.3f}×, worst 0.500×, not won; a peer faster on 1 row"), cell
    assert "compile counted where its oracle verdict was recorded" in markdown.TABLE_LEGEND
    doc = peers.peers_doc([t])
    assert f"| {FSS} | fuse_scale_shift | c001 | run `r-c001` | {f.geomean:.3f}× |" in doc and "| not won |" in doc
    # `kda tasks` prints the same cell
    from kda_lab.cli import main

    monkeypatch.setenv("KDA_ROOT", str(tmp_path / "lab"))
    capsys.readouterr()
    assert main(["tasks"]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith(FSS + " "))
    assert line.endswith(cell), line


def test_without_a_compile_verdict_the_old_best_peer_holds(tmp_path: Path) -> None:
    """Compile timed with no verdict recorded (every run before kda bench checked it), failed (n/a) or absent:
    the best peer per row is the one the ledger's columns name, the family is won, nothing is listed as a faster
    peer; a compile time with no verdict that is faster is listed apart as not counted."""
    row = "qwen_muladd_L19"
    for compile_peer in ({row: (0.5, None)}, {row: (0.5, "n/a")}, {}):
        t = promoted_with_peers(tmp_path / str(len(list(tmp_path.iterdir()))), compile_peer)
        head, _ = t.headline()
        f = peers.family_vs_peers(t)
        assert f.geomean == pytest.approx(head.summary("speedup_vs_best_peer")["geomean"]) == pytest.approx(QUACK_EDGE)
        assert f.beaten == [] and f.won is True and {p for _, p, _ in head.best_peers()} == {"quack"}
        assert peers.vs_best_peer_cell(t).startswith(f"{QUACK_EDGE:.3f}×, worst {QUACK_EDGE:.3f}×, won")
        lb = report.render_leaderboard([t])
        assert "No correct peer is faster than a headline candidate on any row." in lb
        if compile_peer == {row: (0.5, None)}:
            assert f.unchecked == [(row, pytest.approx(2.0, rel=1e-4), "run `r-c001`")]
            assert f"| fuse_scale_shift | c001 | run `r-c001` | `{row}` | torch.compile | 2.000× |" in lb
            assert "compile faster on 1 row, unchecked" in peers.vs_best_peer_cell(t)
        else:
            assert f.unchecked == [] and "timed faster, but no oracle verdict" not in lb


def test_a_compile_time_beside_a_wrong_verdict_is_not_a_faster_peer(tmp_path: Path) -> None:
    """A deliberately wrong ledger row: compile's time is recorded (twice as fast) but its oracle verdict on the
    row is wrong. The report must not count it as the faster peer, nor list it as an unchecked one."""
    row = "qwen_muladd_L19"
    t = promoted_with_peers(tmp_path, {row: (0.5, "wrong")})
    f = peers.family_vs_peers(t)
    assert f.beaten == [] and f.unchecked == [] and f.won is True
    assert f.geomean == pytest.approx(QUACK_EDGE)
    c = f.run.compile_summary()
    assert c["wrong"] == [row] and c["timed"] == 0
    assert f"| torch.compile | {ENV['torch']} | – | – | 0 | `{row}` |" in "\n".join(peers.task_peer_lines(t))
    # the same time with an ok verdict is the faster peer: the verdict, not the time, decided
    assert peers.family_vs_peers(promoted_with_peers(tmp_path / "ok", {row: (0.5, "ok")})).beaten


# ------------------------------------------------------------------------------------------------ split runs

def split_runs(tmp_path: Path, second: dict[str, str] | None = None, overlap: int = 0,
               ts2: str = "2026-12-01T10:20:00Z") -> report.TaskReport:
    """One table of c001 split into two bench runs (`--rows`): the first 7 production rows, then the rest (plus
    ``overlap`` rows of the first part again); ``second`` overrides ledger columns of the second run."""
    root = lab_root(tmp_path, real_ledgers=False)
    task_dir = root / "kernels" / FSS
    a = peer_rows(task_dir, run_id="r-a", ts="2026-12-01T10:00:00Z", compile_peer={})
    b = peer_rows(task_dir, run_id="r-b", ts=ts2, compile_peer={})
    a, b = a[:7], b[7 - overlap:]
    b = [{**r, "run_id": "r-b", "ts": ts2, **(second or {})} for r in b]
    ledger.append_benchmark_rows(task_dir, a)
    ledger.append_benchmark_rows(task_dir, b)
    return task_report(root)


def test_a_table_split_across_box_calls_is_merged_into_one_peer_view(tmp_path: Path) -> None:
    t = split_runs(tmp_path)
    assert [len(r.rows) for r in t.runs] == [7, 8]
    view = t.peer_view()
    assert view.merged_from == ["r-a", "r-b"] and len(view.rows) == 15
    assert view.label == "merged from runs `r-a`, `r-b`"
    assert view.peer_summary("quack")["timed"] == 15
    assert t.family_view().merged_from == ["r-a", "r-b"]
    lines = "\n".join(peers.task_peer_lines(t))
    assert "Peers in the table merged from runs `r-a`, `r-b` (bench; one table split across box calls" in lines
    assert "| quack | 0.6.5 |" in lines and "| 15 |" in lines
    assert "merged from runs `r-a`, `r-b` (bench)" in peers.peers_doc([t])


@pytest.mark.parametrize(("second", "overlap", "ts2", "why"), [
    ({"source_hash": "c001other0000000"}, 0, "2026-12-01T10:20:00Z", "source_hash differs"),
    ({"gpu_name": "NVIDIA H200 NVL"}, 0, "2026-12-01T10:20:00Z", "gpu_name differs"),
    ({"sglang": "0.5.22"}, 0, "2026-12-01T10:20:00Z", "sglang differs"),
    ({"git_commit": "1" * 40}, 0, "2026-12-01T10:20:00Z", "git_commit differs"),
    ({}, 1, "2026-12-01T10:20:00Z", "1 rows measured in both"),
    ({}, 0, "2026-12-02T10:20:00Z", "24.3 h apart"),
], ids=["hash", "gpu", "sglang", "commit", "overlapping-rows", "another-day"])
def test_runs_that_are_not_one_split_table_are_never_merged(tmp_path: Path, second: dict[str, str], overlap: int,
                                                            ts2: str, why: str) -> None:
    t = split_runs(tmp_path, second, overlap, ts2)
    a, b = t.runs
    assert why in model.split_mismatch(a, b)
    with pytest.raises(ValueError, match=why.split(" (")[0]):
        model.merge_split([a, b])
    view = t.peer_view()
    assert view.merged_from == [] and view.run_id in ("r-a", "r-b") and len(view.rows) < 15
    assert "merged from" not in "\n".join(peers.task_peer_lines(t))


def test_a_later_split_peer_batch_of_the_promoted_sources_is_what_vs_best_peer_compares(tmp_path: Path) -> None:
    """Issue 41's batch: the promotion's evidence run timed QuACK but compile had no verdict, and a `--rows` compile
    run of the same sources found compile faster on one row (listed as unchecked, with its run). A later batch of
    the same sources, split across two box calls, checks compile on every row: the merged batch becomes the
    family's evidence, its compile win on one row is counted (the family is not won), and the old unchecked row,
    now checked there, is no longer listed."""
    root = lab_root(tmp_path, real_ledgers=False)
    task_dir = root / "kernels" / FSS
    won_row, sub_row = "qwen_muladd_L19", "qwen_muladd_L47"
    ledger.append_benchmark_rows(task_dir, peer_rows(task_dir, run_id="r-c001", ts="2026-12-01T10:00:00Z",
                                                     compile_peer={}))
    solution(task_dir, "c001", "promoted", "promote", "2026-12-01T11:00:00Z", evidence={"run_id": "r-c001"})
    sub = [r for r in peer_rows(task_dir, run_id="r-sub", ts="2026-12-01T12:00:00Z",
                                compile_peer={sub_row: (0.8, None)}) if r["row"] in (sub_row, won_row)]
    ledger.append_benchmark_rows(task_dir, sub)
    t = task_report(root)
    f = peers.family_vs_peers(t)
    assert f.run.run_id == "r-c001" and f.won is True
    assert (sub_row, pytest.approx(1.25, rel=1e-4), "run `r-sub`") in f.unchecked

    names = [r["row"] for r in sub] + [r["row"] for r in bench_rows(task_dir, run_id="x", mode="bench", cand="c001",
                                                                     factors=1.2, ts="x")]
    batch = peer_rows(task_dir, run_id="r-a", ts="2026-12-03T09:00:00Z",
                      compile_peer={n: (0.5, "ok") if n == won_row else (1.1, "ok") for n in names})
    ledger.append_benchmark_rows(task_dir, batch[:7])
    ledger.append_benchmark_rows(task_dir, [{**r, "run_id": "r-b", "ts": "2026-12-03T09:15:00Z"} for r in batch[7:]])
    t = task_report(root)
    f = peers.family_vs_peers(t)
    assert f.run.merged_from == ["r-a", "r-b"] and f.n_rows == 15
    assert f.beaten == [(won_row, ledger.COMPILE_PEER, pytest.approx(2.0, rel=1e-4))] and f.won is False
    assert f.unchecked == []  # r-sub's and r-c001's compile rows are checked in the batch now
    assert t.peer_view().merged_from == ["r-a", "r-b"]
    lb = report.render_leaderboard([t])
    assert f"| fuse_scale_shift | c001 | merged from runs `r-a`, `r-b` | `{won_row}` | torch.compile | 2.000× |" in lb
    assert t.headline()[0].run_id == "r-c001"  # the headline vs SGLang stays the promotion's evidence run
