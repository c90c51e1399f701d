#!/usr/bin/env python3
"""Checks that a name private to a source file of gpulet (a function, type, alias or constant
at the top of its anonymous namespace, or a `static` function) is given in no other file of
its folder.

Why: the sanitizer build compiles each folder's product sources as one unit (a CMake unity
build, cmake/Modules.cmake), and `make lint` reads them so too (scripts/clang_lint.py). In one
unit the anonymous namespaces of the files are one namespace: a second definition of the same
signature fails to compile ("redefinition of"), but a second function of the same name with
other parameters joins the first one's overload set, and a call in either file may then pick
the other file's function without a word. The tests (*_test.cc), the fuzz targets and the
tests' helpers' units never hold two files of one folder, so only the product's sources are
checked. The same alias given twice to the same type (`using json = nlohmann::json;`) is no
conflict and is allowed.

The reading is lexical, for code in the project's style (clang-format, Google style: a
namespace's contents are not indented, a definition starts at column 0): comments, string and
character literals are blanked first, then braces are counted.

Usage: scripts/private_names.py SOURCE_DIR        (exit 1 and one line per clash)
       scripts/private_names.py --self-test       (the reader finds what it must)
"""
import collections
import os
import re
import sys

FOLDERS = ("src", "sim")
SKIP = re.compile(r"_(test|fuzz)\.cc$")
# A function definition or declaration at column 0: return type, name, "(".
FUNCTION = re.compile(
    r"^(?:template\s*<.*>\s*)?(?:(?:static|inline|constexpr|consteval|\[\[\w+\]\])\s+)*"
    r"[\w:<>,\*&\s]+?[\s\*&](~?\w+)\s*\(")
TYPE = re.compile(r"^(?:class|struct|union|enum\s+class|enum\s+struct|enum)\s+(\w+)")
ALIAS = re.compile(r"^using\s+(\w+)\s*=\s*(.+?);")
CONSTANT = re.compile(
    r"^(?:(?:static|inline|constexpr|constinit|const)\s+)+[\w:<>,\*&\s]+?[\s\*&](\w+)\s*"
    r"(?:\[[^\]]*\])?\s*[=\{;]")
STATIC_FUNCTION = re.compile(r"^static\s+(?:inline\s+)?[\w:<>,\*&\s]+?[\s\*&](\w+)\s*\(")
NOT_NAMES = {"if", "for", "while", "switch", "return", "sizeof", "decltype", "operator"}


def blank(text):
    """`text` with comments and string and character literals replaced by spaces (newlines
    kept), so that braces and names inside them are not read."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "R" and text.startswith('R"', i) and (i == 0 or not text[i - 1].isalnum()):
            m = re.match(r'R"([^()\\\s]{0,16})\(', text[i:])
            if not m:
                out.append(c)
                i += 1
                continue
            end = text.find(")" + m.group(1) + '"', i + m.end())
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c in "\"'":
            if c == "'" and i > 0 and text[i - 1].isalnum():  # a digit separator: 1'000
                out.append(c)
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + " " * (j - i - 2) + c if j - i >= 2 else text[i:j])
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def private_names(text):
    """{name: what it is} for the names `text` keeps private: the top level of its anonymous
    namespaces, and `static` functions at any namespace level. An alias's value is its
    target, so that two aliases of one type can be told from a clash."""
    names = {}
    depth = 0
    anon = []  # the depths at which anonymous namespaces opened
    pending_anon = False
    for line in blank(text).split("\n"):
        stripped = line.strip()
        top_of_anon = bool(anon) and depth == anon[-1] + 1 and not line.startswith((" ", "\t"))
        if top_of_anon:
            for pattern, kind in ((TYPE, "type"), (CONSTANT, "constant"), (FUNCTION, "function")):
                m = pattern.match(line)
                if m and m.group(1) not in NOT_NAMES:
                    names.setdefault(m.group(1), kind)
                    break
            m = ALIAS.match(line)
            if m:
                names[m.group(1)] = "alias of " + re.sub(r"\s+", "", m.group(2))
        m = STATIC_FUNCTION.match(line)
        if m and m.group(1) not in NOT_NAMES and not line.startswith((" ", "\t")):
            names.setdefault(m.group(1), "function")
        if re.match(r"^namespace\s*\{", stripped) or (pending_anon and stripped.startswith("{")):
            anon.append(depth)
            pending_anon = False
        elif re.match(r"^namespace\s*$", stripped):
            pending_anon = True
        for ch in line:
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if anon and depth == anon[-1]:
                    anon.pop()
    return names


def clashes(files):
    """[(name, [file...])] for the names private to more than one of `files` ({path: text}),
    aliases of one same target excepted."""
    where = collections.defaultdict(list)
    for path, text in sorted(files.items()):
        for name, kind in private_names(text).items():
            where[name].append((path, kind))
    out = []
    for name, places in sorted(where.items()):
        if len(places) < 2:
            continue
        kinds = {k for _, k in places}
        if len(kinds) == 1 and next(iter(kinds)).startswith("alias of "):
            continue
        out.append((name, [p for p, _ in places]))
    return out


def check(source_dir):
    found = 0
    for top in FOLDERS:
        for folder, _, names in sorted(os.walk(os.path.join(source_dir, top))):
            files = {}
            for f in sorted(names):
                if f.endswith(".cc") and not SKIP.search(f):
                    with open(os.path.join(folder, f), encoding="utf-8") as fh:
                        files[f] = fh.read()
            for name, where in clashes(files):
                found += 1
                rel = os.path.relpath(folder, source_dir)
                print("private_names: %s: '%s' is private to %s: the sanitizer build compiles "
                      "the folder as one unit, where they would be one name (an overload or a "
                      "redefinition); name each for what it is" % (rel, name, ", ".join(where)))
    if found:
        return 1
    print("private_names: no name private to a file is given twice in a folder")
    return 0


def self_test():
    a = ('#include "x.h"\nnamespace gpulet::x {\nnamespace {\n'
         'constexpr char kUrl[] = "https://example.com/{";  // { in a comment\n'
         'std::string Describe(int v) {\n  if (v) { return "}"; }\n  return R"({)";\n}\n'
         'using json = nlohmann::json;\nstruct Row { int a; };\n'
         '}  // namespace\nvoid Public() {}\n}  // namespace gpulet::x\n')
    b = ('namespace gpulet::x {\nnamespace {\nconst std::string& Describe(const Row& r,\n'
         '                             int width) {\n  return r;\n}\n'
         'using json = nlohmann::json;\nint Other() { return 1\'000; }\n}  // namespace\n'
         'void Public2() {}\nstatic int Helper(int) { return 0; }\n}  // namespace gpulet::x\n')
    c = 'namespace gpulet::x {\nstatic bool Helper(bool b) { return b; }\nint kUrl = 0;\n}\n'
    got = clashes({"a.cc": a, "b.cc": b, "c.cc": c})
    want = [("Describe", ["a.cc", "b.cc"]), ("Helper", ["b.cc", "c.cc"])]
    if got != want:
        print("private_names: self-test failed: found %s, want %s" % (got, want))
        return 1
    print("private_names: self-test passed")
    return 0


def main(argv):
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[-2].strip(), file=sys.stderr)
        return 2
    if argv[1] == "--self-test":
        return self_test()
    return check(argv[1])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
