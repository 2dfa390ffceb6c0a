#!/usr/bin/env python3
"""One attention measurement with PyTorch on the CPU (a peer of bench/attention.py).

  python torch_attention.py --impl sdpa|naive --B 1 --H 8 --T 4096 --d 64 [--causal]
                            --mode fwd|fwdbwd --threads 2 --repeat 3 [--mem-limit-gib 8]

sdpa:  torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=...)
naive: softmax(q kᵀ / sqrt(d) [+ causal −inf]) v with the T×T scores materialised.
fwd runs under torch.no_grad(); fwdbwd runs the forward and out.backward(dO).
Prints one JSON line: seconds min/median, max_rss_bytes, rss_inputs_bytes (after the inputs
exist), status ("ok", or "oom" when an allocation fails under the address-space limit).
"""
import argparse
import json
import resource
import statistics
import sys
import time


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--impl", choices=["sdpa", "naive"], required=True)
    for k, v in (("B", 1), ("H", 8), ("T", 1024), ("d", 64), ("threads", 2), ("repeat", 3)):
        p.add_argument(f"--{k}", type=int, default=v)
    p.add_argument("--causal", action="store_true")
    p.add_argument("--mode", choices=["fwd", "fwdbwd"], default="fwd")
    p.add_argument("--mem-limit-gib", type=float, default=8.0)
    a = p.parse_args()
    import torch
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    out = {"impl": a.impl, "B": a.B, "H": a.H, "T": a.T, "d": a.d, "causal": a.causal, "mode": a.mode,
           "threads": a.threads, "repeat": a.repeat, "torch_version": torch.__version__,
           "mem_limit_bytes": int(a.mem_limit_gib * 2**30)}
    rss = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    try:
        grad = a.mode == "fwdbwd"
        q, k, v = (torch.randn(a.B, a.H, a.T, a.d, dtype=torch.float32, requires_grad=grad) for _ in range(3))
        dO = torch.randn(a.B, a.H, a.T, a.d, dtype=torch.float32)
        out["rss_inputs_bytes"] = rss()
        # cap further growth: the address-space limit is set after import and the inputs
        soft = int(a.mem_limit_gib * 2**30)
        with open("/proc/self/statm") as f:
            vm = int(f.read().split()[0]) * resource.getpagesize()
        resource.setrlimit(resource.RLIMIT_AS, (vm + soft, resource.RLIM_INFINITY))
        scale = a.d ** -0.5
        mask = None
        if a.impl == "naive" and a.causal:
            mask = torch.ones(a.T, a.T, dtype=torch.bool).triu_(1)

        def forward():
            if a.impl == "sdpa":
                return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=a.causal)
            s = (q @ k.transpose(-2, -1)) * scale
            if mask is not None:
                s = s.masked_fill(mask, float("-inf"))
            return torch.softmax(s, dim=-1) @ v

        times = []
        for _ in range(a.repeat + 1):  # the first run warms up and is not counted
            t0 = time.perf_counter()
            if grad:
                o = forward()
                o.backward(dO)
            else:
                with torch.no_grad():
                    o = forward()
            times.append(time.perf_counter() - t0)
            del o
            for x in (q, k, v):
                x.grad = None
        times = times[1:]
        out.update(status="ok", seconds_min=min(times), seconds_median=statistics.median(times))
    except (RuntimeError, MemoryError) as e:
        msg = str(e)
        out.update(status="oom" if ("alloc" in msg.lower() or isinstance(e, MemoryError)) else "error",
                   error=msg[:200])
    out["max_rss_bytes"] = rss()
    print(json.dumps(out))


if __name__ == "__main__":
    sys.exit(main())
