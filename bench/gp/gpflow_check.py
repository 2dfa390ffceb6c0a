#!/usr/bin/env python3
"""The SGPR bound and its gradient, memsafe against GPflow's autodiff, at the same parameters (f64).

    bench/gp/gpflow_check.py [--dataset kin40k] [--split 0] [--m 200] [--kernel matern32]
                             [--lengthscale 0.7] [--variance 1.3] [--noise 0.05] [--sgpr-train build/examples/sgpr_train]

memsafe side: `sgpr_train --dump-gradient` prints the bound and its gradient (σ_f², ARD ℓ, σ², Z) at
the initial point, and the initial inducing points Z (k-means++ seeding, examples/README.md).
GPflow side: the same UCI split standardised the same way (training split's mean and population
standard deviation), gpflow.models.SGPR with the same kernel, Z, noise variance and GPflow's
default jitter (1e-6, the same fixed jitter memsafe adds to Kuu); the gradient by
tf.GradientTape with respect to the unconstrained variables, divided by d(constrained)/d(unconstrained)
(softplus: the sigmoid) to get the gradient in the natural parameters memsafe reports.
Prints one JSON line: the bound's relative difference and the max-norm relative difference of each
gradient group. GPflow is installed in a venv (bench/.cache/venv-gpflow, git-ignored):
    python3 -m venv bench/.cache/venv-gpflow && bench/.cache/venv-gpflow/bin/pip install gpflow tensorflow-cpu
"""
import argparse
import gzip
import json
import os
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def load_split(data_dir, name, split, with_test=False):
    """The training split standardised by its own mean and population standard deviation; with_test:
    also the test inputs standardised the same way, the raw test targets and the target's mean and scale."""
    with gzip.open(os.path.join(data_dir, name, "data.csv.gz"), "rt") as f:
        data = np.loadtxt(f, delimiter=",", ndmin=2)
    with gzip.open(os.path.join(data_dir, name, "test_mask.csv.gz"), "rt") as f:
        mask = np.loadtxt(f, delimiter=",", ndmin=2)
    train = mask[:, split] == 0
    X, y = data[train, :-1], data[train, -1]
    xm, xs = X.mean(0), X.std(0)
    xs[xs == 0] = 1.0
    ym, ys = y.mean(), y.std()
    ys = ys if ys > 0 else 1.0
    if not with_test:
        return (X - xm) / xs, (y - ym) / ys
    return (X - xm) / xs, (y - ym) / ys, (data[~train, :-1] - xm) / xs, data[~train, -1], ym, ys


def start_args(ap, m, lengthscale, variance, noise):
    """The options that fix the starting point (data, split, m, kernel, initial hyperparameters), the
    threads and the sgpr_train program; the defaults of m and the hyperparameters are the caller's."""
    ap.add_argument("--data-dir", default=os.environ.get("MEMSAFE_DATA_DIR", os.path.join(ROOT, "..", "shared", "data")) + "/uci")
    ap.add_argument("--dataset", default="kin40k")
    ap.add_argument("--split", type=int, default=0)
    ap.add_argument("--m", type=int, default=m)
    ap.add_argument("--kernel", default="matern32", choices=["rbf", "matern12", "matern32", "matern52"])
    ap.add_argument("--lengthscale", type=float, default=lengthscale)
    ap.add_argument("--variance", type=float, default=variance)
    ap.add_argument("--noise", type=float, default=noise)
    ap.add_argument("--threads", type=int, default=2, help="TensorFlow intra/inter-op threads")
    ap.add_argument("--sgpr-train", default=os.path.join(ROOT, "build", "examples", "sgpr_train"))


def same_start(a, with_test=False):
    """memsafe's starting point and GPflow's SGPR built on it: `sgpr_train --dump-gradient` (its bound and
    gradient there, and the initial inducing points Z), the split (and its test rows with with_test), and
    gpflow.models.SGPR with a's kernel, initial σ_f², ℓ, σ², Z, in f64 on a.threads threads.
    Returns (memsafe's JSON, the model, its kernel, the split's arrays)."""
    cmd = [a.sgpr_train, "--data-dir", a.data_dir, "--dataset", a.dataset, "--split", str(a.split), "--m", str(a.m),
           "--kernel", a.kernel, "--lengthscale", repr(a.lengthscale), "--variance", repr(a.variance),
           "--noise", repr(a.noise), "--dump-gradient", "--budget", "64MiB"] + \
        (["--whitened"] if getattr(a, "whitened", False) else []) + \
        (["--gram-first"] if getattr(a, "gram_first", False) else []) + \
        (["--init-model", a.init_model] if getattr(a, "init_model", "") else [])
    ms = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1])
    if getattr(a, "init_model", ""):  # the saved model's hyperparameters and jitter, as sgpr_train read them
        a.variance, a.noise = ms["variance"], ms["noise"]
        a.lengthscale = np.asarray(ms["lengthscales"], float)
        a.jitter = ms["jitter"]
    arrays = load_split(a.data_dir, a.dataset, a.split, with_test=with_test)
    X, y = arrays[0], arrays[1]
    Z = np.asarray(ms["Z_init"], float).reshape(a.m, X.shape[1])

    import tensorflow as tf
    # a.threads busy threads in all: each op on a.threads, one op at a time (inter-op a.threads let
    # TensorFlow run up to a.threads² threads at once; memsafe runs on a.threads)
    tf.config.threading.set_intra_op_parallelism_threads(a.threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    import gpflow
    gpflow.config.set_default_float(np.float64)
    kern = {"rbf": gpflow.kernels.SquaredExponential, "matern12": gpflow.kernels.Matern12,
            "matern32": gpflow.kernels.Matern32, "matern52": gpflow.kernels.Matern52}[a.kernel]
    gpflow.config.set_default_jitter(getattr(a, "jitter", 1e-6))
    k = kern(variance=a.variance, lengthscales=np.broadcast_to(np.asarray(a.lengthscale, float), (X.shape[1],)).copy())
    model = gpflow.models.SGPR((X, y[:, None]), kernel=k, inducing_variable=Z.copy(), noise_variance=a.noise)
    return ms, model, k, arrays


def rel(a, b):
    a, b = np.asarray(a, float).ravel(), np.asarray(b, float).ravel()
    s = np.max(np.abs(b))
    return float(np.max(np.abs(a - b)) / (s if s > 0 else 1.0))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    start_args(ap, m=200, lengthscale=0.7, variance=1.3, noise=0.05)
    ap.add_argument("--whitened", action="store_true", help="force memsafe's whitened order of the sums")
    ap.add_argument("--gram-first", action="store_true",
                    help="force memsafe's Gram-first order (default: memsafe chooses from Kuu's conditioning)")
    ap.add_argument("--init-model", default="",
                    help="check at a model sgpr_train --save-model wrote (e.g. a trained one): its hyperparameters, "
                         "jitter and Z replace the initial values")
    ap.add_argument("--time", type=int, default=0, help="also time R GPflow elbo+gradient evaluations (wall and CPU seconds)")
    a = ap.parse_args()

    ms, model, k, (X, y) = same_start(a)
    n, d = X.shape
    import tensorflow as tf
    import gpflow
    params = [k.variance, k.lengthscales, model.likelihood.variance]
    Zp = model.inducing_variable.Z
    with tf.GradientTape() as tape:
        elbo = model.elbo()
    grads = tape.gradient(elbo, [p.unconstrained_variable for p in params] + [Zp.unconstrained_variable])
    # softplus (+ shift) transforms: d(constrained)/d(unconstrained) = sigmoid(unconstrained)
    nat = [g.numpy() / tf.math.sigmoid(p.unconstrained_variable).numpy() for g, p in zip(grads[:3], params)]
    gz = grads[3].numpy()
    out = {
        "dataset": a.dataset, "split": a.split, "n": n, "d": d, "m": a.m, "kernel": a.kernel, "whitened": a.whitened, "gram_first": a.gram_first,
        "memsafe_whitened": ms.get("init_whitened"), "kuu_condition": ms.get("init_kuu_condition"),
        "init_model": a.init_model, "gpflow_version": gpflow.__version__, "tensorflow_version": tf.__version__,
        "bound_memsafe": ms["init_bound"], "bound_gpflow": float(elbo.numpy()),
        "bound_rel_diff": abs(ms["init_bound"] - float(elbo.numpy())) / abs(float(elbo.numpy())),
        "grad_variance_rel_diff": rel(ms["grad_variance"], nat[0]),
        "grad_lengthscales_rel_diff": rel(ms["grad_lengthscales"], nat[1]),
        "grad_noise_rel_diff": rel(ms["grad_noise"], nat[2]),
        "grad_Z_rel_diff": rel(ms["grad_Z"], gz),
    }
    if a.time > 0:
        import time

        @tf.function
        def elbo_and_grad():
            with tf.GradientTape() as t:
                e = model.elbo()
            return e, t.gradient(e, model.trainable_variables)

        elbo_and_grad()  # trace once
        wall, cpu = [], []
        for _ in range(a.time):
            w0, c0 = time.perf_counter(), time.process_time()
            elbo_and_grad()
            wall.append(time.perf_counter() - w0)
            cpu.append(time.process_time() - c0)
        out.update({"gpflow_threads": a.threads, "gpflow_seconds_bound_grad_min": min(wall),
                    "gpflow_seconds_bound_grad_median": float(np.median(wall)),
                    "gpflow_cpu_seconds_bound_grad_median": float(np.median(cpu))})
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
