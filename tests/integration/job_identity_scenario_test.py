"""Issue #21 item 1 on a real cluster: a coordinator without --state_dir (its documented default)
is restarted and the same spec is submitted again. Job ids used to restart at job-1, so the new
job resumed the old job's checkpoint and overwrote its steps. Now the new job gets a new id,
starts from scratch, and the old job's checkpoint files stay byte-identical."""
import json
import os
import signal
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import cluster_test  # noqa: E402  (imported as a module, so its tests are not collected here)


class JobIdentityScenarioTest(unittest.TestCase):
    def setUp(self):
        self.cluster = harness.Cluster(workers=2, slots=2, grace_period_s=3, in_memory=True)

    tearDown = cluster_test.ClusterTest.tearDown
    spec = cluster_test.ClusterTest.spec
    submit = cluster_test.ClusterTest.submit

    def run_to_end(self, spec):
        job = self.submit(spec)
        status = self.cluster.wait_for(job, lambda s: s.get("state") in ("SUCCEEDED", "FAILED"),
                                       timeout=300, what="job end")
        self.assertEqual(status["state"], "SUCCEEDED", json.dumps(status, indent=1))
        return job, status

    def test_restarted_in_memory_coordinator_never_reuses_a_job_id_or_its_checkpoints(self):
        spec = self.spec(steps=6)
        old, _ = self.run_to_end(spec)
        self.assertRegex(old, r"^job-[0-9a-z]{12}$")
        old_root = os.path.join(self.cluster.dir, "checkpoints", old)
        before = harness.tree_digest(old_root)
        self.assertIn(os.path.join("step_6", "MANIFEST.json"), before)
        with open(os.path.join(old_root, "step_6", "MANIFEST.json")) as f:
            manifest = json.load(f)
        self.assertEqual(manifest.get("job_id"), old)  # the manifest names its job and attempt
        self.assertEqual(int(manifest.get("attempt", 0)), 1)

        coordinator = self.cluster.procs["coordinator"]
        coordinator.send_signal(signal.SIGTERM)
        coordinator.wait()
        self.cluster.start_coordinator(self.cluster.address)  # same address, no state
        self.cluster.wait_for_workers(2)
        self.assertEqual(self.cluster.shardctl_json("list").get("jobs", []), [])

        new, status = self.run_to_end(spec)
        self.assertNotEqual(new, old)
        # A fresh start: no attempt resumed from a checkpoint, every step trained.
        self.assertEqual(int(status["attempt"]), 1)
        self.assertEqual(int(status["step"]), 6)
        messages = " ".join(e.get("message", "") for e in status["events"])
        self.assertNotIn("resuming from checkpoint", messages)
        for worker in (0, 1):
            for rank in range(4):
                self.assertNotIn("resumed from", self.cluster.rank_log(worker, new, 1, rank))
        # The old job's checkpoints: byte-identical, none un-committed or deleted.
        self.assertEqual(harness.tree_digest(old_root), before)
        self.assertTrue(os.path.exists(
            os.path.join(self.cluster.dir, "checkpoints", new, "step_6", "MANIFEST.json")))


if __name__ == "__main__":
    harness.run_tests(__name__)
