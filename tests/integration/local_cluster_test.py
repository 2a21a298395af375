"""The local cluster's credentials (issue 14 item 5): `shardctl cluster up` makes a random user
token and a distinct worker token, keeps them in files created with mode 0600 (cluster.json holds
the user token), passes them to the coordinator and workers as files (never on a command line),
and its clients (shardctl, the Python client) use the user token; its dashboard (on loopback)
needs that token too. Token-holding files that others can read are refused with the fix.

Runs with the venv's python (grpcio) for the Python client's part.
"""
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import unittest
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


class LocalClusterTokenTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="shardline_local_", dir=os.environ.get("TEST_TMPDIR"))
        cls.state = os.path.join(cls.tmp, "cluster")
        # A umask that would leave new files world-readable: the cluster must not rely on it.
        old = os.umask(0o022)
        try:
            proc = cls.run_shardctl("cluster", "up", "--workers=1", "--slots=1")
        finally:
            os.umask(old)
        if proc.returncode != 0:
            raise RuntimeError("cluster up failed:\n" + proc.stdout + proc.stderr)
        cls.up_stdout = proc.stdout
        with open(os.path.join(cls.state, "cluster.json")) as f:
            cls.info = json.load(f)

    @classmethod
    def tearDownClass(cls):
        cls.run_shardctl("cluster", "down")
        for root, _, files in os.walk(cls.state):
            for name in files:
                if name.endswith(".log"):
                    p = os.path.join(root, name)
                    print("==== %s\n%s" % (p, open(p, errors="replace").read()[-3000:]))

    @classmethod
    def run_shardctl(cls, *args, state_dir=None):
        # HOME without a config file, no SHARDLINE_* variables: the cluster is the only source.
        env = {k: v for k, v in os.environ.items() if not k.startswith("SHARDLINE_")}
        env["HOME"] = cls.tmp
        return subprocess.run([harness.BINARIES.shardctl, "--state_dir=" + (state_dir or cls.state)]
                              + list(args), capture_output=True, text=True, timeout=120, env=env)

    def worker_token(self):
        with open(os.path.join(self.state, "worker.token")) as f:
            return f.read().strip()

    def test_tokens_are_random_distinct_and_in_owner_only_files(self):
        token = self.info["token"]
        self.assertRegex(token, r"^[0-9a-f]{64}$")
        self.assertEqual(mode(os.path.join(self.state, "cluster.json")), 0o600)
        self.assertEqual(mode(os.path.join(self.state, "worker.token")), 0o600)
        self.assertEqual(mode(os.path.join(self.state, "coordinator", "user.token")), 0o600)
        self.assertRegex(self.worker_token(), r"^[0-9a-f]{64}$")
        self.assertNotEqual(self.worker_token(), token)
        self.assertNotIn("worker_token", json.dumps(self.info))

    def test_shardctl_uses_the_clusters_token_and_others_are_refused(self):
        proc = self.run_shardctl("workers", "--json")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        workers = json.loads(proc.stdout)["workers"]
        self.assertEqual([w["state"] for w in workers], ["ALIVE"])
        address = self.info["coordinator_address"]
        empty = os.path.join(self.tmp, "no-cluster")
        no_token = self.run_shardctl("workers", "--coordinator=" + address, state_dir=empty)
        self.assertEqual(no_token.returncode, 6, no_token.stderr)
        self.assertIn("missing \"authorization: Bearer <token>\" metadata", no_token.stderr)
        # The worker token (held by every trainer) is not a user token.
        as_worker = self.run_shardctl("list", "--token=" + self.worker_token())
        self.assertEqual(as_worker.returncode, 6, as_worker.stderr)
        self.assertIn("wrong user token", as_worker.stderr)

    def test_the_dashboard_is_on_loopback_and_needs_the_clusters_token(self):
        address = self.info["dashboard_address"]
        self.assertRegex(address, r"^127\.0\.0\.1:\d+$")
        with self.assertRaises(urllib.error.HTTPError) as e:
            urllib.request.urlopen("http://%s/api/jobs" % address, timeout=30)
        self.assertEqual(e.exception.code, 401)
        req = urllib.request.Request("http://%s/api/workers" % address,
                                     headers={"Authorization": "Bearer " + self.info["token"]})
        with urllib.request.urlopen(req, timeout=30) as r:
            self.assertEqual([w["state"] for w in json.load(r)["workers"]], ["ALIVE"])
        self.assertIn("dashboard: http://%s/" % address, self.up_stdout)

    def test_prometheus_metrics_are_on_loopback(self):
        address = self.info["metrics_address"]
        self.assertRegex(address, r"^127\.0\.0\.1:\d+$")
        with urllib.request.urlopen("http://%s/metrics" % address, timeout=30) as r:
            text = r.read().decode()
        self.assertIn("shardline_", text)
        self.assertIn("metrics: http://%s/metrics" % address, self.up_stdout)

    def test_no_token_on_any_command_line(self):
        pids = [self.info["coordinator_pid"]] + self.info["worker_pids"]
        for pid in pids:
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                cmdline = f.read().decode(errors="replace")
            self.assertNotIn(self.info["token"], cmdline)
            self.assertNotIn(self.worker_token(), cmdline)
            self.assertRegex(cmdline, r"token_file=")

    def test_group_readable_cluster_json_is_refused(self):
        copy = os.path.join(self.tmp, "copy")
        os.makedirs(copy, exist_ok=True)
        path = os.path.join(copy, "cluster.json")
        shutil.copy(os.path.join(self.state, "cluster.json"), path)
        os.chmod(path, 0o644)
        proc = self.run_shardctl("workers", state_dir=copy)
        self.assertEqual(proc.returncode, 6, proc.stderr)
        self.assertIn("local cluster: %s has mode 0644: group or other users can read the token "
                      "in it; run `chmod 600 %s`" % (path, path), proc.stderr)

    def test_group_readable_config_with_a_token_is_refused(self):
        config = os.path.join(self.tmp, "config")
        with open(config, "w") as f:
            f.write("coordinator=%s\ntoken=%s\n" % (self.info["coordinator_address"],
                                                     self.info["token"]))
        os.chmod(config, 0o640)
        proc = self.run_shardctl("workers", "--config=" + config)
        self.assertEqual(proc.returncode, 6, proc.stderr)
        self.assertIn("config file: %s has mode 0640" % config, proc.stderr)
        self.assertIn("run `chmod 600 %s`" % config, proc.stderr)
        os.chmod(config, 0o600)
        proc = self.run_shardctl("workers", "--config=" + config)
        self.assertEqual(proc.returncode, 0, proc.stderr)

    def test_python_client_uses_the_clusters_token(self):
        shardline = harness.import_shardline()
        with shardline.Client(state_dir=self.state, config=os.path.join(self.tmp, "none")) as c:
            self.assertEqual(len(c.workers()), 1)
        copy = os.path.join(self.tmp, "pycopy")
        os.makedirs(copy, exist_ok=True)
        shutil.copy(os.path.join(self.state, "cluster.json"), os.path.join(copy, "cluster.json"))
        os.chmod(os.path.join(copy, "cluster.json"), 0o644)
        with self.assertRaises(shardline.ShardlineError) as e:
            shardline.Client(state_dir=copy, config=os.path.join(self.tmp, "none"))
        self.assertIn("has mode 0644", str(e.exception))
        self.assertIn("chmod 600", str(e.exception))


if __name__ == "__main__":
    harness.run_tests(__name__)
