#!/usr/bin/env python3
"""Attention benchmark: memsafe (examples/attention) against PyTorch's scaled_dot_product_attention
and a naive dense PyTorch implementation on the CPU, same threads, B = 1 (--B: the paper's
transformer is B = 64, d_model = 512 = 8 heads × 64), H = 8, d = 64, f32.

  python3 bench/attention.py [--B 1] [--T 256,1024,4096] [--T-memsafe 16384] [--threads 2] [--repeat 3]
                             [--budget 64MiB] [--torch-python bench/.cache/venv-torch/bin/python]
                             [--out bench/results/attention.jsonl]

For every T and causal in (False, True) the three implementations run back to back, each in its own
process: the forward alone (memsafe: eval_into; torch: under no_grad) and forward + backward
(memsafe: eval_into then attention_backward; torch: forward then out.backward(dO)). The T in
--T-memsafe run memsafe alone. One JSON line per measurement (suite "attention") is appended to
--out; `python3 bench/report.py` turns them into the attention table of docs/benchmarks.md.
The torch peers get an address-space cap of --mem-limit-gib above their inputs; an allocation that
fails under it is recorded as status "oom". Set up the peer with
  python3 -m venv bench/.cache/venv-torch && bench/.cache/venv-torch/bin/pip install torch numpy
"""
import argparse
import datetime
import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def git_rev():
    try:
        return subprocess.check_output(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], text=True).strip()
    except Exception:
        return None


def run_json(cmd, timeout):
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"status": "timeout"}
    lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
    if not lines:
        return {"status": "error", "error": (p.stderr or p.stdout)[-300:]}
    return json.loads(lines[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--T", default="256,1024,4096")
    ap.add_argument("--T-memsafe", default="16384")
    ap.add_argument("--B", type=int, default=1, help="batch (the paper's transformer: B = 64, H = 8, d = 64)")
    ap.add_argument("--H", type=int, default=8)
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--repeat-large", type=int, default=1, help="repetitions of the --T-memsafe runs")
    ap.add_argument("--large-causal-only", action="store_true", help="run the --T-memsafe sizes causal only")
    ap.add_argument("--budget", default="64MiB")
    ap.add_argument("--impls", default="memsafe,torch_sdpa,torch_naive", help="which implementations run for --T")
    ap.add_argument("--modes", default="fwd,fwdbwd")
    ap.add_argument("--mem-limit-gib", type=float, default=8.0)
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--bin", default=os.path.join(REPO, "build", "examples", "attention"))
    ap.add_argument("--torch-python", default=os.path.join(REPO, "bench", ".cache", "venv-torch", "bin", "python"))
    ap.add_argument("--out", default=os.path.join(REPO, "bench", "results", "attention.jsonl"))
    a = ap.parse_args()
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    rev = git_rev()
    peer = os.path.join(REPO, "bench", "peers", "torch_attention.py")
    have_torch = os.path.exists(a.torch_python)
    if not have_torch:
        print(f"attention: no {a.torch_python}: torch peers skipped", file=sys.stderr)
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    out = open(a.out, "a")

    def emit(row):
        row.update(suite="attention", bench="attention", timestamp=stamp, git_rev=rev, precision="f32", B=a.B,
                   H=a.H, d=a.d, threads=a.threads)
        out.write(json.dumps(row) + "\n")
        out.flush()
        print(json.dumps(row))

    def memsafe(T, causal, mode, repeat=None):
        cmd = [a.bin, "--B", str(a.B), "--H", str(a.H), "--T", str(T), "--d", str(a.d), "--threads", str(a.threads),
               "--repeat", str(repeat or a.repeat), "--budget", a.budget, "--precision", "f32"]
        if causal:
            cmd.append("--causal")
        if mode == "fwd":
            cmd.append("--forward-only")
        r = run_json(cmd, a.timeout)
        row = {"impl": "memsafe", "T": T, "causal": causal, "mode": mode, "budget_bytes": r.get("budget_bytes"),
               "repeat": repeat or a.repeat,
               "max_rss_bytes": r.get("max_rss_bytes"), "peak_temp_bytes": r.get("peak_temp_bytes"),
               "status": "ok" if "forward_seconds_min" in r else r.get("status", "error")}
        if "error" in r:
            row["error"] = r["error"]
        if row["status"] == "ok":
            if mode == "fwd":
                row.update(seconds_min=r["forward_seconds_min"], seconds_median=r["forward_seconds_median"])
            else:
                row.update(seconds_min=r["forward_seconds_min"] + r["backward_seconds_min"],
                           seconds_median=r["forward_seconds_median"] + r["backward_seconds_median"],
                           backward_seconds_min=r["backward_seconds_min"])
        emit(row)

    def torch_peer(impl, T, causal, mode):
        cmd = [a.torch_python, peer, "--impl", impl, "--B", str(a.B), "--H", str(a.H), "--T", str(T), "--d", str(a.d),
               "--mode", mode, "--threads", str(a.threads), "--repeat", str(a.repeat),
               "--mem-limit-gib", str(a.mem_limit_gib)]
        if causal:
            cmd.append("--causal")
        r = run_json(cmd, a.timeout)
        r.update(impl="torch_" + impl, T=T, causal=causal, mode=mode)
        emit(r)

    impls = set(a.impls.split(","))
    for T in [int(x) for x in a.T.split(",") if x]:
        for causal in (False, True):
            for mode in a.modes.split(","):
                if "memsafe" in impls:
                    memsafe(T, causal, mode)
                if have_torch and "torch_sdpa" in impls:
                    torch_peer("sdpa", T, causal, mode)
                if have_torch and "torch_naive" in impls:
                    torch_peer("naive", T, causal, mode)
    for T in [int(x) for x in a.T_memsafe.split(",") if x]:
        for causal in ((True,) if a.large_causal_only else (False, True)):
            memsafe(T, causal, "fwd", a.repeat_large)
    return 0


if __name__ == "__main__":
    sys.exit(main())
