#!/usr/bin/env python3
"""GPflow's SGPR trained as sgpr_train trains memsafe's: the peer of bench/gp/sweep.sh (issue 14 item 5).

    bench/gp/gpflow_train.py --dataset kin40k --split 0 --m 500 --iters 100 [--kernel matern32]
                             [--lengthscale 1 --variance 1 --noise 0.1] [--threads 2] [--time-limit S]
                             [--sgpr-train build/examples/sgpr_train]

The same start: the UCI split standardised the same way (training split's mean and population standard
deviation), the same initial σ_f², ARD ℓ, σ² and the same initial inducing points — memsafe's k-means++
seeding, read from `sgpr_train --dump-gradient` (nothing trained there) — GPflow's default jitter
(1e-6, which memsafe adds too) and softplus transforms (memsafe's parameterisation), Z trained as
memsafe trains it. Then `gpflow.optimizers.Scipy` (scipy's L-BFGS-B) on the training loss for at most
--iters iterations, as sgpr_train runs liblbfgs for at most --iters: the same iteration budget, not
the same steps. --time-limit S stops it as sgpr_train's does: at the end of the first iteration that ends
S seconds or more after training started (a step callback raising StopIteration, which scipy takes as
"stop here" and GPflow answers by keeping that iterate); the row then says lbfgs_status "time_limit". Test RMSE and NLPD in the original units (as sgpr_train: predictive variance + σ²).

Prints one JSON line: impl "gpflow", the trained hyperparameters, bound, rmse, nlpd, iterations,
evaluations, seconds_train, seconds_per_evaluation, max_rss_bytes (the process's peak RSS: data,
TensorFlow and the n×m matrices it forms), or status "oom"/"error" with the message ("oom" also when
its resident set passes the memory available at the start less 1 GiB: bench/gp/rss_guard.py). GPflow lives in
a venv (bench/.cache/venv-gpflow, git-ignored):
    python3 -m venv bench/.cache/venv-gpflow && bench/.cache/venv-gpflow/bin/pip install gpflow tensorflow-cpu
"""
import argparse
import json
import os
import resource
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from gpflow_check import same_start, start_args  # noqa: E402  (the same data, start and model as the gradient check)
import rss_guard  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    start_args(ap, m=500, lengthscale=1.0, variance=1.0, noise=0.1)  # sgpr_train's defaults
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--time-limit", type=float, default=0,
                    help="stop at the end of the first iteration ending this many seconds after training started "
                         "(0: no limit), as sgpr_train --time-limit")
    ap.add_argument("--trace", action="store_true",
                    help="print the bound after every iteration on stderr (one more evaluation each, outside "
                         "the timing's evaluation count: for comparing paths, not for timing)")
    a = ap.parse_args()
    if not a.time_limit >= 0:
        ap.error("--time-limit must be a number of seconds >= 0")
    row = {"impl": "gpflow", "dataset": a.dataset, "split": a.split, "m": a.m, "kernel": a.kernel,
           "iters_max": a.iters, "threads": a.threads, "time_limit_s": a.time_limit}
    rss_guard.start(row)  # past the memory available at the start less 1 GiB: status "oom", exit 3
    try:
        _, model, k, (X, y, Xte, yte, ym, ys) = same_start(a, with_test=True)
        n, d = X.shape
        import tensorflow as tf
        import gpflow
        stopped = []

        def time_limit(step, variables, values):  # after each L-BFGS iteration (GPflow's step callback)
            if a.trace:  # the bound at this iterate: one more evaluation (not counted in evaluations)
                for var, val in zip(variables, values):
                    var.assign(val)
                sys.stderr.write(f"iter {step + 1:4d}  bound {-float(model.training_loss().numpy()):.5f}  "
                                 f"{time.perf_counter() - t0:.1f} s\n")
            if a.time_limit > 0 and time.perf_counter() - t0 >= a.time_limit:
                stopped.append(step + 1)
                raise StopIteration  # scipy stops and returns this iterate; GPflow assigns it to the model

        t0 = time.perf_counter()
        res = gpflow.optimizers.Scipy().minimize(model.training_loss, model.trainable_variables, method="L-BFGS-B",
                                                 options={"maxiter": a.iters}, compile=True,
                                                 step_callback=time_limit if (a.time_limit > 0 or a.trace) else None)
        seconds_train = time.perf_counter() - t0
        t1 = time.perf_counter()
        bound = float(model.elbo().numpy())
        mean, var = model.predict_f(Xte)
        mu = mean.numpy().ravel() * ys + ym
        v = (var.numpy().ravel() + float(model.likelihood.variance.numpy())) * ys * ys
        rmse = float(np.sqrt(np.mean((yte - mu) ** 2)))
        nlpd = float(np.mean(0.5 * np.log(2 * np.pi * v) + 0.5 * (yte - mu) ** 2 / v))
        row.update({
            "status": "ok", "n_train": n, "n_test": len(yte), "d": d,
            "variance": float(k.variance.numpy()), "lengthscales": [float(q) for q in k.lengthscales.numpy()],
            "noise": float(model.likelihood.variance.numpy()), "bound": bound, "bound_per_point": bound / n,
            "rmse": rmse, "nlpd": nlpd, "iterations": int(res.nit), "evaluations": int(res.nfev),
            "lbfgs_message": str(res.message), "seconds_train": seconds_train,
            "seconds_per_evaluation": seconds_train / max(int(res.nfev), 1),
            "seconds_final": time.perf_counter() - t1,
            "gpflow_version": gpflow.__version__, "tensorflow_version": tf.__version__,
            "max_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        })
        if stopped:
            row.update({"lbfgs_status": "time_limit", "final_loss": float(res.fun)})
    except Exception as e:  # noqa: BLE001 — one JSON line whatever happens
        text = f"{type(e).__name__}: {e}"
        row.update({"status": "oom" if ("ResourceExhausted" in text or "MemoryError" in text) else "error",
                    "message": text[-800:]})
    print(json.dumps(row))
    return 0 if row["status"] == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
