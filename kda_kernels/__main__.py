"""``python -m kda_kernels build|status``: ahead-of-time builds and the overlay's state, from a shell."""

from __future__ import annotations

import argparse
import json
import sys


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m kda_kernels")
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="compile every promoted impl's CUDA extension into the cache (once per machine)")
    b.add_argument("--family", action="append", help="only this family (repeatable)")
    b.add_argument("--arch", action="append", help="only this arch (repeatable): h200, b200")
    b.add_argument("-v", "--verbose", action="store_true", help="show the compiler's output")
    sub.add_parser("status", help="print kda_kernels.status() as JSON")
    args = p.parse_args(argv)
    if args.cmd == "status":
        import kda_kernels
        from kda_kernels.build_extensions import impl_extensions

        try:  # status() itself imports nothing; from a shell, load the promoted impls so their build state shows
            impl_extensions()
        except Exception as e:  # noqa: BLE001 - a broken impl is reported by status(), not by a traceback here
            print(f"kda_kernels: could not load every promoted impl: {type(e).__name__}: {e}", file=sys.stderr)
        print(json.dumps(kda_kernels.status(), indent=2, default=str))
        return 0
    from kda_kernels.build_extensions import build
    from kda_kernels.prebuilt import cache_root

    results = build(families=args.family, arches=args.arch, verbose=args.verbose)
    if not results:
        print("nothing to build: no promoted impl has a CUDA extension")
        return 0
    for key, r in results.items():
        if r["ok"]:
            how = "already built" if r["was_built"] else f"built in {r['seconds']:.1f} s"
            print(f"ok    {key}: {r['extension']} {how} -> {r['path']}")
        else:
            print(f"FAIL  {key}: {r['extension']}: {r['error']}")
    print(f"cache: {cache_root()} (set KDA_KERNELS_CACHE to move it)")
    return 0 if all(r["ok"] for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
