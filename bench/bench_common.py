"""What the benchmark scripts share: byte counts and probes of the machine. Imported by the drivers
(bench/run.py, and through it bench/gpu/run_gpu.py) and by the peers (bench/peers/keops_bench.py,
bench/gpu/peers/gpu_common.py). Standard library only."""

from __future__ import annotations

import argparse
import ctypes
import os
import platform
import resource
import shutil
import subprocess

KIB, MIB, GIB, TIB = 1024, 1024**2, 1024**3, 1024**4
UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3, "gb": 1000**3,
         "t": 1000**4, "tb": 1000**4, "kib": KIB, "mib": MIB, "gib": GIB, "tib": TIB}


class ByteCountError(ValueError, argparse.ArgumentTypeError):
    """A malformed byte count: a ValueError, and as an argparse `type=` its message is the error."""


def parse_bytes(text: str) -> int:
    """64MiB, 1GiB, 1.5GB, 4096, ... as bytes (K, M, G, T: powers of 1000; KiB, ...: of 1024)."""
    s = str(text).strip().lower().replace(" ", "")
    i = 0
    while i < len(s) and (s[i].isdigit() or s[i] == "."):
        i += 1
    if i == 0 or s[i:] not in UNITS:
        raise ByteCountError(f"not a byte count: {text!r} (e.g. 64MiB, 1GiB, 4096)")
    return int(float(s[:i]) * UNITS[s[i:]])


def default_data_dir(repo: str) -> str:
    """The data folder (holding mnist/ and uci/) as the build chooses it: $MEMSAFE_DATA_DIR if set,
    else <repo>/../shared/data when it exists, else <repo>/data (where scripts/fetch_data.sh puts it)."""
    env = os.environ.get("MEMSAFE_DATA_DIR")
    if env:
        return env
    shared = os.path.normpath(os.path.join(repo, "..", "shared", "data"))
    return shared if os.path.isdir(shared) else os.path.join(repo, "data")


def cpu_flags() -> set[str]:
    """The CPU's feature flags from /proc/cpuinfo (empty where it cannot be read)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def openblas_avx512_coretype() -> str | None:
    """SkylakeX, OpenBLAS's AVX-512 kernel set, on a CPU with AVX-512 F/BW/DQ/VL, else None: what the
    benchmarks set as OPENBLAS_CORETYPE by default (bench/run.py --blas-coretype auto, bench/gp/sweep.sh's
    BLAS_CORETYPE auto), since the environment may force an older set (this project's machine sets
    OPENBLAS_CORETYPE=Haswell) and an OpenBLAS older than a CPU may take it for an older one."""
    return "SkylakeX" if {"avx512f", "avx512bw", "avx512dq", "avx512vl"} <= cpu_flags() else None


def cpu_model() -> str:
    """The CPU's model name, with its family and model numbers where /proc/cpuinfo has them: a virtual
    machine's model name can be as vague as "AMD EPYC" for several generations (Zen 3 and Zen 5 alike)."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, val = line.partition(":")
                key = key.strip()
                if key in ("model name", "cpu family", "model"):
                    fields.setdefault(key, val.strip())
                if not line.strip():  # the first processor's block is enough
                    break
    except OSError:
        pass
    name = fields.get("model name")
    if not name:
        return platform.processor() or "unknown"
    if "cpu family" in fields and "model" in fields:
        name += f" (family {fields['cpu family']}, model {fields['model']})"
    return name


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def max_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def keops_argkmin(lazy_tensor, queries, database, metric: str, k: int):
    """KeOps' k nearest database rows of each query: argKmin of the metric's LazyTensor formula.
    `lazy_tensor` is pykeops.numpy.LazyTensor or pykeops.torch.LazyTensor; for cosine both point sets
    must already be normalised (1 − q·x)."""
    qi = lazy_tensor(queries[:, None, :])
    xj = lazy_tensor(database[None, :, :])
    if metric == "cosine":
        D = 1 - (qi | xj)
    elif metric == "l2":
        D = ((qi - xj) ** 2).sum(-1)
    else:
        D = (qi - xj).abs().sum(-1)
    return D.argKmin(k, dim=1)


def loaded_libstdcxx() -> str | None:
    """The real path of the libstdc++ this process uses (loaded now if it is not yet), or None."""
    def mapped():
        try:
            with open("/proc/self/maps") as f:
                for line in f:
                    if "libstdc++.so" in line:
                        return os.path.realpath(line.split()[-1])
        except OSError:
            pass
        return None
    if mapped() is None:
        try:
            ctypes.CDLL("libstdc++.so.6")
        except OSError:
            return None
    return mapped()


def compiler_libstdcxx(cxx: str) -> str | None:
    """The real path of the libstdc++ a g++-like compiler links against, or None."""
    try:
        out = subprocess.run([cxx, "-print-file-name=libstdc++.so"], capture_output=True, text=True,
                             timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return os.path.realpath(out) if os.path.isabs(out) and os.path.exists(out) else None


def keops_compatible_cxx() -> tuple[str | None, str]:
    """Sets $CXX, which KeOps compiles its helpers with, to a compiler whose libstdc++ is the one this
    process loads, and says what it chose. KeOps' helpers are shared objects loaded into this process:
    built by a newer GCC than the process's libstdc++ (an image whose CXX is, say, /opt/gcc/bin/g++),
    they bind some of the standard library's stream and locale symbols to themselves and others to
    the process's libstdc++, and the first std::ostringstream crashes (SIGSEGV in KeOps' Compile,
    seen on an H100 with CUDA 13). $CXX is kept when it matches, or when nothing can be checked."""
    loaded = loaded_libstdcxx()
    env = os.environ.get("CXX")
    if loaded is None:
        return env, "kept: the process's libstdc++ could not be found"
    candidates = [c for c in (env, "g++", "c++", "/usr/bin/g++", "/usr/bin/c++") if c and shutil.which(c)]
    for c in candidates:
        if compiler_libstdcxx(c) == loaded:
            if c != env:
                os.environ["CXX"] = c
            return c, ("kept" if c == env else f"chosen instead of CXX={env}" if env else "chosen") + \
                f": its libstdc++ is the process's ({loaded})"
    return env, f"kept: no compiler found whose libstdc++ is the process's ({loaded})"
