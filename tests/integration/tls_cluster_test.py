"""TLS end to end (issue 14 item 1): a real coordinator serving TLS with mutual TLS for workers,
real worker daemons presenting their node certificates, real trainers and shardctl, all with the
certificates made by tools/make_dev_certs.sh; and the refusals around it (a worker without a
client certificate or with another node's, a client without the CA, a token in clear text to a
non-loopback address).

The coordinator listens on this machine's first non-loopback IPv4 address when it has one, so the
whole job crosses a non-loopback address over TLS; otherwise on 127.0.0.1 (and the clear-text
refusal test is skipped, with that reason). Runs with the venv's python (grpcio) for the Python
client's part.
"""
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from cluster_test import write_spec  # noqa: E402

MAKE_CERTS = os.path.abspath("tools/make_dev_certs.sh")


def non_loopback_ipv4():
    """This machine's first global IPv4 address, or None."""
    try:
        out = subprocess.run(["ip", "-4", "-o", "addr", "show", "scope", "global"],
                             capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"inet (\d+\.\d+\.\d+\.\d+)/", out)
    return m.group(1) if m else None


def write_secret(path, text):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text + "\n")
    return path


def make_certs(out, hosts, workers):
    proc = subprocess.run(["bash", MAKE_CERTS, "--out", out, "--hosts", hosts,
                           "--workers", workers], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise RuntimeError("make_dev_certs.sh failed:\n" + proc.stdout + proc.stderr)
    return out


def wait_for_log(path, pattern, timeout=30):
    deadline = time.time() + timeout
    text = ""
    while time.time() < deadline:
        text = open(path, errors="replace").read() if os.path.exists(path) else ""
        if re.search(pattern, text):
            return text
        time.sleep(0.1)
    raise AssertionError("%r not in %s within %ds:\n%s" % (pattern, path, timeout, text[-3000:]))


class TlsClusterTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="shardline_tls_", dir=os.environ.get("TEST_TMPDIR"))
        cls.host = non_loopback_ipv4()
        host = cls.host or "127.0.0.1"
        cls.certs = make_certs(os.path.join(cls.tmp, "certs"), host,
                               "node-0,node-1,node-x")
        cls.other_ca = make_certs(os.path.join(cls.tmp, "other"), host, "")
        cls.user_token = "user-" + os.urandom(8).hex()
        cls.worker_token = "worker-" + os.urandom(8).hex()
        cls.user_token_file = write_secret(os.path.join(cls.tmp, "user.token"), cls.user_token)
        cls.worker_token_file = write_secret(os.path.join(cls.tmp, "worker.token"),
                                             cls.worker_token)
        c = cls.certs
        cls.cluster = harness.Cluster(
            workers=2, slots=1, grace_period_s=3, listen=host + ":0",
            coordinator_flags=[
                "--token_file=" + cls.user_token_file,
                "--worker_token_file=" + cls.worker_token_file,
                "--tls_cert=%s/server.pem" % c, "--tls_key=%s/server.key" % c,
                "--tls_client_ca=%s/ca.pem" % c],
            worker_flags=lambda i: [
                "--join_token_file=" + cls.worker_token_file, "--tls_ca=%s/ca.pem" % c,
                "--tls_cert=%s/worker-node-%d.pem" % (c, i),
                "--tls_key=%s/worker-node-%d.key" % (c, i)],
            shardctl_flags=["--token_file=" + cls.user_token_file, "--tls_ca=%s/ca.pem" % c])

    @classmethod
    def tearDownClass(cls):
        cls.cluster.stop()
        print(cls.cluster.logs())

    def shardctl(self, *args):
        """shardctl with only `args` (no TLS or token from the harness)."""
        return subprocess.run([harness.BINARIES.shardctl] + list(args), capture_output=True,
                              text=True, timeout=120, env=dict(os.environ, HOME=self.tmp))

    def start_worker(self, name, flags):
        d = os.path.join(self.tmp, name)
        os.makedirs(d, exist_ok=True)
        log = os.path.join(d, "worker.log")
        proc = subprocess.Popen(
            [harness.BINARIES.worker, "--coordinator=" + self.cluster.address,
             "--node_name=" + name, "--slots=1", "--work_dir=" + d,
             "--trainer=" + harness.BINARIES.trainer] + flags,
            stdout=open(log, "w"), stderr=subprocess.STDOUT)
        self.addCleanup(lambda: (proc.kill(), proc.wait()))
        return proc, log

    def alive_workers(self):
        return sorted(w["node_name"] for w in self.cluster.shardctl_json("workers")["workers"]
                      if w.get("state") == "ALIVE")

    def test_job_runs_to_success_over_mutual_tls(self):
        # Two ranks, one per worker: they meet through the coordinator's rendezvous.
        spec = write_spec(os.path.join(self.cluster.dir, "checkpoints"), steps=4, world_size=2,
                          degree=2)
        job = self.cluster.shardctl("submit", spec).stdout.strip().splitlines()[0]
        status = self.cluster.wait_for(job, lambda s: s.get("state") in ("SUCCEEDED", "FAILED"),
                                       timeout=300, what="job end")
        self.assertEqual(status["state"], "SUCCEEDED", json.dumps(status, indent=1))
        # Progress reached the coordinator (the daemons relay it over their mutual-TLS channel)
        # and the trainers' rendezvous and checkpoint reports went over TLS with the CA the
        # daemon gave them: both ranks met, and both checkpoints are committed.
        self.assertEqual(int(status["step"]), 4)
        self.assertGreater(status["loss"], 0.0)
        cps = self.cluster.shardctl_json("checkpoints", job)["checkpoints"]
        # Every 3 steps and the final one.
        self.assertEqual(sorted(int(c["step"]) for c in cps if c.get("committed")), [3, 4], cps)
        text = self.cluster.shardctl("status", job).stdout
        self.assertIn("SUCCEEDED", text)
        self.assertEqual(self.alive_workers(), ["node-0", "node-1"])
        # No token on any command line (readable by every local user in /proc/PID/cmdline).
        for name, p in self.cluster.procs.items():
            with open("/proc/%d/cmdline" % p.pid, "rb") as f:
                cmdline = f.read().decode(errors="replace")
            self.assertNotIn(self.user_token, cmdline, name)
            self.assertNotIn(self.worker_token, cmdline, name)

    def test_worker_without_client_certificate_is_refused(self):
        proc, log = self.start_worker("node-nocert", [
            "--join_token_file=" + self.worker_token_file, "--tls_ca=%s/ca.pem" % self.certs])
        wait_for_log(log, r"UNAUTHENTICATED: RegisterWorker: worker calls need a client "
                          r"certificate signed by the coordinator's client CA")
        self.assertIsNone(proc.poll())  # it keeps retrying, unregistered
        self.assertNotIn("node-nocert", self.alive_workers())

    def test_worker_with_another_nodes_certificate_is_refused(self):
        c = self.certs
        _, log = self.start_worker("node-y", [
            "--join_token_file=" + self.worker_token_file, "--tls_ca=%s/ca.pem" % c,
            "--tls_cert=%s/worker-node-x.pem" % c, "--tls_key=%s/worker-node-x.key" % c])
        wait_for_log(log, r"PERMISSION_DENIED: RegisterWorker: the client certificate does not "
                          r"name node node-y")
        self.assertNotIn("node-y", self.alive_workers())

    def test_client_without_the_ca_fails_with_a_tls_hint(self):
        # Plain text to a TLS port: the connection never comes up; shardctl says to pass the CA.
        proc = self.shardctl("workers", "--coordinator=" + self.cluster.address,
                             "--token_file=" + self.user_token_file, "--insecure",
                             "--timeout_s=3")
        self.assertEqual(proc.returncode, 4, proc.stderr)
        self.assertIn("if the coordinator serves TLS, pass --tls_ca=CA.pem", proc.stderr)

    def test_client_trusting_another_ca_fails_the_handshake(self):
        proc = self.shardctl("workers", "--coordinator=" + self.cluster.address,
                             "--token_file=" + self.user_token_file,
                             "--tls_ca=%s/ca.pem" % self.other_ca, "--timeout_s=3")
        self.assertEqual(proc.returncode, 4, proc.stderr)
        self.assertRegex(proc.stderr, r"(?i)handshake|certificate verify|CERTIFICATE_VERIFY")
        self.assertNotIn("pass --tls_ca", proc.stderr)  # it was given one

    def test_a_token_is_never_sent_in_clear_text_off_loopback(self):
        if self.host is None:
            self.skipTest("this machine has no non-loopback IPv4 address to connect to")
        # A listener that records whether anything connects: the refusal happens before any
        # connection, so the token never leaves the process.
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind((self.host, 0))
        listener.listen(8)
        listener.setblocking(False)
        self.addCleanup(listener.close)
        target = "%s:%d" % listener.getsockname()
        proc = self.shardctl("workers", "--coordinator=" + target,
                             "--token_file=" + self.user_token_file)
        self.assertEqual(proc.returncode, 7, proc.stderr)
        self.assertIn("refusing to send the token in clear text to %s, which is not a loopback "
                      "address: pass --tls_ca=CA.pem to connect with TLS, or --insecure" % target,
                      proc.stderr)
        d = os.path.join(self.tmp, "cleartext-worker")
        os.makedirs(d, exist_ok=True)
        worker = subprocess.run(
            [harness.BINARIES.worker, "--coordinator=" + target, "--node_name=cleartext",
             "--slots=1", "--work_dir=" + d, "--trainer=" + harness.BINARIES.trainer,
             "--join_token_file=" + self.worker_token_file],
            capture_output=True, text=True, timeout=60)
        self.assertEqual(worker.returncode, 2, worker.stderr)
        self.assertIn("refusing to send the token in clear text to " + target, worker.stderr)
        with self.assertRaises(BlockingIOError):
            listener.accept()
        # Loopback stays allowed without TLS: the same call to 127.0.0.1 is attempted (and
        # finds nothing listening there).
        proc = self.shardctl("workers", "--coordinator=127.0.0.1:1",
                             "--token_file=" + self.user_token_file, "--timeout_s=2")
        self.assertEqual(proc.returncode, 4, proc.stderr)

    def test_python_client_over_tls(self):
        shardline = harness.import_shardline()
        none = os.path.join(self.tmp, "no-config")
        with shardline.Client(address=self.cluster.address, token=self.user_token,
                              tls="%s/ca.pem" % self.certs, config=none, timeout=30) as c:
            self.assertEqual(sorted(w.node_name for w in c.workers()), ["node-0", "node-1"])
        # export() runs shardctl with the client's CA: it reaches the coordinator over TLS
        # (NOT_FOUND for a job it does not know; without --tls_ca shardctl could not connect
        # and exited 4, an ExportError).
        with shardline.Client(address=self.cluster.address, token=self.user_token,
                              tls="%s/ca.pem" % self.certs, config=none, timeout=30,
                              shardctl=harness.BINARIES.shardctl) as c:
            with self.assertRaises(shardline.NotFoundError) as e:
                c.export("job-none", None, os.path.join(self.tmp, "none.safetensors"))
            self.assertIn("job-none", str(e.exception))
        with shardline.Client(address=self.cluster.address, token=self.user_token,
                              tls=open("%s/ca.pem" % self.certs, "rb").read(), config=none,
                              shardctl=harness.BINARIES.shardctl) as c:
            with self.assertRaises(shardline.ExportError) as e:
                c.export("job-none", None, os.path.join(self.tmp, "none.safetensors"))
            self.assertIn("reads TLS settings from files", str(e.exception))
        if self.host is not None:
            with self.assertRaises(shardline.FailedPreconditionError) as e:
                shardline.Client(address=self.cluster.address, token=self.user_token,
                                 config=none)
            self.assertIn("refusing to send the token in clear text to " + self.cluster.address,
                          str(e.exception))

    def test_group_readable_token_file_is_refused(self):
        path = os.path.join(self.tmp, "shared.token")
        with open(path, "w") as f:
            f.write(self.user_token + "\n")
        os.chmod(path, 0o644)
        proc = self.shardctl("workers", "--coordinator=" + self.cluster.address,
                             "--token_file=" + path, "--tls_ca=%s/ca.pem" % self.certs)
        self.assertEqual(proc.returncode, 6, proc.stderr)
        self.assertIn("--token_file: %s has mode 0644: group or other users can read the token "
                      "in it; run `chmod 600 %s`" % (path, path), proc.stderr)


if __name__ == "__main__":
    harness.run_tests(__name__)
