#!/usr/bin/env python3
"""Writes docs/benchmarks.md and the plots docs/bench_fig2.png, docs/bench_sweep.png from the
JSON lines in bench/results/*.jsonl (written by bench/run.py).

  python3 bench/report.py [--results bench/results] [--doc docs/benchmarks.md] [--fig-dir docs]
                          [--peak-gflops G]

The GPU section at the end comes from bench/results/gpu_*.jsonl (bench/gpu/run_gpu.py); those
rows never enter the CPU sections.

For every measurement key (suite, bench, impl, data, metric, n, m requested, d, k, precision,
budget, threads) the latest row wins.  Nothing is typed in by hand: a cell without a row says
"not measured", a failed run shows its status (oom, timeout, unsupported, ...).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
NM = "not measured"
KIB, MIB, GIB, TIB = 1024, 1024**2, 1024**3, 1024**4
FIG2_BUDGETS = [16 * MIB, 64 * MIB, 256 * MIB, GIB]
BUDGET_64 = 64 * MIB
UNLIMITED = TIB


# ---- loading -----------------------------------------------------------------------------------

def cpu_of(r: dict) -> str:
    """The machine a row was measured on, as recorded (rows from before the CPU family and model were
    recorded say only the model name)."""
    return r.get("host_cpu") or r.get("cpu") or "unknown"


def sgpr_key(r: dict) -> tuple:
    """An SGPR training run: implementation, data set, split, m and iteration budget (row_key adds the machine)."""
    return ("sgpr_train", r.get("impl"), r.get("dataset"), r.get("split"), r.get("m"), r.get("kernel"),
            r.get("iters_max"), r.get("threads"), r.get("budget_bytes"))


def row_key(r: dict) -> tuple:
    if r.get("bench") == "compile":
        # one row per machine too: the CPU under this project changes between sessions
        return ("compile", r.get("tu"), r.get("compiler"), r.get("host_cpu")) + ((r["flags"],) if r.get("flags") else ())
    if r.get("suite") == "attention":  # one row per implementation, T, mask and mode
        return ("attention", r.get("impl"), r.get("B"), r.get("H"), r.get("T"), r.get("d"), r.get("causal"),
                r.get("mode"), r.get("threads"))
    if r.get("suite") == "sgpr_train":  # one row per implementation, data set, split, m, iteration budget and machine
        return sgpr_key(r) + (cpu_of(r),)
    if r.get("suite") == "default_flags":  # one row per workload, build and machine (bench/default_flags.sh)
        return ("default_flags", r.get("bench"), r.get("kernel"), r.get("precision"), r.get("build"), r.get("n"),
                r.get("m"), r.get("d"), r.get("threads"), r.get("host_cpu"))
    if r.get("suite") == "exact_gp":  # one row per implementation, data set, split and CG setting
        return ("exact_gp", r.get("impl"), r.get("dataset"), r.get("split"), r.get("n"), r.get("threads"),
                r.get("tolerance"), r.get("rank"), r.get("dtype"), r.get("budget_bytes"))
    # The machine is part of every CPU row's key: the CPU under this project changes between sessions, and a
    # run on one CPU must not replace another's row (nor sit beside it as if from the same machine).
    key = (r.get("suite"), r.get("bench"), r.get("impl"), r.get("data"), r.get("metric"),
           r.get("n_requested", r.get("n")), r.get("m_requested", r.get("m")), r.get("d"), r.get("k"),
           r.get("precision"), r.get("budget_bytes"), r.get("threads"),
           None if str(r.get("suite", "")).startswith("gpu_") else cpu_of(r))  # GPU rows: by their own keys
    if r.get("suite") == "isa":  # one row per machine's instruction sets, build and forced instruction set
        key += (r.get("build"), r.get("isa_forced"), r.get("screen_forced"), r.get("openblas_coretype"),
                r.get("host_simd"))
    if r.get("suite") == "sums":  # exp peaks per instruction set and type; matvec per variant
        key += (r.get("isa"), r.get("type"), r.get("isa_forced"), bool(r.get("symmetric_off")), r.get("cols") or 1)
    if r.get("suite") == "grad":  # one row per build (rows before builds were recorded: -march=native)
        key += (r.get("build") or "native",)
    if r.get("suite") == "mpi":  # one row per task, ranks and threads per rank
        key += (r.get("task"), r.get("ranks"), r.get("threads_per_rank"))
    if r.get("suite") == "blas_core_ab":  # one row per data set, OpenBLAS kernel set and round
        key += (r.get("dataset"), r.get("split"), r.get("openblas_coretype"), r.get("round"))
    return key


def load(results: str, gpu: bool = False) -> list[dict]:
    """The latest row per key from the CPU results (gpu=False) or from gpu_*.jsonl (gpu=True)."""
    latest: dict[tuple, tuple] = {}
    order = 0
    for path in sorted(glob.glob(os.path.join(results, "*.jsonl"))):
        if os.path.basename(path).startswith("gpu_") != gpu:
            continue
        with open(path) as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                try:
                    r = json.loads(line)
                except json.JSONDecodeError:
                    print(f"report: skipping a malformed line in {path}", file=sys.stderr)
                    continue
                order += 1
                k = row_key(r)
                stamp = (r.get("timestamp") or "", order)
                if k not in latest or stamp >= latest[k][0]:
                    latest[k] = (stamp, r)
    return [v[1] for v in latest.values()]


def find(rows, **want) -> dict | None:
    """The single latest row matching every field; n/m match the requested sizes."""
    best = None
    for r in rows:
        ok = True
        for key, val in want.items():
            have = r.get(key)
            if key == "n":
                have = r.get("n_requested", r.get("n"))
            elif key == "m":
                have = r.get("m_requested", r.get("m"))
            if have != val:
                ok = False
                break
        if ok and not_older(r, best):
            best = r
    return best


def find_on(rows, like: dict | None, **want) -> dict | None:
    """find() among the rows measured on the machine of row `like` (all rows when like is None): a peer's
    row from another CPU must not stand beside memsafe's, where a ratio would compare machines."""
    if like is None:
        return find(rows, **want)
    cpu = cpu_of(like)
    return find([r for r in rows if cpu_of(r) == cpu], **want)


def not_older(r: dict, best: dict | None) -> bool:
    """Whether row r replaces best as the latest: no best yet, or r's timestamp is the same or later."""
    return best is None or (r.get("timestamp") or "") >= (best.get("timestamp") or "")


def ok(r) -> bool:
    return r is not None and r.get("status") == "ok" and r.get("median_s") is not None


# ---- formatting --------------------------------------------------------------------------------

def sig(x: float, digits: int = 3) -> str:
    if x is None:
        return NM
    if x == 0:
        return "0"
    if abs(x) >= 10 ** digits:
        return f"{x:,.0f}"
    return f"{x:.{digits}g}"


def fsec(x) -> str:
    return NM if x is None else sig(x) + " s"


def fbytes(b) -> str:
    if b is None:
        return "n/a"
    b = float(b)
    for unit, size in (("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if b >= size:
            return f"{sig(b / size)} {unit}"
    return f"{int(b)} B"


def fbudget(b) -> str:
    if b is None:
        return "—"
    if b >= TIB:
        return "1 TiB (unlimited)" if b == TIB else fbytes(b)
    return fbytes(b)


def fqps(x) -> str:
    return NM if x is None else sig(x)


def status_cell(r, value: str) -> str:
    if r is None:
        return NM
    if r.get("status") != "ok":
        st = r.get("status") or "error"
        return {"oom": "out of memory", "budget_too_small": "budget too small"}.get(st, st)
    return value


def ratio_cell(num, den, mark="") -> str:
    if num is None or den is None or den == 0:
        return NM
    return f"{num / den:.2f}×{mark}"


def table(header: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


# ---- machine and peak --------------------------------------------------------------------------

def proc_cpu_mhz() -> float | None:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("cpu MHz"):
                    return float(line.split(":")[1])
    except OSError:
        pass
    return None


def machine(rows) -> dict:
    """The machine most of the rows ran on, every field from that machine's rows (the clock rounded to
    the MHz before it is counted: one CPU records 2596.122 and 2596.146)."""
    bench_rows = [r for r in rows if r.get("bench") != "compile"] or rows
    cpus = [cpu_of(r) for r in bench_rows if cpu_of(r) != "unknown"]
    cpu = max(set(cpus), key=cpus.count) if cpus else None
    same = [r for r in bench_rows if cpu_of(r) == cpu] or bench_rows

    def most(key, rounded=False):
        vals = [round(r[key]) if rounded else r[key] for r in same if r.get(key) is not None]
        return max(set(vals), key=vals.count) if vals else None

    return {"cpu": cpu, "cores": most("host_cores") or most("cores"), "mhz": most("host_cpu_mhz", rounded=True),
            "mem": most("host_mem_bytes"), "threads": most("threads")}


def peak_machine(args, mach) -> dict:
    """The cores and clock of the machine whose peak was measured (the peak row's own), else mach's."""
    r = getattr(args, "_peak_row", None)
    if not r:
        return mach
    m = dict(mach)
    m["cores"] = r.get("host_cores") or r.get("cores") or mach.get("cores")
    m["mhz"] = r.get("host_cpu_mhz") or (mach.get("mhz") if cpu_of(r) == mach.get("cpu") else None)
    return m


def peak_per_cycle_text(peak, mach) -> str:
    """The measured peak per core and cycle at the recorded clock, and what the common cores can do."""
    cores, mhz = mach.get("cores"), mach.get("mhz")
    if not peak or not cores or not mhz:
        return ""
    fpc = peak / (cores * mhz / 1000)
    return (f"That is {fpc:.0f} FP32 flops per cycle and core at the recorded {mhz:.0f} MHz; an AVX-512 FMA is "
            "16 lanes × 2 flops, Zen 4 executes one per cycle on two 256-bit pipes (32 flops/cycle), Zen 5 and "
            "Intel's server cores two (64) — more than that means the cores ran above the recorded clock. ")


def peak(args, mach) -> tuple[float | None, str]:
    fpc = args.flops_per_cycle
    if args.peak_gflops:
        return args.peak_gflops, f"{args.peak_gflops:g} GFLOP/s, given with `--peak-gflops`"
    measured = [r for r in getattr(args, "_rows", []) if r.get("bench") == "fma_peak" and r.get("fp32_gflops")]
    # The peak of the machine the tables' rows come from (shares of another CPU's peak mean nothing).
    measured = [r for r in measured if cpu_of(r) == mach.get("cpu")] or measured
    if measured:
        r = max(measured, key=lambda q: q["fp32_gflops"])  # the highest seen: the conservative share
        args._peak_row = r
        return r["fp32_gflops"], (f"**{r['fp32_gflops']:.1f} GFLOP/s**, measured by `build/bench/fma_peak` "
                                  f"({r['threads']} threads, each running 12 independent chains of "
                                  f"{r['lanes']}-lane FP32 FMAs; 2 flops per lane) in the `peak` suite on "
                                  f"{cpu_of(r)}; the highest of {len(measured)} measurement(s) there (a goal's share "
                                  "takes the peak of its own row's machine where the suite measured it)")
    cores = mach["cores"]
    mhz, src = mach["mhz"], "the `cpu MHz` line of /proc/cpuinfo recorded with the results"
    if mhz is None:
        mhz, src = proc_cpu_mhz(), "the `cpu MHz` line of this machine's /proc/cpuinfo"
    if not cores or not mhz:
        return None, "unknown (no core count or clock recorded; pass `--peak-gflops`)"
    g = cores * mhz / 1000 * fpc
    return g, (f"{cores} cores × {mhz / 1000:.3f} GHz × {fpc} FP32 flops/cycle = **{g:.1f} GFLOP/s** "
               f"(clock from {src})")


# ---- plots -------------------------------------------------------------------------------------

def plt_module():
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        return plt
    except ImportError:
        print("report: matplotlib is not installed (pip install -r bench/requirements.txt); no plots",
              file=sys.stderr)
        return None


def plot_fig2(rows, path, mach) -> bool:
    fig2 = [r for r in rows if r.get("suite") == "fig2"]
    if not any(ok(r) for r in fig2):
        return False
    plt = plt_module()
    if plt is None:
        return False
    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(11.5, 4.4))
    colors = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown"]
    budgets = sorted({r["budget_bytes"] for r in fig2 if r.get("impl") == "memsafe" and r.get("budget_bytes")})
    for i, b in enumerate(budgets):
        pts = sorted((r["n"], r) for r in fig2 if r.get("impl") == "memsafe" and r.get("budget_bytes") == b and ok(r))
        if not pts:
            continue
        c = colors[i % len(colors)]
        ns = [p[0] for p in pts]
        ax_t.plot(ns, [p[1]["median_s"] for p in pts], "o-", color=c, label=f"memsafe, budget {fbytes(b)}")
        mem = [(p[0], p[1].get("peak_temp_bytes")) for p in pts if p[1].get("peak_temp_bytes")]
        if mem:
            ax_m.plot([x for x, _ in mem], [y for _, y in mem], "o-", color=c, label=f"memsafe, budget {fbytes(b)}")
        ax_m.axhline(b, color=c, linestyle=":", linewidth=0.8)
    naive = sorted((r["n"], r) for r in fig2 if r.get("impl") == "naive")
    good = [(n, r) for n, r in naive if ok(r)]
    if good:
        ax_t.plot([n for n, _ in good], [r["median_s"] for _, r in good], "s--", color="black", label="naive dense")
        mem = [(n, r.get("peak_temp_bytes") or r.get("max_rss_bytes")) for n, r in good]
        mem = [(n, b) for n, b in mem if b]
        if mem:
            ax_m.plot([n for n, _ in mem], [b for _, b in mem], "s--", color="black", label="naive dense (matrix)")
    failed = [(n, r) for n, r in naive if r.get("status") in ("oom", "timeout")]
    if failed:
        n_fail, r_fail = failed[0]
        what = "out of memory" if r_fail["status"] == "oom" else "timed out"
        for ax in (ax_t, ax_m):
            ax.axvline(n_fail, color="black", linestyle="--", linewidth=0.8)
        ax_t.text(n_fail, ax_t.get_ylim()[1] if good else 1, f"naive: {what} \nat n = {n_fail:,} ", va="top", ha="right",
                  fontsize=8)
    for ax, ylabel in ((ax_t, "time per matvec, median (s)"), (ax_m, "peak temporary memory (bytes)")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("n")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=8)
    ax_m.set_title("dotted: the budgets", fontsize=9)
    fig.suptitle(f"Kernel matvec K(X,X)·v, RBF, d = 1, f64 — {mach['cpu']}, {mach['threads']} threads", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def plot_sweep(rows, path, mach) -> bool:
    sw = [r for r in rows if r.get("suite") == "sweep"]
    pts = sorted((r["budget_bytes"], r) for r in sw if r.get("impl") == "memsafe" and ok(r) and r.get("budget_bytes"))
    if not pts:
        return False
    plt = plt_module()
    if plt is None:
        return False
    fig, ax = plt.subplots(figsize=(7.5, 4.4))
    xs = [b for b, _ in pts]
    ax.plot(xs, [r["median_s"] for _, r in pts], "o-", color="tab:blue", label="memsafe (median)")
    ax.plot(xs, [r["min_s"] for _, r in pts], "v", color="tab:blue", alpha=0.5, label="memsafe (min)")
    fa = next((r for r in sw if r.get("impl") == "faiss" and ok(r)), None)
    if fa is not None:
        # per-query rate scaled to the memsafe query count, so the line is comparable
        m = pts[0][1]["m"]
        t = m / fa["qps_median"] if fa.get("qps_median") else fa["median_s"]
        ax.axhline(t, color="tab:red", linestyle="--", label=f"FAISS IndexFlatL2 ({t:.3g} s)")
    minb = next((r.get("min_budget_bytes") for r in sorted(sw, key=lambda r: r.get("timestamp") or "")
                 if r.get("impl") == "memsafe" and r.get("min_budget_bytes")), None)
    if minb:
        ax.axvline(minb, color="gray", linestyle=":", label=f"smallest budget ({fbytes(minb)})")
    ax.set_xscale("log", base=2)
    ax.set_xticks(xs)
    ax.set_xticklabels([fbytes(x) for x in xs], rotation=45, ha="right", fontsize=8)
    ax.minorticks_off()
    ax.set_xlabel("budget for temporaries")
    ax.set_ylabel("time per search (s)")
    r0 = pts[0][1]
    ax.set_title(f"kNN L2, n = {r0['n']:,}, m = {r0['m']:,}, d = {r0['d']}, k = {r0['k']}, {r0['precision']} — "
                 f"{mach['threads']} threads", fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


# ---- sections ----------------------------------------------------------------------------------

SUPERSCRIPT = str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹")


class Notes:
    """Footnotes shared by the tables: mark(text) returns a superscript number."""

    def __init__(self):
        self.items: list[str] = []

    def mark(self, text: str) -> str:
        if text not in self.items:
            self.items.append(text)
        return str(self.items.index(text) + 1).translate(SUPERSCRIPT)

    def render(self) -> str:
        return "\n".join(f"{str(i + 1).translate(SUPERSCRIPT)} {t}  " for i, t in enumerate(self.items))


def peer_qps_cell(r, ms, notes: Notes) -> str:
    if r is None:
        return NM
    if not ok(r):
        return status_cell(r, "")
    cell = fqps(r.get("qps_median"))
    if r.get("queries_reduced") or (r.get("m") != r.get("m_requested") and r.get("m_requested")):
        cell += notes.mark(f"measured on {r['m']:,} of the {r.get('m_requested'):,} queries "
                           f"(a call on all would exceed the driver's time limit); queries/s is comparable")
    if ms is not None and r.get("run_id") and ms.get("run_id") and r["run_id"] != ms["run_id"]:
        cell += notes.mark("from a different invocation of bench/run.py than the memsafe row")
    return cell


def check_cell(ms) -> str:
    c = (ms or {}).get("check") or {}
    parts = []
    for peer in ("faiss", "keops", "naive"):
        v = c.get("vs_" + peer)
        if v:
            parts.append(f"{peer}: {v['recall_at_k']:.4f} ({v['exact_sets'] * 100:.1f}% exact, {v['queries']} q)")
    return "; ".join(parts) if parts else "—"


def knn_rows(rows, suite, workloads, notes):
    out = []
    for w in workloads:
        ms = find(rows, suite=suite, impl="memsafe", budget_bytes=BUDGET_64, **w)
        peers = {p: find_on(rows, ms, suite=suite, impl=p, **w) for p in ("faiss", "keops", "naive")}
        ms_q = ms.get("qps_median") if ok(ms) else None
        def rq(p):
            r = peers[p]
            return r.get("qps_median") if ok(r) else None
        n_label = f"{w['n']:,}"
        out.append([
            w.get("data"), w.get("metric"), n_label, str(w.get("d")), f"{w['m']:,}",
            cpu_of(ms) if ms else "—",
            status_cell(ms, fqps(ms_q)),
            peer_qps_cell(peers["faiss"], ms, notes), peer_qps_cell(peers["keops"], ms, notes),
            peer_qps_cell(peers["naive"], ms, notes),
            ratio_cell(ms_q, rq("faiss")), ratio_cell(ms_q, rq("keops")),
            fbytes(ms.get("peak_temp_bytes")) if ok(ms) else "—",
            " / ".join(rss_cell(r) for r in (ms, peers["faiss"], peers["keops"], peers["naive"])),
            check_cell(ms),
        ])
    return out


KNN_HEADER = ["data", "metric", "n", "d", "m", "machine", "memsafe q/s", "FAISS q/s", "KeOps q/s", "naive q/s",
              "memsafe / FAISS", "memsafe / KeOps", "memsafe peak temp",
              "peak RSS, MiB (memsafe / FAISS / KeOps / naive)", "recall@k vs peers"]


def rss_cell(r) -> str:
    if r is None:
        return "–"
    if r.get("status") == "oom":
        return "oom"
    if r.get("status") != "ok" or not r.get("max_rss_bytes"):
        return "–"
    return f"{r['max_rss_bytes'] / MIB:,.0f}"


def workloads_of(rows, suite):
    seen = []
    for r in rows:
        if r.get("suite") != suite or r.get("bench") != "knn":
            continue
        w = {"data": r.get("data"), "metric": r.get("metric"), "n": r.get("n_requested", r.get("n")),
             "m": r.get("m_requested", r.get("m")), "d": r.get("d"), "k": r.get("k"), "precision": r.get("precision")}
        if w not in seen:
            seen.append(w)
    order = {"l2": 0, "l1": 1, "cosine": 2}
    return sorted(seen, key=lambda w: (w["data"] != "random", order.get(w["metric"], 9), w["n"], w["d"]))


def expected_knn_workloads():
    out = []
    for n in (10**4, 10**5, 10**6, 10**7):
        for d in (3, 10, 100):
            out.append({"data": "random", "metric": "l2", "n": n, "m": 10**4, "d": d, "k": 10, "precision": "f32"})
    for metric in ("l1", "cosine"):
        for n in (10**5, 10**6):
            for d in (10, 100):
                out.append({"data": "random", "metric": metric, "n": n, "m": 10**4, "d": d, "k": 10, "precision": "f32"})
    return out


def merge_workloads(expected, measured):
    out = list(expected)
    for w in measured:
        if w not in out:
            out.append(w)
    return out


def section_fig2(rows, img) -> str:
    fig2 = [r for r in rows if r.get("suite") == "fig2"]
    s = ["## Kernel matvec against n (the eXLA paper's Fig. 2)", "",
         "`python3 bench/run.py fig2` — K(X,X)·v with the RBF kernel (ℓ = 1), X and v ~ N(0,1), d = 1, f64; "
         "n grows 1e3, 3e3, 1e4, … and a line stops after a run slower than about a minute. "
         "Each cell: median time of the repetitions / peak temporary bytes (memsafe) or the dense matrix (naive).", ""]
    if not fig2:
        return "\n".join(s + [NM + ".", ""])
    if img:
        s += [f"![Kernel matvec: time and peak memory against n]({img})", ""]
    budgets = sorted({r["budget_bytes"] for r in fig2 if r.get("impl") == "memsafe" and r.get("budget_bytes")}
                     | set(FIG2_BUDGETS))
    ns = sorted({r.get("n_requested", r.get("n")) for r in fig2})
    header = ["n"] + [f"memsafe {fbytes(b)}" for b in budgets] + ["naive dense", "max abs error vs naive (relative to max output)"]
    body = []
    for n in ns:
        row = [f"{n:,}"]
        errs = []
        for b in budgets:
            r = find(fig2, impl="memsafe", n=n, budget_bytes=b)
            row.append(status_cell(r, f"{fsec(r.get('median_s'))} / {fbytes(r.get('peak_temp_bytes'))}" if r else ""))
            v = ((r or {}).get("check") or {}).get("vs_naive")
            if v:
                errs.append(v["max_rel_diff"])
        r = find(fig2, impl="naive", n=n)
        row.append(status_cell(r, f"{fsec(r.get('median_s'))} / {fbytes(r.get('peak_temp_bytes'))}" if r else ""))
        row.append(f"{max(errs):.1e}" if errs else "—")
        body.append(row)
    return "\n".join(s + [table(header, body), ""])


def section_knn(rows, notes) -> str:
    s = ["## kNN (the eXLA paper's Table 1 at CPU scale)", "",
         "`python3 bench/run.py knn` — m = 10⁴ queries, k = 10, f32, random N(0,1) data; memsafe with a 64 MiB "
         "budget. Queries per second from the median of the repetitions (higher is better); ratios are "
         "memsafe's queries/s over the peer's. FAISS: its exact flat indexes (IndexFlatL2/IP) as run by memsafe_bench; "
         "KeOps: `LazyTensor.argKmin`; naive: the full m×n distance matrix, then the top k. "
         "Recall@k compares memsafe's indices with the peer's on the first ≤ 2000 queries (KeOps only on MNIST: "
         "its random numbers differ). Each line is its workload's newest run; *machine* is the CPU it ran on "
         "(the project's machine changes between sessions: compare q/s within a line, or across lines of one "
         "machine only).", ""]
    ws = merge_workloads(expected_knn_workloads(), workloads_of(rows, "knn"))
    return "\n".join(s + [table(KNN_HEADER, knn_rows(rows, "knn", ws, notes)), ""])


def section_mnist(rows, notes) -> str:
    s = ["## MNIST kNN", "",
         "`python3 bench/run.py mnist` — database: the 60000 training images, queries: the 10000 test images, "
         "d = 784, pixels / 255, k = 10, f32; memsafe with a 64 MiB budget.", ""]
    exp = [{"data": "mnist", "metric": mt, "n": 60000, "m": 10000, "d": 784, "k": 10, "precision": "f32"}
           for mt in ("l2", "l1")]
    ws = merge_workloads(exp, workloads_of(rows, "mnist"))
    return "\n".join(s + [table(KNN_HEADER, knn_rows(rows, "mnist", ws, notes)), ""])


def section_sweep(rows, img) -> str:
    sw = [r for r in rows if r.get("suite") == "sweep"]
    s = ["## Budget sweep", "",
         "`python3 bench/run.py sweep` — kNN L2, n = 10⁶, m = 2000 queries, d = 100, k = 10, f32: time against the budget, "
         "from 1 GiB down to the smallest budget memsafe accepts (going down stops after a run slower than "
         "`--sweep-max-s` seconds: tiny budgets mean tiny tiles).", ""]
    if not sw:
        return "\n".join(s + [NM + ".", ""])
    if img:
        s += [f"![kNN time against budget]({img})", ""]
    minb = next((r.get("min_budget_bytes") for r in sw if r.get("min_budget_bytes")), None)
    if minb:
        s += [f"Smallest budget reported by memsafe: {fbytes(minb)} ({minb:,} bytes).", ""]
    body = []
    for r in sorted((r for r in sw if r.get("impl") == "memsafe"), key=lambda r: r.get("budget_bytes") or 0):
        tiles = f"{r.get('tile_rows')} × {r.get('tile_cols')}" if r.get("tile_rows") else "—"
        body.append([fbudget(r.get("budget_bytes")), status_cell(r, fsec(r.get("median_s"))),
                     status_cell(r, fsec(r.get("min_s"))), str(r.get("reps") or "—"),
                     status_cell(r, fqps(r.get("qps_median"))),
                     fbytes(r.get("peak_temp_bytes")) if ok(r) else "—", tiles])
    fa = next((r for r in sw if r.get("impl") == "faiss"), None)
    if fa is not None:
        extra = f" on {fa['m']:,} queries" if fa.get("queries_reduced") else ""
        body.append([f"FAISS (no budget){extra}", status_cell(fa, fsec(fa.get("median_s"))),
                     status_cell(fa, fsec(fa.get("min_s"))), str(fa.get("reps") or "—"),
                     status_cell(fa, fqps(fa.get("qps_median"))), "—", "—"])
    return "\n".join(s + [table(["budget", "median", "min", "runs", "queries/s", "peak temp", "tile (rows × cols)"],
                                body), ""])


def section_matvec3(rows) -> str:
    mv = [r for r in rows if r.get("suite") == "matvec3"]
    s = ["## Kernel matvec, d = 3, f32", "",
         "`python3 bench/run.py matvec3` — K(X,X)·v, RBF (ℓ = 1), n = 10⁵, d = 3, f32; memsafe with a 64 MiB budget, "
         "KeOps `(-D_ij/2).exp() @ v`, naive dense. K = k(X, X): memsafe's row takes the symmetric form (each "
         "pair evaluated once, docs/design.md “Symmetric K·v”) when its `symmetric` field is true; pairs/s counts "
         "all n² pairs for every implementation.", ""]
    if not mv:
        return "\n".join(s + [NM + ".", ""])
    for cpu, rs in by_machine(mv):
        s += machine_line(cpu, rs) + [table(["impl", "n", "d", "precision", "median", "min", "pairs/s", "peak temp",
                                             "max RSS"], matvec3_body(rs)), ""]
    return "\n".join(s)


def machine_line(cpu, rs) -> list[str]:
    """The line above one machine's table in a section that has a table per machine."""
    stamps = sorted((r.get("timestamp") or "")[:10] for r in rs if r.get("timestamp"))
    when = f", {stamps[0]}" + (f" … {stamps[-1]}" if stamps[-1] != stamps[0] else "") if stamps else ""
    revs = sorted({r.get("git_rev") for r in rs if r.get("git_rev")})
    return [f"Machine: {cpu}{when}" + (f", git {', '.join(f'`{x}`' for x in revs)}" if revs else "") + ".", ""]


def matvec3_body(mv) -> list[list[str]]:
    body = []
    for impl in ("memsafe", "keops", "naive"):
        for r in sorted((r for r in mv if r.get("impl") == impl), key=lambda r: r.get("n") or 0):
            body.append([impl, f"{r.get('n_requested', r.get('n')):,}", str(r.get("d")), r.get("precision"),
                         status_cell(r, fsec(r.get("median_s"))), status_cell(r, fsec(r.get("min_s"))),
                         status_cell(r, sig(r.get("pairs_per_s")) if r.get("pairs_per_s") else NM),
                         fbytes(r.get("peak_temp_bytes")) if ok(r) else "—",
                         fbytes(r.get("max_rss_bytes")) if r.get("max_rss_bytes") else "—"])
    return body


def section_sums(rows) -> str:
    su = [r for r in rows if r.get("suite") == "sums"]
    s = ["## Fused kernel sums and the exp throughput", "",
         "`python3 bench/run.py sums` — first `exp_peak` (vector exp throughput per instruction set and type, all "
         "threads), then RBF K(X, X)·v with a 64 MiB budget: f32 d = 3 n = 10⁵ and f64 d = 1 n = 3·10⁴, in three "
         "variants alternating in every round — fused and symmetric (the default: each pair once), fused with "
         "`MEMSAFE_SYMMETRIC=off` (every pair), and the tile path (`MEMSAFE_ISA=portable`); then KeOps (CPU, "
         "`(-D_ij/2).exp() @ v`, every pair) once per workload. Pairs/s counts the n² "
         "pairs of the product; evaluated pairs/s the pairs the kernels computed (n(n + tile rows)/2 for the "
         "symmetric form), and its share of the exp throughput of the same instruction set and type (one exp per "
         "pair). Then K·M: the same RBF K(X, X) times an n × 16 matrix (f32, d = 3, n = 3·10⁴; c = 16 in the "
         "workload column), fused and on the tile path (several columns: no symmetric form), and KeOps "
         "(`K @ V`). Min / median over the rounds.", ""]
    if not su:
        return "\n".join(s + [NM + ".", ""])
    for cpu, rs in by_machine(su):
        s += machine_line(cpu, rs) + sums_tables(rs)
    return "\n".join(s)


def sums_tables(su) -> list[str]:
    """The sums suite's exp-throughput and K·v tables for the rows of one machine."""
    s = []
    pk = [r for r in su if r.get("bench") == "exp_peak" and r.get("status") == "ok"]
    if pk:
        s += [table(["instruction set", "type", "threads", "exp/s"],
                    [[r.get("isa"), r.get("type"), str(r.get("threads")), sig(r.get("gexp_per_s") * 1e9)]
                     for r in sorted(pk, key=lambda r: (r.get("isa"), r.get("type")))]), ""]
    body = []
    mv = [r for r in su if r.get("bench") == "matvec"]

    def variant(r):
        if r.get("impl") == "keops":
            return "KeOps (every pair)"
        if r.get("isa_forced") == "portable":
            return "tile path"
        return "fused, every pair" if r.get("symmetric_off") else ("fused, symmetric" if r.get("symmetric") else "fused")

    for r in sorted(mv, key=lambda r: (r.get("cols") or 1, r.get("precision"), r.get("n") or 0, variant(r))):
        sp = r.get("speedup_vs_tile_path_median")
        sp2 = r.get("speedup_vs_plain_fused_median")
        sp3 = r.get("speedup_vs_keops_median")
        cols = f" c={r['cols']}" if (r.get("cols") or 1) > 1 else ""
        body.append([f"{r.get('precision')} d={r.get('d')} n={r.get('n'):,}{cols}", variant(r), str(r.get("isa") or "—"),
                     status_cell(r, f"{sig(r.get('min_s'))} / {sig(r.get('median_s'))} s"),
                     sig(r.get("pairs_per_s")) if r.get("pairs_per_s") else NM,
                     sig(r.get("evaluated_pairs_per_s")) if r.get("evaluated_pairs_per_s") else NM,
                     f"{100 * r['share_of_exp_peak']:.0f} %" if r.get("share_of_exp_peak") else NM,
                     " / ".join(f"{x:.2f}×" if x else "—" for x in (sp2, sp, sp3)) if (sp or sp2 or sp3) else "—"])
    s += [table(["workload", "variant", "isa", "min / median", "pairs/s", "evaluated pairs/s",
                 "share of exp/s", "speed-up vs every pair / tile path / KeOps (median)"], body), ""]
    return s


def section_grad(rows) -> str:
    gr = [r for r in rows if r.get("suite") == "grad"]
    s = ["## Gradients of a kernel sum (vjp)", "",
         "`python3 bench/run.py grad` — the gradient of ⟨g, K(X, X′)·v⟩ with respect to the row points X (RBF, "
         "ℓ = 1, d = 3, X′ the same points as the column side): memsafe's `grad(vjp(rbf(X, X′) * v, g, wrt(X)))` "
         "with a 64 MiB budget against KeOps' own symbolic derivative (`Genred(\"Grad(Exp(-SqDist(x,y)*s)*b, x, "
         "e)\")`, summed over j), alternating in every round. memsafe runs built with -march=native and, as "
         "“memsafe (default flags)”, built as a consumer builds it (plain -O2, no -march: memsafe_bench_default). "
         "Pairs/s counts the n² pairs. Min / median over the rounds.", ""]
    if not gr:
        return "\n".join(s + [NM + ".", ""])
    body = []
    for r in sorted(gr, key=lambda r: (r.get("precision"), r.get("n") or 0, r.get("impl"), r.get("build") == "default")):
        sp = r.get("speedup_vs_keops_median")
        impl = r.get("impl") + (" (default flags)" if r.get("build") == "default" else "")
        body.append([f"{r.get('precision')} d={r.get('d')} n={r.get('n'):,}", impl, str(r.get("threads")),
                     status_cell(r, f"{sig(r.get('min_s'))} / {sig(r.get('median_s'))} s"),
                     sig(r.get("pairs_per_s")) if r.get("pairs_per_s") else NM,
                     fbytes(r["peak_temp_bytes"]) if r.get("peak_temp_bytes") else "—",
                     f"{sp:.2f}× / {r.get('speedup_vs_keops_min'):.2f}×" if sp else "—"])
    s += [table(["workload", "impl", "threads", "min / median", "pairs/s", "peak temp", "speed-up vs KeOps (median / min)"],
                body), ""]
    return "\n".join(s)


def section_attention(rows) -> str:
    at = [r for r in rows if r.get("suite") == "attention"]
    s = ["## Attention (forward, forward + backward)", "",
         "`python3 bench/attention.py` — one multi-head attention layer, B = 1, H = 8, d = 64, f32, 2 threads: "
         "memsafe (`examples/attention`, `softmax_sum(dot(Q, K) / sqrt(d) [+ causal], V)` with a 64 MiB budget, "
         "then `attention_backward`), PyTorch's `scaled_dot_product_attention` on the CPU (`torch_sdpa`) and a naive "
         "dense PyTorch `softmax(Q Kᵀ / sqrt(d)) V` that forms the T×T scores (`torch_naive`); forward alone "
         "(torch under `no_grad`) and forward + backward (memsafe: the forward's and the backward's times added; "
         "torch: forward then `backward(dO)`). Seconds: min / median of the repetitions (torch: after one untimed "
         "warm-up). Each run is its own process, the three back to back per row. memsafe's memory is its peak "
         "temporaries (the accountant's count, outputs excluded); torch's is the peak RSS above the RSS once the "
         "inputs exist. The torch peers run under an address-space cap (8 GiB above the inputs): a run that "
         "cannot allocate under it shows “out of memory”. The machine is shared (2 cores, other builds running): "
         "compare ratios within a row, not rows across runs.", ""]
    if not at:
        return "\n".join(s + [NM + ".", ""])

    def cell(r):
        if r is None:
            return NM
        return status_cell(r, f"{sig(r.get('seconds_min'))} / {sig(r.get('seconds_median'))} s")

    def mem(r):
        if r is None or r.get("status") != "ok":
            return "—"
        if r.get("impl") == "memsafe":
            return fbytes(r.get("peak_temp_bytes"))
        if r.get("max_rss_bytes") and r.get("rss_inputs_bytes"):
            return fbytes(max(0, r["max_rss_bytes"] - r["rss_inputs_bytes"]))
        return "—"

    def t(r):
        return r.get("seconds_min") if r is not None and r.get("status") == "ok" else None

    body = []
    keys = sorted({(r.get("B", 1), r.get("T"), bool(r.get("causal")), r.get("mode")) for r in at})
    for B, T, causal, mode in keys:
        m = find(at, impl="memsafe", B=B, T=T, causal=causal, mode=mode)
        sd = find(at, impl="torch_sdpa", B=B, T=T, causal=causal, mode=mode)
        nv = find(at, impl="torch_naive", B=B, T=T, causal=causal, mode=mode)
        body.append([str(B), f"{T:,}", "yes" if causal else "no", "forward" if mode == "fwd" else "forward + backward",
                     cell(m), cell(sd), cell(nv), ratio_cell(t(sd), t(m)), mem(m), mem(sd), mem(nv)])
    s.append(table(["B", "T", "causal", "pass", "memsafe min / median", "SDPA min / median", "naive min / median",
                    "SDPA / memsafe (min)", "memsafe peak temp", "SDPA peak RSS above inputs",
                    "naive peak RSS above inputs"], body))
    s.append("")
    # causal over non-causal, memsafe
    cr = []
    for B, T in sorted({(r.get("B", 1), r.get("T")) for r in at}):
        for mode in ("fwd", "fwdbwd"):
            a = find(at, impl="memsafe", B=B, T=T, causal=True, mode=mode)
            b = find(at, impl="memsafe", B=B, T=T, causal=False, mode=mode)
            if ok(a) and ok(b):
                cr.append([str(B), f"{T:,}", "forward" if mode == "fwd" else "forward + backward",
                           ratio_cell(t(a), t(b))])
    if cr:
        s += ["memsafe, causal time over non-causal time (min):", "",
              table(["B", "T", "pass", "causal / non-causal"], cr), ""]
    big = sorted((r for r in at if r.get("impl") == "memsafe" and r.get("status") == "ok" and r.get("B", 1) == 1),
                 key=lambda r: r.get("T") or 0)
    if big:
        r = big[-1]
        s += [f"Largest memsafe run: B = 1, T = {r['T']:,}, H = {r.get('H')}, {'causal' if r.get('causal') else 'non-causal'} "
              f"{'forward' if r.get('mode') == 'fwd' else 'forward + backward'}: {sig(r.get('seconds_min'))} s with "
              f"{fbytes(r.get('peak_temp_bytes'))} of temporaries (its dense scores would be "
              f"{fbytes(r.get('B', 1) * r.get('H', 8) * r['T'] ** 2 * 4)}).", ""]
    return "\n".join(s)


SGPR_IMPLS = ("memsafe", "gpflow", "gpytorch")


def sgpr_rows(rows, every_machine: bool = False) -> list[dict]:
    """SGPR training rows: the latest per implementation, data set, split, m and iteration budget, whichever
    machine ran it (what the table's statistics and the plot show); with every_machine, each machine's latest
    (row_key adds the machine: what the speed ratios pair, split by split, on one machine)."""
    key = row_key if every_machine else sgpr_key
    latest: dict[tuple, dict] = {}
    for r in rows:
        if r.get("suite") == "sgpr_train" and not_older(r, latest.get(key(r))):
            latest[key(r)] = r
    return list(latest.values())


AVX512_BLAS_CORES = ("skylakex", "cooperlake", "sapphirerapids")  # OpenBLAS's AVX-512 kernel sets


def blas_ab_section(rows) -> list[str]:
    """bench/gp/blas_core_ab.sh's rows: sgpr_train --bench under each OpenBLAS kernel set, per machine."""
    ab = [r for r in rows if r.get("suite") == "blas_core_ab" and r.get("status") == "ok"]
    if not ab:
        return []
    med = statistics.median
    body = []
    for cpu, ds, m in sorted({(cpu_of(r), r.get("dataset"), r.get("m")) for r in ab}, key=str):
        mine = [r for r in ab if (cpu_of(r), r.get("dataset"), r.get("m")) == (cpu, ds, m)]
        by = {}
        for r in mine:
            by.setdefault(r.get("openblas_coretype"), []).append(r)
        base = by.get("Haswell")
        base_t = med([r["seconds_bound_grad_median"] for r in base]) if base else None
        for req in sorted(by, key=str):
            rs = by[req]
            t = med([r["seconds_bound_grad_median"] for r in rs])
            body.append([cpu, f"{ds} (n = {rs[0].get('n_train'):,})", f"{m:,}", str(req),
                         ", ".join(sorted({str(r.get("blas_core")) for r in rs})), str(len(rs)),
                         f"{sig(min(r['seconds_bound_min'] for r in rs))} / {sig(med([r['seconds_bound_median'] for r in rs]))} s",
                         f"{sig(min(r['seconds_bound_grad_min'] for r in rs))} / {sig(t)} s",
                         f"{base_t / t:.2f}×" if base_t else "—"])
    head = ["machine", "data set", "m", "OPENBLAS_CORETYPE", "OpenBLAS ran", "runs", "bound (min / median)",
            "bound + gradient (min / median)", "Haswell's median / this median"]
    return ["### OpenBLAS's kernel set under the bound and gradient", "",
            "`bash bench/gp/blas_core_ab.sh` — `sgpr_train --bench` (the bound, and the bound with its gradient, at the "
            "initial point; no training) with `OPENBLAS_CORETYPE` set to each kernel set in alternating rounds (`unset`: "
            "OpenBLAS's own choice for the CPU): the n-sized SYRK and GEMMs and the m×m factorisations run on "
            "OpenBLAS, the kernel evaluations on memsafe's own dispatched kernels. Min and median over the runs' "
            "own minima and medians (each run times `--bench` evaluations); `bench/results/gp_blas_core.jsonl`.", "",
            table(head, body), ""]


def stopped_by_time_limit(r) -> bool:
    """An sgpr_train (or gpflow_train.py) run that --time-limit stopped before its iteration budget."""
    return r.get("lbfgs_status") == "time_limit"


def stopped_by_line_search(r) -> bool:
    """A run whose L-BFGS ended before its iteration budget because a line search failed: sgpr_train says so
    itself (stopped_by_line_search, after any restarts); gpflow_train.py's rows carry scipy's message
    (ABNORMAL_TERMINATION_IN_LNSRCH). sgpr_train rows recorded before it wrote the flag saw one such
    failure only, liblbfgs's rounding_error (bike split 1, m = 5000)."""
    if "stopped_by_line_search" in r:
        failed = bool(r["stopped_by_line_search"])
    else:
        failed = r.get("lbfgs_status") == "rounding_error" or "LNSRCH" in str(r.get("lbfgs_message", ""))
    return failed and (r.get("iterations") or 0) < (r.get("iters_max") or 0)


def iterations_cell(r) -> str:
    """The iterations a run made, marked ‡ (time limit), ¶ (a failed line search) and ↻n (n restarts)."""
    c = str(r.get("iterations"))
    if stopped_by_time_limit(r):
        c += " ‡"
    if stopped_by_line_search(r):
        c += " ¶"
    if r.get("lbfgs_restarts"):
        c += f" ↻{r['lbfgs_restarts']}"
    return c


def mean_spread(vals) -> str:
    vals = [v for v in vals if v is not None and v == v]
    if not vals:
        return NM
    mu = sum(vals) / len(vals)
    if len(vals) == 1:
        return f"{mu:.4f}"
    return f"{mu:.4f} ± {(max(vals) - min(vals)) / 2:.4f}"


def plot_sgpr(rows, path, mach) -> bool:
    sg = [r for r in sgpr_rows(rows) if r.get("status") == "ok"]
    if not sg:
        return False
    plt = plt_module()
    if plt is None:
        return False
    from matplotlib.ticker import NullFormatter
    sets = sorted({r["dataset"] for r in sg})
    # The lines join runs of the common iteration budget; a run with another budget (e.g. a few
    # iterations at m = 10^4) is a separate, labelled marker, not a point of the same curve.
    # A run stopped by its time limit counts as a budget of the iterations it did.
    def run_iters(r):
        return r.get("iterations") if stopped_by_time_limit(r) else r.get("iters_max")

    budgets = [run_iters(r) for r in sg]
    main_it = max(set(budgets), key=budgets.count)
    fig, axes = plt.subplots(2, len(sets), figsize=(max(6.4, 4.6 * len(sets)), 6.8), squeeze=False)
    for col, ds in enumerate(sets):
        for row, (key, label) in enumerate((("rmse", "test RMSE"), ("nlpd", "test NLPD"))):
            ax = axes[row][col]
            for ci, impl in enumerate(SGPR_IMPLS):
                for oi, it in enumerate(sorted({run_iters(r) for r in sg if r["dataset"] == ds} - {main_it}, key=str)):
                    off = [r for r in sg if r["dataset"] == ds and r.get("impl") == impl and run_iters(r) == it
                           and r.get(key) is not None]
                    if off:
                        ax.plot([r["m"] for r in off], [r[key] for r in off], "x+*D"[oi % 4], markersize=8, color=f"C{ci}",
                                label=f"{impl}, {it} iterations only")
                        ax.legend(fontsize=8)
            # One value per split (load() keeps a split's latest row), by m.
            per = {impl: {} for impl in SGPR_IMPLS}
            for r in sg:
                if (r["dataset"] == ds and r.get("impl") in per and r.get(key) is not None
                        and run_iters(r) == main_it):
                    per[r["impl"]].setdefault(r["m"], {})[r.get("split")] = r[key]
            for ci, (impl, style) in enumerate(zip(SGPR_IMPLS, ("o-", "s--", "^:"))):
                pts = per[impl]
                if pts:
                    ms = sorted(pts)
                    mu = [sum(pts[m].values()) / len(pts[m]) for m in ms]
                    lo = [min(pts[m].values()) for m in ms]
                    hi = [max(pts[m].values()) for m in ms]
                    ax.errorbar(ms, mu, yerr=[[a - b for a, b in zip(mu, lo)], [b - a for a, b in zip(mu, hi)]],
                                fmt=style, capsize=3, color=f"C{ci}", label=f"{impl} (splits: mean, min–max)")
                    # A point from fewer splits than the rest of memsafe's line, or a peer's from fewer than
                    # memsafe's at that m, is no like-for-like mean: drawn hollow and labelled with its
                    # splits; beside a peer's, memsafe's mean over those same splits (a small hollow circle).
                    full = max(len(v) for v in pts.values())
                    for m, v in zip(ms, mu):
                        mine = per["memsafe"].get(m, {})
                        # memsafe: e.g. m = 10^4, whose splits are still being measured
                        if len(pts[m]) >= (full if impl == "memsafe" else len(mine)):
                            continue
                        ax.plot([m], [v], style[0], color=f"C{ci}", markerfacecolor="white", markersize=7, zorder=5)
                        same = [mine[sp] for sp in pts[m] if sp in mine] if impl != "memsafe" else []
                        if same:
                            ax.plot([m], [sum(same) / len(same)], "o", color="C0", markerfacecolor="white",
                                    markersize=5, zorder=5)
                        ax.annotate("split " + ",".join(str(sp) for sp in sorted(pts[m])), (m, v),
                                    textcoords="offset points", xytext=(-6, 6), ha="right", fontsize=7,
                                    color=f"C{ci}")
            ax.set_xscale("log")
            # Ticks at the m values run, in plain numbers (log-axis minor labels at 3·10³ and 4·10³ overlap).
            ticks = sorted({r["m"] for r in sg if r["dataset"] == ds})
            ax.set_xticks(ticks)
            ax.set_xticklabels([f"{t:,}" for t in ticks], fontsize=8)
            ax.xaxis.set_minor_formatter(NullFormatter())
            ax.set_xlabel("inducing points m")
            ax.set_ylabel(label)
            ax.set_title(ds, fontsize=10)
            ax.grid(True, which="both", alpha=0.3)
            if row == 0 and col == 0 or ax.get_legend() is not None:
                ax.legend(fontsize=8)
    fig.suptitle("SGPR trained (Matérn 3/2, ARD, inducing points trained):\nmemsafe vs GPflow and GPyTorch, same start, "
                 "same L-BFGS iteration budget", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


SGPR_SHARED_LOAD = 3.0  # a 1-minute load above this at a run's start on the 2 cores: other work ran beside it


def sgpr_shared(r) -> bool:
    """Timed beside other work: marked so by hand (`cpu_shared`), or started at a load above
    SGPR_SHARED_LOAD (a sweep's previous run alone leaves ≈ 2 on the 2 cores)."""
    return bool(r.get("cpu_shared")) or (r.get("load_1m") or 0) > SGPR_SHARED_LOAD


SGPR_PAIR_HOURS = 6  # a ratio pairs runs started this close: one session or the next, one machine and its load


def sgpr_same_machine(a: dict, b: dict) -> bool:
    """Two runs to compare: the same recorded CPU (or both none, rows from before 2026-11-27), started
    within SGPR_PAIR_HOURS of each other. The same CPU model days apart is another machine of the kind
    with another neighbourhood: pairs across sessions moved by ≈ 35 % (elevators m = 2000 against
    GPflow: 2.5–2.7× within a session, 3.3–3.7× paired hours apart)."""
    return cpu_of(a) == cpu_of(b) and abs(sgpr_hours_apart(a, b)) <= SGPR_PAIR_HOURS


def sgpr_hours_apart(a: dict, b: dict) -> float:
    import datetime
    ta, tb = (datetime.datetime.fromisoformat(r.get("timestamp") or "1970-01-01T00:00:00+00:00") for r in (a, b))
    return (ta - tb).total_seconds() / 3600


def section_sgpr(rows, img) -> str:
    sg, every = sgpr_rows(rows), sgpr_rows(rows, every_machine=True)
    s = ["## SGPR training (issue 14: against GPflow and GPyTorch)", "",
         "`bash bench/gp/sweep.sh` with `IMPLS=\"memsafe gpflow gpytorch\"` — SGPR (Titsias' collapsed bound) trained "
         "end to end on a UCI split: kernel variance, ARD lengthscales, noise variance and the inducing points. "
         "memsafe: `examples/sgpr_train` (the bound and its gradient under a 64 MiB budget of temporaries, liblbfgs). "
         "GPflow: `bench/gp/gpflow_train.py`, `gpflow.models.SGPR` from the same start — the same standardised "
         "data, initial σ_f² = 1, ℓ = 1, σ² = 0.1, the same initial inducing points (memsafe's k-means++ seeding), "
         "softplus transforms and jitter — trained by scipy's L-BFGS-B (`gpflow.optimizers.Scipy`). GPyTorch: "
         "`bench/gp/gpytorch_train.py`, `InducingPointKernel` (Titsias' bound, exact m×m Cholesky algebra) from the "
         "same start with the same fixed 1e-6 jitter (its bound at the start equals memsafe's to ≈ 4e-14), its "
         "default noise floor σ² ≥ 1e-4, Titsias' predictive, `torch.optim.LBFGS` with a strong-Wolfe line search. "
         "All stop after at most the same number of L-BFGS iterations (the same budget, not the same steps), same "
         "threads (each op on that many threads, one op at a time: TensorFlow's and PyTorch's inter-op pools at 1 "
         "from 2026-12-03, at the thread count before). Test RMSE and NLPD in the data's units, mean ± half the "
         "range over the splits run; time per evaluation of the bound and its gradient (training time / "
         "evaluations: memsafe's is the time inside its evaluations, the peers' their whole training loop, "
         "GPflow's with its one-off `tf.function` tracing, a few seconds: several % of its time at m = 500, "
         "which flatters memsafe's ratios there); peak RSS of the process (the "
         "peers' hold the n×m matrices their frameworks form; a peer whose RSS passes the memory available at its "
         "start less 1 GiB is stopped and recorded as `oom`). The machine is shared (2 cores): each row records the "
         "load at its start.", ""]
    if not sg:
        return "\n".join(s + [f"{NM}: run `IMPLS=\"memsafe gpflow gpytorch\" bash bench/gp/sweep.sh`.", ""])
    body = []
    groups = sorted({(r.get("dataset"), r.get("m"), r.get("iters_max")) for r in sg}, key=lambda g: (g[0], g[1], g[2] or 0))
    for ds, m, it in groups:
        per_split = {}  # seconds per evaluation of each implementation's good runs, by split
        lines = []
        for impl in SGPR_IMPLS:
            def of_impl(rows):
                return [r for r in rows if r.get("impl") == impl and r.get("dataset") == ds and r.get("m") == m
                        and r.get("iters_max") == it]
            rs = of_impl(sg)
            if not rs:
                continue
            good = [r for r in rs if r.get("status") == "ok"]
            bad = [r for r in rs if r.get("status") != "ok"]
            cells = [ds, f"{m:,}", str(it), impl]
            if good:
                splits = ",".join(str(r.get("split")) for r in sorted(good, key=lambda r: r.get("split", 0)))
                times = [r["seconds_per_evaluation"] for r in good]
                shared = any(sgpr_shared(r) for r in good)
                # One machine: the mean; splits last run on different machines: their range (◇), no mean.
                if len({cpu_of(r) for r in good}) > 1:
                    t_cell = f"{sig(min(times))}–{sig(max(times))} ◇"
                else:
                    t_cell = sig(sum(times) / len(times))
                # A time taken beside other work is no speed comparison: only the splits timed alone pair up.
                # Every machine's run of a split is kept for the pairing (the table shows the latest).
                shown = {r.get("split"): r for r in good}
                timed: dict = {}
                for r in of_impl(every):
                    if r.get("status") == "ok" and not sgpr_shared(r):
                        timed.setdefault(r.get("split"), []).append(r)
                per_split[impl] = (timed, shown)
                wide = impl == "memsafe" and any(str(r.get("blas_core", "")).lower() in AVX512_BLAS_CORES for r in good)
                cells += [splits, mean_spread([r.get("rmse") for r in good]), mean_spread([r.get("nlpd") for r in good]),
                          t_cell + (" †" if shared else "") + (" §" if wide else ""),
                          "/".join(iterations_cell(r) for r in good),
                          fbytes(max(r.get("max_rss_bytes") or 0 for r in good))]
            else:
                why = ", ".join(sorted({str(r.get("status")) for r in bad})) or NM
                peak = max((r.get("max_rss_bytes") or 0 for r in bad), default=0)
                cells += [why, "—", "—", "—", "—", f"> {fbytes(peak)}" if peak else "—"]
            lines.append((impl, cells))
        for impl, cells in lines:
            # Paired by split, and only where both runs were on the same machine as recorded (`cpu_of`; the
            # machine under this project changes between sessions): the mean of the per-split ratios.
            (mine, shown), (base, _) = per_split.get(impl, ({}, {})), per_split.get("memsafe", ({}, {}))
            ratios = []
            for sp in (sorted(mine, key=str) if impl != "memsafe" else []):
                # the peer's run shown if memsafe ran beside it, else any peer run; with the memsafe run
                # that started closest to it on the same machine
                cands = sorted(mine[sp], key=lambda r: r is not shown.get(sp))
                pair = None
                for a in cands:
                    near = [b for b in base.get(sp, []) if sgpr_same_machine(a, b)]
                    if near:
                        pair = (a, min(near, key=lambda b: abs(sgpr_hours_apart(a, b))))
                        break
                if pair:
                    ratios.append(pair[0]["seconds_per_evaluation"] / pair[1]["seconds_per_evaluation"])
            n = len(ratios)
            cells.append(f"{sum(ratios) / n:.2f}× ({n} split{'s' if n > 1 else ''})" if ratios else "—")
            body.append(cells)
    head = ["data set", "m", "iterations (max)", "implementation", "splits (or why none)", "test RMSE", "test NLPD",
            "s / evaluation", "iterations", "peak RSS", "its s / memsafe's s (mean over splits)"]
    s += [table(head, body), ""]
    s += ["Each row shows the latest run of each split, whichever machine ran it (the CPU under this project "
          "changes between sessions). The last column pairs a peer's run of a split with memsafe's run of that "
          f"split on the same machine, started within {SGPR_PAIR_HOURS} hours of each other, which may be an "
          "earlier memsafe run than the one the row above shows; splits "
          "with no such pair, or timed beside other work (†), are left out, and the number of splits paired is "
          "given.", ""]
    if any("◇" in c for row in body for c in row):
        s += ["◇ The splits shown last ran on different machines: the range of their times per evaluation, not a "
              "mean (seconds on different CPUs do not average).", ""]
    loads = [r.get("load_1m") for r in sg if r.get("load_1m") is not None]
    if loads:
        s += [f"Load average at the start of the runs: {min(loads):.2f} … {max(loads):.2f} (2 cores).", ""]
    if any(sgpr_shared(r) for r in sg):
        s += ["† Measured beside other work on the same two cores (builds and benchmarks; at the lowest priority, "
              f"or paused while a benchmark was timed; or started at a 1-minute load above {SGPR_SHARED_LOAD:g}): "
              "the time per evaluation is an upper bound, not a speed comparison, and those splits are left out of "
              "the ratio. RMSE, NLPD and iterations do not depend on it — except where a time limit stopped the run "
              "(‡), whose iterations then depended on the speed.", ""]
    if any(stopped_by_time_limit(r) for r in sg):
        s += ["‡ Stopped by its time limit (`TIME_LIMIT` in sweep.sh: `sgpr_train --time-limit`, "
              "`gpflow_train.py --time-limit`) before the iteration budget: the model after that many L-BFGS "
              "iterations, not a converged or full-budget one.", ""]
    if any(stopped_by_line_search(r) for r in sg):
        s += ["¶ Stopped before the iteration budget by a line search that failed (liblbfgs's `rounding_error` and "
              "kin, `lbfgs_status` in the row; scipy's `ABNORMAL_TERMINATION_IN_LNSRCH` for GPflow): the model at the "
              "last accepted iterate. Runs before sgpr_train restarted L-BFGS after such a failure "
              "(`--lbfgs-restarts`, default 5) stopped there.", ""]
    if any(r.get("lbfgs_restarts") for r in sg):
        s += ["↻n L-BFGS restarted n times (from the last accepted iterate, with an empty history) after failed line "
              "searches; the iterations count all of its runs.", ""]
    mem = [r for r in sg if r.get("impl") == "memsafe"]
    if any(str(r.get("blas_core", "")).lower() in AVX512_BLAS_CORES for r in mem):
        s += ["§ At least one of these memsafe runs had OpenBLAS on its AVX-512 kernels (`blas_core` in the row: "
              "sweep.sh's `BLAS_CORETYPE`, default `OPENBLAS_CORETYPE=SkylakeX` on an AVX-512 CPU).", ""]
    s += ["memsafe's dense steps (the n-sized SYRK and GEMMs, the m×m factorisations) run on OpenBLAS, whose kernel "
          "set the environment can choose: on 2026-12-02 this project's machine set `OPENBLAS_CORETYPE=Haswell`, "
          "OpenBLAS's AVX2 kernels, on an AVX-512 CPU. Rows from then on record the set that ran (`blas_core`); "
          f"{sum(1 for r in mem if not r.get('blas_core'))} of the {len(mem)} memsafe rows shown are older and "
          "did not record it: they ran on whatever their machine's environment chose, on 2026-12-02's machine the "
          "Haswell kernels. The peers do not use OpenBLAS (GPflow: TensorFlow's Eigen and oneDNN; GPyTorch: "
          "PyTorch's bundled BLAS), so on an AVX-512 CPU those memsafe times may be upper bounds"
          + (" (the table below)." if blas_ab_section(rows) else "."), ""]
    s += blas_ab_section(rows)
    if img:
        s += [f"![SGPR RMSE and NLPD against m]({img})", "",
              "In the plot a hollow marker is a mean over fewer splits than the rest of its line (memsafe's) or than "
              "memsafe's at that m (a peer's), its splits named beside it; beside a peer's, the small hollow circle "
              "is memsafe's mean over those same splits, the like-for-like comparison.", ""]
    return "\n".join(s)


def section_exact_gp(rows) -> str:
    eg = [r for r in rows if r.get("suite") == "exact_gp"]
    s = ["## Exact GP by preconditioned CG (against GPyTorch)", "",
         "`python3 bench/gp/exact_gp_vs_gpytorch.py` — the exact GP posterior mean on a UCI split (standardised "
         "by the training split's mean and standard deviation), Matérn 3/2 with fixed ARD hyperparameters (from "
         "`sgpr_train`; the row's source below), zero prior mean: memsafe's `examples/exact_gp` "
         "(`gp::exact_solve`: pivoted-Cholesky preconditioner, CG whose every product is a budgeted lazy K·v, f64, "
         "then K*·α) against GPyTorch's `ExactGP` in eval mode (`max_cholesky_size(0)`, so it solves by CG; "
         "`max_preconditioner_size` = the same rank; `eval_cg_tolerance` = the same tolerance; "
         "`skip_posterior_variances`), same threads, each in its own process, back to back. Time: from the data in "
         "memory to the test means (memsafe: preconditioner + CG + K*·α, without the extra product of its "
         "true-residual check; GPyTorch: `model(X_test).mean`, kernel evaluation included). memsafe's memory: its peak temporaries (the accountant's count); GPyTorch's: the "
         "peak RSS above the RSS once the data are loaded. GPyTorch forms the n×n kernel matrix; where that does not "
         "fit in this shared machine's available memory the row says so. Residual: memsafe's recursive relative "
         "residual ‖r‖/‖y‖ at the stop (true residual after the slash). Iterations for GPyTorch: kernel products "
         "inside its `linear_cg` minus one per call. The machine is shared (2 cores): the load average at the start "
         "of each run is shown.", ""]
    if not eg:
        return "\n".join(s + [NM + ".", ""])

    def mem(r):
        if r.get("status") != "ok":
            return "—"
        if r.get("impl") == "memsafe":
            return fbytes(r.get("peak_temp_bytes")) + f" (budget {fbytes(r.get('budget_bytes'))})"
        if r.get("max_rss_bytes") and r.get("rss_inputs_bytes"):
            return fbytes(max(0, r["max_rss_bytes"] - r["rss_inputs_bytes"])) + " above inputs"
        return "—"

    def resid(r):
        if r.get("impl") != "memsafe" or r.get("residual") is None:
            return "—"
        t = r.get("true_residual")
        return sig(r["residual"]) + (f" / {sig(t)}" if t is not None else "")

    body = []
    for r in sorted(eg, key=lambda q: (q.get("dataset") or "", q.get("n") or q.get("n_estimate") or 0,
                                      q.get("impl") or "", q.get("budget_bytes") or 0)):
        it = r.get("iterations")
        secs = r.get("seconds") if r.get("status") == "ok" else None
        if r.get("impl") == "memsafe":
            per_it = r.get("seconds_per_iteration")
        elif r.get("seconds_cg") is not None and it:
            per_it = r["seconds_cg"] / it
        else:
            per_it = secs / it if secs and it else None
        n_shown = r.get("n") or r.get("n_estimate")
        cache = "—"
        if r.get("impl") == "memsafe" and r.get("status") == "ok" and r.get("cache_fraction") is not None:
            cf = r["cache_fraction"]
            cache = f"{100 * cf:.0f} %" if cf > 0 else "none"
            if cf > 0 and it and r.get("seconds_cg") is not None and r.get("seconds_cache") is not None:
                cache += f"; {fsec((r['seconds_cg'] - r['seconds_cache']) / it)} per it. after its fill ({fsec(r['seconds_cache'])})"
        body.append([str(r.get("dataset")), f"{n_shown:,}" if n_shown else "—", str(r.get("impl")) +
                     (f" ({r.get('dtype')})" if r.get("dtype") else ""),
                     status_cell(r, str(it) if it is not None else "—"), resid(r),
                     sig(r.get("rmse"), 7) if r.get("status") == "ok" else "—",
                     fsec(secs) if secs is not None else "—",
                     fsec(r.get("cpu_seconds")) if r.get("cpu_seconds") is not None else "—",
                     fsec(per_it) if per_it else "—", cache, mem(r),
                     fbytes(r.get("max_rss_bytes")) if r.get("max_rss_bytes") else "—",
                     f"{r.get('load_average'):.1f}" if r.get("load_average") is not None else "—"])
    s.append(table(["data", "n", "impl", "CG iterations", "residual", "test RMSE", "seconds", "CPU seconds",
                    "s / iteration", "kernel cache", "memory", "peak RSS", "load"], body))
    s.append("")
    s += ["s / iteration: each one's CG time over its iterations (GPyTorch: the time inside `linear_cg`, on the "
          "kernel matrix it evaluated before; older rows without that time: its whole time over its iterations). "
          "GPyTorch stores the kernel matrix; memsafe recomputes what its kernel cache does not hold (the cache: "
          "K's first rows in the budget's free part, computed in the first product — the share of the whole "
          "strip it holds, and the time per iteration without that first fill). CPU seconds: the process's CPU time over the same span (memsafe: solve and "
          "means, true-residual product included).", ""]
    pairs = []
    for d_, n_ in sorted({(r.get("dataset") or "", r.get("n")) for r in eg if r.get("n")}):
        a = find(eg, impl="memsafe", dataset=d_, n=n_, budget_bytes=64 * MIB) or find(eg, impl="memsafe", dataset=d_, n=n_)
        b = find(eg, impl="gpytorch", dataset=d_, n=n_)
        if a and b and a.get("status") == b.get("status") == "ok" and a.get("rmse") and b.get("rmse"):
            pairs.append(f"{d_} n = {n_:,}: |RMSE(memsafe) − RMSE(GPyTorch)| / RMSE = "
                         f"{abs(a['rmse'] - b['rmse']) / b['rmse']:.1e}, iterations {a.get('iterations')} and "
                         f"{b.get('iterations')}, time GPyTorch / memsafe {ratio_cell(b.get('seconds'), a.get('seconds'))}")
    if pairs:
        s += ["- " + p for p in pairs] + [""]
    srcs = sorted({(r.get("dataset"), r.get("hypers_source")) for r in eg if r.get("hypers_source")})
    if srcs:
        s += ["Hyperparameters: " + "; ".join(f"{d}: {src}" for d, src in srcs) + ".", ""]
    bad = [r for r in eg if r.get("status") not in (None, "ok")]
    for r in bad:
        s += [f"- {r.get('dataset')} {r.get('impl')}: {r.get('status')}: {r.get('error', '')}"]
    if bad:
        s.append("")
    return "\n".join(s)


def section_overhead(rows) -> str:
    ov = [r for r in rows if r.get("suite") == "overhead"]
    s = ["## Tiling overhead", "",
         "`python3 bench/run.py overhead` — the same memsafe run with a 64 MiB budget and with an unlimited one "
         "(1 TiB): the ratio is the cost of working in tiles.", ""]
    if not ov:
        return "\n".join(s + [NM + ".", ""])
    body = []
    for w in overhead_workloads(ov):
        a = find(ov, budget_bytes=BUDGET_64, **w)
        b = find(ov, budget_bytes=UNLIMITED, **w)
        ra = a.get("median_s") if ok(a) else None
        rb = b.get("median_s") if ok(b) else None
        name = f"{w['bench']} {w['metric']} n={w['n']:,} m={w['m']:,} d={w['d']} {w['precision']}"
        body.append([name, status_cell(a, fsec(ra)), status_cell(b, fsec(rb)), ratio_cell(ra, rb),
                     fbytes(a.get("peak_temp_bytes")) if ok(a) else "—",
                     fbytes(b.get("peak_temp_bytes")) if ok(b) else "—"])
    return "\n".join(s + [table(["workload", "64 MiB (median)", "unlimited (median)", "64 MiB / unlimited",
                                 "peak temp 64 MiB", "peak temp unlimited"], body), ""])


def overhead_workloads(ov):
    seen = []
    for r in ov:
        w = {"bench": r.get("bench"), "impl": "memsafe", "metric": r.get("metric"), "n": r.get("n_requested", r.get("n")),
             "m": r.get("m_requested", r.get("m")), "d": r.get("d"), "precision": r.get("precision")}
        if w not in seen:
            seen.append(w)
    return seen


def group_rows(rows, field: str) -> dict[str, list]:
    """Rows grouped by one field's value ("unknown" where it is missing), in their order."""
    groups: dict[str, list] = {}
    for r in rows:
        groups.setdefault(r.get(field) or "unknown", []).append(r)
    return groups


def section_default_flags(rows) -> str:
    df = [r for r in rows if r.get("suite") == "default_flags"]
    s = ["## Default flags against -march=native (Matérn sums, the GP module, attention)", "",
         "`bash bench/default_flags.sh` — four small programs built as a consumer compiles by default (plain "
         "`g++ -O2`, no `-march`, errno kept: *default*) and as this project compiles (`-O3 -march=native "
         "-fno-math-errno`: *native*), one thread, the builds alternating in every round; each round's time is the "
         "best of 3 calls, and the table gives min / median over the rounds. *kv*: the fused K·v, X = Y with n "
         "N(0, 1) points (`bench/default_flags/kv.cpp`); *grad*: the VJP of K(X, X′)·v with respect to X "
         "(`bench/default_flags/grad.cpp`); *sgpr*: one `gp::sgpr` bound + gradient on synthetic "
         "N(0, 1) data, 64 MiB of temporaries, BLAS on one thread (`bench/default_flags/sgpr.cpp`); *attention*: "
         "one layer, B = 1, H heads, T queries and keys, d = dv = 64, the forward (*fwd*) and the backward from its "
         "O and logsumexp (*bwd*), 64 MiB (`bench/default_flags/attention.cpp`). The default "
         "build takes the AVX2 copies of the kernels at run time and its square roots by packed square-root "
         "builtins, which set no errno (docs/design.md). The latest run on each CPU; earlier runs stay in "
         "`bench/results/default_flags.jsonl`.", ""]
    if not df:
        return "\n".join(s + [NM + ".", ""])
    for cpu, rs in sorted(group_rows(df, "host_cpu").items()):
        latest = max(r.get("timestamp", "") for r in rs)
        rs = [r for r in rs if r.get("timestamp", "") == latest]
        s += [f"On {cpu} ({rs[0].get('host_simd') or '?'}), {rs[0].get('timestamp', '')[:10]}, `{rs[0].get('cmd', '')}`:", ""]
        keyed = {(r.get("bench"), r.get("kernel"), r.get("precision"), r.get("n"), r.get("m"), r.get("d"), r.get("build")): r
                 for r in rs}
        body = []
        order = {"native": 0, "default": 1}  # then default@<rev> builds (BASE_REV: the headers before a change)
        for (bench, kernel, prec, n, m, d, build), r in sorted(
                keyed.items(), key=lambda kv: tuple(str(x) for x in kv[0][:6]) + (order.get(kv[0][6], 2), kv[0][6])):
            nat = keyed.get((bench, kernel, prec, n, m, d, "native"))
            shape = (f"T={n:,} H={m} d={d}" if bench == "attention"  # one layer: T queries and keys, H heads
                     else f"n={n:,} d={d}" + (f" m={m:,}" if m else ""))
            ratio = f"{r['median_s'] / nat['median_s']:.2f}×" if nat and nat.get("median_s") else "—"
            body.append([bench, kernel, prec, shape, build, f"{sig(r['min_s'])} / {sig(r['median_s'])} s", ratio])
        s += [table(["workload", "kernel", "precision", "shape", "build", "min / median", "time / native's (medians)"],
                    body), ""]
    return "\n".join(s)


def section_isa(rows) -> str:
    rs = [r for r in rows if r.get("suite") == "isa"]
    s = ["## Instruction sets: default-flags build, -march=native, forced kernels", "",
         "`python3 bench/run.py isa` — kNN L2, f32, k = 10, 64 MiB budget, random N(0,1) data, and the fused "
         "RBF K·v (f32, d = 3, n = 10⁵; no portable or peer row: its sums equal the tile path's to tolerance, not "
         "bit for bit): `memsafe_bench` "
         "built with `-O3 -march=native` (*native*) and `memsafe_bench_default` built as a consumer builds it, "
         "plain `-O2` without `-march` (*default*); each with the fused kernels chosen at run time (*dispatched*) "
         "and with every instruction set this CPU runs forced by `MEMSAFE_ISA` (*portable* is the tile path); at "
         "d = 100 also with the fused selection's screen forced by `MEMSAFE_SCREEN` (the AVX2 kernels' default is "
         "their int16 screen; the AVX-512 kernels' is amx — bfloat16 on AMX tiles — where the CPU has AMX-BF16, "
         "else bf16 — VDPBF16PS — on AMD's CPUs with AVX512-BF16, else fp32; rows before 2026-11-30T22:38 ran "
         "bf16 wherever the CPU had AVX512-BF16). One "
         "process per variant and round, the variants alternating in each round; min and median over the rounds "
         "(one timed call each, after a warm-up call). FAISS (`IndexFlatL2`, exact) runs in the same rounds; on an "
         "AVX-512 CPU a second time with `OPENBLAS_CORETYPE=Haswell`, OpenBLAS's AVX2 kernels — what FAISS runs on an "
         "AVX2-only CPU — to compare with memsafe's AVX2 kernels as an AVX2-only machine would see them.", ""]
    if not rs:
        return "\n".join(s + [NM + ".", ""])
    # One table per machine (its instruction sets): the CPU under this project changes between sessions,
    # and an AVX2-only CPU's rows must not sit beside an AVX-512 CPU's as if from the same run.
    for _, mrs in by_machine(rs):
        groups = group_rows(mrs, "host_simd")
        for simd in sorted(groups, key=lambda g: (-len(g), g)):
            s += isa_machine_table(groups[simd])
    return "\n".join(s + ["*speed vs native dispatched*: the median of the -march=native build with the "
                          "dispatched kernels divided by this row's median (above 1: faster).", ""])


def isa_machine_table(rs) -> list[str]:
    """The isa suite's table and FAISS ratios for the rows of one machine (one set of instruction sets)."""
    s = []
    first = max(rs, key=lambda r: r.get("timestamp") or "")
    s += [f"Machine: {first.get('host_cpu') or first.get('cpu')}, {first.get('host_cores') or first.get('cores')} cores, "
          f"{first.get('host_cpu_mhz') or 0:.0f} MHz (`cpu MHz`), instruction sets: {first.get('host_simd', 'unknown')}; "
          f"results of run `{first.get('run_id')}` at git `{first.get('git_rev')}`.", ""]
    body = []
    order = {None: 0, "portable": 1, "avx2": 2, "avx512": 3}

    def work(r):
        return (r.get("bench"), r.get("n_requested", r.get("n")), r.get("m_requested", r.get("m")), r.get("d"))

    def label(w):
        bench, n, m, d = w
        return f"K·v RBF f32, n = {n:,}, d = {d}" if bench == "matvec" else f"{n:,} × {m:,}, d = {d}"

    for w in sorted({work(r) for r in rs}, key=lambda w: (w[0] != "knn", w[1], w[2], -w[3])):
        mine = [r for r in rs if work(r) == w]
        base = next((r for r in mine if r.get("build") == "native" and r.get("isa_forced") is None
                     and not r.get("screen_forced") and r.get("impl") == "memsafe"), None)
        base_t = base.get("median_s") if ok(base) else None
        for r in sorted(mine, key=lambda r: (r.get("impl") != "memsafe", order.get(r.get("isa_forced"), 9),
                                             r.get("screen_forced") or "", r.get("openblas_coretype") or "",
                                             r.get("build") != "native")):
            t = r.get("median_s") if ok(r) else None
            check = (r.get("check") or {}).get("same_indices_as_portable")
            faiss = r.get("impl") == "faiss"
            ran = ("FAISS IndexFlatL2" + (f", OPENBLAS_CORETYPE={r['openblas_coretype']}" if r.get("openblas_coretype")
                                          else ", OpenBLAS dispatched") if faiss else
                   (r.get("isa") or "—") + (f", {r['screen']} screen" if r.get("screen") else ""))
            rate = (f"{sig(r['pairs_per_s'])} pairs/s" if r.get("bench") == "matvec" and r.get("pairs_per_s")
                    else fqps(r.get("qps_median")))
            body.append([label(w), "FAISS" if faiss else r.get("build"),
                         "—" if faiss else r.get("isa_forced") or "dispatched",
                         r.get("screen_forced") or "—", ran,
                         status_cell(r, fsec(t)), status_cell(r, fsec(r.get("min_s"))),
                         status_cell(r, rate), ratio_cell(base_t, t) if t else "—",
                         "—" if check is None else ("yes" if check else "**no**")])
    s.append(table(["workload", "build", "MEMSAFE_ISA", "MEMSAFE_SCREEN", "ran", "median", "min", "queries/s (K·v: pairs/s)",
                    "speed vs native dispatched", "same indices as portable"], body))
    notes = []
    for w in sorted({work(r) for r in rs if r.get("bench") == "knn"}):
        _, n, m, d = w
        mine = [r for r in rs if work(r) == w and ok(r)]
        pick = lambda pred: next((r["median_s"] for r in mine if pred(r) and r.get("median_s")), None)  # noqa: E731
        nat = lambda r: r.get("impl") == "memsafe" and r.get("build") == "native" and not r.get("screen_forced")  # noqa: E731
        disp = pick(lambda r: nat(r) and r.get("isa_forced") is None)
        avx2 = pick(lambda r: nat(r) and r.get("isa_forced") == "avx2")
        fa = pick(lambda r: r.get("impl") == "faiss" and r.get("openblas_coretype") != "Haswell")
        ct = next((r.get("openblas_coretype") for r in mine if r.get("impl") == "faiss" and
                   r.get("openblas_coretype") != "Haswell"), None) or "OpenBLAS's own choice"
        fa2 = pick(lambda r: r.get("impl") == "faiss" and r.get("openblas_coretype") == "Haswell")
        parts = []
        if disp and fa:
            parts.append(f"dispatched {fa / disp:.2f}× FAISS ({ct})")
        if avx2 and fa:
            parts.append(f"AVX2 kernels {fa / avx2:.2f}× FAISS ({ct})")
        if avx2 and fa2:
            parts.append(f"AVX2 kernels {fa2 / avx2:.2f}× FAISS on OpenBLAS's AVX2 kernels (the AVX2-only CPU comparison)")
        if parts:
            notes.append(f"- {n:,} × {m:,}, d = {d} (medians, same rounds): " + "; ".join(parts) + ".")
    return s + [""] + (notes + [""] if notes else [])


# The network the scale model assumes (stated, not measured): a 100 Gb/s link per rank, 2 µs latency.
NET_BYTES_PER_S = 12.5e9
NET_LATENCY_S = 2e-6
# The SGPR scale model's f64 rate per rank (one core of this machine on gp::sgpr at m = 10^4: 518 CPU-s for
# ≈ 2.0e13 flops, docs/design.md) and the m×m algebra's flops at m = 10^4 (the Cholesky factors, TRSMs and
# POTRI of bound + gradient, docs/design.md).
SGPR_CORE_FLOPS = 39e9
SGPR_MM_FLOPS = 7.4e12


def section_mpi(rows) -> str:
    s = ["## Distributed evaluation (MPI)", "",
         "`bash bench/mpi/run.sh` — `memsafe_mpi_bench` under `mpirun` on this machine: the database (kNN) or the "
         "training points (RBF matvec, ℓ = 0.5) sharded over the ranks (`shard_reduced`), every rank holding the "
         "m = 1000 queries (knn_both: the queries sharded too, `shard_both`, the database shards travelling around "
         "the ring; `comm` is then the time in the ring's waits), 64 MiB budget per rank, f32. Time of the whole call (agreement, local evaluation, merge, "
         "broadcast), min / median of the repetitions after a warm-up; `comm` is the median time from the end of "
         "the local evaluation to the merged result, which includes waiting for the slower rank; bytes are the "
         "most any rank sent, received and broadcast.", ""]
    mrows = [r for r in rows if r.get("suite") == "mpi"]
    if not mrows:
        return "\n".join(s + [NM, ""])
    body = []
    for task, d in (("knn", 3), ("knn", 100), ("matvec", 3), ("knn_both", 3), ("sgpr", 9)):
        base = find(mrows, suite="mpi", task=task, d=d, ranks=1, threads_per_rank=2)
        for ranks, th in ((1, 2), (1, 1), (2, 1)):
            r = find(mrows, suite="mpi", task=task, d=d, ranks=ranks, threads_per_rank=th)
            if not r:
                continue
            ratio = (f"{r['median_s'] / base['median_s']:.2f}×" if base and base.get("median_s") else "—")
            label = f"{task} n = {r['n']:,}, d = {d}" + (f", k = {r['k']}" if task in ("knn", "knn_both") else "")
            if task == "sgpr":
                label = f"SGPR bound + gradient n = {r['n']:,}, m = {r['m']:,}, d = {d}, {r.get('kernel', '')}"
            body.append([label,
                         f"{ranks} × {th}", fsec(r.get("min_s")), fsec(r.get("median_s")), ratio,
                         fsec(r.get("comm_median_s")), fbytes(r.get("comm_bytes_max_rank")),
                         fbytes(r.get("peak_temp_bytes_max_rank")), str(r.get("loadavg_1m", "—"))])
    s.append(table(["workload", "ranks × threads", "min", "median", "median / (1 × 2)", "comm", "bytes per rank",
                    "peak temp per rank", "load (1 min)"], body))
    s.append("")
    s.append("The load column is the machine's 1-minute load average when the row was taken: above 2 (the core "
             "count) other work shared the cores and the ratios are only indicative. The SGPR rows "
             "(`memsafe_mpi_sgpr_bench`, `bench/results/mpi_sgpr.jsonl`) are `mpi::sgpr` with the gradient, random "
             "points in [0, 1)⁹, Z the first m points of another stream, ℓ = 0.5, 64 MiB per rank; their bytes are "
             "what a rank contributes to the two allreduces (m(m+1)/2 + m + 2 and 1 + d + m·d doubles), and "
             "`comm` includes the agreement.")
    s.append("")
    # Scale model: the compute rate measured here (pairs per second per rank), the stated network.
    knn = find(mrows, suite="mpi", task="knn", d=100, ranks=2, threads_per_rank=1)
    if knn and knn.get("median_s"):
        rate = knn["n"] * knn["m"] / 2 / knn["median_s"]  # pairs per second per rank (1 thread)
        s += ["### Scale model", "",
              f"Measured: one rank (one thread of this machine) computes {sig(rate)} query–point pairs per second on "
              "kNN at d = 100 (the 2-rank row above). Modelled for P ranks, each one such thread — scale the compute "
              "column down by the cores of a real node — with a stated network of "
              f"{NET_BYTES_PER_S * 8 / 1e9:g} Gb/s per rank and {NET_LATENCY_S * 1e6:g} µs latency: compute = n·m / "
              "(P · rate); communication = (1 + ⌈log₂ P⌉) · (latency + rows · record bytes / bandwidth) (tree "
              "reduction then broadcast); memory per rank = the rank's shard of the inputs + the replicated operand + "
              "the budget (64 MiB) + the result.", ""]
        body = []
        for P in (8, 64, 512):
            steps = (P - 1).bit_length()
            n, m, d, k = 10**9, 10**4, 100, 10
            comm_b = m * k * 16
            comm_t = (1 + steps) * (NET_LATENCY_S + comm_b / NET_BYTES_PER_S)
            mem = n // P * d * 4 + m * d * 4 + (64 << 20) + m * k * 12
            body.append([f"kNN n = 10⁹, m = 10⁴, d = 100, k = 10", str(P), fbytes(mem),
                         fbytes((1 + steps) * comm_b), f"{n * m / (P * rate):.3g} s", f"{comm_t * 1e3:.3g} ms"])
        # SGPR bound + gradient with mpi::sgpr, by its flop count: 3·n·m² (SYRK forward, GEMM backward)
        # split over the ranks, plus the m×m algebra (≈ 7.4e12 flops at m = 10^4) that every rank does
        # whole, at SGPR_CORE_FLOPS per rank; communication: two allreduces (m(m+1)/2 + m + 2 and
        # 1 + d + m·d doubles), bandwidth-optimal (reduce-scatter + allgather: 2(P − 1)/P of the message
        # each way, 2⌈log₂ P⌉ latencies).
        for P in (8, 64, 512):
            steps = (P - 1).bit_length()
            n, mu, d = 10**8, 10**4, 8
            doubles = mu * (mu + 1) // 2 + mu + 2 + 1 + d + mu * d
            comm_b = 2 * (P - 1) / P * doubles * 8
            comm_t = 2 * steps * NET_LATENCY_S + comm_b / NET_BYTES_PER_S
            mem = n // P * (d + 1) * 8 + mu * d * 8 + (64 << 20) + 4 * mu * mu * 8
            compute = (3 * n * mu * mu / P + SGPR_MM_FLOPS) / SGPR_CORE_FLOPS
            body.append([f"SGPR bound + gradient n = 10⁸, m = 10⁴, d = 8 (`mpi::sgpr`)", str(P), fbytes(mem),
                         fbytes(comm_b), f"{compute:.3g} s", f"{comm_t * 1e3:.3g} ms"])
        s.append(table(["workload", "ranks", "memory per rank", "bytes sent per rank", "compute", "communication"], body))
        s += ["", "SGPR rows: `mpi::sgpr` (bound and gradient, one evaluation), modelled by its flop count rather than "
              "by the SGPR rows above (taken at m = 500 on the loaded machine, where the per-pair kernel loops weigh more "
              "against the n·m² BLAS work than at m = 10⁴): compute = "
              f"(3·n·m² / P + {SGPR_MM_FLOPS:.2g}) / {SGPR_CORE_FLOPS / 1e9:g} GFLOP/s — the SYRK and GEMM flops "
              "split over the ranks, the m×m algebra (Cholesky factors, TRSMs, POTRI) done whole on every rank — at "
              "the f64 rate one core of this machine reached on `gp::sgpr` at m = 10⁴ (docs/design.md: 518 CPU-s "
              "for ≈ 2·10¹³ flops); memory per rank = its shard (d + 1 doubles per point) + Z + the budget + the "
              "four m×m outputs every rank holds; communication = the two allreduces, m(m+1)/2 + m + 2 and "
              "1 + d + m·d doubles, about 2(P − 1)/P of that sent per rank by a bandwidth-optimal allreduce, "
              "whatever n. kNN's communication does not grow with n either: it is k (value, index) pairs per "
              "query.", ""]
    return "\n".join(s)


def section_compile(rows) -> str:
    cr = [r for r in rows if r.get("bench") == "compile"]
    s = ["## Compile time", "", "`python3 bench/run.py compile` (runs `bash bench/compile_time.sh R`): g++ with "
         "`-O3 -march=native -fno-math-errno` (this project's programs), *g++ -O2* with plain `-O2` as a consumer "
         "compiles by default; nvcc with `-O3`. Wall seconds, and CPU seconds (user + system: on this shared "
         "machine they move far less with the load than the wall time; rows from before they were recorded show —); "
         "the load column is the 1-minute load average when the row was written. *Instructions* (the g++ -O2 rows "
         "of the small units) are the millions of instructions the compiler executed, counted under valgrind "
         "(`bench/compile_instructions.sh`): they do not move with the load and repeat exactly, so they are the "
         "column to compare revisions by on one compiler (they are not seconds: a machine runs its own number "
         "per second).", ""]
    if not cr:
        return "\n".join(s + [NM + ".", ""])
    # One table per machine, the latest machine first: only rows of one machine compare.
    for cpu, rs in by_machine(cr):
        first = max(rs, key=lambda r: r.get("timestamp") or "")
        s += [f"Machine: {cpu}; latest run `{first.get('run_id')}` at git `{first.get('git_rev')}`.", ""]
        body = [[r.get("tu"), r.get("compiler") + (f" {r['flags']}" if r.get("flags") else ""),
                 status_cell(r, fsec(r.get("min_s"))) if "error" not in r else "compile failed",
                 fsec(r.get("median_s")) if "error" not in r else "—",
                 fsec(r.get("cpu_min_s")) if r.get("cpu_min_s") is not None else "—",
                 fsec(r.get("cpu_median_s")) if r.get("cpu_median_s") is not None else "—",
                 f"{r['load_1m']:.2f}" if r.get("load_1m") is not None else "—", str(r.get("runs", "—")),
                 f"{r['instructions_m']:,.0f} M" if r.get("instructions_m") is not None else "—"]
                for r in sorted(rs, key=lambda r: (r.get("compiler") or "", r.get("flags") or "", r.get("tu") or ""))]
        s += [table(["translation unit", "compiler", "wall min", "wall median", "CPU min", "CPU median", "load", "runs",
                     "instructions"],
                    body), ""]
    return "\n".join(s)


def by_machine(rs) -> list:
    """Rows grouped by machine (`cpu_of`), the machine of the latest row first."""
    groups: dict[str, list] = {}
    for r in rs:
        groups.setdefault(cpu_of(r), []).append(r)
    return sorted(groups.items(), key=lambda g: max(r.get("timestamp") or "" for r in g[1]), reverse=True)


# ---- goals -------------------------------------------------------------------------------------

def verdict(value, target, higher=True) -> str:
    """A goal's verdict cell: pass or FAIL against the target, "not measured" without a value."""
    if value is None:
        return NM
    return "**pass**" if (value >= target if higher else value <= target) else "**FAIL**"


def machines_verdict(vals, target, higher=True) -> str:
    """The verdict of a goal measured on several machines, vals = [(value, machine)] newest machine first:
    plain when every machine gives the same one, else each verdict with its machines, the newest
    machine's first (a goal met on one CPU and missed on another is not simply met)."""
    if not vals:
        return NM
    groups = {}
    for x, mach in vals:
        groups.setdefault(verdict(x, target, higher), []).append(mach)
    if len(groups) == 1:
        return next(iter(groups))
    return "; ".join(f"{v} on " + ", ".join(machs) for v, machs in groups.items())


def same_run(x, y) -> str:
    """The mark of a ratio whose two rows come from different invocations of a driver (or machines)."""
    if not (x and y):
        return ""
    if cpu_of(x) != cpu_of(y):
        return " (different machines)"
    return "" if x.get("run_id") == y.get("run_id") else " (different invocations)"


def provenance(*rs) -> str:
    """Where and when rows were measured: "CPU, date, git revision" for each distinct one (the Goals
    table's last column: the CPU under this project changes between sessions, and a ratio is only as
    current as the rows it comes from)."""
    seen = []
    for r in rs:
        if not r:
            continue
        when = (r.get("timestamp") or "")[:10] or (r.get("run_id") or "")[:8] or "?"
        text = f"{cpu_of(r)}, {when}, {(r.get('git_rev') or '?')[:12]}"
        if text not in seen:
            seen.append(text)
    return "; ".join(seen) if seen else NM


def goals(rows, peak_gflops) -> str:
    out = []

    def knn_pair(d, suite="knn", data="random", metric="l2", n=10**6, m=10**4, peer="faiss"):
        w = dict(suite=suite, data=data, metric=metric, n=n, m=m, d=d, k=10, precision="f32")
        ms = find(rows, impl="memsafe", budget_bytes=BUDGET_64, **w)
        pr = find_on(rows, ms, impl=peer, **w)  # on memsafe's machine
        a = ms.get("qps_median") if ok(ms) else None
        b = pr.get("qps_median") if ok(pr) else None
        return ms, pr, a, b

    def ratio_goal(name, target, ms, pr, a, b, peer_name):
        r = a / b if a is not None and b else None
        if r is None:
            why = "no memsafe row" if ms is None else ("memsafe " + ms.get("status", "?") if a is None else
                                                      (peer_name + ": " + (pr.get("status") if pr else NM)))
            out.append([name, f"≥ {target:g}×", f"{NM} ({why})", NM, provenance(ms, pr)])
        else:
            out.append([name, f"≥ {target:g}×", f"{r:.2f}× ({sig(a)} vs {sig(b)} q/s){same_run(ms, pr)}",
                        verdict(r, target), provenance(ms, pr)])

    ms, pr, a, b = knn_pair(3)
    ratio_goal("kNN L2 n=10⁶ m=10⁴ k=10 f32 d=3, 64 MiB: memsafe vs FAISS", 10, ms, pr, a, b, "FAISS")
    ms, pr, a, b = knn_pair(100)
    ratio_goal("kNN L2 n=10⁶ m=10⁴ k=10 f32 d=100, 64 MiB: memsafe vs FAISS", 2, ms, pr, a, b, "FAISS")
    # the peak of the CPU this row ran on, where the peak suite measured it there (the tables' machine's
    # otherwise): a share of another CPU's peak means nothing
    own = [r["fp32_gflops"] for r in rows if r.get("bench") == "fma_peak" and r.get("fp32_gflops")
           and ok(ms) and cpu_of(r) == cpu_of(ms)]
    if own:
        peak_gflops = max(own)
    if ok(ms) and peak_gflops:
        g = 2.0 * ms["n"] * ms["m"] * ms["d"] / ms["median_s"] / 1e9
        frac = g / peak_gflops
        b16 = {"bf16": " — bfloat16 screen: the FP32-equivalent rate",
               "amx": " — bfloat16 screen on AMX tiles: the FP32-equivalent rate"}.get(ms.get("screen"), "")
        out.append(["kNN L2 n=10⁶ d=100: share of the FP32 FMA peak (2·n·m·d flops per search)", "≥ 50%",
                    f"{frac * 100:.1f}% ({g:.1f} of {peak_gflops:.1f} GFLOP/s{b16})", verdict(frac, 0.5), provenance(ms)])
    else:
        out.append(["kNN L2 n=10⁶ d=100: share of the FP32 FMA peak (2·n·m·d flops per search)", "≥ 50%", NM, NM,
                    provenance(ms)])

    mv_ms = find(rows, suite="matvec3", impl="memsafe", n=10**5, d=3, precision="f32", budget_bytes=BUDGET_64)
    mv_ko = find(rows, suite="matvec3", impl="keops", n=10**5, d=3, precision="f32")
    if ok(mv_ms) and ok(mv_ko):
        r = mv_ko["median_s"] / mv_ms["median_s"]
        out.append(["matvec RBF d=3 f32 n=10⁵: memsafe vs KeOps (time ratio)", "≥ 3×",
                    f"{r:.2f}× ({sig(mv_ms['median_s'])} s vs {sig(mv_ko['median_s'])} s){same_run(mv_ms, mv_ko)}",
                    verdict(r, 3), provenance(mv_ms, mv_ko)])
    else:
        out.append(["matvec RBF d=3 f32 n=10⁵: memsafe vs KeOps (time ratio)", "≥ 3×", NM, NM, provenance(mv_ms, mv_ko)])

    for metric, peers in (("l2", ("faiss", "keops")), ("l1", ("keops",))):
        for peer in peers:
            ms, pr, a, b = knn_pair(784, suite="mnist", data="mnist", metric=metric, n=60000, m=10000, peer=peer)
            name = f"MNIST {metric.upper()}: memsafe faster than {'FAISS' if peer == 'faiss' else 'KeOps'}"
            r = a / b if a is not None and b else None
            out.append([name, "> 1×", NM if r is None else f"{r:.2f}× ({sig(a)} vs {sig(b)} q/s){same_run(ms, pr)}",
                        NM if r is None else ("**pass**" if r > 1 else "**FAIL**"), provenance(ms, pr)])

    ov = [r for r in rows if r.get("suite") == "overhead"]
    ws = overhead_workloads(ov) or [{"bench": "knn", "metric": "l2"}, {"bench": "matvec", "metric": "rbf"}]
    for w in ws:
        a = find(ov, budget_bytes=BUDGET_64, **w) if ov else None
        b = find(ov, budget_bytes=UNLIMITED, **w) if ov else None
        name = f"tiling overhead, {w['bench']}" + (f" n={w['n']:,} d={w['d']} {w['precision']}" if "n" in w else "") + \
               ": 64 MiB vs unlimited"
        if ok(a) and ok(b):
            r = a["median_s"] / b["median_s"]
            out.append([name, "≤ 1.05×", f"{r:.3f}×{same_run(a, b)}", verdict(r, 1.05, higher=False),
                        provenance(a, b)])
        else:
            out.append([name, "≤ 1.05×", NM, NM, provenance(a, b)])

    # Instruction sets (issue 15): each machine's latest isa run (the CPU under this project changes
    # between sessions; only one run's rows compare), the verdict from the newest machine's.
    runs: dict[tuple, list] = {}
    for r in rows:
        if r.get("suite") == "isa" and ok(r) and r.get("median_s"):
            runs.setdefault((cpu_of(r), r.get("host_simd")), []).append(r)
    latest = []
    for (cpu, simd), rs in runs.items():
        rid = max(r.get("run_id") or "" for r in rs)
        latest.append((rid, f"{cpu} [{simd}]", [r for r in rs if r.get("run_id") == rid]))
    latest.sort(reverse=True)

    def isa_t(rs, bench, d, build="native", isa=None, impl="memsafe"):
        return next((r["median_s"] for r in rs if r.get("bench") == bench and r.get("d") == d and
                     r.get("impl") == impl and (impl != "memsafe" or (r.get("build") == build and
                     r.get("isa_forced") == isa and not r.get("screen_forced"))) and
                     (impl == "memsafe" or r.get("openblas_coretype") != "Haswell")), None)

    def isa_goal(name, target, ratio, percent=False, none=NM):
        """One goal row from ratio(rows of a machine's latest run), None where that run cannot give it."""
        got = [(v, mach, rs) for _, mach, rs in latest if (v := ratio(rs)) is not None]
        vals = [(v, mach) for v, mach, _ in got]
        show = (lambda v: f"{v * 100:.0f}%") if percent else (lambda v: f"{v:.2f}×")  # noqa: E731
        cell = "; ".join(f"{show(v)} on {mach}" for v, mach in vals) if vals else none
        out.append([name, f"≥ {show(target)}" if percent else f"≥ {target:g}×", cell, machines_verdict(vals, target),
                    provenance(*(rs[0] for _, _, rs in got))])

    for bench, d, name in (("knn", 100, "kNN L2 n=10⁶ m=1000 d=100"), ("knn", 3, "kNN L2 n=10⁶ m=1000 d=3"),
                           ("matvec", 3, "K·v RBF f32 n=10⁵ d=3")):
        def default_vs_native(rs, bench=bench, d=d):
            a, b = isa_t(rs, bench, d), isa_t(rs, bench, d, "default")
            return a / b if a and b else None
        isa_goal(f"default-flags build (-O2) vs -march=native, kernels dispatched, {name} (speed, medians)", 0.9,
                 default_vs_native)
    def avx2_vs_avx512(rs):  # None on a CPU without AVX-512: no forced avx512 row
        a, b = isa_t(rs, "knn", 100, isa="avx512"), isa_t(rs, "knn", 100, isa="avx2")
        return a / b if a and b else None
    isa_goal("AVX2 kernels vs AVX-512 kernels on one AVX-512 CPU, kNN L2 n=10⁶ m=1000 d=100 (queries/s)", 0.5,
             avx2_vs_avx512, percent=True, none=f"{NM} (no AVX-512 CPU's run)")

    def avx2_vs_faiss(rs):
        a, f = isa_t(rs, "knn", 100, isa="avx2"), isa_t(rs, "knn", 100, impl="faiss")
        return f / a if a and f else None
    isa_goal("AVX2 kernels vs FAISS (OpenBLAS on any kernel set but the forced Haswell one: on an AVX-512 CPU "
             "its AVX-512 kernels), kNN L2 n=10⁶ m=1000 d=100 (time ratio)", 2.0,
             avx2_vs_faiss)

    # Compile time (issue 15): g++ -O2 CPU seconds (median) of bench/compile_time/*.cpp.
    machines = by_machine([r for r in rows if r.get("bench") == "compile"])
    for tu, flags, name, target in (
            ("typical.cpp", "-O2", "one kNN + one matvec (typical.cpp), g++ -O2, header-only", 2.0),
            ("typical.cpp", "-O2 -DMEMSAFE_PRECOMPILED=1",
             "one kNN + one matvec (typical.cpp), g++ -O2, with memsafe::precompiled", 2.0),
            ("include_only.cpp", "-O2", "include only (include_only.cpp), g++ -O2", 0.8)):
        # Each machine's latest row and its verdict, the newest machine first (the CPU under this project
        # changes between sessions: only one machine's rows compare with each other).
        vals, used = [], []
        for cpu, rs in machines:
            c = next((r for r in rs if r.get("tu") == "bench/compile_time/" + tu and r.get("compiler") == "g++"
                      and r.get("flags") == flags and "error" not in r and r.get("cpu_median_s") is not None), None)
            if c:
                vals.append((c["cpu_median_s"], cpu))
                used.append(c)
        cell = "; ".join(f"{x:.2f} CPU-s on {cpu}" for x, cpu in vals) if vals else NM
        out.append([f"compile time, {name}", f"≤ {target:g} s", cell, machines_verdict(vals, target, higher=False),
                    provenance(*used)])

    checked = bad = unknown = 0
    worst = None
    for r in rows:
        if r.get("impl") != "memsafe" or not ok(r) or not r.get("budget_bytes"):
            continue
        if r.get("peak_temp_bytes") is None:
            unknown += 1
            continue
        checked += 1
        if r["peak_temp_bytes"] > r["budget_bytes"]:
            bad += 1
            worst = r
    if checked == 0:
        out.append(["peak temporary bytes ≤ budget in every memsafe row", "all rows", NM, NM, NM])
    else:
        text = f"{checked - bad} of {checked} rows"
        if unknown:
            text += f" ({unknown} rows did not report it)"
        if worst is not None:
            text += f"; e.g. {worst['suite']} n={worst['n']:,}: {worst['peak_temp_bytes']:,} > {worst['budget_bytes']:,}"
        out.append(["peak temporary bytes ≤ budget in every memsafe row", "all rows", text,
                    "**pass**" if bad == 0 and unknown == 0 else "**FAIL**", "every memsafe row in the tables above"])
    return "\n".join(["## Goals", "", "Each ratio is computed from the rows above (the same invocation of "
                      "bench/run.py unless marked); the last column says on which CPU, on which day and at which "
                      "revision its rows were measured.", "",
                      table(["goal", "target", "measured", "verdict", "measured on (CPU, date, revision)"], out), ""])


# ---- GPU ---------------------------------------------------------------------------------------

GPU_BUDGET = GIB  # bench/gpu/run_gpu.py's default budget
GPU_PEERS = ("keops", "torch", "jax")
GPU_PEER_NAMES = {"keops": "KeOps", "torch": "torch", "jax": "JAX", "memsafe-cuda-host": "memsafe host-resident"}
NO_GPU = "No GPU results yet: run bash bench/gpu/run_gpu.sh on a machine with an NVIDIA GPU."


def gpu_find(rows, suite, impl, w) -> dict | None:
    """The latest row of impl for workload w; memsafe rows at the 1 GiB budget when there is one."""
    if impl.startswith("memsafe"):
        r = find(rows, suite=suite, impl=impl, budget_bytes=GPU_BUDGET, **w)
        if r is not None:
            return r
    return find(rows, suite=suite, impl=impl, **w)


def gpu_dev(r) -> str | None:
    """The GPU a row ran on, as recorded."""
    return (r or {}).get("device") or (r or {}).get("gpu_name")


def gpu_find_like(rows, suite, impl, w, like) -> dict | None:
    """gpu_find on the GPU of row `like` (the memsafe-cuda row a peer stands beside), else on any GPU
    (then gpu_mark says so and gpu_ratio gives no ratio: the rows come from two GPUs)."""
    dev = gpu_dev(like)
    if dev:
        r = gpu_find([q for q in rows if gpu_dev(q) == dev], suite, impl, w)
        if r is not None:
            return r
    return gpu_find(rows, suite, impl, w)


def gpu_names(rows) -> list[str]:
    names = [r.get("device") or r.get("gpu_name") for r in rows if r.get("status") == "ok"]
    names = [x for x in names if x]
    return sorted(set(names), key=lambda x: -names.count(x))


def gpu_workloads(rows, suite, expected, keys) -> list[dict]:
    seen = list(expected)
    for r in rows:
        if r.get("suite") != suite:
            continue
        w = {k: (r.get("n_requested", r.get("n")) if k == "n" else r.get("m_requested", r.get("m")) if k == "m"
                 else r.get(k)) for k in keys}
        if w not in seen:
            seen.append(w)
    return seen


def gpu_mark(r, ref, notes: Notes) -> str:
    mark = ""
    if r is not None and r.get("note"):
        mark += notes.mark(r["note"])
    if r is not None and r.get("tf32"):
        mark += notes.mark("TF32 tensor cores allowed for float32 products (--tf32)")
    if r is not None and ref is not None and r is not ref and gpu_dev(r) and gpu_dev(ref) and gpu_dev(r) != gpu_dev(ref):
        mark += notes.mark(f"measured on {gpu_dev(r)}; the memsafe-cuda row on {gpu_dev(ref)}: no ratio is taken")
    elif r is not None and ref is not None and r is not ref and r.get("run_id") and ref.get("run_id") and \
            r["run_id"] != ref["run_id"]:
        mark += notes.mark("from a different invocation of bench/gpu/run_gpu.py than the memsafe-cuda row")
    return mark


def gpu_mem_cell(r) -> str:
    if r is None:
        return "–"
    if r.get("status") == "oom":
        return "oom"
    if not ok(r) or r.get("device_peak_bytes") is None:
        return "–"
    return fbytes(r["device_peak_bytes"])


def gpu_check_cell(ms, knn: bool) -> str:
    c = (ms or {}).get("check") or {}
    parts = []
    for peer in ("memsafe-cuda-host",) + GPU_PEERS:
        v = c.get("vs_" + peer)
        if not v:
            continue
        name = GPU_PEER_NAMES[peer]
        if knn:
            parts.append(f"{name}: {v['exact_sets'] * 100:.1f}% exact, recall {v['recall_at_k']:.4f}")
        else:
            parts.append(f"{name}: {v['max_rel_diff']:.1e}")
    return "; ".join(parts) if parts else "—"


def gpu_ratio(num, den, peer, ref=None) -> str:
    """ratio_cell, but a peer that ran and failed, or ran on another GPU than ref, shows "—" (its own cell
    says why)."""
    if peer is not None and not ok(peer):
        return "—"
    if peer is not None and ref is not None and gpu_dev(peer) and gpu_dev(ref) and gpu_dev(peer) != gpu_dev(ref):
        return "—"
    return ratio_cell(num, den)


def gpu_peak_on(rows, dev, fallback):
    """The measured FP32 peak of GPU `dev` (a share of another GPU's peak means nothing), else fallback."""
    pk = [r["fp32_gflops"] for r in rows if r.get("suite") == "gpu_peak" and r.get("status") == "ok"
          and r.get("fp32_gflops") and dev and gpu_dev(r) == dev]
    return max(pk) if pk else fallback


def gpu_peak(rows) -> tuple[float | None, str]:
    pk = [r for r in rows if r.get("suite") == "gpu_peak" and r.get("status") == "ok" and r.get("fp32_gflops")]
    if not pk:
        return None, f"{NM} (`python3 bench/gpu/run_gpu.py peak`)"
    r = max(pk, key=lambda q: q["fp32_gflops"])  # the highest seen: the conservative share
    text = f"**{r['fp32_gflops']:,.0f} GFLOP/s** measured on {r.get('device')} by `fma_peak_cuda`"
    if r.get("blocks") and r.get("threads_per_block") and r.get("chains"):
        text += (f" ({r['blocks']} blocks × {r['threads_per_block']} threads, {r['chains']} independent fmaf chains "
                 f"each; 2 flops per FMA)")
    if r.get("theoretical_fp32_gflops"):
        parts = (r.get("sm_count"), r.get("fp32_lanes_per_sm"), r.get("clock_mhz"))
        how = (f"{parts[0]} SMs × {parts[1]} FP32 lanes × 2 × {parts[2]:.0f} MHz (peak clock) = " if all(parts) else "")
        text += f"; from the device's attributes {how}{r['theoretical_fp32_gflops']:,.0f} GFLOP/s"
    if r.get("note"):
        text += f" ({r['note']})"
    return r["fp32_gflops"], text


def gpu_knn_expected() -> list[dict]:
    base = {"k": 10, "precision": "f32", "m": 10**4}
    out = [{"metric": "l2", "n": n, "d": d, **base} for n in (10**4, 10**6, 10**7) for d in (3, 10, 100)]
    return out + [{"metric": mt, "n": 10**6, "d": d, **base} for mt in ("l1", "cosine") for d in (3, 10, 100)]


def gpu_matvec_expected() -> list[dict]:
    return [{"precision": p, "d": d, "n": n} for d, p in ((3, "f32"), (1, "f64")) for n in (10**4, 10**5, 10**6)]


def section_gpu_knn(rows, notes, peak_gflops, gpus) -> str:
    s = ["### kNN on the GPU", "",
         f"`python3 bench/gpu/run_gpu.py knn` on {' / '.join(gpus) or 'the GPU'} — the eXLA paper's sizes: m = 10⁴ "
         "queries, k = 10, f32, random N(0,1) data; memsafe-cuda with a 1 GiB budget, inputs in device memory "
         "(host-resident: the database left in pageable host memory and streamed through the budget). KeOps: "
         "`LazyTensor.argKmin`; torch: `torch.cdist` + `torch.topk`; JAX: `jax.jit` of the dense distances + "
         "`lax.top_k`. Queries per second from the median (higher is better); ratios are memsafe-cuda's queries/s "
         "over the peer's. % of peak: 2·n·m·d flops per search over the median time, against the measured FP32 "
         "peak (L2, d = 100; the screen's GEMM runs on TF32 tensor cores — `options::screen_tf32`, on by default — "
         "so this FP32-equivalent rate can pass what FP32 FMAs alone could do; the values and ranks are still "
         "the exact FP32 ones, re-evaluated). Device peak: the peak device bytes of a call beyond its inputs (memsafe: "
         "cudaMemGetInfo polled during the warm-up call; the others: their allocator's peak). Agreement: memsafe-cuda's "
         "index sets against each peer's on the first ≤ 2000 queries, on the same numbers.", ""]
    ws = gpu_workloads(rows, "gpu_knn", gpu_knn_expected(), ("metric", "n", "d", "k", "precision", "m"))
    order = {"l2": 0, "l1": 1, "cosine": 2}
    ws = sorted(ws, key=lambda w: (order.get(w["metric"], 9), w["n"], w["d"]))
    body = []
    for w in ws:
        ms = gpu_find(rows, "gpu_knn", "memsafe-cuda", w)
        host = gpu_find_like(rows, "gpu_knn", "memsafe-cuda-host", w, ms)
        peers = {p: gpu_find_like(rows, "gpu_knn", p, w, ms) for p in GPU_PEERS}
        q = ms.get("qps_median") if ok(ms) else None

        def qcell(r):
            return status_cell(r, fqps(r.get("qps_median")) + gpu_mark(r, ms, notes)) if r is not None else NM

        def rq(r):
            return r.get("qps_median") if ok(r) else None

        pct = "—"
        if ok(ms) and w["metric"] == "l2" and w["d"] == 100:
            pct = NM
            pk = gpu_peak_on(rows, gpu_dev(ms), peak_gflops)
            if pk:
                g = 2.0 * ms["n"] * ms["m"] * ms["d"] / ms["median_s"] / 1e9
                pct = f"{g / pk * 100:.1f}% ({g:,.0f} GFLOP/s)"
        body.append([w["metric"], f"{w['n']:,}", str(w["d"]), f"{w['m']:,}", gpu_dev(ms) or "—", qcell(ms), qcell(host),
                     *(qcell(peers[p]) for p in GPU_PEERS), *(gpu_ratio(q, rq(peers[p]), peers[p], ms) for p in GPU_PEERS), pct,
                     fbytes(ms.get("peak_temp_bytes")) if ok(ms) else "—",
                     " / ".join(gpu_mem_cell(r) for r in (ms, peers["keops"], peers["torch"], peers["jax"])),
                     gpu_check_cell(ms, True)])
    header = ["metric", "n", "d", "m", "GPU", "memsafe-cuda q/s", "host-resident q/s", "KeOps q/s", "torch q/s", "JAX q/s",
              "memsafe / KeOps", "memsafe / torch", "memsafe / JAX", "memsafe % of FP32 peak", "memsafe peak temp",
              "device peak (memsafe / KeOps / torch / JAX)", "agreement with peers"]
    return "\n".join(s + [table(header, body), ""])


def section_gpu_matvec(rows, notes, gpus) -> str:
    s = ["### Kernel matvec on the GPU", "",
         f"`python3 bench/gpu/run_gpu.py matvec` on {' / '.join(gpus) or 'the GPU'} — K(X,X)·v with the RBF kernel "
         "(ℓ = 1), X and v ~ N(0,1): d = 3 in f32, and d = 1 in f64 as in the eXLA paper's Fig. 2; memsafe-cuda "
         "with a 1 GiB budget; KeOps `(-D_ij/2).exp() @ v`; torch and JAX build the dense n×n kernel matrix, then "
         "multiply. Times are medians; ratios are the peer's time over memsafe-cuda's (above 1: memsafe faster). "
         "Agreement: the largest difference of the first ≤ 2000 outputs relative to the largest output, on the "
         "same numbers.", ""]
    ws = gpu_workloads(rows, "gpu_matvec", gpu_matvec_expected(), ("precision", "d", "n"))
    ws = sorted(ws, key=lambda w: (w["precision"], -w["d"], w["n"]))
    body = []
    for w in ws:
        ms = gpu_find(rows, "gpu_matvec", "memsafe-cuda", w)
        peers = {p: gpu_find_like(rows, "gpu_matvec", p, w, ms) for p in GPU_PEERS}
        t = ms.get("median_s") if ok(ms) else None

        def tcell(r):
            return status_cell(r, fsec(r.get("median_s")) + gpu_mark(r, ms, notes)) if r is not None else NM

        body.append([w["precision"], str(w["d"]), f"{w['n']:,}", tcell(ms), *(tcell(peers[p]) for p in GPU_PEERS),
                     *(gpu_ratio(peers[p].get("median_s") if ok(peers[p]) else None, t, peers[p]) for p in GPU_PEERS),
                     fbytes(ms.get("peak_temp_bytes")) if ok(ms) else "—",
                     " / ".join(gpu_mem_cell(r) for r in (ms, peers["keops"], peers["torch"], peers["jax"])),
                     gpu_check_cell(ms, False)])
    header = ["precision", "d", "n", "memsafe-cuda", "KeOps", "torch", "JAX", "KeOps / memsafe", "torch / memsafe",
              "JAX / memsafe", "memsafe peak temp", "device peak (memsafe / KeOps / torch / JAX)",
              "max rel. difference vs peers"]
    return "\n".join(s + [table(header, body), ""])


def section_gpu_memory(rows) -> str:
    s = ["### Device memory against the budget", "",
         "Every memsafe-cuda row: memsafe's own peak of device + pinned temporaries (peak temp) and the device bytes "
         "in use beyond the inputs and outputs as `cudaMemGetInfo` saw them during the warm-up call, polled every "
         "~100 µs (a lower bound of the true high-water mark; it also counts whatever else allocates on the device "
         "during the call, e.g. a cuBLAS workspace).", ""]
    ms = [r for r in rows if r.get("suite") in ("gpu_knn", "gpu_matvec") and str(r.get("impl", "")).startswith("memsafe")]
    ms = sorted(ms, key=lambda r: (r.get("suite"), r.get("impl"), r.get("metric"), r.get("precision"),
                                   r.get("d") or 0, r.get("n") or 0))
    if not ms:
        return "\n".join(s + [NM + ".", ""])
    body, within, dev_within, counted, dev_counted = [], 0, 0, 0, 0
    for r in ms:
        name = (f"{r.get('bench')} {r.get('metric')} n={r.get('n_requested', r.get('n')):,} d={r.get('d')} "
                f"{r.get('precision')}" + (" host-resident" if r.get("impl") == "memsafe-cuda-host" else ""))
        b, pt, dp = r.get("budget_bytes"), r.get("peak_temp_bytes"), r.get("device_peak_bytes")
        if ok(r) and b and pt is not None:
            counted += 1
            within += pt <= b
        if ok(r) and b and dp is not None:
            dev_counted += 1
            dev_within += dp <= b
        body.append([name, fbudget(b), status_cell(r, fbytes(pt)), status_cell(r, fbytes(dp)),
                     status_cell(r, f"{dp / b:.2f}" if b and dp is not None else "—")])
    summary = (f"peak temp ≤ budget in {within} of {counted} rows; device peak ≤ budget in {dev_within} of "
               f"{dev_counted} rows.")
    return "\n".join(s + [summary, "", table(["workload", "budget", "peak temp", "device peak", "device peak / budget"],
                                             body), ""])


def section_gpu_goals(rows, peak_gflops) -> str:
    """The GPU issue's goals, from the rows above (memsafe-cuda at the 1 GiB budget, f32, k = 10)."""
    out = []

    for d, target in ((100, 2), (3, 2)):
        w = dict(metric="l2", n=10**6, m=10**4, d=d, k=10, precision="f32")
        ms = gpu_find(rows, "gpu_knn", "memsafe-cuda", w)
        ko = gpu_find_like([q for q in rows if gpu_dev(q) == gpu_dev(ms)] if ms else rows, "gpu_knn", "keops", w, ms)
        r = ko["median_s"] / ms["median_s"] if ok(ms) and ok(ko) else None
        out.append([f"kNN L2 n=10⁶ m=10⁴ k=10 f32 d={d}, 1 GiB: memsafe vs KeOps (time ratio)", f"≥ {target}×",
                    NM if r is None else f"{r:.2f}× ({fsec(ms['median_s'])} vs {fsec(ko['median_s'])}, "
                                         f"{gpu_dev(ms)}){same_run(ms, ko)}",
                    verdict(r, target)])
    w = dict(metric="l2", n=10**6, m=10**4, d=100, k=10, precision="f32")
    ms = gpu_find(rows, "gpu_knn", "memsafe-cuda", w)
    share = None
    peak_gflops = gpu_peak_on(rows, gpu_dev(ms), peak_gflops)
    if ok(ms) and peak_gflops:
        g = 2.0 * ms["n"] * ms["m"] * ms["d"] / ms["median_s"] / 1e9
        share = g / peak_gflops
    out.append(["kNN L2 n=10⁶ d=100: share of the measured FP32 FMA peak (2·n·m·d flops; exact results)", "≥ 50%",
                NM if share is None else f"{share * 100:.1f}% ({g:,.0f} of {peak_gflops:,.0f} GFLOP/s, {gpu_dev(ms)})",
                verdict(share, 0.5)])
    out.append(["kNN L2 n=10⁶ d=100: memsafe vs FAISS-GPU", "≥ 1×",
                f"{NM} (FAISS-GPU's wheel needs CUDA 12 runtime wheels, more than a GPU call can carry)", NM])
    w = dict(precision="f32", d=3, n=10**6)
    ms = gpu_find(rows, "gpu_matvec", "memsafe-cuda", w)
    ko = gpu_find([q for q in rows if gpu_dev(q) == gpu_dev(ms)] if ms else rows, "gpu_matvec", "keops", w)
    r = ko["median_s"] / ms["median_s"] if ok(ms) and ok(ko) else None
    out.append(["K·v RBF d=3 f32 n=10⁶: memsafe vs KeOps (time ratio)", "≥ 1.5×",
                NM if r is None else f"{r:.2f}× ({fsec(ms['median_s'])} vs {fsec(ko['median_s'])}, "
                                     f"{gpu_dev(ms)}){same_run(ms, ko)}",
                verdict(r, 1.5)])
    ms_rows = [r for r in rows if r.get("suite") in ("gpu_knn", "gpu_matvec") and
               str(r.get("impl", "")).startswith("memsafe") and ok(r) and r.get("budget_bytes")]
    counted = [r for r in ms_rows if r.get("peak_temp_bytes") is not None and r.get("device_peak_bytes") is not None]
    good = [r for r in counted if r["peak_temp_bytes"] <= r["budget_bytes"] and r["device_peak_bytes"] <= r["budget_bytes"]]
    out.append(["peak device memory (counted and seen from outside) ≤ budget in every memsafe-cuda row", "all rows",
                f"{len(good)} of {len(counted)} rows" if counted else NM,
                NM if not counted else ("**pass**" if len(good) == len(counted) else "**FAIL**")])
    return "\n".join(["### GPU goals", "", table(["goal", "target", "measured", "verdict"], out), ""])


def section_gpu(rows, results_rel="bench/results") -> str:
    s = ["## GPU", "",
         "`bash bench/gpu/run_gpu.sh` builds `memsafe_bench_cuda` and `fma_peak_cuda` and runs "
         f"`python3 bench/gpu/run_gpu.py all` (see `bench/README.md`); its rows are `{results_rel}/gpu_*.jsonl`. "
         "memsafe's CUDA backend (`memsafe::cuda::eval_into`) against KeOps on the GPU and naive PyTorch and JAX, "
         "each in its own process, timed after one untimed warm-up call.", ""]
    if not rows:
        return "\n".join(s + [NO_GPU, ""])
    notes = Notes()
    gpus = gpu_names(rows)
    pk, pk_text = gpu_peak(rows)
    stamps = sorted(r["timestamp"] for r in rows if r.get("timestamp"))
    revs = sorted({r.get("git_rev") for r in rows if r.get("git_rev")})

    def first(key, impl=None):
        return next((r.get(key) for r in rows if r.get(key) and (impl is None or r.get("impl") == impl)), None)

    mems = sorted({r.get("device_mem_bytes") or r.get("gpu_mem_bytes") for r in rows
                   if r.get("device_mem_bytes") or r.get("gpu_mem_bytes")})
    versions = [f"{name} {v}" for name, v in (("torch", first("torch_version")), ("JAX", first("jax_version")),
                                              ("pykeops", first("keops_version"))) if v]
    s += ["### GPU machine", "", table(["", ""], [
        ["GPU", ", ".join(gpus) or "unknown"],
        ["GPU memory", ", ".join(fbytes(m) for m in mems) or "unknown"],
        ["driver / CUDA runtime", f"{first('gpu_driver') or first('cuda_driver') or 'unknown'} / "
                                  f"{first('cuda_runtime') or 'unknown'}"],
        ["host CPU", str(first("host_cpu") or first("cpu") or "unknown")],
        ["peers", ", ".join(versions) or NM],
        ["results taken", f"{stamps[0]} … {stamps[-1]}" if stamps else NM],
        ["git revisions", ", ".join(f"`{r}`" for r in revs) if revs else "unknown"],
    ]), "", "**FP32 peak.** " + pk_text + ".", ""]
    s += [section_gpu_goals(rows, pk), section_gpu_knn(rows, notes, pk, gpus), section_gpu_matvec(rows, notes, gpus),
          section_gpu_memory(rows)]
    if notes.items:
        s += ["#### Notes to the GPU tables", "", notes.render(), ""]
    return "\n".join(s)


# ---- main --------------------------------------------------------------------------------------

def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="Generate docs/benchmarks.md and its plots from bench/results.")
    p.add_argument("--results", default=os.path.join(REPO, "bench", "results"))
    p.add_argument("--doc", default=os.path.join(REPO, "docs", "benchmarks.md"))
    p.add_argument("--fig-dir", default=None, help="where the PNGs go (default: the doc's folder)")
    p.add_argument("--peak-gflops", type=float, default=None,
                   help="FP32 peak in GFLOP/s (default: cores × cpu MHz × --flops-per-cycle)")
    p.add_argument("--flops-per-cycle", type=float, default=32,
                   help="FP32 flops per cycle per core (32: Zen 4, AVX-512 FMA on two 256-bit pipes)")
    a = p.parse_args(argv)
    fig_dir = a.fig_dir or os.path.dirname(os.path.abspath(a.doc))
    os.makedirs(fig_dir, exist_ok=True)
    os.makedirs(os.path.dirname(os.path.abspath(a.doc)), exist_ok=True)

    rows = load(a.results)
    gpu_rows = load(a.results, gpu=True)
    mach = machine(rows)
    a._rows = rows
    pk, pk_text = peak(a, mach)
    doc_dir = os.path.dirname(os.path.abspath(a.doc))

    def img(name, fn):
        path = os.path.join(fig_dir, name)
        return os.path.relpath(path, doc_dir) if fn(rows, path, mach) else None

    fig2_img = img("bench_fig2.png", plot_fig2)
    sweep_img = img("bench_sweep.png", plot_sweep)
    sgpr_img = img("bench_sgpr.png", plot_sgpr)
    notes = Notes()

    stamps = sorted(r["timestamp"] for r in rows if r.get("timestamp"))
    revs = sorted({r.get("git_rev") for r in rows if r.get("git_rev")})
    keops = next((r for r in rows if r.get("impl") == "keops" and r.get("keops_version")), None)
    results_rel = os.path.relpath(os.path.abspath(a.results), REPO)
    parts = [
        "# Benchmarks", "",
        "<!-- Generated by `python3 bench/report.py`; do not edit: rerun the benchmarks and the report instead. -->",
        "",
        f"This page is generated by `python3 bench/report.py` from the JSON lines in `{results_rel}/` "
        "(written by `python3 bench/run.py SUITE`, see `bench/README.md`); no measurement here is typed by hand (the "
        "MPI section's scaling model takes one constant, its per-core f64 rate, from docs/design.md, and the notes "
        "quote a few numbers of earlier runs, each with its source). "
        f"For each measurement the latest row is shown; a cell without one says “{NM}”, and a run that failed "
        "shows why (out of memory, timeout, unsupported, unavailable, error).", "",
        "## Machine", "",
        table(["", ""], [
            ["CPU", str(mach["cpu"] or "unknown")],
            ["cores", str(mach["cores"] or "unknown")],
            ["clock (`cpu MHz` in /proc/cpuinfo)", f"{mach['mhz']:.0f} MHz" if mach["mhz"] else "unknown"],
            ["memory", fbytes(mach["mem"]) if mach["mem"] else "unknown"],
            ["threads used", str(mach["threads"] or "unknown")],
            ["results taken", f"{stamps[0]} … {stamps[-1]}" if stamps else NM],
            ["git revisions", ", ".join(f"`{r}`" for r in revs) if revs else "unknown"],
            ["KeOps", (f"pykeops {keops.get('keops_version')}, CPU backend, g++ flags `{keops.get('keops_cpp_flags')}`"
                       if keops else NM)],
        ]), "",
        "Timings are wall-clock seconds of the computation only (data generation, index building and "
        "KeOps' compilation excluded: KeOps' first, untimed call is reported as its setup), min and median of the "
        "repetitions, each implementation in its own process, peers of one workload back to back. "
        "Peak temp is memsafe's own count of temporary bytes (for naive: its dense matrix); "
        "`max_rss_bytes` in the results is the process's peak resident memory. "
        "FAISS and the naive peer call OpenBLAS's sgemm; their rows record `openblas_coretype`: `bench/run.py` "
        "sets `OPENBLAS_CORETYPE=SkylakeX` (OpenBLAS's AVX-512 kernels) on an AVX-512 CPU, because the environment "
        "of this project's machine sets `OPENBLAS_CORETYPE=Haswell` (found on 2026-12-02; an OpenBLAS older than "
        "a CPU may also take it for an older one) and OpenBLAS's Haswell (AVX2) kernels are slower there (on the "
        "Zen 5 dgemm 121 against 200 GFLOP/s, FAISS kNN d = 100 1.2× slower). Rows taken before 2026-11-26 13:00 "
        "(no `openblas_coretype`) ran FAISS on those AVX2 kernels.", "",
        "**FP32 peak.** " + pk_text + ". " + peak_per_cycle_text(pk, peak_machine(a, mach)) + "In a virtual machine `cpu MHz` "
        "is the nominal clock; if the core boosts above it the measured share of peak is overstated.", "",
        section_fig2(rows, fig2_img),
        section_knn(rows, notes),
        section_mnist(rows, notes),
        section_sweep(rows, sweep_img),
        section_matvec3(rows),
        section_sums(rows),
        section_grad(rows),
        section_attention(rows),
        section_exact_gp(rows),
        section_sgpr(rows, sgpr_img),
        section_overhead(rows),
        section_isa(rows),
        section_default_flags(rows),
        section_mpi(rows),
        section_compile(rows),
        goals(rows, pk),
    ]
    if notes.items:
        parts += ["### Notes to the tables", "", notes.render(), ""]
    parts += ["## About the peers", "",
              "- Random data: memsafe_bench draws N(0,1) numbers with `std::mt19937_64` (libstdc++), the KeOps peer "
              "with numpy's `default_rng`: the same distribution, not the same numbers — so KeOps' answers are "
              "checked against memsafe's only on MNIST.",
              "- KeOps compiles each formula with g++ on its first call; the flags (`-march=native` first) are shown "
              "above and are part of KeOps' cache key, so a module compiled without them is never reused.",
              "- A FAISS or KeOps kNN run that would take longer than about a minute per call runs on fewer queries "
              "(marked); queries per second is what is compared.", ""]
    parts.append(section_gpu(gpu_rows, results_rel))
    text = "\n".join(parts)
    with open(a.doc, "w") as f:
        f.write(text if text.endswith("\n") else text + "\n")
    print(f"report: wrote {a.doc} ({len(rows)} rows, {len(gpu_rows)} GPU rows)" +
          "".join(f", {x}" for x in (fig2_img, sweep_img) if x), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
