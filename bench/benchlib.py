"""Helpers shared by the Python benchmark drivers under bench/: the machine header of a results
file, free loopback ports, and running W rank processes while measuring each one's peak RSS.

Peak RSS comes from wait4()'s rusage (ru_maxrss, the kernel's high-water mark of the child's
resident set, the same number as /proc/<pid>/status VmHWM at exit), so both sides of a
comparison are measured the same way whatever they are written in.
"""
import datetime
import os
import platform
import socket
import statistics
import subprocess
import time


def load_average():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_header(title):
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    return (f"{title}\n"
            f"date {now}; host {platform.node()}; nproc {os.cpu_count()}; cpu {cpu_model()}; "
            f"memory {os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB; "
            f"load average at start {load_average()}\n")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RankRun:
    """Outcome of one multi-process run."""

    def __init__(self, returncodes, maxrss_bytes, cpu_s, wall_s, logs, load_before, load_after):
        self.returncodes = returncodes
        self.maxrss_bytes = maxrss_bytes  # Per rank.
        self.cpu_s = cpu_s                # Per rank: user + system CPU seconds, whole process.
        self.wall_s = wall_s
        self.logs = logs                  # Per rank: path of its stdout+stderr.
        self.load_before = load_before
        self.load_after = load_after

    def ok(self):
        return all(rc == 0 for rc in self.returncodes)

    def tail(self, rank, n=2000):
        with open(self.logs[rank], errors="replace") as f:
            return f.read()[-n:]


def run_ranks(argv_of_rank, world, log_prefix, extra_env=None, timeout_s=900):
    """Starts argv_of_rank(r) for r in [0, world) with torchrun's variables, waits for all.

    Each rank's stdout and stderr go to <log_prefix>.<rank>.log. A run past timeout_s is killed
    (every rank, by its own pid) and reported with return code -9.
    """
    port = free_port()
    load_before = load_average()
    procs, logs = [], []
    start = time.monotonic()
    for r in range(world):
        env = dict(os.environ)
        env.update({"RANK": str(r), "WORLD_SIZE": str(world), "LOCAL_RANK": str(r),
                    "LOCAL_WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1",
                    "MASTER_PORT": str(port), "OMP_NUM_THREADS": "1",
                    # the bootstrap store's secret, one per launch (the trainer requires one)
                    "SHARDLINE_STORE_SECRET": f"bench-{port}-{os.getpid()}"})
        env.update(extra_env or {})
        log = f"{log_prefix}.{r}.log"
        logs.append(log)
        with open(log, "w") as out:
            procs.append(subprocess.Popen(argv_of_rank(r), env=env, stdout=out,
                                          stderr=subprocess.STDOUT))
    codes, rss, cpu = [None] * world, [0] * world, [0.0] * world
    pending = {p.pid: i for i, p in enumerate(procs)}
    deadline = start + timeout_s
    while pending:
        pid, status, usage = os.wait4(-1, os.WNOHANG)
        if pid == 0:
            if time.monotonic() > deadline:
                for p in procs:
                    if p.pid in pending:
                        p.kill()
                deadline = float("inf")
            time.sleep(0.02)
            continue
        if pid not in pending:
            continue
        i = pending.pop(pid)
        codes[i] = os.waitstatus_to_exitcode(status)
        rss[i] = usage.ru_maxrss * 1024  # KiB on Linux.
        cpu[i] = usage.ru_utime + usage.ru_stime
        procs[i].returncode = codes[i]
    return RankRun(codes, rss, cpu, time.monotonic() - start, logs, load_before, load_average())


def median(values):
    return statistics.median(values) if values else float("nan")


def write_results(path, text):
    """Writes a benchmark's results file (creating its folder) and says where."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    print(f"wrote {path}")
