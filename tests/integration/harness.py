"""Process harness for Shardline's end-to-end tests: real coordinator, worker daemons and trainer
processes on loopback, driven through the real shardctl.

`run_tests(module)` runs a unittest module and writes a JUnit XML file to $XML_OUTPUT_FILE, so
Bazel (and tools/test.sh) count each test case.
"""
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import xml.etree.ElementTree as ET


def tree_digest(root):
    """{path relative to root: sha256} of every file under root (to show a tree did not change)."""
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, root)] = hashlib.sha256(fh.read()).hexdigest()
    return out


def client_stub_root():
    """A temporary root holding a copy of python/shardline with its stubs generated from proto/
    (python/gen_protos.py), put first on sys.path. The package goes beside its stubs: a regular
    package in python/ would otherwise shadow the stubs' directory. Returns the root."""
    root = tempfile.mkdtemp(prefix="shardline_py_", dir=os.environ.get("TEST_TMPDIR"))
    shutil.copytree("python/shardline", os.path.join(root, "shardline"))
    sys.path.insert(0, "python")
    import gen_protos  # python/gen_protos.py
    gen_protos.generate("proto", root)
    sys.path.insert(0, root)
    return root


def import_shardline():
    """The Python client (python/shardline) with its generated stubs (client_stub_root)."""
    client_stub_root()
    import shardline
    return shardline


class Binaries:
    """Paths of the four binaries, from the command line: name=path ..."""

    def __init__(self, argv):
        paths = dict(a.split("=", 1) for a in argv if "=" in a)
        self.coordinator = os.path.abspath(paths["coordinator"])
        self.worker = os.path.abspath(paths["worker"])
        self.trainer = os.path.abspath(paths["trainer"])
        self.shardctl = os.path.abspath(paths["shardctl"])


BINARIES = None


def proc_state(pid):
    """The state letter of /proc/<pid>/stat ('T' stopped, 'Z' zombie), or None if gone."""
    try:
        with open("/proc/%d/stat" % int(pid)) as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def pids_of(pattern):
    """Pids whose command line contains `pattern`."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if pattern in cmd and int(pid) != os.getpid():
            state = proc_state(pid)
            if state not in (None, "Z"):  # None: it ended since its cmdline was read
                out.append(int(pid))
    return out


class Cluster:
    """A coordinator plus worker daemons, each a real process, under one temporary directory."""

    # The heartbeat timeout is generous for loopback because four trainers share two cores with
    # the daemons here; a starved heartbeat must not read as a lost node.
    # `listen`: the coordinator's address (another one than loopback when workers run in other
    # network namespaces); workers=0 starts none (the caller starts them with start_worker).
    # `coordinator_flags`: more flags for the coordinator (e.g. --insecure with a non-loopback
    # `listen`). `in_memory`: no --state_dir (the coordinator's documented default).
    # `worker_flags(i)`: more flags for worker i (TLS files, token file); `shardctl_flags`: more
    # flags for every shardctl call (--tls_ca, --token_file). `parent`: the directory to make
    # the cluster's under (default $TEST_TMPDIR; one another Unix user can reach, for trainers
    # run as --trainer_user).
    def __init__(self, workers=2, slots=2, heartbeat_timeout_ms=8000, grace_period_s=5,
                 listen="127.0.0.1:0", coordinator_flags=(), in_memory=False,
                 worker_flags=None, shardctl_flags=(), parent=None):
        self.dir = tempfile.mkdtemp(prefix="shardline_it_",
                                    dir=parent or os.environ.get("TEST_TMPDIR"))
        self.procs = {}
        self.worker_flags = worker_flags or (lambda i: [])
        self.shardctl_flags = list(shardctl_flags)
        self.coordinator_flags = list(coordinator_flags)
        self.in_memory = in_memory
        self.heartbeat_timeout_ms = heartbeat_timeout_ms
        self.grace_period_s = grace_period_s
        self.start_coordinator(listen)
        for i in range(workers):
            self.start_worker(i, slots, grace_period_s)
        self.wait_for_workers(workers)

    def start_coordinator(self, listen):
        """Starts (or restarts, on the same state dir) the coordinator; sets self.address."""
        log_path = os.path.join(self.dir, "coordinator.log")
        with open(log_path, "a") as log:
            log.write("---- start\n")
        offset = os.path.getsize(log_path)
        state = [] if self.in_memory else ["--state_dir=" + os.path.join(self.dir, "coordinator")]
        self.procs["coordinator"] = subprocess.Popen(
            [BINARIES.coordinator, "--listen=" + listen] + state + [
             "--heartbeat_interval_ms=500",
             "--heartbeat_timeout_ms=%d" % self.heartbeat_timeout_ms,
             "--stop_grace_s=%d" % self.grace_period_s] + self.coordinator_flags,
            stdout=open(log_path, "a"), stderr=subprocess.STDOUT)
        self.address = self._wait_for_address(log_path, offset)

    def _wait_for_address(self, log, offset=0, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            with open(log) as f:
                f.seek(offset)
                m = re.search(r"listening on (\S+)", f.read())
            if m:
                return m.group(1)
            time.sleep(0.05)
        raise RuntimeError("coordinator did not start: " + open(log).read()[-2000:])

    def worker_dir(self, i):
        return os.path.join(self.dir, "worker-%d" % i)

    # `address`: the worker's --address (where its trainers bind and peers reach them);
    # `wrap`: a command prefix that runs the daemon, e.g. ["ip", "netns", "exec", "ns1"];
    # `env`: added to the daemon's environment (its trainers inherit it); `flags`: more flags;
    # `trainer`: the trainer binary (default: the one the test was given).
    def start_worker(self, i, slots, grace_period_s=5, address=None, wrap=None, env=None,
                     flags=(), trainer=None):
        os.makedirs(self.worker_dir(i), exist_ok=True)
        log = open(os.path.join(self.worker_dir(i), "worker.log"), "a")
        cmd = [BINARIES.worker, "--coordinator=" + self.address, "--node_name=node-%d" % i,
               "--slots=%d" % slots, "--work_dir=" + self.worker_dir(i),
               "--trainer=" + (trainer or BINARIES.trainer),
               "--grace_period_s=%d" % grace_period_s]
        if address:
            cmd.append("--address=" + address)
        cmd += self.worker_flags(i) + list(flags)
        self.procs["worker-%d" % i] = subprocess.Popen(
            (wrap or []) + cmd, stdout=log, stderr=subprocess.STDOUT,
            env=dict(os.environ, **env) if env else None)

    def wait_for_workers(self, n, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            workers = self.shardctl_json("workers").get("workers", [])
            if sum(1 for w in workers if w.get("state") == "ALIVE") >= n:
                return
            time.sleep(0.1)
        raise RuntimeError("workers did not register")

    def shardctl(self, *args, timeout=600, check=True):
        proc = subprocess.run([BINARIES.shardctl, "--coordinator=" + self.address] +
                              self.shardctl_flags + list(args),
                              capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError("shardctl %s exited %d:\n%s%s" % (
                " ".join(args), proc.returncode, proc.stdout, proc.stderr))
        return proc

    def shardctl_json(self, *args):
        return json.loads(self.shardctl(*args, "--json").stdout or "{}")

    def job(self, job_id):
        return self.shardctl_json("status", job_id)

    def wait_for(self, job_id, predicate, timeout=300, what="condition"):
        deadline = time.time() + timeout
        status = {}
        while time.time() < deadline:
            status = self.job(job_id)
            if predicate(status):
                return status
            time.sleep(0.2)
        raise AssertionError("timed out waiting for %s; last status:\n%s" % (
            what, json.dumps(status, indent=1)[-3000:]))

    def rank_pid(self, worker, job_id, attempt, rank):
        """Pid of one trainer (rank of a job attempt) started by worker daemon `worker`, or None.
        The daemon passes --spec=<work_dir>/jobs/<job>/attempt-<a>/spec-rank-<r>.yaml."""
        pids = pids_of("%s/jobs/%s/attempt-%d/spec-rank-%d.yaml" % (
            self.worker_dir(worker), job_id, attempt, rank))
        return pids[0] if pids else None

    def rank_log(self, worker, job_id, attempt, rank):
        path = os.path.join(self.worker_dir(worker), "jobs", job_id, "attempt-%d" % attempt,
                            "rank-%d.log" % rank)
        return open(path, errors="replace").read() if os.path.exists(path) else ""

    def trainer_pids(self):
        # The worker daemons' own command lines name the trainer too (--trainer=...).
        return pids_of(BINARIES.trainer + " --spec")

    def logs(self):
        out = []
        for root, _, files in os.walk(self.dir):
            for f in files:
                if f.endswith(".log"):
                    p = os.path.join(root, f)
                    out.append("==== %s\n%s" % (p, open(p, errors="replace").read()[-3000:]))
        return "\n".join(out)

    def stop(self):
        for name, p in self.procs.items():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for name, p in self.procs.items():
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def run_tests(module_name):
    global BINARIES
    BINARIES = Binaries(sys.argv[1:])
    suite = unittest.defaultTestLoader.loadTestsFromModule(sys.modules[module_name])
    # Running a suite drops its tests, so list them first.
    test_ids = [t.id() for t in _iter(suite)]
    result = unittest.TextTestRunner(verbosity=2, stream=sys.stdout).run(suite)
    for t, reason in result.skipped:
        print("SKIPPED %s: %s" % (t.id(), reason))
    xml_path = os.environ.get("XML_OUTPUT_FILE")
    if xml_path:
        root = ET.Element("testsuites")
        ts = ET.SubElement(root, "testsuite", name=module_name, tests=str(result.testsRun),
                           failures=str(len(result.failures)), errors=str(len(result.errors)))
        bad = {t.id(): tb for t, tb in result.failures + result.errors}
        skipped = {t.id(): reason for t, reason in result.skipped}
        ts.set("skipped", str(len(skipped)))
        for test_id in test_ids:
            case = ET.SubElement(ts, "testcase", classname=module_name,
                                 name=test_id.split(".")[-1])
            if test_id in bad:
                ET.SubElement(case, "failure", message="failed").text = bad[test_id]
            elif test_id in skipped:
                # A skip is not a pass: the reason shows in the XML and on stdout.
                ET.SubElement(case, "skipped", message=skipped[test_id])
        ET.ElementTree(root).write(xml_path)
    sys.exit(0 if result.wasSuccessful() else 1)


def _iter(suite):
    for t in suite:
        if isinstance(t, unittest.TestSuite):
            yield from _iter(t)
        else:
            yield t
