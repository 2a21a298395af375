"""The chaos soak's seeded fault injector.

The schedule (each fault's kind, the pause before it, how long it holds, and the draws that pick
its victim) is made up front from the seed alone, so one seed replays the same schedule; which
process a draw lands on depends on what runs at that moment. One fault at a time, each undone
(SIGCONT, restart, link up, space freed) before the next; every hold is bounded.

Kinds:
  kill_trainer     SIGKILL one trainer process
  stop_trainer     SIGSTOP one trainer, SIGCONT after the hold (3-40 s: below and above the
                   spec's 30 s collective timeout)
  kill_worker      SIGKILL a worker daemon (its trainers die with it), restart it after the hold
  stop_worker      SIGSTOP a worker daemon, SIGCONT after the hold (2-16 s: around the 8 s
                   heartbeat timeout)
  kill_coordinator SIGKILL the coordinator, restart it on the same address and state dir
  stop_coordinator SIGSTOP the coordinator, SIGCONT after the hold
  cut_link         take node-2's veth link down, up after the hold (4-25 s)
  fill_disk        fill the checkpoint tmpfs, free it after the hold
  corrupt_shard    flip bytes in the middle of a committed shard file of a live job: of its
                   newest committed step or of an older one (one draw each way). Promise tested:
                   a corrupted checkpoint is detected (checkpoint_verify says BAD; a load fails
                   with DATA_LOSS naming the file) and never silently loaded
"""
import glob
import os
import random
import signal
import threading
import time

import soak_cluster

KINDS = ["kill_trainer", "stop_trainer", "kill_worker", "stop_worker", "kill_coordinator",
         "stop_coordinator", "cut_link", "fill_disk", "corrupt_shard"]
HOLD_S = {"kill_trainer": (0, 0), "stop_trainer": (3, 40), "kill_worker": (1, 6),
          "stop_worker": (2, 16), "kill_coordinator": (1, 4), "stop_coordinator": (2, 10),
          "cut_link": (4, 25), "fill_disk": (4, 15), "corrupt_shard": (0, 0)}
GAP_S = (6, 30)


def make_schedule(seed, minutes):
    """[(gap_s, kind, hold_s, draw)] from the seed; enough entries for the whole soak (the
    smallest gap bounds the count)."""
    rng = random.Random(seed)
    out = []
    for _ in range(int(minutes * 60 / GAP_S[0]) + 1):
        kind = rng.choice(KINDS)
        lo, hi = HOLD_S[kind]
        out.append((rng.uniform(*GAP_S), kind, rng.uniform(lo, hi), rng.random()))
    return out


def _pick(items, draw):
    items = sorted(items)
    return items[int(draw * len(items)) % len(items)] if items else None


class Injector:
    """Runs the schedule on a thread until `stop` is set or the deadline passes; records every
    fault it injected (or skipped for want of a victim) in self.log and node-2's cut intervals
    in self.cuts."""

    def __init__(self, sc, tracker, schedule, deadline):
        self.sc = sc
        self.tracker = tracker
        self.schedule = schedule
        self.deadline = deadline
        self.log = []  # {"t", "kind", "hold_s", "what", "done"}
        self.cuts = []  # [t_down, t_up]
        self.corrupted = []  # {"t", "job", "step", "dir", "file", "newest"}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self):
        self.thread.start()

    def join(self, timeout):
        self.stop.set()
        self.thread.join(timeout)

    def _run(self):
        for gap, kind, hold, draw in self.schedule:
            if self.stop.wait(gap) or time.time() + hold > self.deadline:
                return
            t = time.time()
            try:
                what = getattr(self, "_" + kind)(hold, draw)
            except Exception as e:  # noqa: BLE001 (a fault that could not be made is recorded)
                what = "error: %r" % e
            done = not (what.startswith("skipped") or what.startswith("error"))
            self.log.append({"t": t, "kind": kind, "hold_s": round(hold, 1), "what": what,
                             "done": done})
            print("soak: %s %s (%.1f s): %s" % (time.strftime("%H:%M:%S"), kind, hold, what),
                  flush=True)

    def _trainer(self, draw):
        return _pick(self.sc.cluster.trainer_pids(), draw)

    def _kill_trainer(self, hold, draw):
        pid = self._trainer(draw)
        if pid is None:
            return "skipped: no trainer running"
        os.kill(pid, signal.SIGKILL)
        return "pid %d" % pid

    def _stop_trainer(self, hold, draw):
        pid = self._trainer(draw)
        if pid is None:
            return "skipped: no trainer running"
        os.kill(pid, signal.SIGSTOP)
        time.sleep(hold)
        try:
            os.kill(pid, signal.SIGCONT)
        except OSError:
            return "pid %d (gone before SIGCONT)" % pid
        return "pid %d" % pid

    def _worker(self, draw):
        return "worker-%d" % min(int(draw * soak_cluster.WORKERS), soak_cluster.WORKERS - 1)

    def _kill_worker(self, hold, draw):
        name = self._worker(draw)
        self.sc.kill(name)
        time.sleep(hold)
        self.sc.restart(name)
        return name

    def _stop_worker(self, hold, draw):
        name = self._worker(draw)
        pid = self.sc.proc(name).pid
        os.kill(pid, signal.SIGSTOP)
        time.sleep(hold)
        os.kill(pid, signal.SIGCONT)
        return name

    def _kill_coordinator(self, hold, draw):
        self.sc.kill("coordinator")
        time.sleep(hold)
        self.sc.restart("coordinator")
        return "restarted on %s" % self.sc.cluster.address

    def _stop_coordinator(self, hold, draw):
        pid = self.sc.proc("coordinator").pid
        os.kill(pid, signal.SIGSTOP)
        time.sleep(hold)
        os.kill(pid, signal.SIGCONT)
        return "pid %d" % pid

    def _cut_link(self, hold, draw):
        t0 = time.time()
        self.sc.set_link(False)
        try:
            time.sleep(hold)
        finally:
            self.sc.set_link(True)
            self.cuts.append([t0, time.time()])
        return "node-%d" % soak_cluster.CUT_NODE

    def _fill_disk(self, hold, draw):
        path = os.path.join(self.sc.ckpt_root, ".soak_fill")
        written = 0
        try:
            with open(path, "wb") as f:
                chunk = b"\0" * (1 << 20)
                for _ in range(soak_cluster.CKPT_TMPFS_MB + 1):  # bounded by the tmpfs size
                    f.write(chunk)
                    f.flush()
                    written += len(chunk)
        except OSError:
            pass  # ENOSPC: full
        try:
            time.sleep(hold)
        finally:
            os.remove(path)
        return "%d MiB held" % (written >> 20)

    def _corrupt_shard(self, hold, draw):
        """Flips 64 bytes in the middle of shard_00000.bin of a committed step of a live job:
        its newest committed step when draw < 0.5, else an older one (skipped when it has none
        older)."""
        jobs = [j for j in self.tracker.live()
                if glob.glob(os.path.join(self.sc.ckpt_root, j, "step_*", "MANIFEST.json"))]
        job = _pick(jobs, draw)
        if job is None:
            return "skipped: no live job with a committed checkpoint"
        steps = sorted(int(os.path.basename(os.path.dirname(m))[5:]) for m in glob.glob(
            os.path.join(self.sc.ckpt_root, job, "step_*", "MANIFEST.json")))
        newest = draw < 0.5
        if not newest and len(steps) < 2:
            return "skipped: %s has no committed step older than its newest" % job
        step = steps[-1] if newest else steps[-2]
        d = os.path.join(self.sc.ckpt_root, job, "step_%d" % step)
        f = os.path.join(d, "shard_00000.bin")
        try:
            with open(f, "r+b") as fh:
                size = fh.seek(0, 2)
                fh.seek(size // 2)
                data = fh.read(64)
                fh.seek(size // 2)
                fh.write(bytes(b ^ 0xFF for b in data))
        except OSError as e:
            return "skipped: %s step %d vanished (%s)" % (job, step, e.strerror)
        self.corrupted.append({"t": time.time(), "job": job, "step": step, "dir": d,
                               "file": f, "newest": newest})
        return "%s step %d (%s) %s" % (job, step, "newest" if newest else "older", f)
