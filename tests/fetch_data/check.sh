#!/usr/bin/env bash
# CTest data.fetch_data_mirror: scripts/fetch_data.sh against local HTTP mirrors, no internet.
#
#   bash tests/fetch_data/check.sh REFERENCE_DIR WORK_DIR
#
# Serves REFERENCE_DIR (a complete data folder, e.g. ../shared/data) with python3 -m http.server on
# 127.0.0.1 and a free port, points MEMSAFE_DATA_MIRROR at it, and checks that
#   1. a fetch into an empty folder exits 0 and lays out exactly the files of scripts/data.sha256,
#      each byte-identical to the reference;
#   2. a second fetch downloads nothing (no request reaches the server);
#   3. a file damaged in place is downloaded again (and only that one);
#   4. from a mirror serving one altered file the fetch fails, names the file with the expected and
#      actual sha256, and leaves neither that file nor a partial download behind; a file the mirror
#      lacks (HTTP 404) fails the same way;
#   5. --check accepts the complete folder and rejects the incomplete one.
# The servers are stopped on every exit. Prints "SKIPPED: ..." (CTest: skipped) and exits 0 when
# the reference data or python3 are missing. WORK_DIR is emptied first and removed on success.
set -euo pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: bash tests/fetch_data/check.sh REFERENCE_DIR WORK_DIR" >&2
  exit 2
fi
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
FETCH="$ROOT/scripts/fetch_data.sh"
MANIFEST="$ROOT/scripts/data.sha256"
ref=$1
work=$2

fail() { echo "FAIL: $*" >&2; exit 1; }

files=()
while read -r hash path _; do
  case $hash in "" | "#"*) continue ;; esac
  files+=("$path")
done <"$MANIFEST"
[[ ${#files[@]} -gt 0 ]] || fail "no files in $MANIFEST"

for f in "${files[@]}"; do
  if [[ ! -f $ref/$f ]]; then
    echo "SKIPPED: $ref/$f not found; run 'bash $FETCH $ref' to download the reference data this test serves"
    exit 0
  fi
done
if ! command -v python3 >/dev/null 2>&1; then
  echo "SKIPPED: python3 not found; this test serves the reference data with python3 -m http.server"
  exit 0
fi

rm -rf -- "$work"
mkdir -p -- "$work"
work=$(cd -- "$work" && pwd)

# ---- local HTTP servers, always stopped
pids=()
stop_servers() {
  local p
  for p in ${pids[@]+"${pids[@]}"}; do
    kill "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
}
trap stop_servers EXIT

port=""
start_server() {  # start_server DIR LOG: serves DIR on 127.0.0.1; sets $port
  local dir=$1 log=$2 pid i
  python3 -u -m http.server 0 --bind 127.0.0.1 --directory "$dir" >"$log" 2>&1 &
  pid=$!
  pids+=("$pid")
  port=""
  for ((i = 0; i < 200; i++)); do
    # The background job opens $log after the fork: on a busy machine it may not exist yet.
    port=$(sed -n 's/^Serving HTTP on .* port \([0-9][0-9]*\).*/\1/p' "$log" 2>/dev/null || true)
    if [[ -n $port ]]; then return 0; fi
    kill -0 "$pid" 2>/dev/null || fail "the HTTP server for $dir exited: $(cat "$log")"
    sleep 0.05
  done
  fail "the HTTP server for $dir did not start in 10 s: $(cat "$log")"
}
gets() { grep -c '"GET ' "$1" || true; }  # requests a server has logged

sha() { local out; out=$(sha256sum <"$1"); echo "${out%% *}"; }
manifest_hash() { awk -v p="$1" '$1 !~ /^#/ && $2 == p { print $1 }' "$MANIFEST"; }

fetch() {  # fetch LOG MIRROR_PORT ARGS...: runs fetch_data.sh, output to LOG; returns its status
  local log=$1 p=$2
  shift 2
  MEMSAFE_DATA_MIRROR="http://127.0.0.1:$p" bash "$FETCH" "$@" >"$log" 2>&1
}
show() { sed 's/^/    | /' "$1" >&2; }

no_partials() {  # no_partials DIR: no temporary download is left anywhere under DIR
  local left
  left=$(find "$1" -name '*.part' -print)
  [[ -z $left ]] || fail "temporary files left behind: $left"
}

start_server "$ref" "$work/server_ref.log"
good=$port
echo "serving $ref on 127.0.0.1:$good"

# ---- 1. a fresh fetch: exit 0, exactly the manifest's files, byte-identical to the reference
out="$work/out"
if ! fetch "$work/run1.log" "$good" "$out"; then show "$work/run1.log"; fail "the first fetch failed"; fi
expected=$(printf '%s\n' "${files[@]}" | LC_ALL=C sort)
actual=$(cd "$out" && find . \( -type f -o -type l \) | sed 's|^\./||' | LC_ALL=C sort)
if [[ $actual != "$expected" ]]; then
  diff <(echo "$expected") <(echo "$actual") >&2 || true
  fail "the layout of $out differs from scripts/data.sha256 (< expected, > found)"
fi
for f in "${files[@]}"; do
  cmp -s "$ref/$f" "$out/$f" || fail "$out/$f differs from $ref/$f"
done
n=$(gets "$work/server_ref.log")
[[ $n -eq ${#files[@]} ]] || fail "the first fetch made $n requests for ${#files[@]} files"
grep -q "${#files[@]} downloaded, 0 already present, 0 failed" "$work/run1.log" || { show "$work/run1.log"; fail "unexpected summary of the first fetch"; }
echo "1. ok: ${#files[@]} files fetched, layout and bytes identical to the reference"

# ---- 2. a second fetch downloads nothing
before=$(gets "$work/server_ref.log")
if ! fetch "$work/run2.log" "$good" "$out"; then show "$work/run2.log"; fail "the second fetch failed"; fi
after=$(gets "$work/server_ref.log")
[[ $after -eq $before ]] || fail "the second fetch made $((after - before)) requests; expected none"
grep -q "0 downloaded, ${#files[@]} already present, 0 failed" "$work/run2.log" || { show "$work/run2.log"; fail "unexpected summary of the second fetch"; }
echo "2. ok: a second fetch made no request"

# ---- 3. a file damaged in place is downloaded again, and only that one
damaged=mnist/t10k-labels-idx1-ubyte.gz
printf 'not the file' >"$out/$damaged"
before=$(gets "$work/server_ref.log")
if ! fetch "$work/run3.log" "$good" "$out"; then show "$work/run3.log"; fail "the fetch repairing $damaged failed"; fi
after=$(gets "$work/server_ref.log")
[[ $((after - before)) -eq 1 ]] || fail "repairing $damaged made $((after - before)) requests; expected 1"
cmp -s "$ref/$damaged" "$out/$damaged" || fail "$out/$damaged was not restored"
no_partials "$out"
echo "3. ok: a damaged $damaged was downloaded again"

# ---- 4. a mirror serving one altered file and lacking another
bad="$work/bad_mirror"
altered=uci/concrete/data.csv.gz
absent=uci/pol/test_mask.csv.gz
for f in "${files[@]}"; do
  mkdir -p "$bad/$(dirname "$f")"
  [[ $f == "$absent" || $f == "$altered" ]] || ln -s "$ref/$f" "$bad/$f"
done
python3 - "$ref/$altered" "$bad/$altered" <<'EOF'
import sys
data = bytearray(open(sys.argv[1], "rb").read())
data[len(data) // 2] ^= 0xFF
open(sys.argv[2], "wb").write(bytes(data))
EOF
start_server "$bad" "$work/server_bad.log"
badport=$port

out4="$work/out_bad"
if fetch "$work/run4.log" "$badport" --only concrete "$out4"; then show "$work/run4.log"; fail "the fetch of an altered file succeeded"; fi
want=$(manifest_hash "$altered")
got=$(sha "$bad/$altered")
grep -q "checksum mismatch for $altered .*expected sha256 $want, got $got" "$work/run4.log" ||
  { show "$work/run4.log"; fail "no checksum message naming $altered, $want and $got"; }
[[ ! -e $out4/$altered ]] || fail "$out4/$altered was left in place"
no_partials "$out4"
for f in uci/LICENSE uci/concrete/test_mask.csv.gz; do
  cmp -s "$ref/$f" "$out4/$f" || fail "$out4/$f (served intact) was not fetched"
done
echo "4a. ok: an altered $altered fails the fetch with its checksums and is not kept"

if fetch "$work/run5.log" "$badport" --only pol "$out4"; then show "$work/run5.log"; fail "the fetch of a file the mirror lacks succeeded"; fi
grep -q "$absent: download failed" "$work/run5.log" || { show "$work/run5.log"; fail "no message naming $absent"; }
grep -q "FAILED (1 of 3)" "$work/run5.log" || { show "$work/run5.log"; fail "the summary does not count one failure in three"; }
[[ ! -e $out4/$absent ]] || fail "$out4/$absent was created"
no_partials "$out4"
echo "4b. ok: a file the mirror lacks fails the fetch and leaves nothing"

# ---- 5. --check
bash "$FETCH" --check "$out" >"$work/check_ok.log" 2>&1 || { show "$work/check_ok.log"; fail "--check rejected a complete folder"; }
if bash "$FETCH" --check "$out4" >"$work/check_bad.log" 2>&1; then fail "--check accepted an incomplete folder"; fi
grep -q "$altered (missing)" "$work/check_bad.log" || { show "$work/check_bad.log"; fail "--check did not name $altered"; }
echo "5. ok: --check"

stop_servers
pids=()
rm -rf -- "$work"
echo "fetch_data.sh: all checks passed"
