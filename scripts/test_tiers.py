#!/usr/bin/env python3
"""The test tiers: which gtest suites are in-process (`make check`, ctest label `fast`) and
which are integration tests (label `integration`). tests/integration_suites.txt lists the
integration suites, each with why; every other suite is in the fast tier, and a fast suite
may not start a process or sleep: the fake clock and fault points instead (DEVELOPERS.md,
issue 28).

A suite starts a process or sleeps when a test body of it, or a function of the same file
that a test body calls, holds one of the markers below. The check is by text, so it errs on
the side of calling a suite an integration suite.

Usage:
  scripts/test_tiers.py check      exit 1 naming each fast suite that sleeps or spawns, and
                                   each listed suite that no longer exists
  scripts/test_tiers.py suggest    print the suites the rule puts in the integration tier
"""
import glob
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MARKERS = {
    "starts a process": r"RunProgram|posix_spawn|\bfork\(|\bexecv|RunWithStdin|popen\(|"
                        r"Gpulet\(\)|RunInChild|Subprocess\b|StartProcess",
    "sleeps": r"SleepFor|sleep_for|\busleep\(|nanosleep|\bsleep\(",
}
TEST_RE = re.compile(r"^(?:TEST|TEST_F|TEST_P)\((\w+),\s*(\w+)\)", re.M)
FUNC_RE = re.compile(r"^[A-Za-z_][\w:<>,*& ]*?\b(\w+)\([^;{]*\)\s*(?:const\s*)?\{", re.M)


def bodies(text, starts):
    """Splits `text` at the offsets in `starts` (sorted); yields (start, chunk)."""
    for i, s in enumerate(starts):
        e = starts[i + 1] if i + 1 < len(starts) else len(text)
        yield s, text[s:e]


def scan():
    """suite -> {reason: example test}, suite -> file."""
    found, where = {}, {}
    files = glob.glob(os.path.join(ROOT, "src/**/*_test.cc"), recursive=True)
    files += glob.glob(os.path.join(ROOT, "sim/*_test.cc"))
    for path in sorted(files):
        text = open(path, encoding="utf-8").read()
        tests = list(TEST_RE.finditer(text))
        funcs = [m for m in FUNC_RE.finditer(text)
                 if not TEST_RE.match(text, m.start()) and m.group(1) not in ("if", "for", "while", "switch")]
        # Helpers (functions outside test bodies) that hold a marker, by name.
        marked = {}
        starts = sorted([m.start() for m in tests] + [m.start() for m in funcs])
        names = {m.start(): m.group(1) for m in funcs}
        for s, chunk in bodies(text, starts):
            if s not in names:
                continue
            for reason, rx in MARKERS.items():
                if re.search(rx, chunk):
                    marked.setdefault(names[s], reason)
        # Helpers that call marked helpers are marked too (one level is enough in practice;
        # iterate to a fixed point anyway).
        changed = True
        while changed:
            changed = False
            for s, chunk in bodies(text, starts):
                n = names.get(s)
                if n is None or n in marked:
                    continue
                for m_name, reason in list(marked.items()):
                    if re.search(r"\b%s\(" % re.escape(m_name), chunk):
                        marked[n] = reason
                        changed = True
                        break
        for m in tests:
            suite, name = m.group(1), m.group(2)
            where.setdefault(suite, os.path.relpath(path, ROOT))
            chunk = next(c for s, c in bodies(text, starts) if s == m.start())
            reasons = found.setdefault(suite, {})
            for reason, rx in MARKERS.items():
                if re.search(rx, chunk):
                    reasons.setdefault(reason, name)
            for m_name, reason in marked.items():
                if re.search(r"\b%s\(" % re.escape(m_name), chunk):
                    reasons.setdefault(reason, "%s (through %s)" % (name, m_name))
    return found, where


def listed():
    out = {}
    with open(os.path.join(ROOT, "tests/integration_suites.txt"), encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            suite, _, why = line.partition(" ")
            if not why.strip():
                sys.exit("tests/integration_suites.txt:%d: %s has no reason" % (n, suite))
            out[suite] = why.strip()
    return out


def main():
    if len(sys.argv) != 2 or sys.argv[1] not in ("check", "suggest"):
        sys.exit(__doc__)
    found, where = scan()
    if sys.argv[1] == "suggest":
        for suite in sorted(s for s, r in found.items() if r):
            print(suite, "; ".join("%s: %s" % kv for kv in sorted(found[suite].items())))
        return 0
    tiers = listed()
    bad = []
    for suite, reasons in sorted(found.items()):
        if reasons and suite not in tiers:
            bad.append("%s (%s) is in the fast tier but %s" % (
                suite, where[suite],
                "; ".join("%s: %s" % kv for kv in sorted(reasons.items()))))
    for suite in sorted(tiers):
        if suite not in found:
            bad.append("tests/integration_suites.txt lists %s, which no test defines" % suite)
    for b in bad:
        print("test_tiers:", b)
    if bad:
        print("test_tiers: list the suite in tests/integration_suites.txt with why, or make "
              "its tests in-process (fakes, the simulated clock)")
        return 1
    print("test_tiers: %d fast suites, %d integration suites" % (
        len([s for s in found if s not in tiers]), len(tiers)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
