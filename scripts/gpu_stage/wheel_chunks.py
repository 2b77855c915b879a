#!/usr/bin/env python3
"""Stage a wheel too large for one upload for the offline GPU box in upload-sized chunks, and put it back together
there: SGLang's `sgl_kernel` (scripts/gpu_stage_sgl_kernel.sh, folders .gpu-stage-dK) and FlashInfer
(scripts/gpu_stage_flashinfer.sh, folders .gpu-stage-eK).

Standard library only: this file is copied into every chunk folder as `chunks.py` and runs on the box.

  pack     (here, from the staging script) repacks the wheel as tar.xz (FlashInfer's 65 MB wheel, mostly CUDA
           sources, shrinks to about 17 MB), whole or trimmed to the shared objects a GPU loads, in parts:
           `--keep-so PART=PATTERN` puts every shared object matching PATTERN (fnmatch on its path in the wheel) in
           PART, drops the others and every top-level entry but the package; the first part also gets the Python
           package and the dist-info, later parts are add-ons (sgl_kernel's FlashAttention-3 extension alone is
           1.1 GB). Without --keep-so the whole wheel is one part. Each part becomes a tar.xz split into equal
           chunks under the size limit, one folder per chunk (<letter>1, <letter>2, ... across parts, `--letter`):
           the chunk, the part's manifest.json (sha256 of each of its chunks and of its whole archive, the wheel it
           came from, what was left out) and this file.
  collect  (on the box, from the folder's setup.sh) checks the chunk it was carried with against the manifest and
           keeps it in a stash that lasts while the box is warm; the call that completes a part joins its chunks,
           checks the archive's sha256 and installs it into the site folder (an add-on only over the first part of
           the same stage). Until then it prints one line that names the folders still to carry.

Exit codes of collect: 0 installed (or already installed from the same archive), 10 something still to carry
(chunks of this part, or the base part of an add-on), 4 a chunk or the joined archive does not match the
manifest, 2 bad arguments or a malformed manifest.
"""

from __future__ import annotations

import argparse
import base64
import fnmatch
import hashlib
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

MANIFEST = "manifest.json"
MARK = ".kda-staged-{part}.sha256"  # in the installed package: the archive each part was installed from
TRIMMED_NOTE = "KDA-TRIMMED"  # in the dist-info: what the stage left out
EXIT_MISSING = 10
EXIT_CORRUPT = 4
EXIT_USAGE = 2
# Room left in each folder next to its chunk for manifest.json, setup.sh and this file.
FOLDER_OVERHEAD = 256 * 1024


class StageError(Exception):
    """A refusal with the exit code it maps to."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def record_line(name: str, data: bytes) -> str:
    """A wheel RECORD line (PEP 376/427): path, urlsafe-base64 sha256 without padding, size."""
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


# ------------------------------------------------------------------------------------------------------ pack

def parse_keep(specs: list[str]) -> dict[str, list[str]]:
    """['core=a*', 'fa3=b*', 'core=c*'] -> {'core': ['a*', 'c*'], 'fa3': ['b*']}, parts in order of first use."""
    parts: dict[str, list[str]] = {}
    for spec in specs:
        part, sep, pattern = spec.partition("=")
        if not sep or not part.isidentifier() or not pattern:
            raise StageError(f"--keep-so {spec!r}: give PART=PATTERN", EXIT_USAGE)
        parts.setdefault(part, []).append(pattern)
    if not parts:
        raise StageError("give at least one --keep-so PART=PATTERN", EXIT_USAGE)
    return parts


def assign_members(names: list[str], package: str, parts: dict[str, list[str]] | None) -> tuple[
        dict[str, list[str]], list[str]]:
    """(part -> wheel members, dropped members). The first part gets the package's Python files and data and the
    dist-info; a shared object goes to the first part with a matching pattern, or is dropped; every other
    top-level package of the wheel is dropped. parts=None: the whole wheel, one part named "core"."""
    if parts is None:
        data = sorted({n.split("/", 1)[0] for n in names if n.split("/", 1)[0].endswith(".data")})
        if data:  # scripts, headers, purelib/platlib: where they go is pip's mapping, not the site folder's root
            raise StageError(f"the wheel has {data[0]}/, which an unpacked copy cannot install: stage it with pip",
                             EXIT_USAGE)
        return {"core": [n for n in names if not n.endswith("/")]}, []
    first = next(iter(parts))
    members: dict[str, list[str]] = {part: [] for part in parts}
    dropped = []
    for name in names:
        if name.endswith("/"):
            continue
        top = name.split("/", 1)[0]
        if top.endswith(".dist-info"):
            members[first].append(name)
        elif top != package:
            dropped.append(name)
        elif ".so" in Path(name).name:
            owner = next((p for p, pats in parts.items() if any(fnmatch.fnmatchcase(name, x) for x in pats)), None)
            (members[owner] if owner else dropped).append(name)
        else:
            members[first].append(name)
    for part, kept in members.items():
        if not kept:
            raise StageError(f"part {part!r} matches nothing in the wheel", EXIT_USAGE)
    return members, dropped


def extract_part(wheel: Path, names: list[str], later: list[str], dropped: list[str], dest: Path,
                 stager: str = "the KDA lab's GPU staging") -> None:
    """Extract `names` of `wheel` into `dest`. If they include the dist-info, its RECORD is rewritten to the files
    this part installs (an add-on part appends its own lines when it is installed, so `pip show -f` tells the
    truth) and KDA-TRIMMED names what the stage left out and what comes in later parts."""
    info = None
    records = []
    with zipfile.ZipFile(wheel) as z:
        for name in names:
            if name.endswith(".dist-info/RECORD"):
                info = name.rsplit("/", 1)[0]
                continue
            data = z.read(name)
            target = dest / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            mode = (z.getinfo(name).external_attr >> 16) & 0o777  # the Unix mode, kept for the shared objects
            target.chmod(mode or 0o644)
            records.append(record_line(name, data))
    if info is None:
        return
    if dropped or later:
        note = (f"Trimmed by {stager} from {wheel.name} for the GPU box.\n"
            "Left out (calling what needs them fails with the package's own ImportError):\n"
            + "".join(f"  {n}\n" for n in dropped)
            + "Installed by add-on parts of the stage, when carried:\n" + "".join(f"  {n}\n" for n in later))
        (dest / info / TRIMMED_NOTE).write_text(note)
        records.append(record_line(f"{info}/{TRIMMED_NOTE}", note.encode()))
    records.append(f"{info}/RECORD,,")
    (dest / info / "RECORD").write_text("\n".join(records) + "\n")


def write_archive(tree: Path, archive: Path) -> None:
    """tar.xz of everything under `tree`, sorted and owner-neutral; multi-threaded xz when the tool is there
    (the flash-attention extension alone is over 1 GB), Python's lzma otherwise."""
    def neutral(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        info.mtime = 0
        return info

    def add_all(tar: tarfile.TarFile) -> None:
        for path in sorted(tree.rglob("*")):
            tar.add(path, arcname=str(path.relative_to(tree)), recursive=False, filter=neutral)

    level = os.environ.get("KDA_STAGE_XZ_PRESET", "6")  # 0 trades size for time (the staging tests)
    if level not in {str(n) for n in range(10)}:
        raise StageError(f"KDA_STAGE_XZ_PRESET={level!r}: an xz preset is 0..9", EXIT_USAGE)
    xz = shutil.which("xz")
    if not xz:
        with tarfile.open(archive, mode="w:xz", format=tarfile.PAX_FORMAT, preset=int(level)) as tar:
            add_all(tar)
        return
    with archive.open("wb") as out:
        proc = subprocess.Popen([xz, "-T0", f"-{level}", "-c"], stdin=subprocess.PIPE, stdout=out)
        assert proc.stdin is not None
        with tarfile.open(fileobj=proc.stdin, mode="w|", format=tarfile.PAX_FORMAT) as tar:
            add_all(tar)
        proc.stdin.close()
        if proc.wait() != 0:
            raise StageError(f"xz failed ({proc.returncode}) writing {archive}", 1)


def chunk_sizes(total: int, limit: int) -> list[int]:
    """Split `total` bytes into the fewest chunks of at most `limit` bytes, as equal as possible (so every upload
    takes about the same time)."""
    if limit <= 0:
        raise StageError(f"chunk limit {limit} bytes is not positive", EXIT_USAGE)
    count = max(1, math.ceil(total / limit))
    base, extra = divmod(total, count)
    return [base + (1 if i < extra else 0) for i in range(count)]


def part_archive(wheel: Path, wheel_sha: str, part: str, names: list[str], later: list[str], dropped: list[str],
                 cache: Path, name: str, version: str) -> Path:
    """The part's tar.xz, cached in `cache` under the stage's name and the wheel's version and reused while the
    wheel and the part's members are the same (xz of 1 GB takes minutes)."""
    archive = cache / f"{name}-{version}-{part}.tar.xz"
    key_path = archive.with_name(archive.name + ".key")
    key = json.dumps({"wheel_sha256": wheel_sha, "names": names, "later": later, "dropped": dropped})
    if archive.is_file() and key_path.is_file() and key_path.read_text() == key:
        return archive
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        extract_part(wheel, names, later, dropped, Path(tmp) / "tree", f"the KDA lab's GPU staging ({name})")
        partial = Path(tmp) / "archive.tar.xz"
        write_archive(Path(tmp) / "tree", partial)
        partial.replace(archive)
    key_path.write_text(key)
    return archive


def write_part_folders(archive: Path, out: Path, first_index: int, limit: int, info: dict) -> list[Path]:
    sizes = chunk_sizes(archive.stat().st_size, limit)
    chunks, folders = [], []
    letter = info["letter"]
    with archive.open("rb") as f:
        for offset, size in enumerate(sizes):
            index = first_index + offset
            folder = out / f"{letter}{index}"
            folder.mkdir(parents=True)
            name = f"{info['name']}.tar.xz.part{offset + 1:02d}"
            data = f.read(size)
            (folder / name).write_bytes(data)
            chunks.append({"folder": f".gpu-stage-{letter}{index}", "file": name, "bytes": size,
                           "sha256": hashlib.sha256(data).hexdigest()})
            folders.append(folder)
    manifest = {**info, "archive_bytes": archive.stat().st_size, "archive_sha256": sha256_of(archive),
                "chunks": chunks}
    text = json.dumps(manifest, indent=1, sort_keys=True) + "\n"
    for folder in folders:
        (folder / MANIFEST).write_text(text)
        shutil.copy2(Path(__file__), folder / "chunks.py")
    return folders


def cmd_pack(args: argparse.Namespace) -> int:
    wheel, out = Path(args.wheel), Path(args.out)
    limit = int(args.chunk_mb * 1024 * 1024) - FOLDER_OVERHEAD
    if limit <= 0:
        raise StageError(f"--chunk-mb {args.chunk_mb} leaves no room for a chunk", EXIT_USAGE)
    if out.exists() and any(out.iterdir()):
        raise StageError(f"{out} is not empty", EXIT_USAGE)
    if not re.fullmatch(r"[a-z]", args.letter) or not re.fullmatch(r"[a-z][a-z0-9-]*", args.name):
        raise StageError(f"--letter {args.letter!r} / --name {args.name!r}: give one letter a-z and a lower-case "
                         "name", EXIT_USAGE)
    out.mkdir(parents=True, exist_ok=True)
    parts = parse_keep(args.keep_so) if args.keep_so else None
    wheel_sha = sha256_of(wheel)
    with zipfile.ZipFile(wheel) as z:
        members, dropped = assign_members(z.namelist(), args.package, parts)
    base_part = next(iter(members))
    if f"{args.package}/__init__.py" not in members[base_part]:
        raise StageError(f"{wheel.name} has no {args.package}/__init__.py", EXIT_USAGE)
    patterns = parts or {base_part: ["(the whole wheel)"]}
    base_sha = None
    index = 1
    for part, names in members.items():
        later = [n for p, ns in members.items() if p != base_part for n in ns] if part == base_part else []
        archive = part_archive(wheel, wheel_sha, part, names, later, dropped, Path(args.cache), args.name,
                               args.version)
        info = {"name": args.name, "letter": args.letter, "package": args.package,
                "distribution": args.distribution, "version": args.version,
                "wheel": wheel.name, "wheel_sha256": wheel_sha, "part": part, "patterns": patterns[part],
                "base_part": None if part == base_part else base_part, "base_sha256": base_sha,
                "dropped": dropped}
        folders = write_part_folders(archive, out, index, limit, info)
        if part == base_part:
            base_sha = sha256_of(archive)
        index += len(folders)
        for folder in folders:
            print(folder.name, part, sum(p.stat().st_size for p in folder.iterdir()))
    return 0


# --------------------------------------------------------------------------------------------------- collect

def load_manifest(folder: Path) -> dict:
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
        chunks = manifest["chunks"]
        assert isinstance(chunks, list) and chunks
        name, letter = manifest["name"], manifest["letter"]
        assert re.fullmatch(r"[a-z][a-z0-9-]*", name) and re.fullmatch(r"[a-z]", letter)
        for c in chunks:
            assert isinstance(c["bytes"], int) and len(c["sha256"]) == 64
            # A chunk's name must stay inside its folder.
            assert c["file"] == Path(c["file"]).name and c["file"].startswith(f"{name}.tar.xz.part")
            assert re.fullmatch(rf"\.gpu-stage-{letter}\d+", c["folder"])
        assert len({c["file"] for c in chunks}) == len(chunks)
        assert len(manifest["archive_sha256"]) == 64 and manifest["version"] and manifest["part"].isidentifier()
        assert manifest["package"].isidentifier()
        assert manifest["base_part"] is None or len(manifest["base_sha256"]) == 64
    except (OSError, ValueError, KeyError, TypeError, AttributeError, AssertionError) as exc:
        raise StageError(f"{folder.name}/{MANIFEST} is missing or malformed ({exc!r}); stage again with the "
                         "staging script that made it (docs/gpu-box.md)", EXIT_USAGE) from exc
    return manifest


def chunk_is_good(path: Path, chunk: dict) -> bool:
    return path.is_file() and path.stat().st_size == chunk["bytes"] and sha256_of(path) == chunk["sha256"]


def installed_sha(site: Path, package: str, part: str) -> str:
    mark = site / package / MARK.format(part=part)
    return mark.read_text().strip() if mark.is_file() else ""


def replace_path(source: Path, target: Path) -> None:
    if target.is_dir() and not target.is_symlink():
        shutil.rmtree(target)
    elif target.exists() or target.is_symlink():
        target.unlink()
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(source), str(target))


def install(archive: Path, manifest: dict, site: Path) -> None:
    """Extract next to `site`, then move the part in: the base part replaces the package and its dist-info
    whole; an add-on adds its files to the installed package and its lines to the dist-info's RECORD. A failed
    extract leaves `site` as it was."""
    package = manifest["package"]
    site.mkdir(parents=True, exist_ok=True)
    label = manifest["name"]
    with tempfile.TemporaryDirectory(dir=site.parent, prefix=f".kda-{label}-") as tmp:
        root = Path(tmp)
        with tarfile.open(archive, mode="r:xz") as tar:
            tar.extractall(root, filter="data")
        tops = sorted(p.name for p in root.iterdir())
        if manifest["base_part"] is None:
            if package not in tops:
                raise StageError(f"{label}: the archive holds {tops}, not {package}/", EXIT_CORRUPT)
            dist = manifest["distribution"].replace("-", "_")
            for other in site.glob(f"{dist}-*.dist-info"):  # another version's metadata would be ambiguous
                if other.name not in tops:
                    shutil.rmtree(other)
            for top in tops:
                replace_path(root / top, site / top)
        else:
            if tops != [package]:
                raise StageError(f"{label}: add-on part {manifest['part']} holds {tops}, not only {package}/",
                                 EXIT_CORRUPT)
            files = sorted(p for p in (root / package).rglob("*") if p.is_file())
            records = [record_line(str(p.relative_to(root)), p.read_bytes()) for p in files]
            for path in files:
                replace_path(path, site / path.relative_to(root))
            dist = manifest["distribution"].replace("-", "_")
            for record in site.glob(f"{dist}-{manifest['version']}.dist-info/RECORD"):
                kept = [ln for ln in record.read_text().splitlines()
                        if ln and ln.split(",", 1)[0] not in {r.split(",", 1)[0] for r in records}]
                record.write_text("\n".join(kept + records) + "\n")
        (site / package / MARK.format(part=manifest["part"])).write_text(manifest["archive_sha256"] + "\n")


def install_from_stash(stash: Path, manifest: dict, site: Path) -> None:
    """Join the part's chunks from its stash, check the archive's sha256 and install it."""
    joined = stash / f"{manifest['name']}.tar.xz.partial"
    with joined.open("wb") as out:
        for c in manifest["chunks"]:
            with (stash / c["file"]).open("rb") as f:
                shutil.copyfileobj(f, out, 1 << 20)
    try:
        if sha256_of(joined) != manifest["archive_sha256"]:
            raise StageError(f"{manifest['name']} {manifest['version']} ({manifest['part']}): the joined archive does not "
                             "match the manifest's sha256: stage again", EXIT_CORRUPT)
        install(joined, manifest, site)
    finally:
        joined.unlink()


def waiting_addons(stash_root: Path, base: dict, site: Path) -> list[tuple[Path, dict]]:
    """Add-on parts of `base`'s stage whose chunks all came on earlier calls, before the base was installed."""
    found = []
    for path in sorted(stash_root.glob(f"*/{MANIFEST}")):
        try:
            other = load_manifest(path.parent)
        except StageError:
            continue
        if (other["base_part"] == base["part"] and other["base_sha256"] == base["archive_sha256"]
                and installed_sha(site, other["package"], other["part"]) != other["archive_sha256"]
                and all(chunk_is_good(path.parent / c["file"], c) for c in other["chunks"])):
            found.append((path.parent, other))
    return found


def collect(stage: Path, stash_root: Path, site: Path) -> tuple[int, str]:
    manifest = load_manifest(stage)
    chunks = manifest["chunks"]
    part, package = manifest["part"], manifest["package"]
    label = f"{manifest['name']} {manifest['version']} ({part})"
    if installed_sha(site, package, part) == manifest["archive_sha256"]:
        return 0, f"{label}: already installed in {site} from this stage"
    carried = [c for c in chunks if (stage / c["file"]).exists()]
    if not carried:
        raise StageError(f"{label}: {stage.name} holds none of its chunks; stage again", EXIT_USAGE)
    for c in carried:
        if not chunk_is_good(stage / c["file"], c):
            raise StageError(f"{label}: {stage.name}/{c['file']} does not match its size and sha256 in the "
                             "manifest: stage again and carry the folders of that one stage", EXIT_CORRUPT)
    stash = stash_root / manifest["archive_sha256"][:16]
    stash.mkdir(parents=True, exist_ok=True)
    for c in carried:
        if not chunk_is_good(stash / c["file"], c):
            partial = stash / (c["file"] + ".partial")
            shutil.copyfile(stage / c["file"], partial)
            partial.replace(stash / c["file"])
    (stash / MANIFEST).write_text((stage / MANIFEST).read_text())
    missing = [c["folder"] for c in chunks if not chunk_is_good(stash / c["file"], c)]
    if missing:
        have = [c["folder"] for c in chunks if c["folder"] not in missing]
        return EXIT_MISSING, (f"{label}: {len(have)} of {len(chunks)} chunks on this box ({', '.join(have)}); "
                              f"carry {', '.join(missing)} next, while the box is warm (docs/gpu-box.md)")
    base = manifest["base_part"]
    if base is not None and installed_sha(site, package, base) != manifest["base_sha256"]:
        # Kept in the stash: the call that installs the base part installs this one after it.
        return EXIT_MISSING, (f"{label}: all {len(chunks)} chunks are on this box; it goes in over part {base} "
                              f"of the same stage, not installed yet: carry .gpu-stage-{manifest['letter']}1 (docs/gpu-box.md)")
    install_from_stash(stash, manifest, site)
    lines = [f"{label}: installed in {site} from {len(chunks)} verified chunk(s)"]
    if base is None:
        for other_stash, other in waiting_addons(stash_root, manifest, site):
            install_from_stash(other_stash, other, site)
            lines.append(f"{other['name']} {other['version']} ({other['part']}): installed in {site} from "
                         f"{len(other['chunks'])} verified chunk(s) carried earlier")
    return 0, "\n".join(lines)


def cmd_collect(args: argparse.Namespace) -> int:
    code, line = collect(Path(args.stage), Path(args.stash), Path(args.site))
    print(line, file=sys.stderr if code not in (0, EXIT_MISSING) else sys.stdout, flush=True)
    return code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    pack = sub.add_parser("pack", help="trim, pack and split a wheel into chunk folders <letter>1..N")
    pack.add_argument("--wheel", required=True)
    pack.add_argument("--out", required=True, help="an empty folder: d1..dN go here")
    pack.add_argument("--cache", required=True, help="where each part's archive is kept for the next stage")
    pack.add_argument("--chunk-mb", type=float, required=True, help="the most MiB one folder may hold")
    pack.add_argument("--package", default="sgl_kernel", help="the import package (its __init__.py must be there)")
    pack.add_argument("--distribution", default="sglang-kernel")
    pack.add_argument("--name", default="sgl-kernel", help="the stage's name: archive, cache file and messages")
    pack.add_argument("--letter", default="d", help="the chunk folders are .gpu-stage-<letter>1, 2, ...")
    pack.add_argument("--version", required=True)
    pack.add_argument("--keep-so", action="append", default=[], metavar="PART=PATTERN",
                      help="shared objects to keep, by part; the first part named is the base (none: the whole "
                           "wheel, one part)")
    collect_p = sub.add_parser("collect", help="on the box: stash this folder's chunk, install when a part is "
                               "whole")
    collect_p.add_argument("--stage", required=True)
    collect_p.add_argument("--stash", required=True)
    collect_p.add_argument("--site", required=True)
    args = parser.parse_args(argv)
    try:
        return cmd_pack(args) if args.command == "pack" else cmd_collect(args)
    except StageError as exc:
        print(exc, file=sys.stderr, flush=True)
        return exc.code


if __name__ == "__main__":
    sys.exit(main())
