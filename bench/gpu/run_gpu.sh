#!/usr/bin/env bash
# The GPU benchmarks, on a machine with an NVIDIA GPU (written for an H100): builds memsafe_bench_cuda
# and fma_peak_cuda, runs every GPU suite (bench/gpu/run_gpu.py all: peak, knn, matvec) and the report.
#   bash bench/gpu/run_gpu.sh                 # results appended to bench/results/gpu_*.jsonl, then docs/benchmarks.md
#   bash bench/gpu/run_gpu.sh --quick         # smoke test: tiny sizes, bench/results/quick/, report in /tmp
#   bash bench/gpu/run_gpu.sh --impls memsafe-cuda,keops --reps 5    # any run_gpu.py option
# Environment: BUILD_DIR (default build), BIN_DIR (memsafe_bench_cuda and fma_peak_cuda built
# elsewhere for this GPU: copied, nothing built), CUDA_ARCH (e.g. 90; default: the project's), PYTHON (python3).
# Python peers: torch, jax (jax[cuda12]) and pykeops must be importable; wheels in .whl/ are installed
# first into /tmp/site (no network needed), so KeOps can come from there.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
PYTHON=${PYTHON:-python3}
build=${BUILD_DIR:-build}

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  echo "run_gpu.sh: no NVIDIA GPU visible (nvidia-smi missing or listing none); run this on a machine with one" >&2
  exit 1
fi
nvidia-smi -L >&2

shopt -s nullglob
wheels=(.whl/*.whl)
if ((${#wheels[@]})); then
  site=/tmp/site
  echo "run_gpu.sh: installing ${#wheels[@]} wheel(s) from .whl/ into $site" >&2
  if ! "$PYTHON" -m pip install --quiet --no-index --target "$site" "${wheels[@]}"; then
    echo "run_gpu.sh: pip could not resolve every dependency from .whl/; installing without dependencies" >&2
    "$PYTHON" -m pip install --quiet --no-index --no-deps --target "$site" "${wheels[@]}"
  fi
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi

# Build with CMake; if configuring fails (e.g. a dependency of the CPU benchmarks is missing on this
# machine), compile the two self-contained programs with nvcc directly.
arch_flag=()
[[ -n "${CUDA_ARCH:-}" ]] && arch_flag=(-DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCH")
if [[ -n "${BIN_DIR:-}" && -x "$BIN_DIR/memsafe_bench_cuda" && -x "$BIN_DIR/fma_peak_cuda" ]]; then
  echo "run_gpu.sh: using the programs in $BIN_DIR (BIN_DIR), nothing built" >&2
  mkdir -p "$build/bench"
  cp "$BIN_DIR/memsafe_bench_cuda" "$BIN_DIR/fma_peak_cuda" "$build/bench/"
elif cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DMEMSAFE_CUDA=ON "${arch_flag[@]}"; then
  cmake --build "$build" -j"$(nproc)" --target memsafe_bench_cuda fma_peak_cuda
else
  echo "run_gpu.sh: CMake configuration failed; compiling with nvcc directly" >&2
  mkdir -p "$build/bench"
  nvcc -std=c++20 -O3 -arch="sm_${CUDA_ARCH:-90}" -Iinclude bench/gpu/memsafe_bench_cuda.cu -lcublas \
    -o "$build/bench/memsafe_bench_cuda"
  nvcc -std=c++20 -O3 -arch="sm_${CUDA_ARCH:-90}" bench/gpu/fma_peak_cuda.cu -o "$build/bench/fma_peak_cuda"
fi

"$PYTHON" bench/gpu/run_gpu.py all --bin "$build/bench/memsafe_bench_cuda" --python "$PYTHON" "$@"
if [[ " $* " == *" --quick "* ]]; then
  "$PYTHON" bench/report.py --results bench/results/quick --doc /tmp/benchmarks-quick.md --fig-dir /tmp
else
  "$PYTHON" bench/report.py
fi
