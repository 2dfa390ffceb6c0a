"""A peer that outgrows the machine's memory is recorded, not left to the kernel's OOM killer.

start(row, limit_bytes=None) starts a daemon thread that reads the process's resident set size
(/proc/self/statm) every 0.2 s; when it passes the limit (default: MemAvailable at the start minus
1 GiB, so the rest of the machine keeps running), it prints `row` with status "oom", the limit and
the RSS seen, as the one JSON line the sweeps read, and ends the process at once (exit 3). Linux only;
elsewhere it does nothing.
"""
import json
import os
import sys
import threading
import time


def available_bytes():
    """MemAvailable of /proc/meminfo in bytes (None where there is none)."""
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return None


def _rss_bytes(page=os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096):
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * page


def start(row, limit_bytes=None):
    if not os.path.exists("/proc/self/statm"):
        return None
    if limit_bytes is None:
        avail = available_bytes()
        if avail is None:
            return None
        limit_bytes = avail - (1 << 30)
    row["rss_limit_bytes"] = int(limit_bytes)

    def watch():
        while True:
            rss = _rss_bytes()
            if rss > limit_bytes:
                out = dict(row)
                out.update({"status": "oom", "max_rss_bytes": rss,
                            "message": f"resident set {rss / 2**30:.2f} GiB passed the limit "
                                       f"{limit_bytes / 2**30:.2f} GiB (the memory available at the start less 1 GiB)"})
                sys.stdout.write(json.dumps(out) + "\n")
                sys.stdout.flush()
                os._exit(3)
            time.sleep(0.2)

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    return t
