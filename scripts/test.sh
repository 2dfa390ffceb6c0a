#!/usr/bin/env bash
# Build memsafe (Release, build/) and run the whole test suite.
# Extra arguments are passed to ctest, e.g.  bash scripts/test.sh -L consumer
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/deps.sh

jobs=$(nproc)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$jobs"
ctest --test-dir build --output-on-failure -j"$jobs" "$@"
