#!/bin/sh
# CTest example.bad_inputs: the examples' command lines and data files, when they are wrong, give a
# clear error before any work (exit 2 for the command line), never a crash or a huge allocation.
#
#   sh bad_inputs.sh KNN SGPR_TRAIN WORK_DIR
#
# 1. A malformed --budget or --rss-slack is a command-line error (exit 2) naming the option, found
#    before the data are made (not after the run's computation).
# 2. --budget unlimited with --rss-slack: the RSS limit saturates (it wrapped to a few MiB and
#    failed the check).
# 3. An MNIST image file whose header promises 4·10⁹ images of 28x28 in a few bytes: "truncated",
#    not an allocation of 3 TB.
# 4. sgpr_train --iters beyond liblbfgs's int: refused (it wrapped to 1, 0 or a negative count).
# 5. A UCI CSV with a nan field: an error naming the file, line and field (from_chars reads nan).
# (6.–9. below.)
set -eu
knn=$1
train=$2
work=$3
mkdir -p "$work"
fail() {
  echo "FAIL: $*"
  exit 1
}
expect_exit() {  # expect_exit STATUS PATTERN COMMAND...: the status, and PATTERN in stdout + stderr
  want=$1 pat=$2
  shift 2
  set +e
  out=$("$@" 2>&1)
  got=$?
  set -e
  echo "$* -> exit $got: $(printf '%s' "$out" | tail -n 1 | cut -c1-300)"
  [ "$got" -eq "$want" ] || fail "exit $got, not $want: $*"
  case $out in
    *"$pat"*) ;;
    *) fail "no '$pat' in the output of: $*" ;;
  esac
}
expect_exit 2 "--budget" "$knn" --n 100000000 --m 1000000 --budget 64XB
expect_exit 2 "--rss-slack" "$knn" --n 100000000 --m 1000000 --rss-slack 40MiBs
expect_exit 0 '"rss_check": "pass"' "$knn" --n 2000 --m 20 --d 3 --budget unlimited --rss-slack 64MiB --threads 1
# an IDX image file: magic 0x00000803, count 0xffffffff, 28 x 28, then four pixel bytes
printf '\000\000\010\003\377\377\377\377\000\000\000\034\000\000\000\034\001\002\003\004' | gzip -c > "$work/train-images-idx3-ubyte.gz"
cp "$work/train-images-idx3-ubyte.gz" "$work/t10k-images-idx3-ubyte.gz"
expect_exit 1 "truncated" "$knn" --data mnist --data-dir "$work" --n 100000000 --m 10
expect_exit 2 "--iters must be at most" "$train" --dataset kin40k --m 10 --iters 3000000000
mkdir -p "$work/uci/kin40k"
printf '1,2,3\n4,nan,6\n7,8,9\n' | gzip -c > "$work/uci/kin40k/data.csv.gz"
printf '0\n1\n0\n' | gzip -c > "$work/uci/kin40k/test_mask.csv.gz"
expect_exit 1 "line 2: field 2 'nan' is not a finite number" "$train" --dataset kin40k --m 1 --iters 1 --data-dir "$work/uci"
# 6. sgpr_train --jitter < 0: a command-line error (it failed in the first evaluation, reported as a
#    rejected line-search step); --explain where a program has nothing to explain: unknown option.
expect_exit 2 "--jitter must not be negative" "$train" --dataset kin40k --m 10 --jitter -1
expect_exit 2 "explain" "$train" --dataset kin40k --m 10 --explain
# 7. --rss-slack 0 is a strict limit, not a malformed byte count.
expect_exit 0 '"rss_check": "pass"' "$knn" --n 2000 --m 20 --d 3 --budget unlimited --rss-slack 0 --threads 1
# 8. A byte that is not UTF-8 in a string of the JSON line (here a data set's path) is written as
#    \u00XX: the line stays valid JSON.
expect_exit 1 'u00ff' "$train" --dataset "$(printf '\377')" --m 1 --iters 1 --data-dir "$work/uci"
# 9. Inputs near the top of double's range standardise as the same inputs scaled down do (squares of
#    values above 1.3e154 overflowed: every input became 0, silently), and a target whose spread
#    squared is beyond a double is refused by name.
for set in small big bigy; do
  mkdir -p "$work/uci/$set"
  awk -v set="$set" 'BEGIN { for (i = 0; i < 24; i++) {
      f = (set == "big") ? 1e200 : 1; g = (set == "bigy") ? 1e200 : 1
      printf "%.17g,%.17g,%.17g\n", i * f, ((i * 7) % 11) * f, (((i * 5) % 13) - 6) * g } }' | gzip -c > "$work/uci/$set/data.csv.gz"
  awk 'BEGIN { for (i = 0; i < 24; i++) print (i % 4 == 0) ? 1 : 0 }' | gzip -c > "$work/uci/$set/test_mask.csv.gz"
done
bound_of() { "$train" --dataset "$1" --m 3 --iters 2 --threads 1 --data-dir "$work/uci" 2>/dev/null | tail -n 1 |
  sed -n 's/.*"bound": *\([-0-9.eE+]*\).*/\1/p'; }
small=$(bound_of small)
big=$(bound_of big)
echo "bound small $small, big $big"
[ -n "$small" ] && [ -n "$big" ] || fail "no bound from sgpr_train on the small or big set"
awk -v a="$small" -v b="$big" 'BEGIN { d = a - b; if (d < 0) d = -d; s = a < 0 ? -a : a; exit !(d <= 1e-9 * s) }' ||
  fail "inputs scaled by 1e200 changed the bound: $small vs $big"
expect_exit 1 "rescale the targets" "$train" --dataset bigy --m 3 --iters 1 --threads 1 --data-dir "$work/uci"
echo "bad_inputs: pass"
