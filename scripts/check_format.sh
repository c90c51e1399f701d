#!/bin/sh
# Checks that every C++ file in the tree is formatted as .clang-format says (clang-format 14,
# the one Debian 12 ships). Prints each file that is not and how to fix it; exits 1 then.
# Usage: scripts/check_format.sh [--fix]
set -eu
cd "$(dirname "$0")/.."
fmt=$(command -v clang-format-14 || command -v clang-format || true)
if [ -z "$fmt" ]; then
  echo "check_format: clang-format not found; install clang-format-14 (scripts/deps.sh test)" >&2
  exit 2
fi
if [ -d .git ] && command -v git >/dev/null 2>&1; then
  files=$(git ls-files -co --exclude-standard -- 'src/*.h' 'src/*.cc' 'sim/*.h' 'sim/*.cc' \
    'bench/*.h' 'bench/*.cc' 'tests/*.cc' 'tests/*.c' | sort -u)
else
  files=$(find src sim bench tests -name '*.h' -o -name '*.cc' -o -name '*.c' | sort)
fi
if [ "${1:-}" = "--fix" ]; then
  for f in $files; do
    if [ -f "$f" ]; then "$fmt" -i "$f"; fi
  done
  exit 0
fi
bad=""
for f in $files; do
  [ -f "$f" ] || continue
  if ! "$fmt" --dry-run -Werror "$f" >/dev/null 2>&1; then bad="$bad $f"; fi
done
if [ -n "$bad" ]; then
  echo "check_format: not formatted as .clang-format says:$bad" >&2
  echo "  fix with: scripts/check_format.sh --fix" >&2
  exit 1
fi
echo "check_format: $(echo "$files" | wc -l) files formatted"
