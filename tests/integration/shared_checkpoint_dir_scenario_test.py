"""Issue #21 item 9 on a real cluster: a job whose checkpoint.dir is not one directory on every
worker it runs on fails at its start, with a message naming the directory, a rank and both
hosts, and is not restarted; a job whose checkpoint.dir is shared runs as before.

Worker node-1 runs in a mount namespace of its own (`unshare -m`) with a private tmpfs mounted
over the checkpoint root: its trainers see an empty directory at the same path, as a worker with
a node-local volume (a Kubernetes hostPath) would. Nothing in the trainer knows it is tested.

Needs root and `unshare` with mount namespaces (as the tests run here and in CI); without them
the test is SKIPPED, with the reason.
"""
import json
import os
import re
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import cluster_test  # noqa: E402  (imported as a module, so its tests are not collected here)

SLOTS = 2
GRACE_S = 3


def private_mount_problem(path):
    """Why a private tmpfs cannot be mounted over `path` in a new mount namespace, or None."""
    try:
        proc = subprocess.run(
            ["unshare", "-m", "--propagation", "private", "sh", "-c",
             'mount -t tmpfs -o size=1m shardline-probe-test "$0"', path],
            capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return "unshare: %s" % e
    if proc.returncode != 0:
        return "unshare -m + mount tmpfs exited %d: %s" % (proc.returncode, proc.stderr.strip())
    return None


class SharedCheckpointDirScenarioTest(unittest.TestCase):
    def setUp(self):
        self.cluster = harness.Cluster(workers=0, grace_period_s=GRACE_S)
        self.root = os.path.join(self.cluster.dir, "checkpoints")
        os.makedirs(self.root)
        problem = private_mount_problem(self.root)
        if problem:
            self.cluster.stop()
            self.skipTest("needs mount namespaces (root, unshare): " + problem)
        self.cluster.start_worker(0, SLOTS, GRACE_S)
        # node-1: the same path, another (private, empty) file system.
        self.cluster.start_worker(1, SLOTS, GRACE_S, wrap=[
            "unshare", "-m", "--propagation", "private", "sh", "-c",
            'mount -t tmpfs -o size=256m shardline-node-local "$0" && exec "$@"', self.root])
        self.cluster.wait_for_workers(2)

    tearDown = cluster_test.ClusterTest.tearDown
    submit = cluster_test.ClusterTest.submit

    def run_to_end(self, ckpt_root, steps):
        spec = cluster_test.write_spec(ckpt_root, steps=steps,
                                       extra="restart: {max_restarts: 2, backoff_s: 1}")
        job = self.submit(spec)
        status = self.cluster.wait_for(job, lambda s: s.get("state") in ("SUCCEEDED", "FAILED"),
                                       timeout=300, what="job end")
        return job, status

    def test_unshared_checkpoint_dir_fails_the_job_at_its_start_without_restarts(self):
        job, status = self.run_to_end(self.root, steps=6)
        dump = json.dumps(status, indent=1)
        self.assertEqual(status["state"], "FAILED", dump)
        # At the first attempt's start: no restart, no step trained, no checkpoint.
        self.assertEqual(int(status["attempt"]), 1, dump)
        self.assertEqual(int(status.get("step", 0)), 0, dump)
        kinds = [e.get("kind") for e in status["events"]]
        self.assertIn("CHECKPOINT_DIR_NOT_SHARED", kinds, dump)
        self.assertNotIn("RESTARTING", kinds, dump)
        # The message names the directory, a rank that cannot see the probe, its host and rank 0's
        # host (rank 0 may be on either worker: then the ranks of the other one cannot see it).
        m = re.search(r"exited with code 6: .*checkpoint\.dir (\S+) is not shared: rank (\d+) on "
                      r"host (node-\d) cannot read the probe written by rank 0 on host (node-\d) "
                      r"\(open \S+/\.shardline-probe-[0-9a-f]+: No such file or directory\); "
                      r"(?:2 of 4 ranks cannot: \d, \d; )?"
                      r"mount one shared volume at (\S+) on every worker", status["message"])
        self.assertIsNotNone(m, dump)
        self.assertEqual(m.group(1), self.root)
        self.assertEqual(m.group(5), self.root)
        self.assertNotEqual(m.group(3), m.group(4), "the two hosts must differ")
        self.assertNotEqual(m.group(2), "0")
        # Each trainer exited 6 (or was stopped after the first did); none trained a step.
        for worker in (0, 1):
            for rank in range(4):
                log = self.cluster.rank_log(worker, job, 1, rank)
                self.assertNotIn("step 1/", log)
        # The probe is removed (on node-0's view; node-1's tmpfs went with its namespace).
        job_dir = os.path.join(self.root, job)
        leftovers = [f for f in os.listdir(job_dir) if "probe" in f] if os.path.isdir(job_dir) else []
        self.assertEqual(leftovers, [])
        self.assertFalse(os.path.exists(os.path.join(job_dir, "step_3")))

        # A job whose checkpoint.dir is the same directory on both workers runs as before.
        shared = os.path.join(self.cluster.dir, "shared-checkpoints")
        job, status = self.run_to_end(shared, steps=6)
        dump = json.dumps(status, indent=1)
        self.assertEqual(status["state"], "SUCCEEDED", dump)
        self.assertEqual(int(status["attempt"]), 1, dump)
        self.assertEqual(int(status["step"]), 6, dump)
        job_dir = os.path.join(shared, job)
        self.assertTrue(os.path.exists(os.path.join(job_dir, "step_6", "MANIFEST.json")))
        self.assertEqual([f for f in os.listdir(job_dir) if "probe" in f], [])


if __name__ == "__main__":
    harness.run_tests(__name__)
