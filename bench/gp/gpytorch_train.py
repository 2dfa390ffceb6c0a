#!/usr/bin/env python3
"""GPyTorch's SGPR trained as sgpr_train trains memsafe's: the second peer of bench/gp/sweep.sh (issue 14 item 5).

    bench/gp/gpytorch_train.py --dataset kin40k --split 0 --m 500 --iters 100 [--kernel matern32]
                               [--lengthscale 1 --variance 1 --noise 0.1] [--threads 2] [--jitter 1e-6]
                               [--sgpr-train build/examples/sgpr_train]

The same start as memsafe and bench/gp/gpflow_train.py: the UCI split standardised the same way (training
split's mean and population standard deviation), the same initial σ_f², ARD ℓ, σ² and the same initial
inducing points Z — memsafe's k-means++ seeding, read from `sgpr_train --dump-gradient` (nothing trained
there; the same command line as gpflow_check.same_start) — in float64 on --threads torch threads.
The model: gpytorch.models.ExactGP, ZeroMean, InducingPointKernel(ScaleKernel(RBF or Matérn ν = 1/2, 3/2,
5/2 with ARD)), GaussianLikelihood; the loss is −ExactMarginalLogLikelihood, which GPyTorch divides by n:
with InducingPointKernel's added loss term −tr(Kxx − Qxx)/(2σ²) it is −(Titsias' collapsed bound)/n,
the f that sgpr_train hands liblbfgs. σ_f², ℓ and Z trained as memsafe trains them, through GPyTorch's
default softplus constraints (memsafe's parameterisation), and σ² through GaussianLikelihood's default
noise constraint GreaterThan(1e-4), kept: σ² = softplus(t) + 1e-4, where memsafe has softplus(t) + 1e-6,
so GPyTorch cannot go below σ² = 1e-4 (memsafe: 1e-6) and its unconstrained noise coordinate differs
slightly (same σ², not the same t).

Jitter: GPyTorch's InducingPointKernel adds none to Kuu. It factors Kuu with
linear_operator's psd_safe_cholesky, which adds jitter only when the plain Cholesky fails: 1e-8 in
float64 (settings.cholesky_jitter), then 1e-7, 1e-6 (cholesky_max_tries = 3), with a NumericalWarning,
and raises NotPSDError after that. memsafe and GPflow always add 1e-6, so by default (--jitter 1e-6)
this script adds the same fixed 1e-6·I to Kuu (an InducingPointKernel subclass that overrides only
_inducing_mat): the same model. --jitter 0 is GPyTorch as shipped. Measured at the start (elevators
split 0, Matérn 3/2): with 1e-6 the bound agrees with memsafe's to 4e-14 (relative; m = 50, 100 and 500);
with GPyTorch's own (no) jitter it differs by 2e-8 / 4e-8 / 9e-8 at m = 50 / 100 / 500 (concrete m = 50:
2.5e-7) — the jitter, nothing else. RBF and Matérn 5/2 agree to 4e-14 too; Matérn 1/2 to 9e-10, because
GPyTorch forms distances from ‖x‖² + ‖z‖² − 2x·z: near r = 0 the rounding (~1e-16 in r²) becomes ~1e-8 in
r, which exp(−r) passes on (Kuu's diagonal off by up to 2e-7), where the smoother kernels see it squared.
Each row records the relative difference at its own start (start_bound_rel_diff), and the test RMSE and
NLPD at the start against sgpr_train's (start_rmse_rel_diff, start_nlpd_rel_diff: 1e-15 to 1e-12 in the
checks above): the prediction path, checked.

Exact linear algebra: the training covariance is a LowRankRootAddedDiagLinearOperator, whose
inv_quad_logdet and solves are Woodbury identities with a Cholesky of the m×m capacitance matrix — no
CG, no Lanczos, whatever the settings — and the predictive caches are Cholesky-based too. Settings:
fast_computations(covar_root_decomposition=False, log_prob=True, solves=False) and max_cholesky_size(2^62)
so that no other path uses CG/Lanczos. log_prob stays True on purpose: with log_prob=False GPyTorch's
MultivariateNormal.log_prob falls back to torch's, which forms the DENSE n×n covariance and its
Cholesky (the same number, checked on concrete, but n² memory and n³ time: not SGPR). Predictions: SGPR's
(Titsias') predictive, as memsafe's and GPflow's — mean Q*x(Qxx + σ²I)⁻¹y, variance K** − Q** + K*u Σ Ku* —
with fast_pred_var(False), skip_posterior_variances(False), in two passes (predict()): GPyTorch's default
sgpr_diagonal_correction(True) adds diag(Kxx − Qxx) to the TRAINING covariance in eval mode (a FITC-like
predictive: at the start of elevators m = 50 its test mean differs by up to 2.6 standardised units), so
the prediction caches are built with it off; and GPyTorch 1.15's ExactGP evaluates the test×test
covariance before SGPRPredictionStrategy can swap Q** for the base kernel's K**, so the test pass runs
with it on, which puts K** on the diagonal.

Optimiser: torch.optim.LBFGS(lr=1, max_iter=--iters, history_size=10 (sgpr_train's --lbfgs-memory
default), line_search_fn="strong_wolfe", max_eval=40·iters+1 (liblbfgs's max_linesearch 40 per iteration, as one
budget), tolerance_grad=1e-10 (max |g| of the per-point loss), tolerance_change=1e-14), one .step(closure):
the same iteration budget as sgpr_train's liblbfgs (More-Thuente line search, epsilon 1e-8), not the same
steps. evaluations = closure calls, iterations = the optimizer's n_iter. Test RMSE and NLPD in the
original units (as sgpr_train: predictive variance of f + σ², times the target's scale²).

Prints one JSON line: impl "gpytorch", the trained hyperparameters, bound, rmse, nlpd, iterations,
evaluations, seconds_train, seconds_per_evaluation, start_bound_rel_diff (|GPyTorch's bound − memsafe's|
/ |memsafe's| at the start), max_rss_bytes (the process's peak RSS: data, torch and the n×m matrices and
their autograd graph), or status "oom"/"error" with the message ("oom" also when its resident set passes
the memory available at the start less 1 GiB: bench/gp/rss_guard.py). GPyTorch lives in a venv
(bench/.cache/venv-gpytorch, git-ignored):
    python3 -m venv bench/.cache/venv-gpytorch
    bench/.cache/venv-gpytorch/bin/pip install torch --index-url https://download.pytorch.org/whl/cpu
    bench/.cache/venv-gpytorch/bin/pip install gpytorch numpy
"""
import argparse
import contextlib
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from gpflow_check import load_split, start_args  # noqa: E402  (no TensorFlow/GPflow import at module level)
import rss_guard  # noqa: E402


def memsafe_start(a, with_test=False):
    """memsafe's starting point: `sgpr_train --dump-gradient` (the command line gpflow_check.same_start
    runs: its bound at the initial point and the initial inducing points Z) and the split (and its test
    rows with with_test). Returns (memsafe's JSON, Z as an m×d array, the split's arrays)."""
    cmd = [a.sgpr_train, "--data-dir", a.data_dir, "--dataset", a.dataset, "--split", str(a.split), "--m", str(a.m),
           "--kernel", a.kernel, "--lengthscale", repr(a.lengthscale), "--variance", repr(a.variance),
           "--noise", repr(a.noise), "--dump-gradient", "--budget", "64MiB"]
    ms = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1])
    arrays = load_split(a.data_dir, a.dataset, a.split, with_test=with_test)
    Z = np.asarray(ms["Z_init"], float).reshape(a.m, arrays[0].shape[1])
    return ms, Z, arrays


def build_model(a, X, y, Z):
    """GPyTorch's SGPR at a's initial σ_f², ℓ, σ² and Z (float64 tensors X, y, Z); jitter a.jitter on Kuu."""
    import torch
    import gpytorch

    class JitteredInducingPointKernel(gpytorch.kernels.InducingPointKernel):
        """InducingPointKernel with a fixed jitter·I on Kuu (memsafe's and GPflow's), cached as the parent caches."""
        jitter = 0.0

        @property
        def _inducing_mat(self):
            if not self.training and hasattr(self, "_cached_kernel_mat"):
                return self._cached_kernel_mat
            res = gpytorch.kernels.InducingPointKernel._inducing_mat.fget(self)
            if self.jitter > 0:
                res = res + self.jitter * torch.eye(res.shape[-1], dtype=res.dtype, device=res.device)
            if not self.training:
                self._cached_kernel_mat = res
            return res

    d = X.shape[1]
    base = gpytorch.kernels.RBFKernel(ard_num_dims=d) if a.kernel == "rbf" else \
        gpytorch.kernels.MaternKernel(nu={"matern12": 0.5, "matern32": 1.5, "matern52": 2.5}[a.kernel], ard_num_dims=d)
    likelihood = gpytorch.likelihoods.GaussianLikelihood()  # noise constraint GreaterThan(1e-4), GPyTorch's default

    class SGPR(gpytorch.models.ExactGP):
        def __init__(self):
            super().__init__(X, y, likelihood)
            self.mean_module = gpytorch.means.ZeroMean()
            self.scale = gpytorch.kernels.ScaleKernel(base)
            if a.jitter > 0:
                self.covar_module = JitteredInducingPointKernel(self.scale, inducing_points=Z, likelihood=likelihood)
                self.covar_module.jitter = a.jitter
            else:
                self.covar_module = gpytorch.kernels.InducingPointKernel(self.scale, inducing_points=Z,
                                                                         likelihood=likelihood)

        def forward(self, x):
            return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))

    model = SGPR()
    likelihood.noise = a.noise  # through the constraints' inverse transforms
    model.scale.outputscale = a.variance
    base.lengthscale = torch.full((1, d), a.lengthscale)
    return model, likelihood, base


def predict(model, likelihood, Xte):
    """SGPR's (Titsias') predictive mean and variance of f at Xte (standardised units), exactly (Cholesky).
    GPyTorch 1.15 needs two passes for it. Its default sgpr_diagonal_correction adds diag(Kxx − Qxx) to
    the training covariance in eval mode (FITC-like caches: a different mean), so the prediction caches
    (mean_cache, covar_cache) are built with the correction off. But ExactGP evaluates the test×test
    covariance before SGPRPredictionStrategy can replace Q** by the base kernel's K**, so with the
    correction off the predictive variance would be Q** − ... instead of K** − ...; the second pass,
    with the correction on and the caches kept, gets K** on the diagonal: K** − Q** + K*u Σ Ku*."""
    import torch
    import gpytorch
    model.eval()
    likelihood.eval()
    with torch.no_grad(), gpytorch.settings.fast_pred_var(False), gpytorch.settings.skip_posterior_variances(False):
        with gpytorch.settings.sgpr_diagonal_correction(False):
            model(Xte)  # creates the prediction strategy
            model.prediction_strategy.mean_cache  # noqa: B018  (built and cached now, without the correction)
            model.prediction_strategy.covar_cache  # noqa: B018
        with gpytorch.settings.sgpr_diagonal_correction(True):
            f = model(Xte)
            return f.mean.numpy().ravel(), f.variance.numpy().ravel()


def test_errors(pred, noise, yte, ym, ys):
    """Test RMSE and NLPD in the original units (as sgpr_train and gpflow_train.py: variance of f + σ²)."""
    mean, var = pred
    mu = mean * ys + ym
    v = (var + noise) * ys * ys
    return float(np.sqrt(np.mean((yte - mu) ** 2))), float(np.mean(0.5 * np.log(2 * np.pi * v) + 0.5 * (yte - mu) ** 2 / v))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    start_args(ap, m=500, lengthscale=1.0, variance=1.0, noise=0.1)  # sgpr_train's defaults
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--jitter", type=float, default=1e-6,
                    help="fixed jitter on Kuu's diagonal (memsafe's and GPflow's 1e-6); 0: GPyTorch's own (none unless "
                         "the Cholesky fails)")
    a = ap.parse_args()
    row = {"impl": "gpytorch", "dataset": a.dataset, "split": a.split, "m": a.m, "kernel": a.kernel,
           "iters_max": a.iters, "threads": a.threads, "jitter": a.jitter}
    rss_guard.start(row)  # past the memory available at the start less 1 GiB: status "oom", exit 3
    try:
        ms, Z, (X, y, Xte, yte, ym, ys) = memsafe_start(a, with_test=True)
        n, d = X.shape
        import torch
        import gpytorch
        torch.set_default_dtype(torch.float64)
        torch.set_num_threads(a.threads)
        try:
            torch.set_num_interop_threads(1)  # a.threads busy threads in all, as memsafe and GPflow
        except RuntimeError:
            pass  # already set in this process (it may be set once, before any parallel work)
        Xt, yt, Xtet = torch.tensor(X), torch.tensor(y), torch.tensor(Xte)
        model, likelihood, base = build_model(a, Xt, yt, torch.tensor(Z))
        mll = gpytorch.mlls.ExactMarginalLogLikelihood(likelihood, model)
        exact = contextlib.ExitStack()  # for the rest of the run (see the docstring)
        exact.enter_context(gpytorch.settings.fast_computations(covar_root_decomposition=False, log_prob=True,
                                                                solves=False))
        exact.enter_context(gpytorch.settings.max_cholesky_size(2 ** 62))
        model.train()
        likelihood.train()
        with torch.no_grad():
            start_bound = float(mll(model(Xt), yt)) * n
        ms_bound = ms.get("init_bound", ms.get("bound"))
        row["start_bound"] = start_bound
        row["start_bound_memsafe"] = ms_bound
        row["start_bound_rel_diff"] = abs(start_bound - ms_bound) / abs(ms_bound)
        rmse0, nlpd0 = test_errors(predict(model, likelihood, Xtet), float(likelihood.noise.detach()), yte, ym, ys)
        row["start_rmse_rel_diff"] = abs(rmse0 - ms["rmse"]) / abs(ms["rmse"])  # the prediction path, checked
        row["start_nlpd_rel_diff"] = abs(nlpd0 - ms["nlpd"]) / abs(ms["nlpd"])
        model.train()  # drops the prediction caches
        likelihood.train()

        params = list(model.parameters())  # raw noise, raw outputscale, raw lengthscale, Z (deduplicated)
        evaluations = 0
        iterations = 0
        if a.iters > 0:
            opt = torch.optim.LBFGS(params, lr=1, max_iter=a.iters, max_eval=40 * a.iters + 1, history_size=10,
                                    line_search_fn="strong_wolfe", tolerance_grad=1e-10, tolerance_change=1e-14)

            def closure():
                nonlocal evaluations
                evaluations += 1
                opt.zero_grad()
                loss = -mll(model(Xt), yt)  # −bound/n
                loss.backward()
                return loss

            t0 = time.perf_counter()
            opt.step(closure)
            seconds_train = time.perf_counter() - t0
            iterations = int(opt.state[params[0]]["n_iter"])
        else:
            seconds_train = 0.0
        t1 = time.perf_counter()
        with torch.no_grad():
            bound = float(mll(model(Xt), yt)) * n
        noise = float(likelihood.noise.detach())
        rmse, nlpd = test_errors(predict(model, likelihood, Xtet), noise, yte, ym, ys)
        row.update({
            "status": "ok", "n_train": n, "n_test": len(yte), "d": d,
            "variance": float(model.scale.outputscale.detach()),
            "lengthscales": [float(q) for q in base.lengthscale.detach().ravel()],
            "noise": noise, "bound": bound, "bound_per_point": bound / n,
            "rmse": rmse, "nlpd": nlpd, "iterations": iterations, "evaluations": evaluations,
            "seconds_train": seconds_train, "seconds_per_evaluation": seconds_train / max(evaluations, 1),
            "seconds_final": time.perf_counter() - t1,
            "gpytorch_version": gpytorch.__version__, "torch_version": torch.__version__,
            "max_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        })
    except Exception as e:  # noqa: BLE001 — one JSON line whatever happens
        text = f"{type(e).__name__}: {e}"
        row.update({"status": "oom" if ("out of memory" in text or "MemoryError" in text
                                        or "DefaultCPUAllocator" in text) else "error",
                    "message": text[-800:]})
    print(json.dumps(row))
    return 0 if row["status"] == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
