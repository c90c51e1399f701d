#!/usr/bin/env python3
"""clang-tidy over gpulet's sources: every translation unit of the product in
BUILD/compile_commands.json (src/ and sim/, less the tests beside them, *_test.cc, their
helpers, src/testing/, and the fuzz targets, *_fuzz.cc) is checked by clang-tidy-14 with the
rule set in .clang-tidy (bug-finding checks and clang's -Wthread-safety analysis, all as errors), so a member read
without the mutex its ABSL_GUARDED_BY names, a value read after std::move or a string_view
bound to a temporary fails `make test`. `make lint` gives it the sanitizer build (clang's: its
precompiled header, generated headers and flags). The sources of a folder compiled alike are
read as one unit (a file that includes them all), so the headers they share are parsed once,
not once a file: a third of the time (src/daemon's first six files, 9.7 s against 29.7 s,
2026-12-07); each finding is still reported at its own file and line (.clang-tidy's
HeaderFilterRegex keeps src/ and sim/). The g++ build works too, without CMake's forced
include of the precompiled header (clang cannot read GCC's). FILEs are checked one by
one, a test the build compiles only inside a unity file (tests/CMakeLists.txt) with that
file's command. --with-tests adds the tests and their helpers; `make test` leaves them out
because its sanitizer build applies the compiler-side checks (thread-safety, dangling,
returned locals) to every file, tests included, as it compiles them (CMakeLists.txt).

Usage: scripts/clang_lint.py BUILD_DIR [-j N] [--with-tests] [FILE...]
       scripts/clang_lint.py --self-test
       scripts/clang_lint.py --compiler-self-test CLANG [FLAG...]
Exits 1 listing each file that fails, 2 when clang-tidy or the build directory is missing.
--self-test runs the configuration over tests/lint/violations.cc and exits 1 unless every
`// expect: CHECK` comment there is reported on its line: a check the configuration names but
never fires (a misspelt name, a diagnostic clang files under another name) fails it.
--compiler-self-test does the same for the compiler-side checks: CLANG with the build's FLAGs
must stop with an error on each `// expect: clang-diagnostic-NAME` line.
"""
import argparse
import json
import os
import re
import shlex
import tempfile
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

# Passed to clang as it parses: the thread-safety analysis is a clang diagnostic that
# .clang-tidy enables; g++-only warning options in the compile commands are not clang's.
EXTRA_ARGS = ["--extra-arg=-Wthread-safety", "--extra-arg=-Wno-unknown-warning-option"]


def tidy_command(tidy, db_dir, config, path):
    # The configuration by name: a unit lives in a temporary or the build directory, not under
    # the sources whose .clang-tidy clang-tidy would otherwise look for.
    return [tidy, "-p", db_dir, "--config-file=" + config, "--quiet"] + EXTRA_ARGS + [path]


UNITY_FILE = re.compile(r"/Unity/unity_\w+\.cxx$")
UNITY_INCLUDE = re.compile(r'^#include "(.+)"$')


def unity_members(path):
    """The sources a CMake unity file includes, in order."""
    with open(path, encoding="utf-8") as f:
        return [os.path.abspath(m.group(1)) for m in map(UNITY_INCLUDE.match, f.read().splitlines())
                if m]


def failing_files(output, members):
    """The members of a unit that clang-tidy's `output` reports an error in; all of them
    when it names none (clang-tidy itself failed)."""
    named = {os.path.abspath(m.group(1)) for m in
             re.finditer(r"^(/[^:\n]+):\d+:\d+: error:", output, re.M)}
    return [m for m in members if m in named] or list(members)


def arguments(e):
    """A compilation database entry's command as a list of arguments."""
    return e.get("arguments") or shlex.split(e["command"])


def command_key(e, path):
    """The entry's arguments less its source and output: what files compiled alike share."""
    out, skip = [], False
    for a in arguments(e):
        if skip:
            skip = False
        elif a == "-o":
            skip = True
        elif a not in ("-c", e["file"], path):
            out.append(a)
    return tuple(out)


def with_source(e, source, path):
    """Entry `e` (a compile command) with `source` compiled in the place of `path`."""
    e = dict(e)
    args = [source if a in (e["file"], path) else a for a in arguments(e)]
    e.pop("command", None)
    e.update(file=source, arguments=args)
    return e


def write_unit(work_dir, index, members, source_dir):
    """A file in `work_dir` that includes `members` (sources of one folder), named after the
    folder; its path."""
    unit = os.path.join(work_dir, "unit-%d-%s.cc" % (
        index, os.path.relpath(os.path.dirname(members[0]), source_dir).replace(os.sep, "_")))
    with open(unit, "w", encoding="utf-8") as f:
        f.write("".join('#include "%s"\n' % m for m in members))
    return unit


def lint_units(db, source_dir, with_tests, files, work_dir):
    """What to check: {translation unit path: [the sources of src/ and sim/ it covers]}, and
    the compilation database to check them with (`db` and the entries this adds).

    The product's sources of one folder compiled alike are read as one unit, a file in
    `work_dir` that includes them: one parse of the headers they share, where clang-tidy
    spends most of its time. Such a unit joins the anonymous namespaces of its files, so a
    private name given twice in a folder fails the lint ("redefinition of"), as
    CONTRIBUTING.md says. Tests are never joined so (two tests of a folder often share a
    helper's name); the sanitizer build's own unity files, which never hold two files of one
    folder (tests/CMakeLists.txt), are units as they are when every file they include is one
    to check. `files`, when given, are checked each on its own: a source the build compiles
    only inside a unity file gets the unity file's command with itself in its place."""
    roots = tuple(os.path.join(source_dir, d) + os.sep for d in ("src", "sim"))
    wanted = lambda p: p.startswith(roots) and (with_tests or bool(files) or
                                                  not is_test(source_dir, p))
    units, singles, covered, inside, extra = {}, {}, set(), {}, []
    for e in db:
        path = os.path.abspath(os.path.join(e["directory"], e["file"]))
        if UNITY_FILE.search(path):
            members = unity_members(path)
            for m in members:
                inside.setdefault(m, (e, path))
            keep = [m for m in members if wanted(m)]
            if members and len(keep) == len(members):
                units[path] = members
                covered.update(members)
            elif keep and not files:
                # A module's unit with a generated source (the explain catalogue, the
                # embedded manifests): the others, as one unit of their own.
                unit = write_unit(work_dir, len(units), keep, source_dir)
                extra.append(with_source(e, unit, path))
                units[unit] = keep
                covered.update(keep)
        elif wanted(path) and path not in singles:
            singles[path] = e
    db = list(db) + extra
    if files:
        chosen = {}
        for f in files:
            if f in singles:
                chosen[f] = [f]
            elif f in inside:
                db.append(with_source(inside[f][0], f, inside[f][1]))
                chosen[f] = [f]
        return chosen, db
    groups = {}
    for path, e in sorted(singles.items()):
        if path in covered:
            continue
        if is_test(source_dir, path):
            units[path] = [path]
            continue
        key = (os.path.dirname(path), e["directory"], command_key(e, path))
        groups.setdefault(key, []).append((path, e))
    for members in groups.values():
        if len(members) == 1:
            units[members[0][0]] = [members[0][0]]
            continue
        unit = write_unit(work_dir, len(units), [p for p, _ in members], source_dir)
        db.append(with_source(members[0][1], unit, members[0][0]))
        units[unit] = [p for p, _ in members]
    return units, db


def without_pch(entry):
    """The entry's command without CMake's precompiled header (`-include .../cmake_pch.hxx`,
    `-Winvalid-pch`): clang cannot read GCC's .gch beside it, and a file linted without the
    forced include must include what it uses."""
    args = arguments(entry)
    out, skip = [], False
    for i, a in enumerate(args):
        if skip:
            skip = False
            continue
        if a == "-include" and i + 1 < len(args) and args[i + 1].endswith("cmake_pch.hxx"):
            skip = True
            continue
        if a == "-Winvalid-pch":
            continue
        out.append(a)
    e = {k: v for k, v in entry.items() if k != "command"}
    e["arguments"] = out
    return e


def is_test(source_dir, path):
    """A test beside the code, the tests' helpers, or a fuzz target (the sanitizer build
    compiles them, each with flags of its own: checked on their own, they would add a unit
    each to `make lint`; --with-tests checks them)."""
    return (path.endswith("_test.cc") or path.endswith("_fuzz.cc") or
            path.startswith(os.path.join(source_dir, "src", "testing") + os.sep))


def unreported(probe, pattern, reported, say):
    """The `// expect: NAME` lines of `probe` whose NAME matches `pattern` and is not among
    the (line, NAME) pairs `reported`, each worded by `say(n, name)`."""
    missing = []
    with open(probe, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            m = re.search(r"// expect: (" + pattern + ")", line)
            if m and (n, m.group(1)) not in reported:
                missing.append(say(n, m.group(1)))
    for m in missing:
        print("clang_lint:", m)
    return missing


def self_test(tidy, source_dir):
    probe = os.path.join(source_dir, "tests", "lint", "violations.cc")
    absl = "/usr/include"
    r = subprocess.run([tidy, "--config-file=" + os.path.join(source_dir, ".clang-tidy"),
                        "--quiet"] + EXTRA_ARGS + [probe, "--", "-std=c++20", "-I" + absl],
                       capture_output=True, text=True)
    reported = set()
    for line in (r.stdout + r.stderr).splitlines():
        m = re.match(r".*violations\.cc:(\d+):\d+: (?:error|warning): .*\[([^\]]+)\]$", line)
        if m:
            for name in m.group(2).split(","):
                reported.add((int(m.group(1)), name))
    missing = unreported(probe, r"[\w.-]+", reported,
                         lambda n, name: f"violations.cc:{n}: {name} was not reported")
    if missing or not reported:
        print("clang_lint: the configuration does not catch what it says; clang-tidy printed:")
        print(r.stdout + r.stderr)
        return 1
    print(f"clang_lint: every expected check fired ({len(reported)} reports)")
    return 0


def compiler_self_test(source_dir, compiler, flags):
    """The compiler-side half: `compiler` with the build's `flags` must stop on every
    `// expect: clang-diagnostic-NAME` line of violations.cc with an error for -WNAME."""
    probe = os.path.join(source_dir, "tests", "lint", "violations.cc")
    r = subprocess.run([compiler, "-fsyntax-only", "-std=c++20", "-I/usr/include"] + flags +
                       [probe], capture_output=True, text=True)
    reported = set()
    for line in (r.stdout + r.stderr).splitlines():
        m = re.match(r".*violations\.cc:(\d+):\d+: error: .*\[(?:-Werror,)?-W([\w-]+)\]$", line)
        if m:
            reported.add((int(m.group(1)), "clang-diagnostic-" + m.group(2)))
    missing = unreported(probe, r"clang-diagnostic-[\w.-]+", reported,
                         lambda n, name: f"violations.cc:{n}: {compiler} gave no error for {name}")
    if missing or r.returncode == 0:
        print(f"clang_lint: {compiler} with the build's flags does not stop on what CMakeLists.txt "
              f"says it does; it printed:\n{r.stdout}{r.stderr}")
        return 1
    print(f"clang_lint: {compiler} stops on every compiler-side check ({len(reported)} errors)")
    return 0


def main():
    if sys.argv[1:2] == ["--compiler-self-test"] and len(sys.argv) >= 3:
        return compiler_self_test(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                  sys.argv[2], sys.argv[3:])
    if sys.argv[1:] == ["--self-test"]:
        tidy = shutil.which("clang-tidy-14") or shutil.which("clang-tidy")
        if tidy is None:
            print("clang_lint: clang-tidy not found; install clang-tidy-14 (scripts/deps.sh test)",
                  file=sys.stderr)
            return 2
        return self_test(tidy, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("build_dir")
    parser.add_argument("-j", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--with-tests", action="store_true",
                        help="also the tests (*_test.cc) and their helpers (src/testing/)")
    parser.add_argument("files", nargs="*", help="only these sources (default: all)")
    opts = parser.parse_intermixed_args()
    tidy = shutil.which("clang-tidy-14") or shutil.which("clang-tidy")
    if tidy is None:
        print("clang_lint: clang-tidy not found; install clang-tidy-14 (scripts/deps.sh test)",
              file=sys.stderr)
        return 2
    db_path = os.path.join(opts.build_dir, "compile_commands.json")
    try:
        with open(db_path) as f:
            db = json.load(f)
    except (OSError, ValueError) as e:
        print(f"clang_lint: cannot read {db_path}: {e}; run `make build` first",
              file=sys.stderr)
        return 2
    source_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    db_dir = tempfile.mkdtemp(prefix="clang-lint-")
    units, db = lint_units(db, source_dir, opts.with_tests,
                           [os.path.abspath(f) for f in opts.files], db_dir)
    if opts.files:
        missing = sorted({os.path.abspath(f) for f in opts.files} -
                         {m for members in units.values() for m in members})
        if missing:
            print("clang_lint: not a source of the build (" + db_path + "): " +
                  ", ".join(os.path.relpath(m, source_dir) for m in missing), file=sys.stderr)
            shutil.rmtree(db_dir, ignore_errors=True)
            return 2

    with open(os.path.join(db_dir, "compile_commands.json"), "w") as f:
        json.dump([without_pch(e) for e in db], f)
    config = os.path.join(source_dir, ".clang-tidy")

    def check(item):
        path, e = item
        r = subprocess.run(tidy_command(tidy, db_dir, config, path), cwd=source_dir,
                           capture_output=True, text=True)
        # clang-tidy prints "N warnings generated." for warnings it was told to hide.
        out = "\n".join(l for l in (r.stdout + r.stderr).splitlines()
                        if not l.endswith("generated.") and not l.startswith("Suppressed "))
        return path, r.returncode, out

    failed = []
    with ThreadPoolExecutor(max_workers=max(1, opts.j)) as pool:
        for path, rc, output in pool.map(check, sorted(units.items())):
            if rc != 0:
                failed.extend(failing_files(output, units[path]))
                sys.stdout.write(output + "\n")
    shutil.rmtree(db_dir, ignore_errors=True)
    files = sum(len(m) for m in units.values())
    rel = sorted({os.path.relpath(p, source_dir) for p in failed})
    if failed:
        print(f"clang_lint: {len(failed)} of {files} files fail clang-tidy "
              f"(.clang-tidy's checks and -Wthread-safety): {', '.join(rel)}")
        return 1
    print(f"clang_lint: {files} files in {len(units)} translation units pass clang-tidy "
          f"(.clang-tidy's checks and -Wthread-safety)")
    return 0

if __name__ == "__main__":
    sys.exit(main())
