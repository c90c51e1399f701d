#!/usr/bin/env python3
"""Clang's thread-safety analysis over gpulet's sources: every translation unit of src/ and
sim/ in BUILD/compile_commands.json (the g++ build `make build` configured) is parsed by
clang++ with -fsyntax-only -Wthread-safety -Werror, so a member read without the mutex its
ABSL_GUARDED_BY names, or a call missing an ABSL_EXCLUSIVE_LOCKS_REQUIRED lock, fails
`make test`. Parsing only (no code generation) keeps it to a few minutes.

Usage: scripts/thread_safety.py BUILD_DIR [-j N]
Exits 1 listing each file that fails, 2 when clang++ or the build directory is missing.
"""
import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

FLAGS = ["-fsyntax-only", "-Wthread-safety", "-Werror=thread-safety",
         "-Wno-unknown-warning-option"]
# g++-only options clang rejects or warns about.
DROP = {"-fno-sanitize-recover=undefined"}
DROP_PREFIXES = ("-fsanitize",)


def clang_command(entry, clang, source_dir):
    args = entry.get("arguments") or shlex.split(entry["command"])
    out = [clang]
    skip = False
    for a in args[1:]:
        if skip:
            skip = False
            continue
        if a == "-o":
            skip = True
            continue
        if a in ("-c",) or a in DROP or a.startswith(DROP_PREFIXES):
            continue
        out.append(a)
    return out + FLAGS


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("build_dir")
    parser.add_argument("-j", type=int, default=os.cpu_count() or 2)
    opts = parser.parse_args()
    clang = shutil.which("clang++-14") or shutil.which("clang++")
    if clang is None:
        print("thread_safety: clang++ not found; install clang-14 (scripts/deps.sh test)",
              file=sys.stderr)
        return 2
    db_path = os.path.join(opts.build_dir, "compile_commands.json")
    try:
        with open(db_path) as f:
            db = json.load(f)
    except (OSError, ValueError) as e:
        print(f"thread_safety: cannot read {db_path}: {e}; run `make build` first",
              file=sys.stderr)
        return 2
    source_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    roots = tuple(os.path.join(source_dir, d) + os.sep for d in ("src", "sim"))
    entries = {}
    for e in db:
        path = os.path.abspath(os.path.join(e["directory"], e["file"]))
        if path.startswith(roots) and path not in entries:
            entries[path] = e

    def check(item):
        path, e = item
        r = subprocess.run(clang_command(e, clang, source_dir), cwd=e["directory"],
                           capture_output=True, text=True)
        return path, r.returncode, r.stdout + r.stderr

    failed = []
    with ThreadPoolExecutor(max_workers=max(1, opts.j)) as pool:
        for path, rc, output in pool.map(check, sorted(entries.items())):
            if rc != 0:
                failed.append(path)
                sys.stdout.write(output)
    rel = [os.path.relpath(p, source_dir) for p in failed]
    if failed:
        print(f"thread_safety: {len(failed)} of {len(entries)} files fail clang "
              f"-Wthread-safety: {', '.join(rel)}")
        return 1
    print(f"thread_safety: {len(entries)} files pass clang -Wthread-safety")
    return 0


if __name__ == "__main__":
    sys.exit(main())
