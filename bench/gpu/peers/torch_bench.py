#!/usr/bin/env python3
"""Naive PyTorch (CUDA) peer for the GPU benchmarks: the full matrix, then the reduction.

Same command line and one-JSON-line output as build/bench/memsafe_bench_cuda (impl "torch"):

  python3 bench/gpu/peers/torch_bench.py knn --n 1000000 --m 10000 --d 100 --k 10 --metric l2 \
      --precision f32 --reps 3 --seed 42 [--data-file PREFIX] [--dump /tmp/torch.idx]
  python3 bench/gpu/peers/torch_bench.py matvec --n 100000 --d 3 --precision f32 --lengthscale 1

kNN:    D = torch.cdist(Q, X) (l2: Euclidean, same order as squared), torch.cdist(Q, X, p=1) (l1),
        or 1 - Q^ X^T on L2-normalised rows (cosine: the database normalised before the timed calls,
        the queries inside them, as the CPU peers do); then torch.topk(D, k, largest=False).
matvec: K = X X^T, turned in place into exp(-max(|x_i|^2 + |x_j|^2 - 2 x_i.x_j, 0) / (2 l^2)), then
        y = K @ v: one n x n matrix materialised.

float32 products run in full FP32 unless --tf32 1 (torch.backends.cuda.matmul.allow_tf32).
An out-of-memory (torch.cuda.OutOfMemoryError) is the row {"status": "oom", "oom": true, ...} with
needed_bytes, the size of the dense matrix. device_peak_bytes: torch.cuda.max_memory_allocated over
the calls minus the bytes allocated before them (the inputs); torch_max_memory_allocated and
torch_max_memory_reserved are the raw allocator figures; device_used_delta_bytes is the drop in
torch.cuda.mem_get_info's free bytes across the calls (the caching allocator keeps what it reserved). Data and timing: see gpu_common.py. Exit status 0 when status is "ok", else 1.
"""

from __future__ import annotations

import os
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_common as gc  # noqa: E402


def run(a, row, np, torch) -> None:
    dev = torch.device("cuda", a.device)
    X_h, B_h = gc.load_inputs(a, np, row)
    t0 = time.perf_counter()
    X = torch.from_numpy(X_h).to(dev)
    B = torch.from_numpy(B_h).to(dev)
    torch.cuda.synchronize(dev)
    row["h2d_s"] = time.perf_counter() - t0
    del X_h, B_h

    if a.bench == "knn":
        k = a.k
        if not 0 < k <= a.n:
            raise ValueError(f"--k {k} must be in [1, n = {a.n}]")
        Q = B
        Xs = torch.nn.functional.normalize(X, dim=1) if a.metric == "cosine" else X

        def fn():
            if a.metric == "l2":
                D = torch.cdist(Q, Xs)
            elif a.metric == "l1":
                D = torch.cdist(Q, Xs, p=1)
            else:
                D = torch.mm(torch.nn.functional.normalize(Q, dim=1), Xs.T).neg_().add_(1)
            return torch.topk(D, k, dim=1, largest=False, sorted=True).indices
    else:
        v = B
        scale = 1.0 / (2.0 * a.lengthscale * a.lengthscale)

        def fn():
            x2 = (X * X).sum(1)
            K = torch.mm(X, X.T)
            K.mul_(-2).add_(x2[:, None]).add_(x2[None, :]).clamp_min_(0).mul_(-scale).exp_()
            return torch.mm(K, v)

    torch.cuda.synchronize(dev)
    base = torch.cuda.memory_allocated(dev)
    torch.cuda.reset_peak_memory_stats(dev)
    free0, _ = torch.cuda.mem_get_info(dev)
    out, setup, times = gc.time_calls(fn, lambda _: torch.cuda.synchronize(dev), a.reps)
    free1, _ = torch.cuda.mem_get_info(dev)
    peak = torch.cuda.max_memory_allocated(dev)
    row.update(device_peak_bytes=peak - base, torch_max_memory_allocated=peak,
               torch_max_memory_reserved=torch.cuda.max_memory_reserved(dev),
               device_used_delta_bytes=max(0, free0 - free1))
    gc.record_times(row, a, setup, times)
    if a.dump:
        if a.bench == "knn":
            gc.dump_indices(a.dump, out[: gc.DUMP_ROWS].cpu().numpy(), np)
        else:
            gc.dump_vector(a.dump, out[: gc.DUMP_ROWS, 0].cpu().numpy(), np)


def main(argv=None) -> int:
    a = gc.build_parser("torch", "Naive PyTorch CUDA peer: cdist + topk (kNN), dense RBF K @ v; one JSON line.") \
        .parse_args(argv)
    row = gc.new_row(a, "torch")
    with gc.JsonStdout() as out:
        try:
            import numpy as np
            import torch
        except Exception as e:  # noqa: BLE001 - any import problem means the peer is unavailable
            row.update(status="unavailable", message=f"torch not importable: {type(e).__name__}: {e}")
            out.emit(row)
            return 1
        row["torch_version"] = torch.__version__
        row["torch_cuda"] = torch.version.cuda
        if not torch.cuda.is_available() or a.device >= torch.cuda.device_count():
            row.update(status="unavailable",
                       message=f"torch {torch.__version__} sees no CUDA device {a.device} "
                               f"(torch.cuda.is_available() = {torch.cuda.is_available()}, "
                               f"built for CUDA {torch.version.cuda})")
            out.emit(row)
            return 1
        props = torch.cuda.get_device_properties(a.device)
        row.update(device=props.name, device_mem_bytes=props.total_memory,
                   compute_capability=f"{props.major}.{props.minor}")
        torch.backends.cuda.matmul.allow_tf32 = bool(a.tf32)
        torch.set_float32_matmul_precision("high" if a.tf32 else "highest")
        oom_type = getattr(torch.cuda, "OutOfMemoryError", None)
        try:
            run(a, row, np, torch)
            row["status"] = "ok"
        except Exception as e:  # noqa: BLE001 - reported in the JSON line
            oom = (oom_type is not None and isinstance(e, oom_type)) or "out of memory" in str(e).lower()
            if oom:
                row.update(status="oom", oom=True, needed_bytes=gc.needed_bytes(a),
                           message=gc.first_line(e))
            elif isinstance(e, MemoryError):
                row.update(status="oom", oom=True, message=f"host MemoryError: {e}")
            else:
                row.update(status="error", message=f"{type(e).__name__}: {e}")
        out.emit(row)
    return 0 if row["status"] == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
