#!/bin/sh
# The COMMAND of a CTest test that reads data from outside the repository (see
# memsafe_add_data_test in the top-level CMakeLists.txt):
#
#   sh run_with_data.sh DATA_DIR FILE... -- COMMAND [ARG...]
#
# When every DATA_DIR/FILE exists, runs COMMAND (exec: its output and exit status are the test's).
# Otherwise prints one "SKIPPED: <path> not found; ..." line per missing file and exits 0; the
# test's SKIP_REGULAR_EXPRESSION makes CTest report it as skipped, never as failed or passed.
set -eu

if [ $# -lt 3 ]; then
  echo "usage: sh run_with_data.sh DATA_DIR FILE... -- COMMAND [ARG...]" >&2
  exit 2
fi
data_dir=$1
shift
fetch="$(cd "$(dirname "$0")/.." && pwd)/scripts/fetch_data.sh"
missing=0
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  if [ ! -f "$data_dir/$1" ]; then
    echo "SKIPPED: $data_dir/$1 not found; run 'bash $fetch $data_dir' to download the data (or configure with -DMEMSAFE_DATA_DIR=<folder holding mnist/ and uci/>)"
    missing=1
  fi
  shift
done
if [ $# -lt 2 ]; then
  echo "run_with_data.sh: no '-- COMMAND' after the data files" >&2
  exit 2
fi
shift
if [ "$missing" -ne 0 ]; then
  exit 0
fi
exec "$@"
