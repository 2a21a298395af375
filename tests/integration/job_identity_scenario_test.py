"""Issue #21 item 1 on a real cluster: a coordinator without --state_dir (its documented default)
is restarted and the same spec is submitted again. Job ids used to restart at job-1, so the new
job resumed the old job's checkpoint and overwrote its steps. Now the new job gets a new id,
starts from scratch, and the old job's checkpoint files stay byte-identical.

And the explicit way to carry on an old job's training in a new job (checkpoint.resume_from):
the new job, at another sharding strategy, loads the old job's step, trains the remaining
steps with the same losses as the old job, saves under its own id, and leaves the old job's
files byte-identical."""
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

    def run_to_end(self, spec, *args):
        job = self.submit(spec, *args)
        status = self.cluster.wait_for(job, lambda s: s.get("state") in ("SUCCEEDED", "FAILED"),
                                       timeout=300, what="job end")
        self.assertEqual(status["state"], "SUCCEEDED", json.dumps(status, indent=1))
        return job, status

    def losses(self, job):
        m = json.loads(self.cluster.shardctl("metrics", job, "--json").stdout)
        return {int(p["step"]): float(p["loss"]) for p in m["points"]}

    def test_a_new_job_continues_another_jobs_checkpoint_under_its_own_id(self):
        old, _ = self.run_to_end(self.spec(steps=12))  # HYBRID_SHARD(2), saves 9 and 12 kept
        old_root = os.path.join(self.cluster.dir, "checkpoints", old)
        before = harness.tree_digest(old_root)
        new, status = self.run_to_end(
            self.spec(steps=12), "--set", "checkpoint.resume_from=%s/step_9" % old_root,
            "--set", "fsdp.sharding_strategy=FULL_SHARD", "--set", "fsdp.hybrid_shard_degree=0")
        self.assertNotEqual(new, old)
        self.assertEqual(int(status["attempt"]), 1)
        # Steps 10-12 only, with the old job's losses (another strategy: float tolerance).
        old_losses, new_losses = self.losses(old), self.losses(new)
        self.assertEqual(sorted(new_losses), [10, 11, 12], new_losses)
        for step, loss in new_losses.items():
            self.assertAlmostEqual(loss, old_losses[step], delta=1e-4 * old_losses[step],
                                   msg="step %d" % step)
        new_root = os.path.join(self.cluster.dir, "checkpoints", new)
        with open(os.path.join(new_root, "step_12", "MANIFEST.json")) as f:
            self.assertEqual(json.load(f).get("job_id"), new)
        # shardctl checkpoints: each committed step's size is its files' on disk.
        cps = json.loads(self.cluster.shardctl("checkpoints", new, "--json").stdout)["checkpoints"]
        for c in cps:
            step_dir = os.path.join(new_root, "step_%s" % c["step"])
            on_disk = sum(os.path.getsize(os.path.join(step_dir, f)) for f in os.listdir(step_dir))
            self.assertEqual(int(c["size_bytes"]), on_disk, c)
        self.assertEqual(harness.tree_digest(old_root), before)
        # shardctl submit --continue_job=OLD names OLD's newest committed step for the new job,
        # and refuses it when train.steps leaves nothing to train.
        spec = self.spec(steps=12)
        refused = self.cluster.shardctl("submit", spec, "--continue_job=" + old, check=False)
        self.assertEqual(refused.returncode, 3, refused.stderr)
        self.assertIn("--continue_job %s: its checkpoint is step 12, not below train.steps 12"
                      % old, refused.stderr)
        dry = self.cluster.shardctl("submit", spec, "--continue_job=" + old, "--set",
                                    "train.steps=15", "--dry_run", "--json")
        self.assertEqual(json.loads(dry.stdout)["checkpoint"]["resume_from"],
                         os.path.join(old_root, "step_12"))
        missing = self.cluster.shardctl("submit", spec, "--continue_job=" + old, "--step=5",
                                        check=False)
        self.assertEqual(missing.returncode, 5, missing.stderr)
        self.assertIn("job %s has no committed checkpoint at step 5" % old, missing.stderr)

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
