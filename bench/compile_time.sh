#!/usr/bin/env bash
# Compile time of translation units that use memsafe, with g++ and (when present) nvcc.
# Prints one JSON line per (compiler, flags, translation unit): min and median wall seconds of R runs,
# min and median CPU seconds (user + system), and the 1-minute load average when the line was written.
# g++ compiles with -O3 -march=native (this project's own programs) and, for the small translation
# units, with plain -O2 as a consumer does by default (lines with "flags": "-O2"), and with
# -DMEMSAFE_PRECOMPILED=1 as a consumer linking memsafe::precompiled compiles (the evaluations in
# the library's list are not compiled there); and one of memsafe::precompiled's 22 objects (the
# library is built once, with the project's Release flags, -O3). The g++ -O2 lines of the small
# translation units also give "instructions_m": the instructions executed to compile them, in
# millions (bench/compile_instructions.sh, under valgrind), which do not move with the load and
# repeat exactly: the column to compare two revisions by. CT_INSTRUCTIONS=0 skips it (≈ 5 minutes);
# without valgrind it is null.
#   bash bench/compile_time.sh [R]        (default R = 3)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
R=${1:-3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
instructions() {  # compiler args... -> millions of instructions, or null
  if [[ ${CT_INSTRUCTIONS:-1} != 0 ]] && command -v valgrind >/dev/null 2>&1; then
    bash bench/compile_instructions.sh "$@" -o "$tmp/out.o" 2>/dev/null || echo null
  else
    echo null
  fi
}
measure() {  # name flags-label compiler args...   (an empty label: no "flags" field)
             # COUNT=1 in the environment: with the instruction count too
  local name=$1 label=$2 cc=$3; shift 3
  local times=() cpus=()
  for _ in $(seq "$R"); do
    local t0 t1 u
    t0=$(date +%s.%N)
    # CPU seconds (user + system, children included) too: on a shared machine they move far less
    # with the load than the wall time does.
    u=$( { TIMEFORMAT='%U %S'; time "$cc" "$@" -o "$tmp/out.o" >/dev/null 2>&1; } 2>&1 ) ||
      { echo "{\"tu\": \"$name\", \"compiler\": \"$cc\", \"error\": \"compile failed\"}"; return; }
    t1=$(date +%s.%N)
    times+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')")
    cpus+=("$(echo "$u" | tail -n 1 | awk '{ printf "%.3f", $1 + $2 }')")
  done
  local cpu_stats ins=""
  [[ ${COUNT:-0} == 1 ]] && ins=$(instructions "$cc" "$@")
  cpu_stats=$(printf '%s\n' "${cpus[@]}" | sort -g | awk '{ t[NR] = $1 } END {
      printf "%.2f %.2f", t[1], (NR % 2) ? t[(NR + 1) / 2] : (t[NR / 2] + t[NR / 2 + 1]) / 2 }')
  printf '%s\n' "${times[@]}" | sort -g | awk -v n="$name" -v f="$label" -v c="$cc" -v cs="$cpu_stats" \
    -v ins="$ins" -v load="$(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo 0)" -v cpu="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)" '
    { t[NR] = $1 } END { med = (NR % 2) ? t[(NR + 1) / 2] : (t[NR / 2] + t[NR / 2 + 1]) / 2;
      fl = (f == "") ? "" : sprintf(", \"flags\": \"%s\"", f); split(cs, q, " ");
      if (ins != "") fl = fl sprintf(", \"instructions_m\": %s", ins);
      printf "{\"tu\": \"%s\", \"compiler\": \"%s\"%s, \"runs\": %d, \"min_s\": %.2f, \"median_s\": %.2f, \"cpu_min_s\": %.2f, \"cpu_median_s\": %.2f, \"load_1m\": %s, \"cpu\": \"%s\"}\n", n, c, fl, NR, t[1], med, q[1], q[2], load, cpu }'
}
flags=(-std=c++20 -O3 -march=native -fno-math-errno -DNDEBUG -Iinclude -Iexamples -c)
for tu in bench/compile_time/include_only.cpp bench/compile_time/typical.cpp bench/compile_time/grad.cpp examples/knn.cpp; do
  measure "$tu" "" g++ "${flags[@]}" "$tu"
done
for tu in bench/compile_time/include_only.cpp bench/compile_time/typical.cpp; do
  COUNT=1 measure "$tu" "-O2" g++ -std=c++20 -O2 -Iinclude -c "$tu"
  COUNT=1 measure "$tu" "-O2 -DMEMSAFE_PRECOMPILED=1" g++ -std=c++20 -O2 -Iinclude -DMEMSAFE_PRECOMPILED=1 -c "$tu"
done
# A product chain of 9 factors: its planner's code grows with the kinds of step (O(N)), not the steps.
COUNT=1 measure bench/compile_time/chain.cpp "-O2" g++ -std=c++20 -O2 -Iinclude -c bench/compile_time/chain.cpp
measure "src/precompiled.cpp (rbf, float: 1 of 22 objects)" "-O3" g++ -std=c++20 -O3 -DNDEBUG -fno-math-errno -Iinclude \
  -DMEMSAFE_PRECOMPILED_BUILD=1 -DMEMSAFE_PRECOMPILED_FORMULA=rbf -DMEMSAFE_PRECOMPILED_VALUE=float -c src/precompiled.cpp
if command -v nvcc >/dev/null 2>&1; then
  for tu in bench/compile_time/include_only.cpp bench/compile_time/typical.cpp; do
    measure "$tu" "" nvcc -std=c++20 -O3 -Iinclude -c -x cu "$tu"
  done
fi
