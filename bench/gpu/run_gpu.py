#!/usr/bin/env python3
"""Runs the GPU benchmark suites and appends one JSON line per measurement to
bench/results/gpu_<suite>.jsonl (bench/results/quick/gpu_<suite>.jsonl with --quick).

  python3 bench/gpu/run_gpu.py SUITE [--quick] [--reps R] [--impls LIST] [--timeout S]
                                     [--bin build/bench/memsafe_bench_cuda] [--out bench/results]

SUITE: peak | knn | matvec | all.  `bash bench/gpu/run_gpu.sh` builds the programs, runs `all` and
the report; `python3 bench/report.py` turns the results into the GPU section of docs/benchmarks.md.

  peak    build/bench/fma_peak_cuda: the GPU's FP32 peak, computed from its attributes and measured
          with an FMA kernel (the "% of peak" divides by the measured one).
  knn     the eXLA paper's Table 1 sizes: m = 10^4 queries, k = 10, f32, L2 with n in {10^4, 10^6,
          10^7} and d in {3, 10, 100}; L1 and cosine at n = 10^6, same d; memsafe with a 1 GiB budget.
          Implementations: memsafe-cuda (inputs on the device), memsafe-cuda-host (the database left
          in host memory: streamed), keops, torch, jax.
  matvec  K(X, X) v with the RBF kernel (l = 1): d = 3 f32 and d = 1 f64 (the eXLA paper's Fig. 2),
          n in {10^4, 10^5, 10^6}; memsafe-cuda, keops, torch, jax.

Every measurement is its own subprocess with a wall-clock timeout (--timeout; then the row's status
is "timeout"); the implementations of one workload run back to back. Each row is the program's JSON
line plus suite, timestamp, git_rev, run_id, cmd, wall_s, rc, host_* and gpu_* (nvidia-smi).

Answer checks.  The memsafe-cuda run also writes its inputs (--save-data, up to --share-max bytes)
and the peers read them (--data-file), so everyone sees the same numbers; each run dumps its first
min(m, 2000) rows of indices (matvec: of y).  The memsafe-cuda row's "check" gives, for each peer
that ran on the shared data, the share of queries whose index sets agree exactly and the mean
recall@k (matvec: the largest difference relative to the largest output).
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)
REPO = os.path.dirname(BENCH)
PEERS = {"keops": os.path.join(HERE, "peers", "keops_gpu_bench.py"),
         "torch": os.path.join(HERE, "peers", "torch_bench.py"),
         "jax": os.path.join(HERE, "peers", "jax_bench.py")}
IMPLS = ["memsafe-cuda", "memsafe-cuda-host", "keops", "torch", "jax"]
MATVEC_IMPLS = ["memsafe-cuda", "keops", "torch", "jax"]  # X is small there: no host-resident variant
SUITES = ["peak", "knn", "matvec"]


def _load_cpu_driver():
    """bench/run.py, for its byte parsing, host and git probes, answer comparisons, running a program and
    writing its row."""
    sys.dont_write_bytecode = True  # no __pycache__ in the source tree
    spec = importlib.util.spec_from_file_location("memsafe_bench_run", os.path.join(BENCH, "run.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


cpu = _load_cpu_driver()
log = cpu.log


def gpu_list() -> list[dict]:
    """The GPUs nvidia-smi lists (empty without a driver or a GPU)."""
    try:
        p = subprocess.run(["nvidia-smi", "--query-gpu=index,name,memory.total,driver_version",
                            "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return []
    out = []
    for line in p.stdout.splitlines() if p.returncode == 0 else []:
        parts = [s.strip() for s in line.split(",")]
        if len(parts) == 4 and parts[0].isdigit():
            mem = int(parts[2]) * 1024**2 if parts[2].isdigit() else None  # MiB
            out.append({"gpu_index": int(parts[0]), "gpu_name": parts[1], "gpu_mem_bytes": mem,
                        "gpu_driver": parts[3]})
    return out


def is_memsafe(impl: str) -> bool:
    return impl.startswith("memsafe")


# ---- one measurement ---------------------------------------------------------------------------

class Runner:
    def __init__(self, args):
        self.a = args
        self.run_id = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        self.rev = cpu.git_rev()
        self.host = cpu.host_info()
        gpus = gpu_list()
        self.gpu = next((g for g in gpus if g["gpu_index"] == args.device), {})
        self.tmp = tempfile.mkdtemp(prefix="memsafe-gpu-bench-", dir=args.tmp_dir)
        self.counter = 0

    def wants(self, impl: str) -> bool:
        return impl in self.a.impls

    def path(self, tag: str) -> str:
        self.counter += 1
        return os.path.join(self.tmp, f"{self.counter:05d}-{tag}")

    def command(self, req: dict) -> list[str]:
        a = self.a
        impl = req["impl"]
        if is_memsafe(impl):
            cmd = [a.bin, req["bench"]]
        else:
            cmd = [a.python, PEERS[impl], req["bench"]]
        opt = lambda name, val: cmd.extend([f"--{name}", str(val)])  # noqa: E731
        opt("n", req["n"])
        if req["bench"] == "knn":
            opt("m", req["m"])
            opt("k", req["k"])
            opt("metric", req["metric"])
        opt("d", req["d"])
        opt("precision", req["precision"])
        opt("reps", req.get("reps", a.reps))
        opt("seed", a.seed)
        opt("device", a.device)
        opt("tf32", int(a.tf32))
        if req["bench"] == "matvec":
            opt("lengthscale", req.get("lengthscale", 1))
        if is_memsafe(impl):
            opt("budget", req["budget"])
            opt("warmup", 1)
            if impl == "memsafe-cuda-host":
                cmd.append("--host-resident")
            if req.get("save_data"):
                opt("save-data", req["save_data"])
        elif req.get("data_file"):
            opt("data-file", req["data_file"])
        if req.get("dump"):
            opt("dump", req["dump"])
        return cmd

    def measure(self, suite: str, req: dict) -> dict:
        a = self.a
        cmd = self.command(req)
        impl = req["impl"]
        row = {"suite": suite, "bench": req["bench"], "impl": impl, "data": "random",
               "metric": req.get("metric", "rbf"), "n": req["n"], "m": req.get("m", req["n"]), "d": req["d"],
               "k": req.get("k", 0), "precision": req["precision"], "reps": req.get("reps", a.reps),
               "budget_bytes": cpu.parse_bytes(req["budget"]) if is_memsafe(impl) else None,
               "host_resident": impl == "memsafe-cuda-host"}
        timeout = req.get("timeout", a.timeout)
        out, err, rc, timed_out, wall = cpu.run_program(cmd, timeout, start_new_session=True)
        parsed = cpu.last_json_line(out)
        err_tail = cpu.stderr_tail(err)
        if parsed is not None:
            cpu.merge_fields(row, parsed)
            row.setdefault("status", "ok" if rc == 0 else "error")
        if timed_out:
            row["status"] = "timeout"
            row["message"] = f"killed after {timeout} s"
        elif parsed is None:
            text = (err + out).lower()
            oomish = any(s in text for s in ("out of memory", "resource_exhausted", "bad_alloc", "memoryerror"))
            row["status"] = "oom" if oomish or rc == -signal.SIGKILL else "error"
            row["message"] = f"exit status {rc}, no JSON line; stderr: {err_tail}"
        if row.get("status") != "ok" and not row.get("message") and err_tail:
            row["message"] = err_tail
        row.update({
            "suite": suite, "impl": impl,  # the label: memsafe-cuda-host is memsafe_bench_cuda --host-resident
            "n_requested": req["n"], "m_requested": req.get("m", req["n"]),
            "budget": req.get("budget") if is_memsafe(impl) else None,
            "rc": rc, "wall_s": round(wall, 3), "cmd": shlex.join(cmd).replace(REPO + os.sep, ""),
            "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "git_rev": self.rev, "run_id": self.run_id, "quick": bool(a.quick),
        })
        cpu.finish_row(row, req, {**self.host, **self.gpu})
        self.report(row)
        return row

    def report(self, row: dict) -> None:
        what = f"{row['bench']} {row['impl']:17s} {row.get('metric', '')} n={row['n']} m={row['m']} d={row['d']} " \
               f"{row['precision']}"
        cpu.log_row(row, what)

    def write(self, suite: str, rows: list[dict]) -> None:
        cpu.append_rows(self.a.out, suite, rows)

    # ---- one workload, every implementation ---------------------------------------------------

    def group(self, suite: str, w: dict, impls: list[str]) -> list[dict]:
        """The implementations back to back; memsafe-cuda's inputs shared with the peers; checks."""
        a = self.a
        impls = [i for i in impls if self.wants(i)]
        item = 4 if w["precision"] == "f32" else 8
        if w["bench"] == "knn":
            sizes = {"X": w["n"] * w["d"], "Q": w["m"] * w["d"]}  # values in each shared file
        else:
            sizes = {"X": w["n"] * w["d"], "v": w["n"]}
        share = a.check and any(not is_memsafe(i) for i in impls) and \
            sum(sizes.values()) * item <= a.share_max
        prefix = self.path("data") if share else None
        shared = None  # the prefix once the files are there
        rows, on_shared = {}, set()
        for impl in impls:
            req = {**w, "impl": impl}
            if a.check:
                req["dump"] = self.path(impl + ".bin")
            if is_memsafe(impl) and share and shared is None:
                req["save_data"] = prefix
            if not is_memsafe(impl) and shared:
                req["data_file"] = shared
                on_shared.add(impl)
            rows[impl] = self.measure(suite, req)
            if req.get("save_data") and all(
                    os.path.isfile(f"{prefix}.{s}") and os.path.getsize(f"{prefix}.{s}") == c * item
                    for s, c in sizes.items()):
                shared = prefix
        ref = rows.get("memsafe-cuda")
        if ref is not None and ref.get("status") == "ok" and ref.get("_dump"):
            check = {}
            for impl, r in rows.items():
                if impl == "memsafe-cuda" or r.get("status") != "ok" or not r.get("_dump"):
                    continue
                if not is_memsafe(impl) and impl not in on_shared:
                    continue  # other numbers: nothing to compare
                if w["bench"] == "knn":
                    c = cpu.compare_knn(ref["_dump"], r["_dump"], w["k"])
                else:
                    c = cpu.compare_vectors(ref["_dump"], r["_dump"])
                if c is not None:
                    check["vs_" + impl] = c
            ref["check"] = check or None
        if prefix:
            for s in sizes:
                try:
                    os.remove(f"{prefix}.{s}")
                except OSError:
                    pass
        return list(rows.values())


# ---- suites ------------------------------------------------------------------------------------

def knn_workloads(a) -> list[dict]:
    base = {"bench": "knn", "k": 10, "precision": "f32", "budget": a.budget}
    if a.quick:
        out = [{**base, "metric": "l2", "n": 10**4, "m": 500, "d": d} for d in (3, 100)]
        return out + [{**base, "metric": mt, "n": 10**4, "m": 500, "d": 10} for mt in ("l1", "cosine")]
    out = [{**base, "metric": "l2", "n": n, "m": 10**4, "d": d} for n in (10**4, 10**6, 10**7) for d in (3, 10, 100)]
    return out + [{**base, "metric": mt, "n": 10**6, "m": 10**4, "d": d} for mt in ("l1", "cosine") for d in (3, 10, 100)]


def matvec_workloads(a) -> list[dict]:
    base = {"bench": "matvec", "lengthscale": 1, "budget": a.budget}
    ns = (2000,) if a.quick else (10**4, 10**5, 10**6)
    return [{**base, "n": n, "d": d, "precision": p} for d, p in ((3, "f32"), (1, "f64")) for n in ns]


def suite_knn(R: Runner) -> None:
    for w in knn_workloads(R.a):
        if cpu.wanted(R, w):
            R.write("gpu_knn", R.group("gpu_knn", w, IMPLS))


def suite_matvec(R: Runner) -> None:
    for w in matvec_workloads(R.a):
        if cpu.wanted(R, w):
            R.write("gpu_matvec", R.group("gpu_matvec", w, MATVEC_IMPLS))


def suite_peak(R: Runner) -> None:
    a = R.a
    cmd = [a.fma_bin, str(a.device)]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        out, rc = p.stdout, p.returncode
    except subprocess.TimeoutExpired:
        out, rc = "", None
    rows = []
    for line in out.splitlines():
        if line.strip().startswith("{"):
            r = json.loads(line)
            r.update({"suite": "gpu_peak", "impl": "fma_peak_cuda", "cmd": shlex.join(cmd).replace(REPO + os.sep, ""),
                      "rc": rc, "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                      "git_rev": R.rev, "run_id": R.run_id, "quick": bool(a.quick), **R.host, **R.gpu})
            rows.append(r)
            log(f"[peak] {r.get('device')}: measured {r.get('fp32_gflops')} GFLOP/s FP32, "
                f"theoretical {r.get('theoretical_fp32_gflops')} ({r.get('status')})")
    if not rows:
        log(f"[peak] no JSON line from {shlex.join(cmd)} (exit status {rc})")
    R.write("gpu_peak", rows)


SUITE_FUNCS = {"peak": suite_peak, "knn": suite_knn, "matvec": suite_matvec}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="Run memsafe's GPU benchmark suites; results go to "
                                            "bench/results/gpu_<suite>.jsonl.",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("suite", choices=SUITES + ["all"])
    p.add_argument("--quick", action="store_true", help="tiny sizes for a smoke test; results go to OUT/quick/")
    p.add_argument("--reps", type=int, default=None, help="timed repetitions per run (default 3, --quick 1)")
    p.add_argument("--out", default=os.path.join(BENCH, "results"))
    p.add_argument("--bin", default=os.path.join(REPO, "build", "bench", "memsafe_bench_cuda"))
    p.add_argument("--fma-bin", default=None, help="the peak program (default: fma_peak_cuda next to --bin)")
    p.add_argument("--python", default=sys.executable, help="interpreter for the Python peers")
    p.add_argument("--impls", default=",".join(IMPLS), help="comma-separated subset of " + ",".join(IMPLS))
    p.add_argument("--budget", default="1GiB", help="memsafe's budget (device and pinned temporaries)")
    p.add_argument("--device", type=int, default=0, help="CUDA device index")
    p.add_argument("--tf32", action="store_true", help="allow TF32 for float32 products (every implementation)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--only", default="", help="only the workloads matching KEY=VALUE[,KEY=VALUE...][|...] (any alternative)")
    p.add_argument("--timeout", type=float, default=600, help="seconds per measurement (then status timeout)")
    p.add_argument("--share-max", default="16GiB",
                   help="largest inputs memsafe-cuda writes for the peers (larger: no answer check)")
    p.add_argument("--tmp-dir", default=None, help="where shared inputs and dumps go (default: the system's)")
    p.add_argument("--no-check", dest="check", action="store_false", help="no shared inputs, dumps or checks")
    p.add_argument("--no-gpu-check", dest="gpu_check", action="store_false",
                   help="run even when nvidia-smi lists no GPU (every row then says why it could not run)")
    a = p.parse_args(argv)

    cpu.settle_common_args(p, a, IMPLS)
    try:
        cpu.parse_bytes(a.budget)
        a.share_max = cpu.parse_bytes(a.share_max)
    except ValueError as e:
        p.error(str(e))
    a.out = os.path.abspath(a.out)
    if a.quick:
        a.out = os.path.join(a.out, "quick")
    a.bin = os.path.abspath(a.bin)
    a.fma_bin = os.path.abspath(a.fma_bin or os.path.join(os.path.dirname(a.bin), "fma_peak_cuda"))
    suites = SUITES if a.suite == "all" else [a.suite]

    gpus = gpu_list()
    if not gpus and a.gpu_check:
        log("run_gpu.py: no NVIDIA GPU found (nvidia-smi is missing or lists none). Run the GPU benchmarks on a "
            "machine with an NVIDIA GPU: bash bench/gpu/run_gpu.sh. Nothing was run or written.")
        return 1
    build = ("cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DMEMSAFE_CUDA=ON && "
             "cmake --build build --target memsafe_bench_cuda fma_peak_cuda (or: bash bench/gpu/run_gpu.sh)")
    if any(s != "peak" for s in suites) and any(is_memsafe(i) for i in a.impls) and not os.access(a.bin, os.X_OK):
        p.error(f"{a.bin} not found or not executable: build it first: {build}")
    if "peak" in suites and not os.access(a.fma_bin, os.X_OK):
        p.error(f"{a.fma_bin} not found or not executable: build it first: {build}")

    R = Runner(a)
    log(f"run {R.run_id} at git {R.rev}; GPU {R.gpu.get('gpu_name', 'none')}; results in {a.out}; reps {a.reps}; "
        f"impls {','.join(a.impls)}")
    return cpu.run_suites(R, suites, SUITE_FUNCS)


if __name__ == "__main__":
    sys.exit(main())
