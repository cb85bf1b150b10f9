#!/usr/bin/env bash
# Tidy: enforces two layout rules from STYLE.md that the compiler cannot.
#  1. Only wal/io/ touches the disk. Any other .cpp/.hpp (outside tests/ and
#     bench/, which measure or fake the disk on purpose) that calls pwrite,
#     pwritev, pwritev2, fsync, fdatasync or io_uring_* bypasses the
#     FileSystem seam, so the fault-injecting tests could not see its writes.
#  2. Public headers (sdk/include/fusee/) name no RocksDB or liburing type, so
#     SDK users need neither installed.
#  3. No shell script pipes into `grep -q`. Under `set -o pipefail` grep -q
#     exits at its first match, the writer then dies of SIGPIPE, and the
#     pipeline fails although the line was there: a test that fails when the
#     output is longer than one pipe write (a server's /metrics, say). Use
#     `grep -q PATTERN <<<"$text"`, or `| grep PATTERN >/dev/null`, which
#     reads to the end.
# Usage: tidy.sh [source-root]. Exits 1 naming every offending line.
set -euo pipefail

root="${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
if [[ ! -d "$root/wal" ]]; then
  echo "tidy: $root does not look like the Fusee source root (no wal/)" >&2
  exit 2
fi
cd "$root"

failed=0

# Source files of the project itself: build directories and downloaded
# subprojects are someone else's code.
project_sources() {
  find . \( -path ./.git -o -path './build*' -o -path ./subprojects \) -prune -o \
    -type f \( -name '*.cpp' -o -name '*.hpp' -o -name '*.cc' -o -name '*.h' \) -print |
    sed 's|^\./||' | sort
}

disk_calls='(pwrite|pwritev|pwritev2|fsync|fdatasync)\(|io_uring_'
while IFS= read -r file; do
  case "$file" in
    wal/io/* | tests/* | bench/*) continue ;;
  esac
  if hits=$(grep -nE "$disk_calls" "$file"); then
    while IFS= read -r hit; do
      echo "$file:$hit: disk call outside wal/io/; go through FileSystem" >&2
    done <<<"$hits"
    failed=1
  fi
done < <(project_sources)

# Case-sensitive on purpose: a comment comparing with "RocksDB" is fine; an
# include, a namespace or a struct is not.
foreign_types='rocksdb(::|/)|ROCKSDB_|liburing|io_uring'
if [[ -d sdk/include/fusee ]]; then
  while IFS= read -r file; do
    if hits=$(grep -nE "$foreign_types" "$file"); then
      while IFS= read -r hit; do
        echo "$file:$hit: public header exposes a RocksDB or liburing type" >&2
      done <<<"$hits"
      failed=1
    fi
  done < <(find sdk/include/fusee -type f | sort)
fi

shell_scripts() {
  { find tests scripts .ci demo -type f -name '*.sh' 2>/dev/null; grep -rlE '^#!/usr/bin/env bash|^#!/bin/(ba)?sh' scripts .ci 2>/dev/null; } | sort -u
}
while IFS= read -r file; do
  # A pipe into grep -q, on the line or as the continuation of one ending in |.
  if hits=$(grep -nE '\|[[:space:]]*grep[[:space:]]+-[a-zA-Z]*q|^[[:space:]]*grep[[:space:]]+-[a-zA-Z]*q[^<]*$' "$file" |
    while IFS= read -r hit; do
      line=${hit%%:*}
      if [[ $hit =~ \|[[:space:]]*grep ]] || sed -n "$((line - 1))p" "$file" | grep -E '\|[[:space:]]*$' >/dev/null; then
        echo "$hit"
      fi
    done) && [[ -n $hits ]]; then
    while IFS= read -r hit; do
      echo "$file:$hit: a pipe into grep -q fails under pipefail when the writer gets SIGPIPE; use <<< or grep >/dev/null" >&2
    done <<<"$hits"
    failed=1
  fi
done < <(shell_scripts)

if [[ $failed -ne 0 ]]; then
  echo "tidy: FAILED (see STYLE.md, Layout)" >&2
  exit 1
fi
echo "tidy: ok"
