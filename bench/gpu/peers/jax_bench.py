#!/usr/bin/env python3
"""Naive JAX (jax.jit on a CUDA device) peer for the GPU benchmarks: the same dense code as
torch_bench.py, compiled by XLA (which may fuse parts of it: whatever it does is what is measured).

Same command line and one-JSON-line output as build/bench/memsafe_bench_cuda (impl "jax"):

  python3 bench/gpu/peers/jax_bench.py knn --n 1000000 --m 10000 --d 100 --k 10 --metric l2 \
      --precision f32 --reps 3 --seed 42 [--data-file PREFIX] [--dump /tmp/jax.idx]
  python3 bench/gpu/peers/jax_bench.py matvec --n 100000 --d 3 --precision f32 --lengthscale 1

kNN:    D = max(|q|^2 + |x|^2 - 2 Q X^T, 0) (l2, squared: the same order as torch.cdist),
        sum |q - x| over the broadcast m x n x d difference (l1), or 1 - Q^ X^T on L2-normalised rows
        (cosine: database normalised before the timed calls, queries inside them); then
        jax.lax.top_k(-D, k).
matvec: y = exp(-max(|x_i|^2 + |x_j|^2 - 2 X X^T, 0) / (2 l^2)) @ v.

Products use Precision.HIGHEST (full FP32; JAX's default on recent GPUs is TF32) unless --tf32 1.
XLA_PYTHON_CLIENT_PREALLOCATE=false is set (unless already set) so that JAX takes device memory as
it needs it instead of 75 % up front. The first call is compiled ahead (jit(...).lower().compile(),
compile_s) and then warmed up (setup_s includes both). An out-of-memory (XLA's RESOURCE_EXHAUSTED)
is the row {"status": "oom", "oom": true, ...}. device_peak_bytes: the device's peak_bytes_in_use
(memory_stats(); over the whole process, so XLA's compile-time autotuning counts) minus the bytes
in use before the calls (the inputs). Data and timing: see gpu_common.py. Exit status 0 when status
is "ok", else 1.
"""

from __future__ import annotations

import os
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_common as gc  # noqa: E402


def run(a, row, np, jax, jnp) -> None:
    gpus = jax.devices("gpu")
    if a.device >= len(gpus):
        raise LookupError(f"JAX sees {len(gpus)} GPU(s), no device {a.device}")
    dev = gpus[a.device]
    row["device"] = getattr(dev, "device_kind", str(dev))
    prec = jax.lax.Precision.DEFAULT if a.tf32 else jax.lax.Precision.HIGHEST
    X_h, B_h = gc.load_inputs(a, np, row)
    t0 = time.perf_counter()
    X = jax.device_put(X_h, dev).block_until_ready()
    B = jax.device_put(B_h, dev).block_until_ready()
    row["h2d_s"] = time.perf_counter() - t0
    del X_h, B_h

    def normalised(A):
        return A / jnp.maximum(jnp.sqrt((A * A).sum(1, keepdims=True)), 1e-12)

    if a.bench == "knn":
        k = a.k
        if not 0 < k <= a.n:
            raise ValueError(f"--k {k} must be in [1, n = {a.n}]")

        def f(Q, Xs):
            if a.metric == "l2":
                q2, x2 = (Q * Q).sum(1), (Xs * Xs).sum(1)
                D = jnp.maximum(q2[:, None] + x2[None, :] - 2 * jnp.dot(Q, Xs.T, precision=prec), 0)
            elif a.metric == "l1":
                D = jnp.abs(Q[:, None, :] - Xs[None, :, :]).sum(-1)
            else:
                D = 1 - jnp.dot(normalised(Q), Xs.T, precision=prec)
            return jax.lax.top_k(-D, k)[1]

        args = (B, jax.jit(normalised)(X).block_until_ready() if a.metric == "cosine" else X)
    else:
        scale = 1.0 / (2.0 * a.lengthscale * a.lengthscale)

        def f(X, v):
            x2 = (X * X).sum(1)
            D = jnp.maximum(x2[:, None] + x2[None, :] - 2 * jnp.dot(X, X.T, precision=prec), 0)
            return jnp.dot(jnp.exp(-D * scale), v, precision=prec)

        args = (X, B)

    def in_use():
        st = dev.memory_stats() or {}
        return st.get("bytes_in_use"), st.get("peak_bytes_in_use")

    t0 = time.perf_counter()
    compiled = jax.jit(f).lower(*args).compile()
    row["compile_s"] = time.perf_counter() - t0
    base, _ = in_use()
    out, setup, times = gc.time_calls(lambda: compiled(*args), lambda o: o.block_until_ready(), a.reps)
    _, peak = in_use()
    if base is not None and peak is not None:
        row.update(device_peak_bytes=max(0, peak - base), jax_peak_bytes_in_use=peak)
    gc.record_times(row, a, row["compile_s"] + setup, times)
    if a.dump:
        head = np.asarray(out[: gc.DUMP_ROWS])
        if a.bench == "knn":
            gc.dump_indices(a.dump, head, np)
        else:
            gc.dump_vector(a.dump, head[:, 0], np)


def main(argv=None) -> int:
    a = gc.build_parser("jax", "Naive JAX (jit, CUDA) peer: dense distances + top_k (kNN), dense RBF K @ v; "
                               "one JSON line.").parse_args(argv)
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    row = gc.new_row(a, "jax")
    row["xla_preallocate"] = os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"]
    # The share of device memory XLA's allocator may take (JAX's default 0.75; e.g. 0.95 gives it
    # nearly the whole GPU, as PyTorch has).
    row["xla_mem_fraction"] = os.environ.get("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.75")
    with gc.JsonStdout() as out:
        try:
            import numpy as np
            import jax
            import jax.numpy as jnp
        except Exception as e:  # noqa: BLE001 - any import problem means the peer is unavailable
            row.update(status="unavailable", message=f"jax not importable: {type(e).__name__}: {e}")
            out.emit(row)
            return 1
        row["jax_version"] = jax.__version__
        if a.precision == "f64":
            jax.config.update("jax_enable_x64", True)
        try:
            if not jax.devices("gpu"):
                raise RuntimeError("no GPU devices")
        except Exception as e:  # noqa: BLE001 - no CUDA backend (e.g. jax without jax[cuda12])
            row.update(status="unavailable", message=f"JAX {jax.__version__} has no GPU backend "
                                                     f"({gc.first_line(e, 200)}); "
                                                     f"devices: {[str(d) for d in jax.devices()]}")
            out.emit(row)
            return 1
        try:
            run(a, row, np, jax, jnp)
            row["status"] = "ok"
        except Exception as e:  # noqa: BLE001 - reported in the JSON line
            text = str(e)
            if "RESOURCE_EXHAUSTED" in text or "out of memory" in text.lower():
                row.update(status="oom", oom=True, needed_bytes=gc.needed_bytes(a),
                           message=gc.first_line(e))
            elif isinstance(e, MemoryError):
                row.update(status="oom", oom=True, message=f"host MemoryError: {e}")
            else:
                row.update(status="error", message=f"{type(e).__name__}: {text[:500]}")
        out.emit(row)
    return 0 if row["status"] == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
