#!/usr/bin/env python3
"""memsafe's attention against PyTorch autograd on the same inputs (f32): runs examples/attention with
--dump, recomputes O, lse and the gradients of sum(dO ∘ O) with torch (f64 autograd of the naive
formula, and f32 scaled_dot_product_attention), and prints one JSON line per setting with the largest
error of each output relative to the largest magnitude of the f64 reference.

  python3 bench/attention_vs_torch.py [--bin build/examples/attention] [--T 300] [--H 4] [--d 64]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(REPO, "build", "examples", "attention"))
    ap.add_argument("--B", type=int, default=2)
    ap.add_argument("--H", type=int, default=4)
    ap.add_argument("--T", type=int, default=300)
    ap.add_argument("--d", type=int, default=64)
    a = ap.parse_args()
    import numpy as np
    import torch
    for causal in (False, True):
        for layout in ("bhtd", "bthd"):
            with tempfile.TemporaryDirectory() as tmp:
                cmd = [a.bin, "--B", str(a.B), "--H", str(a.H), "--T", str(a.T), "--d", str(a.d), "--precision", "f32",
                       "--repeat", "1", "--layout", layout, "--dump", tmp]
                if causal:
                    cmd.append("--causal")
                subprocess.run(cmd, check=True, capture_output=True)
                shape = (a.B, a.H, a.T, a.d)
                ld = lambda n, s=shape: np.fromfile(os.path.join(tmp, n + ".bin"), dtype=np.float32).reshape(s)
                q, k, v, dO = (torch.from_numpy(ld(n)) for n in ("q", "k", "v", "dO"))
                ours = {n: torch.from_numpy(ld(n)) for n in ("O", "dQ", "dK", "dV")}
                ours["lse"] = torch.from_numpy(ld("lse", shape[:3]))
            # f64 autograd of the naive formula
            q64, k64, v64 = (x.double().requires_grad_(True) for x in (q, k, v))
            s = (q64 @ k64.transpose(-2, -1)) / a.d ** 0.5
            if causal:
                s = s.masked_fill(torch.ones(a.T, a.T, dtype=torch.bool).triu(1), float("-inf"))
            o = torch.softmax(s, -1) @ v64
            o.backward(dO.double())
            ref = {"O": o.detach(), "lse": torch.logsumexp(s, -1).detach(), "dQ": q64.grad, "dK": k64.grad,
                   "dV": v64.grad}
            # f32 SDPA autograd
            q32, k32, v32 = (x.clone().requires_grad_(True) for x in (q, k, v))
            o32 = torch.nn.functional.scaled_dot_product_attention(q32, k32, v32, is_causal=causal)
            o32.backward(dO)
            sdpa = {"O": o32.detach(), "dQ": q32.grad, "dK": k32.grad, "dV": v32.grad}
            rel = lambda x, r: float((x.double() - r).abs().max() / r.abs().max())
            row = {"B": a.B, "H": a.H, "T": a.T, "d": a.d, "causal": causal, "layout": layout, "precision": "f32",
                   "torch_version": torch.__version__}
            for n in ("O", "lse", "dQ", "dK", "dV"):
                row[f"memsafe_vs_f64_{n}"] = rel(ours[n], ref[n])
                if n in sdpa:
                    row[f"sdpa_vs_f64_{n}"] = rel(sdpa[n], ref[n])
            print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
