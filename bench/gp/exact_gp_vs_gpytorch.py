#!/usr/bin/env python3
"""The exact GP posterior mean by preconditioned CG: memsafe (examples/exact_gp) against GPyTorch's exact GP.

    python3 bench/gp/exact_gp_vs_gpytorch.py [--datasets kin40k,protein] [--split 0] [--threads 2]
        [--tol 0.01] [--max-iters 1000] [--rank 100] [--budget 64MiB] [--dtype float64]
        [--impl memsafe,gpytorch] [--bin build/examples/exact_gp] [--python bench/.cache/venv-gpytorch/bin/python]

Both sides get the same UCI split, standardised the same way (the training split's mean and population
standard deviation, as examples/common/uci.hpp does), the same fixed hyperparameters (HYPERS below, or
--hypers FILE.json), a zero prior mean, the same CG tolerance (relative residual), the same maximum
number of iterations and the same pivoted-Cholesky preconditioner rank, the same number of threads, and
each runs in its own process, back to back. Measured: the time from the data in memory to the test
predictive means (memsafe: preconditioner + CG + K*·α; GPyTorch: `model(X_test).mean` in eval mode,
which builds the mean cache by the same preconditioned CG), test RMSE in the target's units, CG
iterations, peak RSS (getrusage) and, for GPyTorch, the peak RSS above the RSS once the data are
loaded. GPyTorch settings: max_cholesky_size(0) (so it really uses CG), eval_cg_tolerance = cg_tolerance
= --tol, max_cg_iterations = --max-iters, max_preconditioner_size = --rank, min_preconditioning_size(0),
fast_pred_var(False), skip_posterior_variances(True) (means only: without it GPyTorch solves one CG
system per test point for the variances). GPyTorch's CG differs in two ways it does not let us change:
it runs at least 10 iterations, and it stops when the MEAN residual over the right-hand sides is below
the tolerance (here there is one). GPyTorch evaluates the n×n kernel matrix densely (8·n² bytes in
float64, and about four such arrays at once while MaternKernel.forward runs); when that does not fit in the memory available (MemAvailable − 2 GiB), the run is recorded
with status "skipped_memory" instead of risking the machine's other users, and its address space is
capped at that amount so that it fails with "oom" rather than swap or the OOM killer.

Rows (one JSON line per implementation and data set) are appended to bench/results/exact_gp.jsonl.
GPyTorch lives in a git-ignored venv:
    python3 -m venv bench/.cache/venv-gpytorch
    bench/.cache/venv-gpytorch/bin/pip install torch --index-url https://download.pytorch.org/whl/cpu
    bench/.cache/venv-gpytorch/bin/pip install gpytorch numpy
"""
import argparse
import datetime
import gzip
import json
import os
import resource
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from rss_guard import available_bytes  # noqa: E402  (MemAvailable, shared with the training peers)
from bench_common import cpu_model  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

# Fixed hyperparameters (standardised inputs and target), Matérn 3/2 with ARD lengthscales.
#  kin40k: sgpr_train --dataset kin40k --split 0 --m 500 --iters 50 --kernel matern32 (64 MiB, 2 threads),
#          the row of bench/results/gp_sgpr_measured.jsonl with iterations = 50 (test RMSE 0.169 for SGPR).
#  protein: sgpr_train --dataset protein --split 0 --m 200 --iters 30 --kernel matern32 --budget 64MiB
#          --threads 2 (run for this benchmark; its JSON line is in bench/results/exact_gp_hypers.log).
HYPERS = {
    "kin40k": {"kernel": "matern32", "variance": 3.965878553145151,
               "lengthscales": [16.791211574615765, 15.881865255247506, 8.401258917329613, 9.69742057587567,
                                9.213604698762962, 7.441695651360923, 7.4229321264545085, 10.23303379767509],
               "noise": 0.04392161067739848, "source": "sgpr_train m=500, 50 L-BFGS iterations"},
    "protein": {"kernel": "matern32", "variance": 0.2693284519649963,
                "lengthscales": [1.505110545757874, 3.3845138913732815, 3.597292875563932, 0.8177717221560054, 1.9520563732412815, 1.1545935944080628, 1.3812195466258215, 1.405169873824793, 2.398269248253682],
                "noise": 0.4661606445794199, "source": "sgpr_train m=200, 30 L-BFGS iterations"},
}


def git_rev():
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except Exception:
        return None


def load_split(data_dir, name, split, max_train=0, max_test=0):
    import numpy as np
    with gzip.open(os.path.join(data_dir, name, "data.csv.gz"), "rt") as f:
        data = np.loadtxt(f, delimiter=",", ndmin=2)
    with gzip.open(os.path.join(data_dir, name, "test_mask.csv.gz"), "rt") as f:
        mask = np.loadtxt(f, delimiter=",", ndmin=2)
    test = mask[:, split] != 0
    X, y, Xs, ys = data[~test, :-1], data[~test, -1], data[test, :-1], data[test, -1]
    xm, xs = X.mean(0), X.std(0)
    xs[xs == 0] = 1.0
    ym, ysd = y.mean(), y.std()
    ysd = ysd if ysd > 0 else 1.0
    X, y, Xs, ys = (X - xm) / xs, (y - ym) / ysd, (Xs - xm) / xs, (ys - ym) / ysd
    if max_train:
        X, y = X[:max_train], y[:max_train]
    if max_test:
        Xs, ys = Xs[:max_test], ys[:max_test]
    return X, y, Xs, ys, ym, ysd


# ---- the GPyTorch peer (runs in the venv's python: this file with --peer) -----------------------

def peer(a):
    import numpy as np
    import torch
    torch.set_num_threads(a.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    import gpytorch
    import linear_operator
    h = json.loads(a.hyper)
    dtype = {"float64": torch.float64, "float32": torch.float32}[a.dtype]
    X, y, Xs, ys, ym, ysd = load_split(a.data_dir, a.dataset, a.split, a.max_train, a.max_test)
    n, d = X.shape
    X, y, Xs = (torch.tensor(v, dtype=dtype) for v in (X, y, Xs))
    rss_inputs = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    if a.mem_limit:
        resource.setrlimit(resource.RLIMIT_AS, (a.mem_limit, a.mem_limit))

    # Count kernel products inside linear_cg (matmul closure calls): iterations = calls − 1 (the
    # initial residual takes one).
    calls = {"n": 0, "cg": 0, "seconds": 0.0}
    import linear_operator.utils.linear_cg  # noqa: F401  (the package attribute of that name is the function)
    orig = sys.modules["linear_operator.utils.linear_cg"].linear_cg

    def counting_cg(matmul_closure, rhs, *args, **kw):
        calls["cg"] += 1
        inner = matmul_closure if callable(matmul_closure) else matmul_closure.matmul

        def wrapped(v):
            calls["n"] += 1
            return inner(v)
        t = time.perf_counter()
        try:
            return orig(wrapped, rhs, *args, **kw)
        finally:
            calls["seconds"] += time.perf_counter() - t
    patched = []
    for mod in list(sys.modules.values()):
        if mod is None or not getattr(mod, "__name__", "").startswith(("linear_operator", "gpytorch")):
            continue
        if getattr(mod, "linear_cg", None) is orig:
            setattr(mod, "linear_cg", counting_cg)
            patched.append(mod.__name__)

    nu = {"matern12": 0.5, "matern32": 1.5, "matern52": 2.5}
    if h["kernel"] == "rbf":
        base = gpytorch.kernels.RBFKernel(ard_num_dims=d)
    else:
        base = gpytorch.kernels.MaternKernel(nu=nu[h["kernel"]], ard_num_dims=d)
    kern = gpytorch.kernels.ScaleKernel(base)
    lik = gpytorch.likelihoods.GaussianLikelihood()

    class Model(gpytorch.models.ExactGP):
        def __init__(self):
            super().__init__(X, y, lik)
            self.mean_module = gpytorch.means.ZeroMean()
            self.covar_module = kern

        def forward(self, x):
            return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))

    model = Model().to(dtype)
    base.lengthscale = torch.tensor(h["lengthscales"], dtype=dtype).reshape(1, d)
    kern.outputscale = torch.tensor(h["variance"], dtype=dtype)
    lik.noise = torch.tensor([h["noise"]], dtype=dtype)
    model.eval()
    lik.eval()
    row = {"torch_version": torch.__version__, "gpytorch_version": gpytorch.__version__,
           "linear_operator_version": getattr(linear_operator, "__version__", None), "dtype": a.dtype,
           "rss_inputs_bytes": rss_inputs, "mem_limit_bytes": a.mem_limit, "n": n, "d": d, "n_test": len(ys),
           "cg_patched_in": patched}
    t0 = time.perf_counter()
    c0 = time.process_time()
    try:
        with torch.no_grad(), gpytorch.settings.max_cholesky_size(0), \
                gpytorch.settings.cg_tolerance(a.tol), gpytorch.settings.eval_cg_tolerance(a.tol), \
                gpytorch.settings.max_cg_iterations(a.max_iters), \
                gpytorch.settings.max_preconditioner_size(a.rank), \
                gpytorch.settings.min_preconditioning_size(0), \
                gpytorch.settings.fast_pred_var(False), gpytorch.settings.skip_posterior_variances(True), \
                gpytorch.settings.fast_computations(covar_root_decomposition=True, log_prob=True, solves=True):
            mean = model(Xs).mean
        secs = time.perf_counter() - t0
        mean = mean.double().numpy()
        rmse = float(np.sqrt(np.mean((mean * ysd - ys * ysd) ** 2)))
        row.update(status="ok", seconds=secs, cpu_seconds=time.process_time() - c0, rmse=rmse,
                   matvecs=calls["n"], cg_calls=calls["cg"], seconds_cg=calls["seconds"],
                   iterations=(calls["n"] - calls["cg"]) if calls["cg"] else None)
    except (MemoryError, RuntimeError) as e:
        msg = str(e)
        row.update(status="oom" if ("memory" in msg.lower() or isinstance(e, MemoryError)) else "error",
                   error=msg[:300], seconds=time.perf_counter() - t0)
    row["max_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps(row))


# ---- the driver ---------------------------------------------------------------------------------

def run_json(cmd, timeout):
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"status": "timeout", "seconds_wall_process": time.perf_counter() - t0}
    lines = [ln for ln in p.stdout.strip().splitlines() if ln.startswith("{")]
    if not lines:
        return {"status": "error", "error": (p.stderr or p.stdout)[-400:], "returncode": p.returncode}
    r = json.loads(lines[-1])
    r.setdefault("status", "ok" if "error" not in r else "error")
    if p.returncode != 0 and r["status"] == "ok":
        r["returncode"] = p.returncode
    sys.stderr.write(p.stderr[-2000:])
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", default=os.environ.get("MEMSAFE_DATA_DIR", os.path.join(ROOT, "..", "shared", "data")) + "/uci")
    ap.add_argument("--datasets", default="kin40k,protein")
    ap.add_argument("--dataset", default="kin40k", help=argparse.SUPPRESS)
    ap.add_argument("--split", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tol", type=float, default=0.01)
    ap.add_argument("--max-iters", type=int, default=1000)
    ap.add_argument("--rank", type=int, default=100)
    ap.add_argument("--budget", default="64MiB")
    ap.add_argument("--dtype", default="float64", choices=["float64", "float32"], help="GPyTorch's dtype")
    ap.add_argument("--impl", default="memsafe,gpytorch")
    ap.add_argument("--max-train", type=int, default=0)
    ap.add_argument("--max-test", type=int, default=0)
    ap.add_argument("--hypers", default="", help="JSON file {dataset: {kernel, variance, lengthscales, noise}}")
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "examples", "exact_gp"))
    ap.add_argument("--python", default=os.path.join(ROOT, "bench", ".cache", "venv-gpytorch", "bin", "python"))
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "exact_gp.jsonl"))
    ap.add_argument("--timeout", type=int, default=3600)
    ap.add_argument("--peer", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--hyper", default="", help=argparse.SUPPRESS)
    ap.add_argument("--mem-limit", type=int, default=0, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.peer:
        return peer(a)

    hypers = dict(HYPERS)
    if a.hypers:
        with open(a.hypers) as f:
            hypers.update(json.load(f))
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    rev = git_rev()
    impls = a.impl.split(",")

    def emit(row):
        row.update(suite="exact_gp", bench="exact_gp", timestamp=stamp, git_rev=rev, split=a.split, threads=a.threads,
                   tolerance=a.tol, max_iterations=a.max_iters, rank=a.rank, host_cpu=cpu_model(),
                   host_cores=os.cpu_count(), load_average=os.getloadavg()[0])
        with open(a.out, "a") as f:
            f.write(json.dumps(row) + "\n")
        print(json.dumps(row), flush=True)

    for ds in a.datasets.split(","):
        if ds not in hypers:
            print(f"exact_gp_vs_gpytorch: no hyperparameters for {ds} (give --hypers)", file=sys.stderr)
            continue
        h = hypers[ds]
        common = {"dataset": ds, "kernel": h["kernel"], "variance": h["variance"], "lengthscales": h["lengthscales"],
                  "noise": h["noise"], "hypers_source": h.get("source")}
        if "memsafe" in impls:
            cmd = [a.bin, "--data-dir", a.data_dir, "--dataset", ds, "--split", str(a.split), "--kernel", h["kernel"],
                   "--variance", repr(h["variance"]), "--lengthscales", ",".join(repr(v) for v in h["lengthscales"]),
                   "--noise", repr(h["noise"]), "--tol", repr(a.tol), "--max-iters", str(a.max_iters),
                   "--rank", str(a.rank), "--budget", a.budget, "--threads", str(a.threads),
                   "--max-train", str(a.max_train), "--max-test", str(a.max_test)]
            r = run_json(cmd, a.timeout)
            row = {"impl": "memsafe", **common}
            for k in ("status", "error", "n", "n_test", "d", "iterations", "converged", "residual", "true_residual",
                      "rmse", "rank_built", "seconds_preconditioner", "seconds_cg", "seconds_per_iteration",
                      "seconds_mean", "cpu_seconds", "matvecs", "peak_temp_bytes", "budget_bytes", "minimum_bytes", "max_rss_bytes",
                      "isa", "input_bytes", "cache_rows", "cache_bytes", "cache_fraction", "seconds_cache"):
                if k in r:
                    row[k] = r[k]
            if r.get("status") == "ok":
                # preconditioner + CG + K*·α: the extra product of the true-residual check is left out
                row["seconds"] = r["seconds_preconditioner"] + r["seconds_cg"] + r["seconds_mean"]
            emit(row)
        if "gpytorch" in impls:
            n_est = {"kin40k": 36000, "protein": 41157}.get(ds, 0) if not a.max_train else a.max_train
            esize = 8 if a.dtype == "float64" else 4
            # the kernel matrix and the n×n temporaries of its evaluation (distance, exp, polynomial: 4 for
            # Matérn, as gpytorch.kernels.MaternKernel.forward computes it) + 2 GiB for the rest
            need = int(4 * n_est * n_est * esize) + (2 << 30)
            avail = available_bytes() or 0
            limit = max(0, avail - (2 << 30))
            row = {"impl": "gpytorch", **common, "dtype": a.dtype, "mem_available_bytes": avail,
                   "mem_needed_estimate_bytes": need}
            if need > limit:
                row.update(status="skipped_memory", n_estimate=n_est,
                           error=f"the dense {n_est}x{n_est} kernel matrix GPyTorch forms needs about {need >> 20} MiB; "
                                 f"{limit >> 20} MiB are available to it on this shared machine")
                emit(row)
                continue
            cmd = [a.python, os.path.abspath(__file__), "--peer", "--data-dir", a.data_dir, "--dataset", ds,
                   "--split", str(a.split), "--threads", str(a.threads), "--tol", repr(a.tol),
                   "--max-iters", str(a.max_iters), "--rank", str(a.rank), "--dtype", a.dtype,
                   "--max-train", str(a.max_train), "--max-test", str(a.max_test),
                   "--hyper", json.dumps(h), "--mem-limit", str(limit)]
            env = dict(os.environ, OMP_NUM_THREADS=str(a.threads), MKL_NUM_THREADS=str(a.threads))
            t0 = time.perf_counter()
            try:
                p = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout, env=env)
                lines = [ln for ln in p.stdout.strip().splitlines() if ln.startswith("{")]
                r = json.loads(lines[-1]) if lines else {"status": "error", "error": (p.stderr or "")[-400:]}
            except subprocess.TimeoutExpired:
                r = {"status": "timeout", "seconds": time.perf_counter() - t0}
            row.update(r)
            emit(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
