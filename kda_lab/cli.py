"""`kda` / `python -m kda_lab`: the lab's command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from importlib import import_module

from kda_lab import ledger, report
from kda_lab.evidence import bench_row_counts
from kda_lab.report.peers import vs_best_peer_cell
from kda_lab.task import Task, TaskError, all_task_dirs, load_task, resolve_task_dir, validate_task_dir

# Subcommands that live in their own modules (one job each); each defines register(subparsers).
PLUGIN_COMMANDS: tuple[str, ...] = ("kda_lab.task.stamp", "kda_lab.task.new_family", "kda_lab.export.command",
                                   "kda_lab.report", "kda_lab.profile", "kda_lab.e2e.command")


def task_report(task: Task) -> report.TaskReport:
    """What `kda report` reads for this task (status in README's one vocabulary, peers, runs)."""
    from kda_lab.paths import repo_root

    return report.load_task_report(task.path, report.read_launchers(repo_root()))


def task_status(task: Task) -> str:
    """The task's status in the one vocabulary of README's task table and docs/leaderboard.md (kda_lab.report)."""
    return task_report(task).status


def evidence_runs(task: Task) -> dict[str, list[dict[str, str]]]:
    """Runs measured on a GPU that is the task's arch (an H100's rows never count for h200), not superseded."""
    return {rid: rows for rid, rows in ledger.runs(ledger.read_benchmark_rows(task.path)).items()
            if bench_row_counts(rows[0], task.arch)}


def latest_row_numbers(task: Task) -> dict[str, dict[str, str]]:
    """Per row, the most recent ledger row that measured it (any mode)."""
    latest: dict[str, dict[str, str]] = {}
    for rows in evidence_runs(task).values():
        for r in rows:
            latest[r["row"]] = r
    return latest


def cmd_tasks(args: argparse.Namespace) -> int:
    dirs = all_task_dirs()
    if not dirs:
        print("no tasks under kernels/")
        return 0
    # the geomean column is the report's headline run (the promoted candidate's evidence, else the best
    # benchmarked run), the same number as README's "best geomean" column, printed the way the report prints it
    # (three decimals: rounding the README's figure again to two disagreed with rounding the run's)
    print(f"{'task':<52} {'arch':<5} {'family':<18} {'status':<48} {'geomean':>7}  vs best peer")
    bad = 0
    for d in dirs:
        try:
            t = load_task(d)
            tr = task_report(t)
            head, _ = tr.headline()
        except (TaskError, ledger.LedgerError) as e:
            print(f"{d.name:<52} INVALID: {e}")
            bad += 1
            continue
        print(f"{t.slug:<52} {t.arch:<5} {t.family:<18} {tr.status:<48} "
              f"{(f'{head.geomean:.3f}x' if head and head.geomean else '-'):>7}  {vs_best_peer_cell(tr)}")
        if tr.status.startswith("promoted") and t.arch == "h200":
            from kda_lab.e2e.coverage import flag
            from kda_lab.paths import repo_root

            note = flag(repo_root(), t.family)  # what default-tier e2e rows showed (docs/e2e.md, coverage)
            if note:
                print(f"    {note}")
        if args.rows:
            latest = latest_row_numbers(t)
            for w in t.workloads:
                if w.kind != "production":
                    continue
                r = latest.get(w.name)
                tb = f"{float(r['baseline_tbps']):.2f} TB/s baseline" if r and r["baseline_tbps"] else "not measured"
                cand = (f", {float(r['candidate_tbps']):.2f} TB/s {r['candidate_id']}"
                        if r and r["candidate_tbps"] and r["mode"] == "bench" else "")
                print(f"    {w.name:<40} {w.model:<18} {tb}{cand}")
    return 1 if bad else 0


def cmd_validate(args: argparse.Namespace) -> int:
    # resolved, not loaded: a task.toml that does not load is a problem validate_task_dir reports
    dirs = [resolve_task_dir(n) for n in args.tasks] if args.tasks else all_task_dirs()
    bad = 0
    for d in dirs:
        problems = validate_task_dir(d)
        print(f"{'ok     ' if not problems else 'INVALID'} {d.name}")
        for p in problems:
            print(f"    {p}")
        bad += bool(problems)
    if not dirs:
        print("no task folders found under kernels/")
        return 1
    if not args.tasks:  # the whole lab: the end-to-end ledger too
        from kda_lab.ledger import e2e as e2e_ledger
        from kda_lab.paths import repo_root

        problems = e2e_ledger.validate(repo_root())
        print(f"{'ok     ' if not problems else 'INVALID'} {e2e_ledger.E2E_DIR}/ ({e2e_ledger.LEGACY_FILE}, {e2e_ledger.E2E_FILE})")
        for p in problems:
            print(f"    {p}")
        bad += bool(problems)
    return 1 if bad else 0


def use_gpu(args: argparse.Namespace) -> None:
    """--gpu INDEX|UUID: that GPU becomes the current device (refused when busy, unless --allow-busy)."""
    if args.gpu is not None:
        from kda_lab.measure.gpu_select import select_gpu

        select_gpu(args.gpu, args.allow_busy)


def cmd_check(args: argparse.Namespace) -> int:
    task = load_task(args.task)
    if args.interpret and args.gpu is not None:
        raise TaskError("kda check --interpret runs on the CPU: --gpu does not apply")
    if args.interpret:
        from kda_lab.interpret import InterpreterUnavailable, interpret_check

        try:
            return interpret_check(task, dtypes=args.dtypes.split(","), seeds=task.seeds if args.seeds is None else args.seeds,
                                   record=not args.no_record, rows=args.rows)
        except InterpreterUnavailable as e:
            print(f"kda: {e}", file=sys.stderr)
            return 2
    from kda_lab.measure.run import run_check

    use_gpu(args)
    report = run_check(task, rows=args.rows, seeds=args.seeds, seed=args.seed, record=not args.no_record)
    return report.exit_code


def cmd_bench(args: argparse.Namespace) -> int:
    from kda_lab.measure.run import run_bench

    mode = "aa" if args.aa else "baseline-only" if args.baseline_only else "bench"
    task = load_task(args.task)
    use_gpu(args)
    run_bench(task, mode=mode, rows=args.rows, trials=args.trials, seed=args.seed, compile_peer=not args.no_compile,
              public_peers=not args.no_peers, record=not args.no_record, include_test_rows=args.test_rows, allow_other_arch=args.allow_other_arch,
              supersedes=args.supersedes)
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from kda_lab.doctor import report

    return report()


def gpu_flags(parser: argparse.ArgumentParser) -> None:
    from kda_lab.measure.gpu_select import add_arguments

    add_arguments(parser)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kda", description="KDA Lab: SGLang diffusion kernel tasks, harness and ledgers")
    sub = p.add_subparsers(dest="command", required=True)

    t = sub.add_parser("tasks", help="every task: arch, family, status, best measured speedup")
    t.add_argument("--rows", action="store_true", help="also list production rows with their measured TB/s")
    t.set_defaults(func=cmd_tasks)

    v = sub.add_parser("validate", help="validate task folders and their ledgers (all by default)")
    v.add_argument("tasks", nargs="*")
    v.set_defaults(func=cmd_validate)

    c = sub.add_parser("check", help="correctness of the candidate and the SGLang baseline against the oracle")
    c.add_argument("task")
    c.add_argument("--rows", nargs="+", help="row names (default: all production and test rows)")
    c.add_argument("--seeds", type=int, help="fresh random input sets per row (default: the task's `seeds`, 2; "
                   "--interpret too)")
    c.add_argument("--seed", type=int, help="base seed (default: random, recorded)")
    c.add_argument("--no-record", action="store_true", help="do not append to solutions.jsonl")
    c.add_argument("--interpret", action="store_true",
                   help="CPU: the candidate in the Triton interpreter on the rows tagged 'tiny' vs the oracle (and "
                        "bit for bit vs SGLang's kernel for exact functions); recorded as a CPU verdict, never GPU "
                        "evidence; exit 0 passed, 1 failed, 3 not checked (e.g. a CUDA candidate)")
    c.add_argument("--dtypes", default="float32,float16",
                   help="with --interpret: dtypes to run (bfloat16 is listed as skipped: the interpreter mishandles it)")
    gpu_flags(c)
    c.set_defaults(func=cmd_check)

    b = sub.add_parser("bench", help="interleaved CUDA-graph timing vs SGLang (GPU)")
    b.add_argument("task")
    g = b.add_mutually_exclusive_group()
    g.add_argument("--baseline-only", action="store_true", help="time only the SGLang baseline (+ peers)")
    g.add_argument("--aa", action="store_true", help="A/A: the baseline against itself (harness noise)")
    b.add_argument("--rows", nargs="+", help="row names (default: every production row)")
    b.add_argument("--test-rows", action="store_true", help="also time test rows")
    b.add_argument("--trials", type=int, default=20)
    b.add_argument("--seed", type=int, help="input and order seed (default: random, recorded)")
    b.add_argument("--no-compile", action="store_true", help="skip the torch.compile peer")
    b.add_argument("--no-peers", action="store_true",
                   help="skip the public peers (QuACK, Liger, FlashInfer: kda_lab/families/<family>.py PEERS)")
    b.add_argument("--no-record", action="store_true", help="do not append to the ledgers")
    b.add_argument("--supersedes", metavar="RUN_ID", help="this run replaces an earlier, mistaken run (append-only fix)")
    b.add_argument("--allow-other-arch", action="store_true", help=argparse.SUPPRESS)
    gpu_flags(b)
    b.set_defaults(func=cmd_bench)

    d = sub.add_parser("doctor", help="GPU, nvcc, torch/triton/sglang/CuTe DSL, Claude Code, Humanize")
    d.set_defaults(func=cmd_doctor)

    for module in PLUGIN_COMMANDS:  # each module adds its own subcommand(s): register(subparsers)
        import_module(module).register(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (TaskError, ledger.LedgerError) as e:
        print(f"kda: {e}", file=sys.stderr)
        return 2
    except RuntimeError as e:
        from kda_lab.measure.run import RunError

        if isinstance(e, RunError):
            print(f"kda: {e}", file=sys.stderr)
            return 2
        raise


def task_main(task_file: str, command: str) -> None:
    """Entry point of a task folder's thin scripts: `kda <command> <that task> <forwarded flags>`."""
    from pathlib import Path

    sys.exit(main([command, Path(task_file).resolve().parent.name, *sys.argv[1:]]))


if __name__ == "__main__":
    sys.exit(main())
