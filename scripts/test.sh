#!/usr/bin/env bash
# Build memsafe (Release, build/) and run the whole test suite.
# Extra arguments are passed to ctest, e.g.  bash scripts/test.sh -L consumer
# The CUDA backend's tests (label `gpu`) are built whenever nvcc is found (MEMSAFE_CUDA=ON makes
# nvcc required, OFF skips them) and run only when an NVIDIA GPU is visible (nvidia-smi -L);
# without one, ctest runs with -LE gpu.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/deps.sh

# nvcc from the toolkit's default location when it is not on PATH.
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi

jobs=$(nproc)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DMEMSAFE_CUDA="${MEMSAFE_CUDA:-AUTO}"
cmake --build build -j"$jobs"
gpu_args=()
if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "test.sh: no NVIDIA GPU visible: the gpu-labelled tests are built but not run (ctest -LE gpu)"
  gpu_args=(-LE gpu)
fi
data_dir=$(sed -n 's/^MEMSAFE_DATA_DIR:[A-Z]*=//p' build/CMakeCache.txt)
if [[ ! -d $data_dir/mnist || ! -d $data_dir/uci ]]; then
  echo "test.sh: no data sets in $data_dir: the tests that need them (label data) are reported as skipped;"
  echo "         bash scripts/fetch_data.sh $data_dir  downloads them (ctest -L data -V shows what is missing)"
fi
ctest --test-dir build --output-on-failure -j"$jobs" "${gpu_args[@]}" "$@"
