"""`kda profile`: the ncu CSV parser, the digest rules and writer (CPU, on hand-written captures in
tests/fixtures/ncu/ that use Nsight Compute's documented metric names and export layouts), the CLI's
behaviour without ncu/GPU, `--from-csv`, and the GPU path end to end against a fake `ncu` executable.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from kda_lab.cli import main as kda_main
from kda_lab.profile import command as profile
from kda_lab.profile import ncu
from tests.conftest import FSS, REPO

FIX = Path(__file__).parent / "fixtures" / "ncu"
ROW = "qwen_edit_ln_select01_L8424"
BASE_CSV = FIX / f"{ROW}.baseline.raw.csv"
CAND_CSV = FIX / f"{ROW}.candidate.raw.csv"
TINY_CSV = FIX / "qwen_muladd_L19.baseline.details.csv"


# ------------------------------------------------------------------------------------------------ parser

def test_raw_page_parses_into_base_units() -> None:
    (k,) = ncu.parse_csv(BASE_CSV.read_text())
    assert k.name == "_fused_layernorm_scale_shift_gate_select01_kernel"
    assert (k.grid, k.block) == ("(8424, 1, 1)", "(256, 1, 1)")
    assert k.duration_us == pytest.approx(43.36)  # "usecond" -> ns internally
    assert k.get(ncu.DURATION) == pytest.approx(43360.0)
    assert k.dram_bytes == pytest.approx((52.08 + 103.61) * 1e6)  # Mbyte
    assert k.dram_tbps == pytest.approx(155.69e6 / 43.36e-6 / 1e12)
    assert k.get(ncu.DRAM_PCT) == pytest.approx(74.82)
    assert k.registers == 30 and k.grid_blocks == 8424  # "8,424" with a thousands separator
    assert k.get(ncu.ACHIEVED_OCC) == pytest.approx(71.43)
    assert k.local_memory == ("bytes", 0.0)
    assert "device__attribute_display_name" not in k.metrics  # text, not a number


def test_stalls_prefer_pc_samples_and_skip_selected_and_not_issued() -> None:
    (k,) = ncu.parse_csv(BASE_CSV.read_text())
    family, unit, stalls = k.stalls()
    assert (family, unit) == ("pc samples", "samples")
    reasons = [r for r, _, _ in stalls]
    assert "selected" not in reasons and not any(r.endswith("not_issued") for r in reasons)
    top = k.top_stalls(3)
    assert [r for r, _, _ in top] == ["long_scoreboard", "barrier", "short_scoreboard"]
    total = 48211 + 9120 + 6533 + 4411 + 3957 + 2210 + 1408 + 982 + 611 + 402 + 1873 + 355 + 1290
    assert top[0][2] == pytest.approx(48211 / total)


def test_stalls_fall_back_to_cycles_per_issue() -> None:
    (k,) = ncu.parse_csv(BASE_CSV.read_text())
    k.metrics = {n: v for n, v in k.metrics.items() if not n.startswith("smsp__pcsamp")}
    family, unit, stalls = k.stalls()
    assert unit == "cycles/issue" and stalls[0][:2] == ("long_scoreboard", pytest.approx(16.42))


def test_candidate_kernel_name_is_shortened() -> None:
    (k,) = ncu.parse_csv(CAND_CSV.read_text())
    assert k.short_name == "kda::ln_select01_rows_kernel<__nv_bfloat16, 4, 8>"
    assert k.registers == 56 and k.grid_blocks == 2106


def test_details_page_maps_section_names_to_raw_metrics() -> None:
    (k,) = ncu.parse_csv(TINY_CSV.read_text())
    assert k.name == "fuse_scale_shift_kernel_blc_opt"
    assert k.duration_us == pytest.approx(2.14)
    assert k.get(ncu.DRAM_PCT) == pytest.approx(5.16)
    assert k.get(ncu.MEM_PCT) == pytest.approx(5.16)
    assert k.get(ncu.SM_PCT) == pytest.approx(2.31)
    assert k.get(ncu.DRAM_RATE) == pytest.approx(248.41e9)  # Memory Workload Analysis, Gbyte/second
    assert k.registers == 26 and k.grid_blocks == 24
    assert k.get(ncu.THEORETICAL_OCC) == 100 and k.get(ncu.ACHIEVED_OCC) == pytest.approx(6.21)
    assert k.dram_bytes == pytest.approx((357.38 + 116.74) * 1e3)  # Kbyte, from --metrics rows
    assert k.local_memory == ("bytes", 0.0)  # sectors x 32
    assert k.top_stalls(1)[0][0] == "long_scoreboard"


@pytest.mark.parametrize(("value", "unit", "expected"), [
    (1.5, "msecond", 1.5e6), (2.0, "usecond", 2e3), (3.0, "nsecond", 3.0), (1.0, "second", 1e9),
    (2.0, "Kbyte", 2e3), (1.5, "Gbyte/second", 1.5e9), (4.0, "Mbyte", 4e6), (50.0, "%", 50.0), (7.0, "", 7.0),
])
def test_units(value: float, unit: str, expected: float) -> None:
    assert ncu.to_base(value, unit) == pytest.approx(expected)


def test_numbers_and_garbage() -> None:
    assert ncu.parse_number("1,234,567.5") == 1234567.5
    assert ncu.parse_number("n/a") is None and ncu.parse_number("") is None and ncu.parse_number("(1, 2)") is None
    with pytest.raises(ncu.NcuParseError):
        ncu.parse_csv("==PROF== Connected\nno table here\n")


# ------------------------------------------------------------------------------------------------ rules

def kernel(**metrics: float) -> ncu.Kernel:
    base = {ncu.DURATION: 50_000.0, ncu.DRAM_PCT: 60.0, ncu.ACHIEVED_OCC: 70.0, ncu.THEORETICAL_OCC: 100.0,
            ncu.REGISTERS: 32.0, ncu.GRID_SIZE: 4096.0, ncu.SM_PCT: 30.0, ncu.LOCAL_BYTES[0]: 0.0,
            ncu.LOCAL_BYTES[1]: 0.0, "smsp__pcsamp_warps_issue_stalled_selected": 100.0}
    base.update({k.replace("__dot__", "."): v for k, v in metrics.items()})
    return ncu.Kernel(id=0, name="k", metrics=base)


def stall(reason: str, n: float = 1000.0) -> dict[str, float]:
    return {f"smsp__pcsamp_warps_issue_stalled_{reason}": n}


@pytest.mark.parametrize(("metrics", "expect"), [
    ({ncu.LOCAL_BYTES[1]: 4096.0, **stall("long_scoreboard")}, "Register spills: 4,096 bytes"),
    ({ncu.DURATION: 2_000.0, ncu.GRID_SIZE: 24.0, **stall("long_scoreboard")}, "Launch/latency bound: 24 blocks"),
    ({ncu.DRAM_PCT: 91.0, **stall("long_scoreboard")}, "Memory bound near the ceiling: DRAM at 91%"),
    (stall("long_scoreboard"), "Latency bound on global loads"),
    ({ncu.ACHIEVED_OCC: 20.0, **stall("wait", 10.0), **stall("barrier", 5.0)}, "Low achieved occupancy: 20%"),
    (stall("barrier"), "Barrier stalls dominate"),
    (stall("mio_throttle"), "mio_throttle is the top stall"),
    (stall("math_pipe_throttle"), "Issue/compute bound (math_pipe_throttle"),
    (stall("drain"), "No single limiter stands out"),
])
def test_suggestion_rules(metrics: dict[str, float], expect: str) -> None:
    assert expect in ncu.suggest([kernel(**metrics)])


def test_suggestion_uses_the_longest_kernel_and_handles_nothing() -> None:
    short = kernel(**{ncu.DURATION: 1_000.0, ncu.LOCAL_BYTES[0]: 64.0})
    long = kernel(**{ncu.DRAM_PCT: 90.0})
    assert "Memory bound" in ncu.suggest([short, long])
    assert "No kernel" in ncu.suggest([])


def test_fixture_rules() -> None:
    assert "Latency bound on global loads" in ncu.suggest(ncu.parse_csv(BASE_CSV.read_text()))
    assert "Memory bound near the ceiling" in ncu.suggest(ncu.parse_csv(CAND_CSV.read_text()))
    assert "Launch/latency bound: 24 blocks on 132 SMs" in ncu.suggest(ncu.parse_csv(TINY_CSV.read_text()))


# ------------------------------------------------------------------------------------------------ digest

def digest() -> str:
    info = ncu.DigestInput(task=FSS, row=ROW, function="fuse_layernorm_scale_shift_gate_select01_kernel",
                           model="Qwen-Image-Edit", shape="x=bfloat16[1, 8424, 3072]", model_bytes=155341728.0,
                           seed=0, warmup=3, captured="2026-11-22 on NVIDIA H200, ncu 2025.3.1",
                           candidate="c001 (source 0123456789abcdef)", ledger_us={"baseline": 43.17},
                           files={"baseline": f"kernels/{FSS}/ncu/{ROW}.baseline.ncu-rep"},
                           command=f"kda profile {FSS} --row {ROW} --impl both")
    return ncu.render_digest(info, {"baseline": ncu.parse_csv(BASE_CSV.read_text()),
                                    "candidate": ncu.parse_csv(CAND_CSV.read_text())})


def test_digest_content() -> None:
    text = digest()
    assert text == digest()  # deterministic
    assert text.startswith(f"# Nsight Compute digest: `{ROW}`")
    for heading in ("## Summary", "## baseline: kernels", "## candidate: kernels", "## Suggested next step", "## Files"):
        assert heading in text
    assert "| baseline | 1 | 43.36 | 3.58 | 74.8 | 3.59 | 71.4 | 30 | 0 | long_scoreboard 59% |" in text
    assert "| candidate | 1 | 36.92 | 4.21 | 87.8 | 4.21 | 68.9 | 56 | 0 | long_scoreboard 59% |" in text
    assert "Candidate vs baseline under ncu (sum of kernel durations): 1.174x." in text
    assert "`kda::ln_select01_rows_kernel<__nv_bfloat16, 4, 8>` | (2106, 1, 1) / (384, 1, 1)" in text
    assert "- **baseline**: Latency bound on global loads" in text
    assert "- **candidate**: Memory bound near the ceiling" in text
    assert "--clock-control none" in text and "Captured 2026-11-22 on NVIDIA H200, ncu 2025.3.1." in text


# ------------------------------------------------------------------------------------------------ CLI, no GPU

def test_profile_without_ncu_names_docs_and_the_gpu_box(monkeypatch, capsys) -> None:
    monkeypatch.setattr(profile, "find_ncu", lambda explicit=None: None)
    assert kda_main(["profile", FSS, "--row", ROW]) == 2
    err = capsys.readouterr().err
    assert "Nsight Compute (`ncu`) was not found" in err
    assert "docs/report.md" in err and "docs/gpu-box.md" in err and "scripts/gpu_box.sh" in err
    assert f'"profile {FSS} --row {ROW} --copy-to $OUT"' in err


def test_profile_without_gpu_says_so(monkeypatch, capsys, tmp_path) -> None:
    import torch

    fake = tmp_path / "ncu"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert kda_main(["profile", FSS, "--row", ROW, "--ncu", str(fake)]) == 2
    err = capsys.readouterr().err
    assert "needs an NVIDIA GPU" in err and "docs/report.md" in err


def test_unknown_row_fails_before_any_gpu_work(capsys) -> None:
    assert kda_main(["profile", FSS, "--row", "no_such_row"]) == 2
    assert "unknown rows ['no_such_row']" in capsys.readouterr().err


def test_launch_side_on_cpu_fails_clearly() -> None:
    r = subprocess.run([sys.executable, "-m", "kda_lab.profile", "--launch", FSS, "--row", ROW, "--impl", "baseline"],
                       capture_output=True, text=True, cwd=REPO, timeout=300)
    if r.returncode == 0:
        pytest.skip("a CUDA GPU of the task's arch is present")
    assert r.returncode == 2 and "kda profile launch:" in r.stderr


def test_from_csv_rebuilds_the_digest_without_a_gpu(lab_copy: Path, capsys) -> None:
    rc = kda_main(["profile", FSS, "--row", ROW, "--from-csv", f"baseline={BASE_CSV}", f"candidate={CAND_CSV}"])
    assert rc == 0
    out = lab_copy / "profile" / f"{ROW}.md"
    text = out.read_text()
    assert "## baseline: kernels" in text and "## candidate: kernels" in text
    assert "Inputs: `x=bfloat16[1, 8424, 3072]" in text and "155.3 MB per call by the byte model" in text
    assert f"Captured from CSV exports {BASE_CSV.name}, {CAND_CSV.name}." in text
    assert "Latest `kda bench` medians for this row" in text  # from the copied ledger
    assert "## Summary" in capsys.readouterr().out
    assert kda_main(["profile", FSS, "--row", ROW, "--from-csv", f"other={BASE_CSV}"]) == 2


# ------------------------------------------------------------------------------------------------ GPU path, fake ncu

FAKE_NCU = r"""#!/usr/bin/env bash
# Fake Nsight Compute for tests: records argv and the launch environment; "profiles" by writing the report
# file; "exports" by printing the fixture CSV that matches the report name.
set -euo pipefail
log=${FAKE_NCU_LOG:?}
if [ "${1:-}" = "--version" ]; then
  printf 'NVIDIA (R) Nsight Compute Command Line Profiler\nVersion 2025.3.1.0 (build 36398880) (public-release)\n'
  exit 0
fi
if [ "${1:-}" = "--import" ]; then
  printf 'import %s\n' "$*" >>"$log"
  case "$2" in
    *.baseline.ncu-rep) cat "$FAKE_NCU_FIX/BASE" ;;
    *.candidate.ncu-rep) cat "$FAKE_NCU_FIX/CAND" ;;
  esac
  exit 0
fi
out=""
prev=""
for a in "$@"; do
  if [ "$prev" = "-o" ]; then out=$a; fi
  prev=$a
done
printf 'profile %s\n' "$*" >>"$log"
printf 'env KDA_LINEINFO=%s KDA_ROOT=%s\n' "${KDA_LINEINFO:-}" "${KDA_ROOT:-}" >>"$log"
echo "==PROF== Connected to process 4242"
case "$out" in
  *.candidate) echo 'kda-profile-launch: {"id": "c007", "impl": "candidate", "is_baseline": false, "source_hash": "feedfacefeedface"}' ;;
esac
echo "==PROF== Report: $out.ncu-rep"
: >"$out.ncu-rep"
"""


def test_gpu_path_with_a_fake_ncu(lab_copy: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    fix = tmp_path / "fix"
    fix.mkdir()
    (fix / "BASE").write_text(BASE_CSV.read_text())
    (fix / "CAND").write_text(CAND_CSV.read_text())
    fake = tmp_path / "bin" / "ncu"
    fake.parent.mkdir()
    fake.write_text(FAKE_NCU)
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    log = tmp_path / "ncu.log"
    monkeypatch.setenv("FAKE_NCU_LOG", str(log))
    monkeypatch.setenv("FAKE_NCU_FIX", str(fix))
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(profile, "check_gpu", lambda task, allow_other_arch=False: "NVIDIA H200")
    out_dir = tmp_path / "OUT"

    assert kda_main(["profile", FSS, "--row", ROW, "--copy-to", str(out_dir)]) == 0

    calls = log.read_text().splitlines()
    prof = [c for c in calls if c.startswith("profile ")]
    assert len(prof) == 2
    for impl, line in zip(("baseline", "candidate"), prof, strict=True):
        args = line.split()[1:]
        assert args[:6] == ["--clock-control", "none", "--profile-from-start", "off", "--target-processes", "all"]
        assert "--import-source" in args and args[args.index("--set") + 1] == "full"
        assert args[args.index("-o") + 1] == str(lab_copy / "ncu" / f"{ROW}.{impl}")
        tail = args[args.index("-m"):]
        assert tail[:9] == ["-m", "kda_lab.profile", "--launch", FSS, "--row", ROW, "--impl", impl, "--seed"]
    assert calls.count(f"env KDA_LINEINFO=1 KDA_ROOT={lab_copy.parents[1]}") == 2
    assert sum(c.startswith("import --import") and "--csv --page raw" in c for c in calls) == 2

    text = (lab_copy / "profile" / f"{ROW}.md").read_text()
    assert "Candidate: c007 (source feedfacefeedface)." in text
    assert "on NVIDIA H200, ncu 2025.3.1.0." in text
    assert f"`kernels/{FSS}/ncu/{ROW}.baseline.ncu-rep`" in text
    assert "Candidate vs baseline under ncu (sum of kernel durations): 1.174x." in text
    assert (out_dir / f"profile-{ROW}.md").read_text() == text
    with tarfile.open(out_dir / f"profile-{ROW}.tgz") as tar:
        names = sorted(tar.getnames())
    assert names == sorted([f"kernels/{FSS}/profile/{ROW}.md"] + [
        f"kernels/{FSS}/ncu/{ROW}.{impl}{ext}" for impl in ("baseline", "candidate") for ext in (".ncu-rep", ".csv")])
    assert "| candidate | 1 | 36.92 |" in capsys.readouterr().out


def test_ncu_failure_is_reported_with_its_output(lab_copy: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    fake = tmp_path / "ncu"
    fake.write_text("#!/bin/sh\n[ \"$1\" = --version ] && exit 0\n"
                    "echo '==ERROR== ERR_NVGPUCTRPERM - The user does not have permission'\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setattr(profile, "check_gpu", lambda task, allow_other_arch=False: "NVIDIA H200")
    assert kda_main(["profile", FSS, "--row", ROW, "--ncu", str(fake), "--impl", "baseline"]) == 2
    assert "NVreg_RestrictProfilingToAdminUsers=0" in capsys.readouterr().err



def test_real_h200_capture_parses():
    """A real `ncu --page raw --csv` export from the H200 box (SGLang's select01 LayerNorm, 2026-11-21):
    ncu 2025.3 names DRAM % of peak gpu__dram_throughput, which the parser must pick up."""
    from pathlib import Path

    text = (Path(__file__).parent / "fixtures/ncu/h200_select01_baseline_raw_real.csv").read_text()
    (k,) = ncu.parse_csv(text)
    assert "select01" in k.name
    assert k.duration_us == pytest.approx(39.9, abs=0.1)
    assert k.get(ncu.DRAM_PCT) == pytest.approx(67.08, abs=0.01)
    assert "DRAM at 0%" not in ncu.suggest([k])


def test_the_digest_quotes_only_ledger_times_from_the_tasks_own_gpu(tmp_path: Path) -> None:
    """An H100 (capability 9.0 like the H200) and a CPU host write rows too; the digest beside an H200 profile
    must quote the H200's times, even when the other rows are newer."""
    from kda_lab import ledger
    from tests.test_report import bench_rows, lab_root

    root = lab_root(tmp_path, real_ledgers=False)
    task_dir = root / "kernels" / FSS
    ledger.append_benchmark_rows(task_dir, bench_rows(task_dir, run_id="r-h200", mode="bench", cand="c001",
                                                      factors=1.1, ts="2026-11-21T09:00:00Z"))
    h200 = {r["row"]: r for r in ledger.read_benchmark_rows(task_dir)}
    ledger.append_benchmark_rows(task_dir, bench_rows(task_dir, run_id="r-h100", mode="bench", cand="c002",
                                                      factors=2.0, ts="2026-11-21T10:00:00Z",
                                                      gpu="NVIDIA H100 80GB HBM3", arch="h100"))
    ledger.append_benchmark_rows(task_dir, bench_rows(task_dir, run_id="r-cpu", mode="bench", cand="c003",
                                                      factors=5.0, ts="2026-11-21T11:00:00Z", arch="cpu", gpu="cpu"))
    row = next(iter(h200))
    got = profile._ledger_medians(task_dir, row, "h200")
    assert got == {"baseline": float(h200[row]["baseline_us"]), "candidate c001": float(h200[row]["candidate_us"])}
    assert profile._ledger_medians(task_dir, row, "b200") == {}
