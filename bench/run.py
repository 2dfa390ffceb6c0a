#!/usr/bin/env python3
"""Runs the memsafe benchmark suites and appends one JSON line per measurement to
bench/results/<suite>.jsonl (bench/results/quick/<suite>.jsonl with --quick).

  python3 bench/run.py SUITE [--quick] [--reps R] [--threads T] [--out bench/results]
                             [--bin build/bench/memsafe_bench] [--data-dir ../shared/data]

SUITE: fig2 | knn | mnist | sweep | matvec3 | overhead | compile | isa | sums | all.
Then `python3 bench/report.py` turns the results into docs/benchmarks.md and the plots.

Every measurement is its own subprocess (so max_rss_bytes is per run) with a wall-clock
timeout (--timeout, recorded as status "timeout"); naive runs also get an address-space
limit (--mem-limit, RLIMIT_AS) so that an out-of-memory is recorded as "oom" instead of
taking the machine down.  For each workload the implementations run back to back
(memsafe, faiss, keops, naive) so they see the same machine conditions.

Slow peers.  A FAISS or KeOps kNN run whose full query set would take longer than
--peer-max-call-s per call is measured on fewer queries: a pilot call on 200 queries
gives the rate, and the run uses the largest round number of queries that fits (the
row's "m" is what was run, "m_requested" what the workload asks for, and
"queries_reduced" is true).  Queries per second is what the tables compare.

Answer checks.  knn runs dump the indices of their first min(m, 2000) queries; the
memsafe row gets a "check" field comparing them with FAISS's and naive's (same data:
the same program and generator) and, on MNIST only, KeOps's (KeOps's random data have
the same distribution but other numbers): for each peer, the fraction of queries whose
index sets agree exactly and the mean recall@k.  matvec memsafe rows are compared with
naive's outputs (largest absolute difference relative to the largest output).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from array import array

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
KEOPS_SCRIPT = os.path.join(HERE, "peers", "keops_bench.py")
SUITES = ["peak", "fig2", "knn", "mnist", "sweep", "matvec3", "overhead", "compile", "isa", "sums", "grad"]
IMPLS = ["memsafe", "faiss", "keops", "naive"]
UNLIMITED = "1TiB"  # stands for "no budget": far above anything this machine can hold

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
if HERE not in sys.path:
    sys.path.insert(0, HERE)  # also when bench/gpu/run_gpu.py loads this file
from bench_common import (KIB, MIB, GIB, TIB, cpu_flags, cpu_model, default_data_dir,  # noqa: E402
                          openblas_avx512_coretype, parse_bytes)


def fmt_bytes(b: int) -> str:
    for unit, size in (("TiB", TIB), ("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if b >= size and b % size == 0:
            return f"{b // size}{unit}"
    return str(int(b))


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---- machine and revision ----------------------------------------------------------------------

def host_info() -> dict:
    info = {"host_cpu": cpu_model(), "host_cpu_mhz": None, "host_cores": None, "host_mem_bytes": None}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, val = line.partition(":")
                if key.strip() == "cpu MHz":
                    info["host_cpu_mhz"] = float(val)
                    break
    except OSError:
        pass
    try:
        info["host_cores"] = len(os.sched_getaffinity(0))
    except AttributeError:
        info["host_cores"] = os.cpu_count()
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    info["host_mem_bytes"] = int(line.split()[1]) * 1024
    except OSError:
        pass
    return info


def git_rev() -> str | None:
    """The checkout's revision (-dirty when code that can change a measurement differs from it: not the
    results, report.py or Markdown); MEMSAFE_GIT_REV overrides it, for a copy of the tree whose .git is
    not the code's (a remote machine handed a snapshot)."""
    if os.environ.get("MEMSAFE_GIT_REV"):
        return os.environ["MEMSAFE_GIT_REV"]
    try:
        rev = subprocess.run(["git", "-C", REPO, "rev-parse", "--short=12", "HEAD"], capture_output=True,
                             text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no", "--",
                                "include", "bench", "examples", ":(exclude)bench/results", ":(exclude)bench/report.py",
                                ":(exclude,glob)**/*.md"],
                               capture_output=True, text=True).stdout.strip()
        return rev + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return None


# ---- answer checks -----------------------------------------------------------------------------

def read_array(path: str, code: str) -> array | None:
    try:
        a = array(code)
        with open(path, "rb") as f:
            a.frombytes(f.read())
        return a if len(a) else None
    except (OSError, ValueError):
        return None


def compare_knn(mine: str, theirs: str, k: int) -> dict | None:
    a, b = read_array(mine, "q"), read_array(theirs, "q")
    if a is None or b is None or len(a) % k or len(b) % k:
        return None
    q = min(len(a), len(b)) // k
    if q == 0:
        return None
    exact = hits = 0
    for i in range(q):
        sa, sb = set(a[i * k:(i + 1) * k]), set(b[i * k:(i + 1) * k])
        exact += sa == sb
        hits += len(sa & sb)
    return {"queries": q, "exact_sets": exact / q, "recall_at_k": hits / (q * k)}


def compare_vectors(mine: str, theirs: str) -> dict | None:
    a, b = read_array(mine, "d"), read_array(theirs, "d")
    if a is None or b is None:
        return None
    q = min(len(a), len(b))
    diff = max(abs(a[i] - b[i]) for i in range(q))
    scale = max(abs(b[i]) for i in range(q)) or 1.0
    return {"outputs": q, "max_abs_diff": diff, "max_rel_diff": diff / scale}


# ---- running one program (bench/gpu/run_gpu.py uses these too) ------------------------------------

def run_program(cmd: list[str], timeout: float, **popen) -> tuple[str, str, int, bool, float]:
    """Runs cmd in REPO with a wall-clock timeout, then kills its process group (`popen` must give the
    child its own session: preexec_fn calling os.setsid, or start_new_session=True).
    Returns (stdout, stderr, exit status, timed out, wall seconds)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO, **popen)
    _kill_on_term(proc)
    try:
        out, err = proc.communicate(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the whole group: a compiler child (KeOps' g++) too
        out, err = proc.communicate()
        timed_out = True
    finally:
        _kill_on_term(None)
    return out, err, proc.returncode, timed_out, time.perf_counter() - t0


_running: subprocess.Popen | None = None


def _kill_on_term(proc: subprocess.Popen | None) -> None:
    """While a measurement runs, SIGTERM (e.g. an outer `timeout`) kills its process group before this
    driver exits: the child has its own session, so it would otherwise outlive the driver and go on
    using the machine under the next measurements (seen on a GPU: a peer left running slowed every
    later row)."""
    global _running
    _running = proc
    if proc is not None and signal.getsignal(signal.SIGTERM) is not _on_term:
        signal.signal(signal.SIGTERM, _on_term)


def _on_term(signum, frame) -> None:
    if _running is not None and _running.poll() is None:
        try:
            os.killpg(_running.pid, signal.SIGKILL)
        except OSError:
            pass
    raise SystemExit(128 + signum)


def last_json_line(out: str) -> dict | None:
    """The last line of a program's stdout that parses as a JSON object, if any."""
    for line in reversed(out.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                continue
    return None


def stderr_tail(err: str) -> str:
    """The last lines of a program's stderr, for a row's message."""
    return " | ".join(err.strip().splitlines()[-5:])[-800:]


def merge_fields(row: dict, parsed: dict) -> None:
    """The program's fields into the row; a null one does not replace what the row already has."""
    for key, val in parsed.items():
        if val is not None or key not in row:
            row[key] = val


def finish_row(row: dict, req: dict, machine: dict) -> None:
    """The machine's fields (host_*, ...) where the program gave none, and the request's dump (to compare
    answers; append_rows removes it)."""
    for key, val in machine.items():
        row.setdefault(key, val)
    if req.get("dump"):
        row["_dump"] = req["dump"]


def log_row(row: dict, what: str) -> None:
    """One progress line on stderr: what ran and how it went."""
    res = row.get("status")
    if res == "ok" and row.get("median_s") is not None:
        res += f" median {row['median_s']:.4g} s"
        if row.get("qps_median"):
            res += f", {row['qps_median']:.4g} q/s"
    elif row.get("message"):
        res += f" ({str(row['message'])[:160]})"
    log(f"[{row['suite']}] {what}: {res} [wall {row['wall_s']:.1f} s]")


def append_rows(out_dir: str, suite: str, rows: list[dict]) -> None:
    """Appends the rows to OUT_DIR/SUITE.jsonl (keys starting with _ left out), then removes their dumps."""
    if not rows:
        return
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, f"{suite}.jsonl"), "a") as f:
        for r in rows:
            f.write(json.dumps({k: v for k, v in r.items() if not k.startswith("_")}) + "\n")
    for r in rows:
        if r.get("_dump"):
            try:
                os.remove(r["_dump"])
            except OSError:
                pass


def settle_common_args(p: argparse.ArgumentParser, a, impls: list[str]) -> None:
    """--impls as a list (an unknown name is a usage error); --reps, when not given: 1 with --quick, else 3."""
    a.impls = [s.strip() for s in a.impls.split(",") if s.strip()]
    bad = [s for s in a.impls if s not in impls]
    if bad:
        p.error(f"unknown --impls {bad}; choose from {impls}")
    if a.reps is None:
        a.reps = 1 if a.quick else 3


def run_suites(R, suites: list[str], funcs: dict) -> int:
    """Runs the suites in turn, then removes R.tmp (what the runs left there)."""
    t0 = time.perf_counter()
    try:
        for s in suites:
            ts = time.perf_counter()
            funcs[s](R)
            log(f"suite {s} done in {time.perf_counter() - ts:.0f} s")
    finally:
        shutil.rmtree(R.tmp, ignore_errors=True)
    log(f"all done in {time.perf_counter() - t0:.0f} s; now: python3 bench/report.py")
    return 0


# ---- one measurement ---------------------------------------------------------------------------

class Runner:
    def __init__(self, args):
        self.a = args
        self.run_id = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        self.rev = git_rev()
        self.host = host_info()
        self.tmp = tempfile.mkdtemp(prefix="memsafe-bench-")
        self.counter = 0
        self.mnist_dir = self._mnist_dir(args.data_dir)

    @staticmethod
    def _mnist_dir(data_dir: str) -> str:
        sub = os.path.join(data_dir, "mnist")
        if os.path.isfile(os.path.join(sub, "train-images-idx3-ubyte.gz")):
            return sub
        return data_dir

    @property
    def blas_coretype(self) -> str | None:
        """OPENBLAS_CORETYPE for the BLAS-backed peers (FAISS's and the naive code's sgemm): --blas-coretype,
        or with "auto" SkylakeX (OpenBLAS's AVX-512 kernels) on a CPU with AVX-512 F/BW/DQ/VL — the
        environment may force Haswell (this project's machine sets OPENBLAS_CORETYPE=Haswell; on a Zen 5
        its AVX2 sgemm runs 1.65× slower), and an OpenBLAS older than a CPU may take it for an older one —
        else the environment's setting, or OpenBLAS's own choice."""
        c = self.a.blas_coretype
        if c == "auto":
            return openblas_avx512_coretype()
        return c or None

    def wants(self, impl: str) -> bool:
        return impl in self.a.impls

    def command(self, req: dict) -> list[str]:
        a = self.a
        if req["impl"] == "keops":
            cmd = [a.python, KEOPS_SCRIPT, req["bench"]]
        else:
            cmd = [req.get("bin", a.bin), req["bench"], "--impl", req["impl"]]
        opt = lambda name, val: cmd.extend([f"--{name}", str(val)])  # noqa: E731
        if req["bench"] == "knn":
            opt("data", req["data"])
            opt("n", req["n"])
            opt("m", req["m"])
            if req["data"] == "random":
                opt("d", req["d"])
            opt("k", req["k"])
            opt("metric", req["metric"])
        else:
            opt("n", req["n"])
            opt("d", req["d"])
        opt("precision", req["precision"])
        if req["impl"] == "memsafe":
            opt("budget", req["budget"])
        opt("threads", a.threads)
        opt("reps", req.get("reps", a.reps))
        opt("seed", a.seed)
        if req["bench"] == "matvec":
            opt("lengthscale", req.get("lengthscale", 1))
            if req.get("cols", 1) != 1:  # K·M with an n x cols matrix
                opt("cols", req["cols"])
            if req.get("grad"):  # the VJP with respect to the row points (the grad suite)
                opt("grad", 1)
        if req["bench"] == "knn" and req["data"] == "mnist":
            opt("data-dir", self.mnist_dir)
        if req["impl"] == "naive":
            opt("mem-limit", fmt_bytes(a.mem_limit))
        if req["impl"] != "keops":  # KeOps always warms up (its first call compiles)
            opt("warmup", a.warmup)
        if req.get("dump"):
            opt("dump", req["dump"])
        return cmd

    def dump_path(self, tag: str) -> str:
        self.counter += 1
        return os.path.join(self.tmp, f"{self.counter:05d}-{tag}.bin")

    def measure(self, suite: str, req: dict) -> dict:
        """Runs one measurement; returns its row (not yet written)."""
        a = self.a
        req = dict(req)
        req.setdefault("k", 10 if req["bench"] == "knn" else None)
        req.setdefault("m", req["n"])
        req.setdefault("reps", a.reps)
        if a.check and req["bench"] in ("knn", "matvec") and "dump" not in req:
            req["dump"] = self.dump_path(req["impl"])
        cmd = self.command(req)
        limit = a.mem_limit if req["impl"] == "naive" else None

        def preexec():
            os.setsid()
            if limit:
                resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

        row = {
            "suite": suite, "bench": req["bench"], "impl": req["impl"], "data": req.get("data", "random"),
            "metric": req.get("metric", "rbf"), "n": req["n"], "m": req["m"], "d": req["d"], "k": req["k"],
            "precision": req["precision"], "threads": a.threads, "reps": req["reps"],
            "budget_bytes": parse_bytes(req["budget"]) if req["impl"] == "memsafe" else None,
        }
        env = None
        if "isa_forced" in req:  # the isa suite: MEMSAFE_ISA for this process only (None: unset)
            row["isa_forced"] = req["isa_forced"]
            env = {k: v for k, v in os.environ.items() if k not in ("MEMSAFE_ISA", "MEMSAFE_KERNELS")}
            if req["isa_forced"]:
                env["MEMSAFE_ISA"] = req["isa_forced"]
        if req.get("screen_forced"):  # the isa suite: MEMSAFE_SCREEN for this process only
            row["screen_forced"] = req["screen_forced"]
            env = dict(env if env is not None else os.environ)
            env["MEMSAFE_SCREEN"] = req["screen_forced"]
        if "openblas_coretype" not in req and req["impl"] in ("faiss", "naive") and self.blas_coretype:
            req["openblas_coretype"] = self.blas_coretype  # the peers' sgemm on this CPU's best kernels
        if req.get("openblas_coretype"):  # FAISS / naive on OpenBLAS's kernels for that CPU type
            row["openblas_coretype"] = req["openblas_coretype"]
            env = dict(env if env is not None else os.environ)
            env["OPENBLAS_CORETYPE"] = req["openblas_coretype"]
        if req.get("symmetric_off"):  # the sums suite: MEMSAFE_SYMMETRIC=off (every pair of k(X, X)·v)
            row["symmetric_off"] = True
            env = dict(env if env is not None else os.environ)
            env["MEMSAFE_SYMMETRIC"] = "off"
        load_before = os.getloadavg()[0]  # other work on the machine shows here
        timeout = req.get("timeout", a.timeout)
        out, err, rc, timed_out, wall = run_program(cmd, timeout, preexec_fn=preexec, env=env)
        parsed = last_json_line(out)
        err_tail = stderr_tail(err)
        if parsed is not None:
            merge_fields(row, parsed)
            row["suite"] = suite
            if "status" not in parsed:
                row["status"] = "error" if "error" in parsed else ("ok" if rc == 0 else "error")
                if "error" in parsed:
                    row["message"] = parsed["error"]
        if timed_out:
            row["status"] = "timeout"
            row["message"] = f"killed after {timeout} s"
        elif parsed is None:
            text = (err + out).lower()
            oomish = any(s in text for s in ("bad_alloc", "memoryerror", "cannot allocate", "out of memory"))
            if oomish or (limit and rc == -signal.SIGKILL):
                row["status"] = "oom"
            elif rc == -signal.SIGKILL:
                row["status"] = "oom"
                err_tail = "killed by SIGKILL (most likely the kernel's out-of-memory killer) " + err_tail
            else:
                row["status"] = "error"
            row["message"] = f"exit status {rc}, no JSON line; stderr: {err_tail}"
        if row.get("status") not in ("ok",) and not row.get("message") and err_tail:
            row["message"] = err_tail
        row.update({
            "m_requested": req.get("m_requested", req["m"]), "n_requested": req["n"],
            "budget": req.get("budget") if req["impl"] == "memsafe" else None,
            "rc": rc, "wall_s": round(wall, 3),
            "cmd": ((f"MEMSAFE_ISA={req['isa_forced']} " if req.get("isa_forced") else "") +
                    (f"MEMSAFE_SCREEN={req['screen_forced']} " if req.get("screen_forced") else "") +
                    ("MEMSAFE_SYMMETRIC=off " if req.get("symmetric_off") else "") +
                    (f"OPENBLAS_CORETYPE={req['openblas_coretype']} " if req.get("openblas_coretype") else "") +
                    shlex.join(cmd).replace(REPO + os.sep, "")),
            "loadavg_before": round(load_before, 2),
            "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "git_rev": self.rev, "run_id": self.run_id, "quick": bool(a.quick),
        })
        if row.get("cpu") is None:
            row["cpu"] = self.host["host_cpu"]
        if row.get("cores") is None:
            row["cores"] = self.host["host_cores"]
        finish_row(row, req, self.host)
        self.report(row)
        return row

    def report(self, row: dict) -> None:
        what = f"{row['bench']} {row['impl']:7s} {row.get('data', '')} {row.get('metric', '')} n={row['n']} " \
               f"m={row['m']} d={row['d']} {row['precision']}"
        if row.get("budget"):
            what += f" budget={row['budget']}"
        log_row(row, what)

    def write(self, suite: str, rows: list[dict]) -> None:
        append_rows(self.a.out, suite, rows)

    # ---- groups of peers ----------------------------------------------------------------------

    def knn_peer(self, suite: str, req: dict) -> dict:
        """FAISS or KeOps: full query set, or fewer queries when a pilot says it would be too slow."""
        a = self.a
        m = req["m"]
        work = req["n"] * m * req["d"]
        pilot_m = min(m, a.pilot_queries)
        if work < a.pilot_work or pilot_m >= m:
            return self.measure(suite, req)
        pilot = self.measure(suite, {**req, "m": pilot_m, "reps": 1, "m_requested": m})
        if pilot.get("status") != "ok" or not pilot.get("median_s"):
            pilot["queries_reduced"] = True  # a failed pilot is the record (unsupported, unavailable, ...)
            return pilot
        per_query = pilot["median_s"] / pilot_m
        if per_query * m <= a.peer_max_call_s:
            return self.measure(suite, req)
        target = a.peer_max_call_s / per_query
        mag = 10 ** int(math.floor(math.log10(target)))
        m2 = int(target // mag * mag)  # one significant digit, rounded down
        if m2 <= pilot_m:
            pilot["queries_reduced"] = True
            pilot["message"] = (pilot.get("message") or "") + \
                f" measured on {pilot_m} of {m} queries (one call would take ~{per_query * m:.0f} s)"
            return pilot
        row = self.measure(suite, {**req, "m": m2, "m_requested": m})
        row["queries_reduced"] = True
        row["message"] = (row.get("message") or "") + \
            f" measured on {m2} of {m} queries (one call on all would take ~{per_query * m:.0f} s)"
        return row

    def knn_group(self, suite: str, req: dict, impls=None) -> list[dict]:
        impls = [i for i in (impls or IMPLS) if self.wants(i)]
        rows = {}
        for impl in impls:
            r = {**req, "impl": impl}
            if impl in ("faiss", "keops"):
                rows[impl] = self.knn_peer(suite, r)
            else:
                rows[impl] = self.measure(suite, r)
        ms = rows.get("memsafe")
        if ms is not None and ms.get("_dump") and ms.get("status") == "ok":
            check = {}
            for peer in ("faiss", "naive", "keops"):
                pr = rows.get(peer)
                if pr is None or pr.get("status") != "ok" or not pr.get("_dump"):
                    continue
                if peer == "keops" and req.get("data") != "mnist":
                    continue  # different random numbers: nothing to compare
                c = compare_knn(ms["_dump"], pr["_dump"], req.get("k", 10))
                if c is not None:
                    check["vs_" + peer] = c
            ms["check"] = check or None
        return list(rows.values())

    def check_matvec(self, ms: dict, naive: dict) -> None:
        if ms.get("status") == "ok" and naive.get("status") == "ok" and ms.get("_dump") and naive.get("_dump"):
            c = compare_vectors(ms["_dump"], naive["_dump"])
            if c is not None:
                ms["check"] = {"vs_naive": c}


# ---- suites ------------------------------------------------------------------------------------

def suite_fig2(R: Runner) -> None:
    a = R.a
    budgets = ["16MiB", "64MiB"] if a.quick else ["16MiB", "64MiB", "256MiB", "1GiB"]
    grid = [1000, 3000, 10000] if a.quick else [1000, 3000, 10000, 30000, 100000, 300000, 1000000, 3000000,
                                                 10000000]
    max_s = a.fig2_max_s
    lines = {b: None for b in budgets + ["naive"]}  # None: not started; (n, median) last; False: stopped

    def allowed(line, n):
        last = lines[line]
        if last is False:
            return False
        if last is None:
            return True
        n0, t0 = last
        return t0 * (n / n0) ** 2 <= 1.5 * max_s  # predicted from n^2 scaling

    for n in grid:
        rows = []
        for b in budgets:
            if not R.wants("memsafe") or not allowed(b, n):
                lines[b] = False
                continue
            r = R.measure("fig2", {"bench": "matvec", "impl": "memsafe", "n": n, "d": 1, "precision": "f64",
                                   "budget": b})
            rows.append(r)
            ok = r.get("status") == "ok" and r.get("median_s") is not None
            lines[b] = (n, r["median_s"]) if ok and r["median_s"] <= max_s else False
        if R.wants("naive") and allowed("naive", n):
            r = R.measure("fig2", {"bench": "matvec", "impl": "naive", "n": n, "d": 1, "precision": "f64"})
            rows.append(r)
            ok = r.get("status") == "ok" and r.get("median_s") is not None
            lines["naive"] = (n, r["median_s"]) if ok and r["median_s"] <= max_s else False
            for ms in rows:
                if ms["impl"] == "memsafe":
                    R.check_matvec(ms, r)
        else:
            lines["naive"] = False
        R.write("fig2", rows)
        if all(v is False for v in lines.values()):
            break


def knn_workloads(quick: bool) -> list[dict]:
    base = {"bench": "knn", "data": "random", "k": 10, "precision": "f32", "budget": "64MiB"}
    out = []
    if quick:
        for d in (3, 100):
            out.append({**base, "metric": "l2", "n": 10000, "m": 500, "d": d})
        for metric in ("l1", "cosine"):
            out.append({**base, "metric": metric, "n": 10000, "m": 500, "d": 10})
        return out
    for n in (10**4, 10**5, 10**6, 10**7):  # 10^7: the eXLA paper's largest database
        for d in (3, 10, 100):
            out.append({**base, "metric": "l2", "n": n, "m": 10**4, "d": d})
    for metric in ("l1", "cosine"):
        for n in (10**5, 10**6):
            for d in (10, 100):
                out.append({**base, "metric": metric, "n": n, "m": 10**4, "d": d})
    return out


def wanted(R: Runner, w: dict) -> bool:
    """--only KEY=VALUE,...[|KEY=VALUE,...]: run just the workloads whose fields all match one of the
    '|'-separated alternatives (e.g. n=1000000,d=100,metric=l2 or "d=3,n=1000000|d=100,n=1000000")."""
    def match(alt: str) -> bool:
        for cond in filter(None, alt.split(",")):
            key, _, val = cond.partition("=")
            if str(w.get(key.strip())) != val.strip():
                return False
        return True
    return any(match(alt) for alt in (R.a.only or "").split("|"))


def suite_knn(R: Runner) -> None:
    for w in knn_workloads(R.a.quick):
        if wanted(R, w):
            R.write("knn", R.knn_group("knn", w))


def suite_mnist(R: Runner) -> None:
    n, m = (2000, 200) if R.a.quick else (60000, 10000)
    for metric in ("l2", "l1"):
        w = {"bench": "knn", "data": "mnist", "metric": metric, "n": n, "m": m, "d": 784, "k": 10,
             "precision": "f32", "budget": "64MiB"}
        if wanted(R, w):
            R.write("mnist", R.knn_group("mnist", w))


def suite_sweep(R: Runner) -> None:
    """Time against budget, from 1 GiB down to the smallest budget memsafe accepts; the line stops
    going down after a run slower than --sweep-max-s (tiny budgets mean tiny tiles: very slow)."""
    a = R.a
    # m = 2000 queries (not 10^4): every budget point then takes seconds, so the line can reach
    # the small budgets; queries/s is what the plot compares.
    n, m, d = (20000, 500, 100) if a.quick else (10**6, 2000, 100)
    top = 64 * MIB if a.quick else GIB
    w = {"bench": "knn", "data": "random", "metric": "l2", "n": n, "m": m, "d": d, "k": 10, "precision": "f32"}
    if not R.wants("memsafe"):
        return
    # The smallest budget memsafe accepts: ask with a budget far too small (it refuses at once).
    probe = R.measure("sweep", {**w, "impl": "memsafe", "budget": "1KiB", "reps": 1, "timeout": 120})
    minb = probe.get("min_budget_bytes")
    R.write("sweep", [probe])
    budgets = []
    b = 16 * KIB
    while b <= top:
        if not minb or b > 1.25 * minb:
            budgets.append(b)
        b *= 4
    if minb and minb < top:
        budgets.append(int(minb))
    for b in sorted(set(budgets), reverse=True):
        r = R.measure("sweep", {**w, "impl": "memsafe", "budget": fmt_bytes(b)})
        R.write("sweep", [r])
        if r.get("status") != "ok" or (r.get("median_s") or 0) > a.sweep_max_s:
            log(f"[sweep] stopping at budget {fmt_bytes(b)} (status {r.get('status')}, "
                f"median {r.get('median_s')} s; --sweep-max-s {a.sweep_max_s})")
            break
    if R.wants("faiss"):  # the budget-free reference line
        R.write("sweep", [R.knn_peer("sweep", {**w, "impl": "faiss"})])


def suite_matvec3(R: Runner) -> None:
    n = 10000 if R.a.quick else 100000
    w = {"bench": "matvec", "n": n, "d": 3, "precision": "f32", "lengthscale": 1}
    rows = []
    for impl in ("memsafe", "keops", "naive"):
        if R.wants(impl):
            req = {**w, "impl": impl, "budget": "64MiB"}
            if impl == "keops":  # about a minute per call here, warm-up included: give it room
                req["timeout"] = max(R.a.timeout, 1200)
            rows.append(R.measure("matvec3", req))
    ms = next((r for r in rows if r["impl"] == "memsafe"), None)
    nv = next((r for r in rows if r["impl"] == "naive"), None)
    if ms and nv:
        R.check_matvec(ms, nv)
    R.write("matvec3", rows)


def suite_overhead(R: Runner) -> None:
    a = R.a
    if not R.wants("memsafe"):
        return
    reps = max(a.reps, 5) if not a.quick else a.reps
    kn = {"bench": "knn", "impl": "memsafe", "data": "random", "metric": "l2", "d": 10, "k": 10,
          "precision": "f32", "reps": reps}
    kn.update({"n": 10000, "m": 1000} if a.quick else {"n": 10**5, "m": 10**4})
    mv = {"bench": "matvec", "impl": "memsafe", "n": 2000 if a.quick else 20000, "d": 1, "precision": "f64",
          "reps": reps}
    for w in (kn, mv):
        rows = [R.measure("overhead", {**w, "budget": b}) for b in ("64MiB", UNLIMITED)]
        R.write("overhead", rows)


def suite_compile(R: Runner) -> None:
    a = R.a
    cmd = ["bash", os.path.join("bench", "compile_time.sh"), str(1 if a.quick else a.reps)]
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=a.timeout * 3)
        out, rc = p.stdout, p.returncode
    except subprocess.TimeoutExpired as e:
        out, rc = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or ""), None
    rows = []
    for line in out.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            r = json.loads(line)
        except json.JSONDecodeError:
            continue
        r.update({"suite": "compile", "bench": "compile", "impl": r.get("compiler"),
                  "status": "error" if "error" in r else "ok", "cmd": shlex.join(cmd), "rc": rc,
                  "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                  "git_rev": R.rev, "run_id": R.run_id, "quick": bool(a.quick), **R.host})
        rows.append(r)
        log(f"[compile] {r.get('compiler')} {r.get('tu')}: median {r.get('median_s')} s")
    if not rows:
        log(f"[compile] no JSON lines from {shlex.join(cmd)} (exit status {rc})")
    log(f"[compile] {time.perf_counter() - t0:.0f} s")
    R.write("compile", rows)


def suite_peak(R: Runner) -> None:
    """The measured FP32 FMA peak (build/bench/fma_peak), which "% of peak" divides by."""
    a = R.a
    exe = os.path.join(os.path.dirname(a.bin), "fma_peak")
    p = subprocess.run([exe, str(a.threads)], capture_output=True, text=True, timeout=120)
    rows = []
    for line in p.stdout.splitlines():
        if line.strip().startswith("{"):
            r = json.loads(line)
            r.update({"suite": "peak", "impl": "fma_peak", "status": "ok",
                      "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                      "git_rev": R.rev, "run_id": R.run_id, "quick": bool(a.quick), **R.host})
            rows.append(r)
            log(f"[peak] {r['threads']} threads: {r['fp32_gflops']} GFLOP/s FP32")
    R.write("peak", rows)


def suite_isa(R: Runner) -> None:
    """kNN L2, f32, k = 10, 64 MiB budget, n = 10^6, m = 1000, d = 100 and 3 (and the fused RBF K·v, f32, d = 3,
    n = 10^5, dispatched and forced, no peer): memsafe_bench built with
    -march=native (--bin) against memsafe_bench_default (--bin-default: plain -O2, no -march, as a
    consumer builds it), each with the kernels chosen at run time and with every instruction set this
    CPU runs forced (MEMSAFE_ISA=portable, avx2, avx512), and at d = 100 the native build with each
    screen of the fused selection forced (MEMSAFE_SCREEN=fp32; bf16 where the CPU has AVX512-BF16,
    amx where it has AMX-BF16 — the dispatched default there, else bf16 on AMD's CPUs, fp32 on
    Intel's; and the AVX2 kernels with MEMSAFE_SCREEN=fp32 beside their default, the int16 screen). FAISS (IndexFlatL2, with --impls faiss) runs in the same rounds, and
    on an AVX-512 CPU a second time with OPENBLAS_CORETYPE=Haswell — OpenBLAS's AVX2 kernels, what FAISS
    runs on an AVX2-only CPU — beside memsafe's forced AVX2 kernels. One process per variant and round, the
    variants alternating in every round (--reps rounds, one timed call each after the warm-up), so
    slow drifts of the machine's load hit all alike; a row per variant gathers its rounds' times."""
    a = R.a
    if not R.wants("memsafe"):
        return
    bins = [("native", a.bin), ("default", a.bin_default)]
    for name, path in bins:
        if not os.access(path, os.X_OK):
            log(f"[isa] {path} not found: cmake --build build --target memsafe_bench memsafe_bench_default")
            return
    flags = cpu_flags()
    simd = ", ".join(x for x in ("avx2", "fma", "avx512f") if x in flags) or "none of avx2, fma, avx512f"
    forced = ["portable"]
    if {"avx2", "fma"} <= flags:
        forced.append("avx2")
    if {"avx2", "fma", "avx512f"} <= flags:
        forced.append("avx512")
    n, m = (20000, 200) if a.quick else (10**6, 1000)
    knn = [{"bench": "knn", "impl": "memsafe", "data": "random", "metric": "l2", "n": n, "m": m, "d": d, "k": 10,
            "precision": "f32", "budget": "64MiB", "reps": 1} for d in (100, 3)]
    matvec = {"bench": "matvec", "impl": "memsafe", "n": 5000 if a.quick else 10**5, "d": 3, "precision": "f32",
              "lengthscale": 1, "budget": "64MiB", "reps": 1}
    for w in knn + [matvec]:
        is_knn, d = w["bench"] == "knn", w["d"]
        # (build, binary, MEMSAFE_ISA, MEMSAFE_SCREEN, impl, OPENBLAS_CORETYPE)
        variants = [(b, path, isa, None, "memsafe", None) for isa in [None] + forced for b, path in bins]
        if not is_knn:  # the fused kernel sum (RBF K·v, f32, d = 3): each build dispatched and forced, no peer
            variants = [v for v in variants if v[2] != "portable"]
        elif d >= 32 and "avx512f" in flags:
            variants.append(("native", a.bin, None, "fp32", "memsafe", None))
            if "avx512_bf16" in flags:
                variants.append(("native", a.bin, None, "bf16", "memsafe", None))
            if {"avx512_bf16", "amx_bf16", "amx_tile"} <= flags:
                variants.append(("native", a.bin, None, "amx", "memsafe", None))
        if is_knn and d >= 32 and "avx2" in forced:  # the AVX2 kernels' FP32 screen beside their int16 one
            variants.append(("native", a.bin, "avx2", "fp32", "memsafe", None))
        if is_knn and R.wants("faiss"):
            variants.append(("native", a.bin, None, None, "faiss", R.blas_coretype or ""))
            if "avx512f" in flags and "avx2" in forced:
                variants.append(("native", a.bin, None, None, "faiss", "Haswell"))
        rows: dict[tuple, dict] = {}
        dumps: dict[tuple, str | None] = {}
        for _ in range(a.reps):
            for b, path, isa, screen, impl, coretype in variants:
                req = {**w, "impl": impl, "bin": path, "isa_forced": isa, "screen_forced": screen}
                if impl != "memsafe":
                    req.pop("isa_forced")
                    req["openblas_coretype"] = coretype  # "": OpenBLAS's own detection
                r = R.measure("isa", req)
                key = (b, isa, screen, impl, coretype)
                if key not in rows:
                    rows[key] = {**r, "times_s": [], "rounds": 0}
                    dumps[key] = r.get("_dump") if r.get("status") == "ok" else None
                agg = rows[key]
                if r.get("status") == "ok" and r.get("times_s"):
                    agg["times_s"] = agg["times_s"] + list(r["times_s"])
                    agg["rounds"] += 1
                elif r.get("status") != "ok":
                    agg.update({"status": r.get("status"), "message": r.get("message")})
        # Answers: every instruction set of one build gives the portable path's indices (bit for bit).
        for (b, isa, screen, impl, coretype), agg in rows.items():
            ref, mine = dumps.get((b, "portable", None, "memsafe", None)), dumps.get((b, isa, screen, impl, coretype))
            if impl == "memsafe" and isa != "portable" and ref and mine:
                with open(ref, "rb") as f1, open(mine, "rb") as f2:
                    agg["check"] = {"same_indices_as_portable": f1.read() == f2.read()}
        out = []
        for agg in rows.values():
            t = sorted(agg["times_s"])
            if t:
                med = t[len(t) // 2] if len(t) % 2 else (t[len(t) // 2 - 1] + t[len(t) // 2]) / 2
                agg.update({"min_s": t[0], "median_s": med, "reps": len(t)})
                if agg.get("bench") == "matvec":  # n × n pairs, no queries
                    agg["pairs_per_s"] = agg["n"] * agg["n"] / med
                else:
                    agg.update({"qps_median": agg["m"] / med, "pairs_per_s": agg["n"] * agg["m"] / med})
            agg.pop("_dump", None)
            agg["host_simd"] = simd
            out.append(agg)
        R.write("isa", out)


def exp_peaks(R: Runner) -> list[dict]:
    """build/bench/exp_peak: memsafe's vector exp throughput per instruction set and type (G exp/s)."""
    exe = os.path.join(os.path.dirname(R.a.bin), "exp_peak")
    if not os.access(exe, os.X_OK):
        log(f"[sums] {exe} not found: cmake --build build --target exp_peak")
        return []
    p = subprocess.run([exe, str(R.a.threads)], capture_output=True, text=True, timeout=300)
    rows = []
    for line in p.stdout.splitlines():
        if line.strip().startswith("{"):
            r = json.loads(line)
            r.update({"suite": "sums", "impl": "exp_peak", "status": "ok",
                      "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                      "git_rev": R.rev, "run_id": R.run_id, "quick": bool(R.a.quick), **R.host})
            rows.append(r)
            log(f"[sums] exp_peak {r['isa']} {r['type']} {r['threads']} threads: {r['gexp_per_s']} G exp/s")
    return rows


def add_round(rows: dict, key, r: dict) -> None:
    """Adds one round's row r (one timed call) to rows[key]: its times appended, or its failure kept."""
    agg = rows.setdefault(key, {**r, "times_s": []})
    if r.get("status") == "ok" and r.get("times_s"):
        agg["times_s"] = agg["times_s"] + list(r["times_s"])
    elif r.get("status") != "ok":
        agg.update({"status": r.get("status"), "message": r.get("message")})


def summarise_rounds(agg: dict) -> bool:
    """min_s, median_s and reps over the rounds' times of agg; False when it has none."""
    t = sorted(agg["times_s"])
    if not t:
        return False
    med = t[len(t) // 2] if len(t) % 2 else (t[len(t) // 2 - 1] + t[len(t) // 2]) / 2
    agg.update({"min_s": t[0], "median_s": med, "reps": len(t)})
    return True


def suite_sums(R: Runner) -> None:
    """Fused kernel sums (issue 15): the exp throughput (exp_peak), then RBF matvec — f32 d = 3
    n = 10^5 (matvec3) and f64 d = 1 n = 3·10^4 (a Fig. 2 point), 64 MiB — with the fused kernels
    chosen at run time and with the tile path (MEMSAFE_ISA=portable: today's path), alternating in
    every round (--reps rounds of one timed call). Each row: pairs/s, its share of the exp
    throughput of its instruction set and type (one exp per pair), and the fused rows' speedup over
    the tile path of the same run. K(X, X)·v takes the symmetric form (each pair once) when it runs
    fused; a third variant, fused with MEMSAFE_SYMMETRIC=off, evaluates every pair. Then K·M, the
    same RBF K(X, X) times an n x 16 matrix (f32, d = 3, n = 3·10^4), fused and on the tile path
    (a product with several columns has no symmetric form). pairs_per_s
    counts the n² pairs of the product; evaluated_pairs_per_s (and the share of the exp peak) the
    pairs the kernels evaluated: n(n + tile_rows)/2 for the symmetric form. With keops among
    --impls, KeOps runs each workload once after memsafe's rounds (speedup_vs_keops_*)."""
    a = R.a
    if not R.wants("memsafe"):
        return
    peaks = exp_peaks(R)
    flags = cpu_flags()
    best = "avx512" if {"avx2", "fma", "avx512f"} <= flags else ("avx2" if {"avx2", "fma"} <= flags else "portable")
    works = [{"n": 20000 if a.quick else 100000, "d": 3, "precision": "f32"},
             {"n": 5000 if a.quick else 30000, "d": 1, "precision": "f64"},
             {"n": 5000 if a.quick else 30000, "d": 3, "precision": "f32", "cols": 16}]
    out = list(peaks)
    for w in works:
        req0 = {"bench": "matvec", "impl": "memsafe", "lengthscale": 1, "budget": "64MiB", "reps": 1, **w}
        rows: dict = {}
        for _ in range(a.reps):
            for isa in (None, "plain", "portable") if w.get("cols", 1) == 1 else (None, "portable"):
                if isa == "plain":
                    r = R.measure("sums", {**req0, "isa_forced": None, "symmetric_off": True})
                else:
                    r = R.measure("sums", {**req0, "isa_forced": isa})
                add_round(rows, isa, r)
        for isa, agg in rows.items():
            if not summarise_rounds(agg):
                continue
            med = agg["median_s"]
            ran = best if isa in (None, "plain") else isa
            n_, ti = agg["n"], agg.get("tile_rows") or 0
            evaluated = n_ * (n_ + ti) / 2 if agg.get("symmetric") else n_ * agg["m"]
            agg.update({"pairs_per_s": agg["n"] * agg["m"] / med, "evaluated_pairs_per_s": evaluated / med,
                        "isa_ran": ran})
            pk = next((p for p in peaks if p["isa"] == ran and p["type"] == w["precision"]), None)
            if pk:
                agg["exp_peak_gexp_per_s"] = pk["gexp_per_s"]
                agg["share_of_exp_peak"] = agg["evaluated_pairs_per_s"] / (pk["gexp_per_s"] * 1e9)
        if None in rows and "portable" in rows and rows["portable"].get("median_s"):
            f, t = rows[None], rows["portable"]
            if f.get("median_s"):
                f["speedup_vs_tile_path_median"] = t["median_s"] / f["median_s"]
                f["speedup_vs_tile_path_min"] = t["min_s"] / f["min_s"]
                if "plain" in rows and rows["plain"].get("median_s"):
                    f["speedup_vs_plain_fused_median"] = rows["plain"]["median_s"] / f["median_s"]
                    f["speedup_vs_plain_fused_min"] = rows["plain"]["min_s"] / f["min_s"]
                log(f"[sums] matvec {w['precision']} d={w['d']} n={w['n']}: fused {f['pairs_per_s'] / 1e9:.3f} G pairs/s, "
                    f"{f['speedup_vs_tile_path_median']:.2f}x the tile path (median), "
                    f"{100 * f.get('share_of_exp_peak', float('nan')):.0f} % of the exp peak")
        if R.wants("keops"):  # the peer of the goal, once per workload after memsafe's rounds
            kreq = {**req0, "impl": "keops", "reps": a.reps, "timeout": max(a.timeout, 1200)}
            kreq.pop("budget", None)
            k = R.measure("sums", kreq)
            f = rows.get(None)
            if f and f.get("median_s") and k.get("status") == "ok" and k.get("median_s"):
                f["speedup_vs_keops_median"] = k["median_s"] / f["median_s"]
                f["speedup_vs_keops_min"] = k["min_s"] / f["min_s"]
            k.pop("_dump", None)
            out.append(k)
        for agg in rows.values():
            agg.pop("_dump", None)
            out.append(agg)
    R.write("sums", out)


def suite_grad(R: Runner) -> None:
    """Gradients (issue 14's vjp): the gradient of <g, K(X, X')v> with respect to the row points X,
    RBF, 64 MiB (memsafe: grad(vjp(rbf(X, X', l) * v, g, wrt(X))); KeOps: its symbolic
    Grad(Exp(-SqDist(x,y)*s)*b, x, e) summed over j), f32 and f64, d = 3, n = 3·10^4 (10^4 with
    --quick). memsafe runs twice — built -march=native (--bin) and as a consumer builds it
    (memsafe_bench_default, --bin-default: plain -O2, no -march; skipped with a note when it is not
    built) — and alternates with KeOps in every round (--reps rounds of one timed call; KeOps's
    first call, its compilation, is untimed as always); each row keeps every round's time, and
    memsafe's rows the ratio of the medians (speedup_vs_keops_median) and of the minima."""
    a = R.a
    variants = [("memsafe", "native", a.bin)] if R.wants("memsafe") else []
    if variants and os.access(a.bin_default, os.X_OK):
        variants.append(("memsafe", "default", a.bin_default))
    elif variants:
        log(f"[grad] {a.bin_default} not built: no default-flags row (cmake --build build --target "
            "memsafe_bench_default)")
    if R.wants("keops"):
        variants.append(("keops", None, None))
    if not variants:
        return
    n = 10000 if a.quick else 30000
    out = []
    for precision in ("f32", "f64"):
        w = {"bench": "matvec", "n": n, "d": 3, "precision": precision, "lengthscale": 1, "grad": True,
             "budget": "64MiB", "reps": 1}
        rows: dict = {}
        for _ in range(a.reps):
            for impl, build, path in variants:
                req = {**w, "impl": impl}
                if impl == "keops":
                    req["timeout"] = max(a.timeout, 1200)
                else:
                    req["bin"] = path
                r = R.measure("grad", req)
                if build:
                    r["build"] = build
                add_round(rows, (impl, build), r)
        for agg in rows.values():
            agg.pop("_dump", None)
            agg.pop("bin", None)
            if summarise_rounds(agg):
                agg["pairs_per_s"] = n * n / agg["median_s"]
        ko = rows.get(("keops", None))
        for (impl, build), ms in rows.items():
            if impl != "memsafe" or not (ms.get("median_s") and ko and ko.get("median_s")):
                continue
            ms["speedup_vs_keops_median"] = ko["median_s"] / ms["median_s"]
            ms["speedup_vs_keops_min"] = ko["min_s"] / ms["min_s"]
            log(f"[grad] {precision} d=3 n={n} ({build} build): memsafe {ms['pairs_per_s'] / 1e6:.0f} M pairs/s, "
                f"{ms['speedup_vs_keops_median']:.2f}x KeOps (median)")
        out.extend(rows.values())
    R.write("grad", out)


SUITE_FUNCS = {"peak": suite_peak, "fig2": suite_fig2, "knn": suite_knn, "mnist": suite_mnist, "sweep": suite_sweep,
               "matvec3": suite_matvec3, "overhead": suite_overhead, "compile": suite_compile, "isa": suite_isa,
               "sums": suite_sums, "grad": suite_grad}


def newest_source() -> tuple[str, float] | None:
    """The most recently modified source file the benchmark binaries are built from (include/,
    examples/common/, bench/*.cpp and *.hpp) and its modification time; None when there is none."""
    files = [os.path.join(REPO, "bench", f) for f in os.listdir(os.path.join(REPO, "bench"))
             if f.endswith((".cpp", ".hpp"))]
    for root in (os.path.join(REPO, "include"), os.path.join(REPO, "examples", "common")):
        for d, _, names in os.walk(root):
            files += [os.path.join(d, n) for n in names]
    return max(((f, os.path.getmtime(f)) for f in files), key=lambda t: t[1], default=None)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="Run memsafe benchmark suites; results go to bench/results/<suite>.jsonl.",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("suite", choices=SUITES + ["all"])
    p.add_argument("--quick", action="store_true", help="tiny sizes for a smoke test; results go to OUT/quick/")
    p.add_argument("--reps", type=int, default=None, help="timed repetitions per run (default 3, --quick 1)")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--out", default=os.path.join(REPO, "bench", "results"))
    p.add_argument("--bin", default=os.path.join(REPO, "build", "bench", "memsafe_bench"))
    p.add_argument("--bin-default", default=None,
                   help="isa: memsafe_bench_default (plain -O2, no -march); default: next to --bin")
    p.add_argument("--data-dir", default=default_data_dir(REPO),
                   help="data folder (holding mnist/; bash scripts/fetch_data.sh fills one) or the MNIST folder itself")
    p.add_argument("--python", default=sys.executable, help="interpreter for the KeOps peer")
    p.add_argument("--impls", default=",".join(IMPLS), help="comma-separated subset of " + ",".join(IMPLS))
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--blas-coretype", default="auto",
                   help="OPENBLAS_CORETYPE for FAISS and the naive peer (auto: SkylakeX on an AVX-512 CPU; '': "
                        "OpenBLAS's own detection)")
    p.add_argument("--only", default="", help="knn, mnist: only the workloads matching KEY=VALUE[,KEY=VALUE...][|...] (any alternative)")
    p.add_argument("--timeout", type=float, default=600, help="seconds per measurement (then status timeout)")
    p.add_argument("--mem-limit", default="20GiB", help="address-space limit of naive runs (RLIMIT_AS)")
    p.add_argument("--fig2-max-s", type=float, default=60,
                   help="fig2: a line stops growing after a run whose median exceeds this")
    p.add_argument("--sweep-max-s", type=float, default=120,
                   help="sweep: stop lowering the budget after a run whose median exceeds this")
    p.add_argument("--peer-max-call-s", type=float, default=60,
                   help="FAISS/KeOps kNN calls predicted longer than this run on fewer queries")
    p.add_argument("--pilot-queries", type=int, default=200, help="queries in the pilot call of a slow peer")
    p.add_argument("--pilot-work", type=float, default=1e11,
                   help="n*m*d from which a peer's kNN run is piloted first")
    p.add_argument("--warmup", type=int, choices=[0, 1], default=1,
                   help="memsafe_bench --warmup: one untimed run before the timed ones")
    p.add_argument("--no-check", dest="check", action="store_false", help="no dumps, no answer checks")
    p.add_argument("--allow-stale", action="store_true",
                   help="run even when a benchmark binary is older than the sources it is built from")
    a = p.parse_args(argv)

    settle_common_args(p, a, IMPLS)
    a.mem_limit = parse_bytes(a.mem_limit)
    a.out = os.path.abspath(a.out)
    if a.quick:
        a.out = os.path.join(a.out, "quick")
        a.fig2_max_s = min(a.fig2_max_s, 5)
        a.sweep_max_s = min(a.sweep_max_s, 5)
        a.peer_max_call_s = min(a.peer_max_call_s, 10)
        a.pilot_work = min(a.pilot_work, 1e9)
    a.bin = os.path.abspath(a.bin)
    a.bin_default = os.path.abspath(a.bin_default or os.path.join(os.path.dirname(a.bin), "memsafe_bench_default"))
    a.data_dir = os.path.abspath(a.data_dir)
    needs_bin = a.suite != "compile" and any(i != "keops" for i in a.impls)
    if needs_bin and not os.access(a.bin, os.X_OK):
        p.error(f"{a.bin} not found or not executable: build it first "
                "(cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build --target memsafe_bench)")
    if needs_bin and not a.allow_stale:  # each row records the git revision: the binaries must be built from it
        used = [a.bin] + ([a.bin_default] if a.suite in ("isa", "all") or
                          (a.suite == "grad" and os.path.exists(a.bin_default)) else []) + \
               ([os.path.join(os.path.dirname(a.bin), "exp_peak")] if a.suite in ("sums", "all") else [])
        newest = newest_source()  # rows measured by a stale binary would carry the current git revision
        for b in used:
            if newest and os.path.exists(b) and os.path.getmtime(b) < newest[1]:
                p.error(f"{b} is older than {os.path.relpath(newest[0], REPO)}: rebuild it (cmake --build build "
                        f"--target {os.path.basename(b)}) or pass --allow-stale")

    R = Runner(a)
    log(f"run {R.run_id} at git {R.rev}; results in {a.out}; threads {a.threads}, reps {a.reps}")
    return run_suites(R, SUITES if a.suite == "all" else [a.suite], SUITE_FUNCS)


if __name__ == "__main__":
    sys.exit(main())
