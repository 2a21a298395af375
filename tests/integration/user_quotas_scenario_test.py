"""Issue 33 item 2 on a real cluster: a user's own quotas from the users file.

The coordinator's flags bound every user (--max_running_ranks_per_user=3); alice's line of the
users file gives her max_running_ranks=1 max_pending_jobs=1. Checked through shardctl:
`whoami` shows her bounds and where they come from; a 2-rank job of hers is refused at submit
naming the users file, while bob (flags' bounds) runs one; her second 1-rank job waits with the
numbers; her third is refused (pending bound); the file is edited to max_running_ranks=2 and,
once the coordinator reloads it (about a second), her waiting job starts.
"""
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster_test  # noqa: E402
import harness  # noqa: E402

SPEC = """name: quota
world_size: {world}
model: {{architecture: GPT, preset: tiny, init_seed: 1}}
data: {{path: {corpus}, format: TEXT, val_fraction: 0.1, seq_len: 32}}
fsdp: {{sharding_strategy: FULL_SHARD, collective_timeout_s: 60}}
train: {{steps: 100000, global_batch_size: {world}, micro_batch_size: 1, log_every: 50,
        eval_every: 0, eval_batches: 1, sample_tokens: 0}}
device: {{kind: CPU, cpu_threads: 1}}
"""
TOKENS = {"alice": "alice-token-0123456789", "bob": "bob-token-0123456789"}


def owner_only(path, text):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, 0o600)
    return path


class UserQuotasTest(unittest.TestCase):
    def setUp(self):
        self.base = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        self.users = os.path.join(self.base, "users")
        self.write_users("max_running_ranks=1 max_pending_jobs=1")
        self.tokens = {u: owner_only(os.path.join(self.base, u + ".token"), t + "\n")
                       for u, t in TOKENS.items()}
        join = owner_only(os.path.join(self.base, "join.token"), "join-token-0123456789\n")
        self.cluster = harness.Cluster(
            workers=0, coordinator_flags=[
                "--users_file=" + self.users, "--worker_token_file=" + join,
                "--max_running_ranks_per_user=3"],
            shardctl_flags=["--token_file=" + self.tokens["alice"]])
        self.cluster.start_worker(0, 4, flags=["--join_token_file=" + join])
        self.cluster.wait_for_workers(1)

    def tearDown(self):
        self.cluster.stop()

    def write_users(self, alice_limits):
        # Replaced by rename, as an editor or a config tool does.
        tmp = self.users + ".new"
        owner_only(tmp, "alice %s %s\nbob %s\n" % (TOKENS["alice"], alice_limits, TOKENS["bob"]))
        os.replace(tmp, self.users)

    def shardctl_as(self, user, *args, check=True):
        return self.cluster.shardctl("--token_file=" + self.tokens[user], *args, check=check)

    def submit_as(self, user, world, check=True):
        """Submits a long FULL_SHARD job of `world` ranks; returns shardctl's result."""
        path = os.path.join(self.base, "spec-%d.yaml" % world)
        with open(path, "w") as f:
            f.write(SPEC.format(world=world, corpus=cluster_test.CORPUS))
        return self.shardctl_as(user, "submit", path, check=check)

    @staticmethod
    def job_id(proc):
        return proc.stdout.strip().splitlines()[0]

    def test_users_file_quotas(self):
        who = self.shardctl_as("alice", "whoami").stdout
        self.assertIn("running    0 of at most 1 ranks (max_running_ranks of user alice in the "
                      "users file)", who)
        self.assertIn("pending    0 of at most 1 jobs (max_pending_jobs of user alice in the "
                      "users file)", who)
        self.assertIn("running    0 of at most 3 ranks (--max_running_ranks_per_user)",
                      self.shardctl_as("bob", "whoami").stdout)

        wide = self.submit_as("alice", 2, check=False)
        self.assertNotEqual(wide.returncode, 0)
        self.assertIn("job of world_size 2 could never start: user alice may run at most 1 ranks "
                      "at once (max_running_ranks of user alice in the users file)",
                      wide.stderr)
        bobs = self.submit_as("bob", 2)  # the flags' bound (3) lets bob run it
        first = self.job_id(self.submit_as("alice", 1))
        self.cluster.wait_for(first, lambda s: s.get("state") == "RUNNING", what="RUNNING")
        second = self.job_id(self.submit_as("alice", 1))
        st = self.cluster.wait_for(second, lambda s: "waiting: user alice" in s.get("message", ""),
                                   timeout=30, what="a quota wait")
        self.assertEqual(st["state"], "PENDING")
        self.assertEqual(st["message"], "waiting: user alice runs 1 ranks; this job's 1 would "
                         "make it more than 1 (max_running_ranks of user alice in the users file)")
        third = self.submit_as("alice", 1, check=False)
        self.assertNotEqual(third.returncode, 0)
        self.assertIn("user alice has 1 pending jobs; at most 1 (max_pending_jobs of user alice "
                      "in the users file)", third.stderr)
        self.assertTrue(bobs.returncode == 0)

        self.write_users("max_running_ranks=2 max_pending_jobs=1")
        st = self.cluster.wait_for(second, lambda s: s.get("state") == "RUNNING", timeout=60,
                                   what="RUNNING after the reload")
        self.assertIn("users file reloaded", open(os.path.join(
            self.cluster.dir, "coordinator.log")).read())
        self.assertIn("running    2 of at most 2 ranks",
                      self.shardctl_as("alice", "whoami").stdout)
        for job in (first, second):
            self.shardctl_as("alice", "cancel", job)
        self.shardctl_as("bob", "cancel", self.job_id(bobs))


if __name__ == "__main__":
    harness.run_tests(__name__)
