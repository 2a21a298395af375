"""Issue #14 items 2 and 3 end to end: a coordinator with named users (--users_file) and a
worker join token of its own (--worker_token_file), two real worker daemons and a real 4-rank
trainer job that bootstraps through the coordinator's rendezvous, reports progress and commits
checkpoints with nothing but its attempt credential. The trainers' environment holds neither the
join token nor a user token (the daemons have both here), another user may not cancel the job or
read its checkpoints, and every job records its owner."""
import json
import os
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import cluster_test  # noqa: E402  (imported as a module, so its tests are not collected here)

ALICE = "alice-e2e-token-0123456789"
BOB = "bob-e2e-token-0123456789"
JOIN = "join-e2e-token-0123456789"


def write_private(path, text):
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


class CredentialsScenarioTest(unittest.TestCase):
    def setUp(self):
        tmp = tempfile.mkdtemp(prefix="creds_", dir=os.environ.get("TEST_TMPDIR"))
        users = os.path.join(tmp, "users")
        join = os.path.join(tmp, "join.token")
        write_private(users, "# name token [admin]\nalice %s\nbob %s\n" % (ALICE, BOB))
        write_private(join, JOIN + "\n")
        # shardctl (the harness's calls) sends alice's token; the daemons join with JOIN. Both
        # variables are in the daemons' environment, which must not reach their trainers.
        self.saved = {k: os.environ.get(k) for k in ("SHARDLINE_TOKEN", "SHARDLINE_JOIN_TOKEN")}
        os.environ["SHARDLINE_TOKEN"] = ALICE
        os.environ["SHARDLINE_JOIN_TOKEN"] = JOIN
        self.cluster = harness.Cluster(
            workers=2, slots=2, grace_period_s=3,
            coordinator_flags=["--users_file=" + users, "--worker_token_file=" + join])

    def tearDown(self):
        for k, v in self.saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        cluster_test.ClusterTest.tearDown(self)

    spec = cluster_test.ClusterTest.spec
    submit = cluster_test.ClusterTest.submit

    def as_bob(self, *args):
        return self.cluster.shardctl(*args, "--token=" + BOB, check=False)

    def trainer_environments(self):
        envs = []
        for pid in self.cluster.trainer_pids():
            try:
                with open("/proc/%d/environ" % pid, "rb") as f:
                    envs.append(f.read().decode(errors="replace").split("\0"))
            except OSError:
                pass  # exited meanwhile
        return envs

    def test_trainers_run_a_job_with_only_their_attempt_credential(self):
        whoami = self.cluster.shardctl("whoami").stdout
        self.assertIn("user       alice\n", whoami)
        self.assertIn("credential user token", whoami)

        job = self.submit(self.spec(steps=6))
        # While the trainers run: their environment, and bob's refusals.
        envs = []
        deadline = time.time() + 120
        while time.time() < deadline and not envs:
            envs = self.trainer_environments()
            if not envs and self.cluster.job(job).get("state") in ("SUCCEEDED", "FAILED"):
                break
            time.sleep(0.05)
        self.assertTrue(envs, "never saw a trainer process of " + job)
        for env in envs:
            names = {e.split("=", 1)[0] for e in env}
            self.assertIn("SHARDLINE_RDZV_SECRET", names)
            self.assertNotIn("SHARDLINE_TOKEN", names)
            self.assertNotIn("SHARDLINE_JOIN_TOKEN", names)
            self.assertFalse(any(ALICE in e or JOIN in e for e in env), env)

        cancel = self.as_bob("cancel", job)
        self.assertEqual(cancel.returncode, 6, cancel.stderr)
        self.assertIn("job %s is owned by alice; only its owner or an admin may cancel it" % job,
                      cancel.stderr)
        listing = self.as_bob("checkpoints", job)
        self.assertEqual(listing.returncode, 6, listing.stderr)
        self.assertIn("only its owner or an admin may list its checkpoints", listing.stderr)
        # Listing and status stay open to every user.
        bob_status = self.as_bob("status", job, "--json")
        self.assertEqual(bob_status.returncode, 0, bob_status.stderr)
        self.assertEqual(json.loads(bob_status.stdout)["owner"], "alice")

        status = self.cluster.wait_for(job, lambda s: s.get("state") in ("SUCCEEDED", "FAILED"),
                                       timeout=300, what="job end")
        self.assertEqual(status["state"], "SUCCEEDED", json.dumps(status, indent=1))
        # Progress (relayed by the daemons with the attempt credential) and checkpoints
        # (reported by the trainers with it) reached the coordinator.
        self.assertEqual(int(status["step"]), 6)
        self.assertGreater(status["loss"], 0.0)
        self.assertEqual(int(status["latest_checkpoint_step"]), 6)
        self.assertEqual(status["owner"], "alice")
        cps = self.cluster.shardctl_json("checkpoints", job)["checkpoints"]
        self.assertEqual(sorted(int(c["step"]) for c in cps if c.get("committed")), [3, 6], cps)
        self.assertIn("alice", self.cluster.shardctl("list").stdout)
        # Bob's refusals changed nothing.
        self.assertNotIn("CANCELLED", json.dumps(status["events"]))


if __name__ == "__main__":
    harness.run_tests(__name__)
