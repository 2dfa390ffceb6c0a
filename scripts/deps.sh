#!/usr/bin/env bash
# Install what a fresh Debian 12 machine needs to build and test memsafe.
# Idempotent: does nothing (silently) when everything is already present.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

missing=()
for tool in cmake g++ make curl; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
[[ -f /usr/include/doctest/doctest.h ]] || missing+=("doctest.h")
[[ -f /usr/include/zlib.h ]] || missing+=("zlib.h")
compgen -G "/usr/lib/*/libopenblas.so" >/dev/null || missing+=("libopenblas.so")
command -v mpirun >/dev/null 2>&1 && command -v mpicxx >/dev/null 2>&1 || missing+=("mpirun/mpicxx")
[[ -f /usr/include/lbfgs.h ]] || missing+=("lbfgs.h")

if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi

echo "deps.sh: missing: ${missing[*]}; installing with apt-get" >&2
if [[ $(id -u) -eq 0 ]]; then
  SUDO=()
elif command -v sudo >/dev/null 2>&1; then
  SUDO=(sudo)
else
  echo "deps.sh: need root (or sudo) to run apt-get" >&2
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update
"${SUDO[@]}" apt-get install -y --no-install-recommends \
  cmake g++ make doctest-dev zlib1g-dev libopenblas-dev liblbfgs-dev libopenmpi-dev openmpi-bin ca-certificates curl
