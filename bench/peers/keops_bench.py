#!/usr/bin/env python3
"""KeOps (pykeops, CPU backend) peer for the memsafe benchmarks.

Same command-line shape and the same one-JSON-line output as build/bench/memsafe_bench,
with the implementation fixed to "keops":

  python3 bench/peers/keops_bench.py knn --data random --n 100000 --m 10000 --d 3 --k 10 \
      --metric l2 --precision f32 --threads 2 --reps 3 --seed 42 --dump /tmp/keops.idx
  python3 bench/peers/keops_bench.py knn --data mnist --metric l1 --data-dir ../shared/data
  python3 bench/peers/keops_bench.py matvec --n 100000 --d 3 --precision f32 --lengthscale 1

kNN:    D_ij = ((q_i - x_j)**2).sum(-1) (l2), (q_i - x_j).abs().sum(-1) (l1) or 1 - <q^_i, x^_j>
        (cosine, on L2-normalised copies: the database's made before the timed calls, the
        queries' inside them); indices = D_ij.argKmin(k, dim=1).
matvec: K_ij = exp(-||x_i - x_j||^2 / (2 l^2)), y = K @ v (RBF, unit variance); with --cols C > 1,
        Y = K @ V for an n x C matrix V (K·M).
        With --grad 1: the gradient of <g, K(X, X')v> with respect to X (X' the same points as
        a j-variable), Genred("Grad(Exp(-SqDist(x,y)*s)*b, x, e)", Sum over j) with g from
        stream 2: KeOps' own symbolic derivative, as memsafe_bench matvec --grad 1 times it.

Data.  random: N(0,1) draws from numpy.random.default_rng, one stream per array
(SeedSequence([seed, 0]) for the database X, [seed, 1] for the queries Q or the vector v),
drawn in float64 and rounded to the precision.  That is the SAME DISTRIBUTION as
memsafe_bench's data but NOT THE SAME NUMBERS (memsafe_bench uses std::mt19937_64 and
libstdc++'s normal_distribution), so KeOps' answers on random data cannot be compared
index by index with memsafe's; on MNIST they can.  mnist: the 60000 training images are the
database and the 10000 test images the queries (the first --n / --m of them when given),
each image flattened to d = 784 and divided by 255, as examples/common/mnist.hpp does.

Compilation.  KeOps generates and compiles C++ with g++ on the first call of each formula.
Its compile flags start with $CXXFLAGS (keopscore/config/base_config.py: cpp_flags =
CXXFLAGS + " -shared -fPIC -O3 -std=c++11 ... -fopenmp -flto=auto"), read when keopscore is
imported; this script makes sure CXXFLAGS contains --cxxflags (default -march=native) before
that import and reports the flags KeOps will use in the "keops_cpp_flags" field.  The flags
are part of KeOps' cache key, so a module built without them is never reused.  The build
cache lives in $KEOPS_CACHE_FOLDER, default bench/.cache/keops (ignored by git).

Timing.  One untimed warm-up call (which compiles on a cold cache; its time is setup_s),
then --reps timed calls (time.perf_counter around the whole KeOps call, LazyTensor
construction and the output array included).  Threads: OMP_NUM_THREADS = --threads, set before KeOps is imported.

Output fields: see bench/README.md.  Exit status 0 when status is "ok", else 1 (the JSON
line is printed either way; a bad command line exits 2 through argparse).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import struct
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
DEFAULT_CACHE = os.path.join(REPO, "bench", ".cache", "keops")

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(HERE))  # bench/
import bench_common  # noqa: E402
from bench_common import cpu_count, cpu_model, keops_compatible_cxx, max_rss_bytes  # noqa: E402  (shared with the GPU peers)


def parse_bytes(text: str) -> int:
    """A byte count (bench_common.parse_bytes), or 0 for unlimited / inf / none."""
    if text.strip().lower().replace(" ", "") in ("unlimited", "inf", "none"):
        return 0
    return bench_common.parse_bytes(text)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="KeOps CPU peer: kNN (argKmin) and RBF kernel matvec, one JSON line.")
    sub = p.add_subparsers(dest="bench", required=True)

    def common(sp):
        sp.add_argument("--impl", default="keops", choices=["keops"], help="always keops (accepted for symmetry)")
        sp.add_argument("--n", type=int, default=None, help="database size / number of points")
        sp.add_argument("--d", type=int, default=3, help="dimension (random data)")
        sp.add_argument("--precision", default="f32", choices=["f32", "f64"])
        sp.add_argument("--threads", type=int, default=0, help="OpenMP threads (0 = all cores)")
        sp.add_argument("--reps", type=int, default=3, help="timed repetitions after one untimed warm-up")
        sp.add_argument("--seed", type=int, default=42)
        sp.add_argument("--budget", type=parse_bytes, default=None, help="ignored (KeOps has no budget)")
        sp.add_argument("--mem-limit", type=parse_bytes, default=None, help="ignored (the driver limits memory)")
        sp.add_argument("--warmup", type=int, default=1, help="ignored: there is always one untimed first call")
        sp.add_argument("--dump", default=None, help="write the first rows of the answer here (binary)")
        sp.add_argument("--cxxflags", default="-march=native",
                        help="flags that must be in CXXFLAGS when KeOps compiles (default -march=native)")
        sp.add_argument("--cache-dir", default=None,
                        help="KeOps build cache (default $KEOPS_CACHE_FOLDER, else bench/.cache/keops)")

    knn = sub.add_parser("knn", help="k nearest neighbours with LazyTensor.argKmin")
    common(knn)
    knn.add_argument("--data", default="random", choices=["random", "mnist"])
    knn.add_argument("--m", type=int, default=None, help="number of queries")
    knn.add_argument("--k", type=int, default=10)
    knn.add_argument("--metric", default="l2", choices=["l2", "l1", "cosine"])
    knn.add_argument("--data-dir", default=None,
                     help="folder holding the MNIST IDX .gz files, or the shared data folder containing mnist/")

    mv = sub.add_parser("matvec", help="RBF kernel matrix times a vector, K(X, X) @ v")
    common(mv)
    mv.add_argument("--lengthscale", type=float, default=1.0)
    mv.add_argument("--cols", type=int, default=1, help="right-hand columns: 1 for K @ v, more for K @ V (n x C)")
    mv.add_argument("--grad", type=int, default=0, choices=[0, 1],
                    help="1: time the gradient of <g, K v> with respect to the row points instead")
    return p


# ---- data --------------------------------------------------------------------------------------

def mnist_dir(data_dir: str | None) -> str:
    candidates = []
    if data_dir:
        candidates += [data_dir, os.path.join(data_dir, "mnist")]
    candidates.append(os.path.join(bench_common.default_data_dir(REPO), "mnist"))
    for c in candidates:
        if os.path.isfile(os.path.join(c, "train-images-idx3-ubyte.gz")):
            return c
    raise FileNotFoundError("MNIST IDX files not found in " + ", ".join(candidates) +
                            " (pass --data-dir pointing at the folder holding train-images-idx3-ubyte.gz,"
                            " or run bash scripts/fetch_data.sh --only mnist)")


def load_idx_images(path: str, limit: int | None, dtype):
    import numpy as np
    with gzip.open(path, "rb") as f:
        magic, count, rows, cols = struct.unpack(">IIII", f.read(16))
        if magic != 2051:
            raise ValueError(f"{path}: bad magic {magic}, expected 2051 (IDX images)")
        n = count if limit is None else min(limit, count)
        raw = f.read(n * rows * cols)
        if len(raw) != n * rows * cols:
            raise ValueError(f"{path}: truncated ({len(raw)} of {n * rows * cols} pixel bytes)")
    pixels = np.frombuffer(raw, dtype=np.uint8).reshape(n, rows * cols)
    # pixel / 255 computed in the target precision, like static_cast<T>(byte) / T(255)
    return pixels.astype(dtype) / dtype(255)


def normal(seed: int, stream: int, shape, dtype):
    import numpy as np
    rng = np.random.default_rng(np.random.SeedSequence([seed, stream]))
    return rng.standard_normal(shape).astype(dtype)


# ---- benchmarks --------------------------------------------------------------------------------

def built_modules(folder: str) -> set:
    try:
        return {f for f in os.listdir(folder) if f.endswith(".so")}
    except OSError:
        return set()


def time_calls(fn, reps: int, row):
    folder = row.get("keops_build_folder") or ""
    before = built_modules(folder)
    t0 = time.perf_counter()
    out = fn()  # warm-up: compiles on a cold cache
    setup = time.perf_counter() - t0
    row["compiled"] = bool(built_modules(folder) - before)  # True: setup_s includes g++
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return out, setup, times


def run_knn(a, row, np, LazyTensor):
    dt = np.float32 if a.precision == "f32" else np.float64
    t0 = time.perf_counter()
    if a.data == "random":
        if a.n is None or a.m is None:
            raise ValueError("--data random needs --n and --m")
        X = normal(a.seed, 0, (a.n, a.d), dt)
        Q = normal(a.seed, 1, (a.m, a.d), dt)
    else:
        d = mnist_dir(a.data_dir)
        X = load_idx_images(os.path.join(d, "train-images-idx3-ubyte.gz"), a.n, dt)
        Q = load_idx_images(os.path.join(d, "t10k-images-idx3-ubyte.gz"), a.m, dt)
    row["data_s"] = time.perf_counter() - t0
    n, d = X.shape
    m = Q.shape[0]
    k = a.k
    row.update(n=n, m=m, d=d, input_bytes=int(X.nbytes + Q.nbytes))
    if not 0 < k <= n:
        raise ValueError(f"--k {k} must be in [1, n = {n}]")

    def normalised(A):
        norms = np.sqrt((A.astype(np.float64) ** 2).sum(1)).astype(A.dtype)
        norms[norms == 0] = 1  # a zero vector stays zero: similarity 0, distance 1
        return A / norms[:, None]

    # cosine: the database is normalised once, outside the timed calls (like building an index),
    # the queries inside them (as memsafe_bench's FAISS peer does)
    Xs = normalised(X) if a.metric == "cosine" else X

    def search():
        Qs = normalised(Q) if a.metric == "cosine" else Q
        return bench_common.keops_argkmin(LazyTensor, Qs, Xs, a.metric, k)

    idx, setup, times = time_calls(search, a.reps, row)
    med = statistics.median(times)
    row.update(setup_s=setup, times_s=times, min_s=min(times), median_s=med,
               qps_median=m / med, pairs_per_s=n * m / med)
    if a.dump:
        np.ascontiguousarray(idx[: min(m, 2000)], dtype=np.int64).tofile(a.dump)


def run_matvec(a, row, np, LazyTensor):
    dt = np.float32 if a.precision == "f32" else np.float64
    if a.n is None:
        raise ValueError("matvec needs --n")
    t0 = time.perf_counter()
    X = normal(a.seed, 0, (a.n, a.d), dt)
    if not 1 <= a.cols <= 4096:
        raise ValueError("--cols must be between 1 and 4096")
    v = normal(a.seed, 1, (a.n, a.cols), dt)
    row["data_s"] = time.perf_counter() - t0
    n = a.n
    row.update(n=n, m=n, d=a.d, input_bytes=int(X.nbytes + v.nbytes), lengthscale=a.lengthscale, cols=a.cols)
    scale = dt(1.0 / (2.0 * a.lengthscale * a.lengthscale))

    def matvec():
        xi = LazyTensor(X[:, None, :])
        xj = LazyTensor(X[None, :, :])
        K = (-((xi - xj) ** 2).sum(-1) * scale).exp()
        return K @ v

    fn = matvec
    row["grad"] = bool(a.grad)
    if a.grad:
        if a.cols != 1:
            raise ValueError("--grad 1 takes --cols 1")
        from pykeops.numpy import Genred
        g = normal(a.seed, 2, (a.n, 1), dt)
        row["input_bytes"] += int(g.nbytes)
        routine = Genred("Grad(Exp(-SqDist(x,y)*s)*b, x, e)",
                         [f"x = Vi({a.d})", f"y = Vj({a.d})", "b = Vj(1)", "e = Vi(1)", "s = Pm(1)"],
                         reduction_op="Sum", axis=1)
        svec = np.array([scale], dtype=dt)

        def fn():
            return routine(X, X, v, g, svec, backend="CPU")

    y, setup, times = time_calls(fn, a.reps, row)
    med = statistics.median(times)
    row.update(setup_s=setup, times_s=times, min_s=min(times), median_s=med, pairs_per_s=n * n / med)
    if a.dump:
        rows = min(n, 2000) * (a.d if a.grad else 1)
        np.asarray(y, dtype=np.float64).reshape(-1)[:rows].tofile(a.dump)  # rows of Y (or the gradient), row-major


def main(argv=None) -> int:
    a = build_parser().parse_args(argv)

    # Everything below must happen before numpy / pykeops are imported.
    threads = a.threads if a.threads > 0 else cpu_count()
    os.environ["OMP_NUM_THREADS"] = str(threads)
    flags = os.environ.get("CXXFLAGS", "")
    for f in a.cxxflags.split():
        if f not in flags.split():
            flags = (flags + " " + f).strip()
    os.environ["CXXFLAGS"] = flags
    cache = a.cache_dir or os.environ.get("KEOPS_CACHE_FOLDER") or DEFAULT_CACHE
    os.makedirs(cache, exist_ok=True)
    os.environ["KEOPS_CACHE_FOLDER"] = cache
    cxx, cxx_choice = keops_compatible_cxx()  # its helpers are loaded into this process

    # KeOps prints its progress messages on stdout: send everything to stderr and keep the
    # real stdout for the one JSON line.
    sys.stdout.flush()
    json_fd = os.dup(1)
    os.dup2(2, 1)

    row = {
        "bench": a.bench, "impl": "keops", "data": getattr(a, "data", "random"),
        "metric": getattr(a, "metric", "rbf"), "n": a.n, "m": getattr(a, "m", a.n), "d": a.d,
        "k": getattr(a, "k", None), "precision": a.precision, "threads": threads, "budget_bytes": None,
        "reps": a.reps, "min_s": None, "median_s": None, "times_s": [], "qps_median": None,
        "pairs_per_s": None, "peak_temp_bytes": None, "min_budget_bytes": None, "max_rss_bytes": None,
        "input_bytes": None, "setup_s": None, "status": "error", "message": "", "cpu": cpu_model(),
        "cores": cpu_count(), "tile_rows": None, "tile_cols": None, "seed": a.seed,
        "data_generator": "numpy default_rng N(0,1): same distribution as memsafe_bench, different numbers",
        "cxxflags": flags, "keops_cache": cache, "keops_cxx": cxx, "keops_cxx_choice": cxx_choice,
    }
    status = "error"
    try:
        try:
            import numpy as np
            import pykeops
            from pykeops.numpy import LazyTensor
            import keopscore
        except Exception as e:  # noqa: BLE001 - any import problem means the peer is unavailable
            row.update(status="unavailable", message=f"pykeops not importable: {type(e).__name__}: {e}")
        else:
            cfg = pykeops.config.pykeops_base
            row.update(keops_version=getattr(pykeops, "__version__", None) or keopscore.__version__,
                       keops_compiler=cfg.get_cxx_compiler(), keops_cpp_flags=cfg.get_cpp_flags().strip(),
                       keops_build_folder=cfg.get_build_folder(),
                       keops_gpu=bool(getattr(pykeops.config, "gpu_available", False)))
            missing = [f for f in a.cxxflags.split() if f not in cfg.get_cpp_flags().split()]
            if missing:
                raise RuntimeError(f"KeOps compile flags lack {missing}: {cfg.get_cpp_flags()}")
            (run_knn if a.bench == "knn" else run_matvec)(a, row, np, LazyTensor)
            row["status"] = "ok"
    except MemoryError as e:
        row.update(status="oom", message=f"MemoryError: {e}")
    except Exception as e:  # noqa: BLE001 - reported in the JSON line
        row.update(status="error", message=f"{type(e).__name__}: {e}")
    status = row["status"]
    row["max_rss_bytes"] = max_rss_bytes()
    sys.stdout.flush()
    os.write(json_fd, (json.dumps(row) + "\n").encode())
    os.close(json_fd)
    return 0 if status == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
