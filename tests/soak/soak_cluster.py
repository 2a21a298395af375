"""The chaos soak's cluster: a real coordinator and three worker daemons (2 CPU slots each),
worker node-2 inside a network namespace joined by a veth pair (so its link can be cut), the
checkpoint root on a small tmpfs (so the disk can be filled), all under one temporary directory.

Reuses tests/integration/harness.py (Cluster, processes, shardctl) and the veth helper of
tests/integration/partition_scenario_test.py. Needs root and iproute2 (network namespaces,
tmpfs mounts): SoakCluster.unavailable() says why not.
"""
import json
import os
import signal
import subprocess
import time

import harness
import partition_scenario_test as partition

SLOTS = 2
WORKERS = 3
CUT_NODE = 2  # node-2 runs in the namespace
HEARTBEAT_TIMEOUT_MS = 8000
GRACE_S = 3
CKPT_TMPFS_MB = 96


def unavailable():
    why = partition.namespaces_unavailable()
    if why:
        return why
    return None


class SoakCluster:
    """Starts, restarts and stops the processes; every start keeps the same flags, addresses and
    state dir, so a restarted process is the same node (or coordinator) again."""

    def __init__(self):
        self.net = partition.Veth()
        self.net.create()
        self.link_up = True
        try:
            self.cluster = harness.Cluster(
                workers=0, grace_period_s=GRACE_S, heartbeat_timeout_ms=HEARTBEAT_TIMEOUT_MS,
                listen=self.net.outer_ip + ":0", coordinator_flags=["--insecure"])
            self.ckpt_root = os.path.join(self.cluster.dir, "checkpoints")
            os.makedirs(self.ckpt_root)
            subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%dm" % CKPT_TMPFS_MB, "tmpfs",
                            self.ckpt_root], check=True, timeout=30)
            self.mounted = True
            for i in range(WORKERS):
                self.start_worker(i)
            self.cluster.wait_for_workers(WORKERS, timeout=60)
        except BaseException:
            self.destroy()
            raise

    @property
    def dir(self):
        return self.cluster.dir

    def worker_kwargs(self, i):
        inner = i == CUT_NODE
        return dict(grace_period_s=GRACE_S,
                    address=self.net.inner_ip if inner else self.net.outer_ip,
                    wrap=self.net.wrap() if inner else None, flags=["--insecure"])

    def start_worker(self, i):
        self.cluster.start_worker(i, SLOTS, **self.worker_kwargs(i))

    def proc(self, name):
        """The Popen of "coordinator" or "worker-<i>"."""
        return self.cluster.procs[name]

    def kill(self, name):
        p = self.proc(name)
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
        p.wait(timeout=30)

    def restart(self, name):
        if name == "coordinator":
            # Same address (port) and state dir: the workers reconnect by themselves.
            self.cluster.start_coordinator(self.cluster.address)
        else:
            self.start_worker(int(name.rsplit("-", 1)[1]))

    def set_link(self, up):
        self.net.set_link(up)
        self.link_up = up

    def ctl(self, *args, timeout=30):
        """shardctl, or None when it failed or hung (the coordinator may be down or stopped)."""
        try:
            proc = self.cluster.shardctl(*args, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            return None
        return proc if proc.returncode == 0 else None

    def ctl_json(self, *args, timeout=30):
        proc = self.ctl(*args, "--json", timeout=timeout)
        if proc is None:
            return None
        try:
            return json.loads(proc.stdout or "{}")
        except ValueError:
            return None

    def heal_all(self):
        """Ends every fault still in effect: link up, stopped processes continued, dead ones
        restarted. Used at the end of the soak and on the way out of a failed one."""
        self.set_link(True)
        for name, p in list(self.cluster.procs.items()):
            if p.poll() is None:
                try:
                    os.kill(p.pid, signal.SIGCONT)
                except OSError:
                    pass
            else:
                self.restart(name)
        for pid in self.cluster.trainer_pids():
            try:
                os.kill(pid, signal.SIGCONT)
            except OSError:
                pass

    def wait_workers_alive(self, timeout=120):
        """True once every worker is ALIVE (a restarted daemon is let in once its old
        registration is dead: up to a heartbeat timeout)."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            w = self.ctl_json("workers") or {}
            if sum(1 for x in w.get("workers", []) if x.get("state") == "ALIVE") >= WORKERS:
                return True
            time.sleep(0.5)
        return False

    def destroy(self):
        try:
            self.set_link(True)
        except Exception:  # noqa: BLE001 (best effort on the way out)
            pass
        if getattr(self, "cluster", None) is not None:
            for p in self.cluster.procs.values():
                if p.poll() is None:
                    try:
                        os.kill(p.pid, signal.SIGCONT)
                    except OSError:
                        pass
            self.cluster.stop()
            for pid in self.cluster.trainer_pids():
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        if getattr(self, "mounted", False):
            subprocess.run(["umount", "-l", self.ckpt_root], timeout=30)
            self.mounted = False
        self.net.destroy()
