#!/usr/bin/env bash
# Instructions executed to compile one translation unit, in millions: valgrind's cachegrind (no cache
# simulation) over the compiler driver and every process it starts (cc1plus, as), summed. Unlike
# wall or CPU seconds the count does not move with the machine's load or clock, and it repeats to
# the instruction for the same compiler, flags and source: a change to the library's compile cost
# of a fraction of a percent shows between two revisions measured on a busy machine. It is not a
# time (instructions per second differ between machines and between parsing and optimising).
#
#   bash bench/compile_instructions.sh g++ -std=c++20 -O2 -Iinclude -c bench/compile_time/typical.cpp -o /tmp/t.o
#
# Prints the number (e.g. 24976.9); exit status 1 and a message on stderr when valgrind is missing
# or the compile fails. Takes ≈ 30× the compile's own time.
set -euo pipefail
command -v valgrind >/dev/null 2>&1 || { echo "compile_instructions.sh: valgrind not found" >&2; exit 1; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
if ! valgrind --tool=cachegrind --cache-sim=no --trace-children=yes --cachegrind-out-file="$dir/cg.%p" \
    "$@" >"$dir/out" 2>"$dir/err"; then
  echo "compile_instructions.sh: the compile failed: $*" >&2
  grep -v '^==\|^--' "$dir/err" | tail -n 5 >&2
  exit 1
fi
cat "$dir"/cg.* | awk '/^summary:/ { s += $2 } END { printf "%.1f\n", s / 1e6 }'
