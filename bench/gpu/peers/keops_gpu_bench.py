#!/usr/bin/env python3
"""KeOps (pykeops, CUDA backend) peer for the GPU benchmarks: LazyTensor formulas on torch CUDA
tensors, the GPU counterpart of bench/peers/keops_bench.py (whose CPU-only compile-flag handling
does not apply here: KeOps compiles its CUDA kernels with NVRTC).

Same command line and one-JSON-line output as build/bench/memsafe_bench_cuda (impl "keops"):

  python3 bench/gpu/peers/keops_gpu_bench.py knn --n 10000000 --m 10000 --d 3 --k 10 --metric l2 \
      --precision f32 --reps 3 --seed 42 [--data-file PREFIX] [--dump /tmp/keops.idx]
  python3 bench/gpu/peers/keops_gpu_bench.py matvec --n 1000000 --d 1 --precision f64 --lengthscale 1

kNN:    D_ij = ((q_i - x_j)**2).sum(-1) (l2), (q_i - x_j).abs().sum(-1) (l1) or 1 - <q^_i, x^_j>
        (cosine, on L2-normalised rows: the database's before the timed calls, the queries' inside
        them); indices = D_ij.argKmin(k, dim=1).
matvec: K_ij = exp(-||x_i - x_j||^2 / (2 l^2)), y = K @ v.

The first call of each formula compiles (NVRTC; the build cache is $KEOPS_CACHE_FOLDER, default
bench/.cache/keops-gpu): it is the untimed warm-up, setup_s, and "compiled" says whether it built
something. device_peak_bytes: torch.cuda.max_memory_allocated over the calls minus the bytes
allocated before them (KeOps allocates its outputs through torch; its own small cudaMalloc buffers
are not counted); device_used_delta_bytes: the drop in free device memory (torch.cuda.mem_get_info)
across the calls. "unavailable" when torch, pykeops or KeOps' CUDA support is missing.
Data and timing: see gpu_common.py. Exit status 0 when status is "ok", else 1.
"""

from __future__ import annotations

import os
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_common as gc  # noqa: E402
from bench_common import keops_argkmin, keops_compatible_cxx  # noqa: E402  (shared with the CPU peer)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
DEFAULT_CACHE = os.path.join(REPO, "bench", ".cache", "keops-gpu")


def built_modules(folder: str) -> set:
    found = set()
    for root, _dirs, files in os.walk(folder or "/nonexistent"):
        found |= {os.path.join(root, f) for f in files if f.endswith((".so", ".cubin", ".ptx"))}
    return found


def run(a, row, np, torch, LazyTensor, build_folder) -> None:
    dev = torch.device("cuda", a.device)
    X_h, B_h = gc.load_inputs(a, np, row)
    t0 = time.perf_counter()
    X = torch.from_numpy(X_h).to(dev)
    B = torch.from_numpy(B_h).to(dev)
    torch.cuda.synchronize(dev)
    row["h2d_s"] = time.perf_counter() - t0
    del X_h, B_h

    def normalised(A):
        return torch.nn.functional.normalize(A, dim=1)

    if a.bench == "knn":
        k = a.k
        if not 0 < k <= a.n:
            raise ValueError(f"--k {k} must be in [1, n = {a.n}]")
        Q = B
        Xs = normalised(X) if a.metric == "cosine" else X

        def fn():
            Qs = normalised(Q) if a.metric == "cosine" else Q
            return keops_argkmin(LazyTensor, Qs, Xs, a.metric, k)
    else:
        v = B
        scale = 1.0 / (2.0 * a.lengthscale * a.lengthscale)

        def fn():
            xi = LazyTensor(X[:, None, :])
            xj = LazyTensor(X[None, :, :])
            return (-((xi - xj) ** 2).sum(-1) * scale).exp() @ v

    torch.cuda.synchronize(dev)
    base = torch.cuda.memory_allocated(dev)
    torch.cuda.reset_peak_memory_stats(dev)
    before = built_modules(build_folder)
    free0, _ = torch.cuda.mem_get_info(dev)
    out, setup, times = gc.time_calls(fn, lambda _: torch.cuda.synchronize(dev), a.reps)
    free1, _ = torch.cuda.mem_get_info(dev)
    row["compiled"] = bool(built_modules(build_folder) - before)
    peak = torch.cuda.max_memory_allocated(dev)
    row.update(device_peak_bytes=peak - base, torch_max_memory_allocated=peak,
               device_used_delta_bytes=max(0, free0 - free1))
    gc.record_times(row, a, setup, times)
    if a.dump:
        if a.bench == "knn":
            gc.dump_indices(a.dump, out[: gc.DUMP_ROWS].long().cpu().numpy(), np)
        else:
            gc.dump_vector(a.dump, out[: gc.DUMP_ROWS, 0].cpu().numpy(), np)


def main(argv=None) -> int:
    def extra(sp):
        sp.add_argument("--cache-dir", default=None,
                        help="KeOps build cache (default $KEOPS_CACHE_FOLDER, else bench/.cache/keops-gpu)")

    a = gc.build_parser("keops", "KeOps CUDA peer: LazyTensor argKmin (kNN) and RBF K @ v on torch CUDA tensors; "
                                 "one JSON line.", extra).parse_args(argv)
    cache = a.cache_dir or os.environ.get("KEOPS_CACHE_FOLDER") or DEFAULT_CACHE
    os.makedirs(cache, exist_ok=True)
    os.environ["KEOPS_CACHE_FOLDER"] = cache  # read when pykeops is imported
    row = gc.new_row(a, "keops")
    cxx, why = keops_compatible_cxx()  # $CXX is read when pykeops is imported
    row.update(keops_backend="cuda", keops_cache=cache, keops_cxx=cxx, keops_cxx_choice=why)
    with gc.JsonStdout() as out:
        try:
            import numpy as np
            import torch
            import pykeops
            from pykeops.torch import LazyTensor
        except Exception as e:  # noqa: BLE001 - any import problem means the peer is unavailable
            row.update(status="unavailable", message=f"pykeops / torch not importable: {type(e).__name__}: {e}")
            out.emit(row)
            return 1
        row.update(keops_version=getattr(pykeops, "__version__", None), torch_version=torch.__version__)
        if not torch.cuda.is_available() or a.device >= torch.cuda.device_count():
            row.update(status="unavailable", message=f"torch {torch.__version__} sees no CUDA device {a.device}")
            out.emit(row)
            return 1
        if not getattr(pykeops.config, "gpu_available", False):
            row.update(status="unavailable",
                       message="pykeops found no usable CUDA (pykeops.config.gpu_available is False: CUDA "
                               "libraries or NVRTC headers missing); it would run on the CPU")
            out.emit(row)
            return 1
        props = torch.cuda.get_device_properties(a.device)
        row.update(device=props.name, device_mem_bytes=props.total_memory,
                   compute_capability=f"{props.major}.{props.minor}")
        try:
            build_folder = pykeops.config.get_build_folder()
        except Exception:  # noqa: BLE001 - only used to tell whether the warm-up compiled
            build_folder = cache
        row["keops_build_folder"] = build_folder
        oom_type = getattr(torch.cuda, "OutOfMemoryError", None)
        try:
            run(a, row, np, torch, LazyTensor, build_folder)
            row["status"] = "ok"
        except Exception as e:  # noqa: BLE001 - reported in the JSON line
            oom = (oom_type is not None and isinstance(e, oom_type)) or "out of memory" in str(e).lower()
            if oom or isinstance(e, MemoryError):
                row.update(status="oom", oom=True, message=gc.first_line(e))
            else:
                row.update(status="error", message=f"{type(e).__name__}: {str(e)[:500]}")
        out.emit(row)
    return 0 if row["status"] == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
