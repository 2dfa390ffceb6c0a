"""What the GPU peers (torch_bench.py, jax_bench.py, keops_gpu_bench.py) share: the command line of
memsafe_bench_cuda, the data, the row and its one JSON line.

Data.  With --data-file PREFIX the inputs are read from PREFIX.X and PREFIX.Q (knn) or PREFIX.v
(matvec), raw row-major arrays in the chosen precision as `memsafe_bench_cuda --save-data PREFIX`
writes them: the SAME NUMBERS as memsafe's run, so bench/gpu/run_gpu.py can compare the answers.
Without it: N(0,1) draws from numpy's default_rng (SeedSequence([seed, 0]) for X, [seed, 1] for Q
or v, drawn in float64 and rounded), as bench/peers/keops_bench.py does: the same distribution as
memsafe's, not the same numbers (but the same numbers for every Python peer).

Timing.  One untimed warm-up call (it compiles for JAX and KeOps: its time is setup_s), then --reps
calls, each timed with time.perf_counter around the call and a device synchronisation; the inputs
are on the device before the first call (their copy is h2d_s).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import json

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # bench/
from bench_common import cpu_count, cpu_model, max_rss_bytes, parse_bytes  # noqa: E402  (shared with keops_bench.py)

DUMP_ROWS = 2000


def build_parser(impl: str, description: str, extra=None) -> argparse.ArgumentParser:
    """memsafe_bench_cuda's command line; `extra(subparser)` adds a peer's own options."""
    p = argparse.ArgumentParser(description=description)
    sub = p.add_subparsers(dest="bench", required=True)

    def common(sp):
        sp.add_argument("--impl", default=impl, choices=[impl], help=f"always {impl} (accepted for symmetry)")
        sp.add_argument("--n", type=int, required=True, help="database size / number of points")
        sp.add_argument("--d", type=int, default=3, help="dimension")
        sp.add_argument("--precision", default="f32", choices=["f32", "f64"])
        sp.add_argument("--reps", type=int, default=3, help="timed repetitions after one untimed warm-up")
        sp.add_argument("--seed", type=int, default=42)
        sp.add_argument("--device", type=int, default=0, help="CUDA device index")
        sp.add_argument("--tf32", type=int, default=0, choices=[0, 1],
                        help="1: allow TF32 tensor cores for float32 matrix products (default: full FP32)")
        sp.add_argument("--data-file", default=None,
                        help="read the inputs written by memsafe_bench_cuda --save-data PREFIX (same numbers)")
        sp.add_argument("--budget", type=parse_bytes, default=None, help="ignored (no budget)")
        sp.add_argument("--warmup", type=int, default=1, help="ignored: there is always one untimed first call")
        sp.add_argument("--dump", default=None, help="write the first rows of the answer here (binary)")
        if extra:
            extra(sp)

    knn = sub.add_parser("knn", help="k nearest neighbours")
    common(knn)
    knn.add_argument("--m", type=int, required=True, help="number of queries")
    knn.add_argument("--k", type=int, default=10)
    knn.add_argument("--metric", default="l2", choices=["l2", "l1", "cosine"])

    mv = sub.add_parser("matvec", help="RBF kernel matrix times a vector, K(X, X) @ v")
    common(mv)
    mv.add_argument("--lengthscale", type=float, default=1.0)
    return p


def new_row(a, impl: str) -> dict:
    knn = a.bench == "knn"
    return {
        "bench": a.bench, "impl": impl, "data": "random", "metric": a.metric if knn else "rbf",
        "n": a.n, "m": a.m if knn else a.n, "d": a.d, "k": a.k if knn else 0, "precision": a.precision,
        "budget_bytes": None, "reps": a.reps, "min_s": None, "median_s": None, "times_s": [],
        "qps_median": None, "pairs_per_s": None, "peak_temp_bytes": None, "device_peak_bytes": None,
        "max_rss_bytes": None, "input_bytes": None, "setup_s": None, "status": "error", "message": "",
        "host_resident": False, "tf32": bool(a.tf32), "device": None, "device_index": a.device,
        "cpu": cpu_model(), "cores": cpu_count(), "seed": a.seed,
        "lengthscale": None if knn else a.lengthscale,
    }


def first_line(e: BaseException, limit: int = 300) -> str:
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0][:limit] if lines else ''}"


def needed_bytes(a) -> int:
    """Bytes of the naive code's dense matrix (m×n distances or n×n kernel), for oom rows."""
    item = 4 if a.precision == "f32" else 8
    return (a.m if a.bench == "knn" else a.n) * a.n * item


def load_inputs(a, np, row):
    """(X, Q) for knn or (X, v) for matvec as numpy arrays, and where they came from, into row."""
    dt = np.float32 if a.precision == "f32" else np.float64
    second = ("Q", (a.m, a.d)) if a.bench == "knn" else ("v", (a.n, 1))
    t0 = time.perf_counter()
    if a.data_file:
        def read(suffix, shape):
            path = a.data_file + "." + suffix
            arr = np.fromfile(path, dtype=dt)
            if arr.size != shape[0] * shape[1]:
                raise ValueError(f"{path}: {arr.size} values, expected {shape[0]} x {shape[1]} {a.precision}")
            return arr.reshape(shape)
        X, B = read("X", (a.n, a.d)), read(second[0], second[1])
        row["data_generator"] = "memsafe_bench_cuda --save-data (std::mt19937_64): the same numbers as memsafe"
    else:
        def normal(stream, shape):
            rng = np.random.default_rng(np.random.SeedSequence([a.seed, stream]))
            return rng.standard_normal(shape).astype(dt)
        X, B = normal(0, (a.n, a.d)), normal(1, second[1])
        row["data_generator"] = "numpy default_rng N(0,1): same distribution as memsafe_bench, different numbers"
    row["data_s"] = time.perf_counter() - t0
    row["input_bytes"] = int(X.nbytes + B.nbytes)
    return X, B


def time_calls(fn, sync, reps: int):
    """One untimed warm-up call, then `reps` timed calls; (last output, warm-up seconds, times)."""
    t0 = time.perf_counter()
    out = fn()
    sync(out)
    setup = time.perf_counter() - t0
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        out = fn()
        sync(out)
        times.append(time.perf_counter() - t0)
    return out, setup, times


def record_times(row, a, setup, times) -> None:
    med = statistics.median(times)
    row.update(setup_s=setup, times_s=times, min_s=min(times), median_s=med, pairs_per_s=row["n"] * row["m"] / med)
    if a.bench == "knn":
        row["qps_median"] = row["m"] / med


def dump_indices(path, idx, np) -> None:
    np.ascontiguousarray(idx[:DUMP_ROWS], dtype=np.int64).tofile(path)


def dump_vector(path, y, np) -> None:
    np.asarray(y, dtype=np.float64).reshape(-1)[:DUMP_ROWS].tofile(path)


class JsonStdout:
    """Keeps the real stdout for the one JSON line and sends everything else printed to stderr
    (KeOps, JAX and XLA print progress and warnings on stdout)."""

    def __enter__(self):
        sys.stdout.flush()
        self.fd = os.dup(1)
        os.dup2(2, 1)
        return self

    def emit(self, row: dict) -> None:
        row["max_rss_bytes"] = max_rss_bytes()
        sys.stdout.flush()
        os.write(self.fd, (json.dumps(row) + "\n").encode())

    def __exit__(self, *exc):
        sys.stdout.flush()
        os.dup2(self.fd, 1)
        os.close(self.fd)
        return False
