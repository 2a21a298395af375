"""Issue #21 item 2 on a real cluster (coordinator with --state_dir, worker daemons, trainers):
commit, then report (retried until the coordinator acknowledges), then retention; and a restart
whose registry step is missing on disk falls back to the newest committed checkpoint there.

Both tests stop the writer of shard 1 in the save of step 9 (attempt 1) through the trainers'
test-only pause (SHARDLINE_TEST_PAUSE_IN_SAVE, trainer/checkpointing.h), set on the worker
daemons, so the test acts at a known point of a save:

  - an outage: with keep_last 1, the coordinator is SIGKILLed during that save; step 9 commits
    and the job trains to its end during the outage, rank 0 waiting for its reports. Retention
    used to run right after each commit, deleting step 6, the step the coordinator's registry
    still named, so a restart failed NOT_FOUND. Now every committed step stays until the
    coordinator (restarted on its state dir) acknowledges it; the step the registry names is on
    disk at every poll; the job SUCCEEDS keeping only its last step. If rank 0 is killed during
    the outage instead, attempt 2 resumes from step 6 and the job SUCCEEDS.
  - a missing registry step: step_6 (the registry's latest) is moved away and the paused rank
    killed. Attempt 2 gets RESUME 6, finds no committed step 6, resumes from step 3 (the newest
    committed checkpoint of the job on disk), the coordinator notes CHECKPOINT_FALLBACK, and the
    job SUCCEEDS. The moved directory is left alone.
"""
import json
import os
import signal
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import cluster_test  # noqa: E402  (imported as a module, so its tests are not collected here)

PAUSE_STEP = 9
PAUSE_SHARD = 1  # Written by rank 1.


def committed(step_dir):
    return os.path.exists(os.path.join(step_dir, "MANIFEST.json"))


class CommitReportScenarioTest(unittest.TestCase):
    tearDown = cluster_test.ClusterTest.tearDown
    spec = cluster_test.ClusterTest.spec
    submit = cluster_test.ClusterTest.submit

    def start(self, pause_s):
        self.cluster = harness.Cluster(workers=0, grace_period_s=3)
        pause = {"SHARDLINE_TEST_PAUSE_IN_SAVE": "%d:%d:%d:1" % (PAUSE_STEP, PAUSE_SHARD, pause_s)}
        for i in range(2):
            self.cluster.start_worker(i, 2, grace_period_s=3, env=pause)
        self.cluster.wait_for_workers(2)

    def node_of(self, status, rank):
        return int(status["placement"][rank]["node_name"].rsplit("-", 1)[1])

    def wait_for_pause(self, job):
        """Waits until rank 1 pauses in the save of step 9; returns the job's status."""
        status = self.cluster.wait_for(job, lambda s: int(s.get("attempt", 0)) >= 1 and
                                       len(s.get("placement", [])) == 4,
                                       timeout=60, what="placement")
        worker = self.node_of(status, PAUSE_SHARD)
        deadline = time.time() + 180
        while ("test pause in save: step %d shard %d" % (PAUSE_STEP, PAUSE_SHARD)
               not in self.cluster.rank_log(worker, job, 1, PAUSE_SHARD)):
            self.assertLess(time.time(), deadline, "rank 1 never paused in the save of step 9")
            time.sleep(0.1)
        return status

    def outage_across_the_save_of_step_9(self, steps):
        """Runs a keep_last 1 job until rank 1 pauses in the save of step 9, kills the coordinator
        there, and waits until the job has trained to the end during the outage (rank 0 then
        waits for the acknowledgements of its commits). Returns (job, root, rank 0's node,
        step_6's digest)."""
        self.start(pause_s=8)
        job = self.submit(self.spec(steps=steps, extra="restart: {max_restarts: 2, backoff_s: 1}"),
                          "--set", "checkpoint.keep_last=1")
        root = os.path.join(self.cluster.dir, "checkpoints", job)
        status = self.wait_for_pause(job)
        # Step 6 is committed and acknowledged, and retention after it removed step 3.
        self.cluster.wait_for(job, lambda s: int(s.get("latest_checkpoint_step", 0)) == 6,
                              timeout=30, what="step 6 acknowledged")
        deadline = time.time() + 30
        while os.path.exists(self.step(root, 3)) and time.time() < deadline:
            time.sleep(0.1)
        self.assertFalse(os.path.exists(self.step(root, 3)), "retention after 6 kept step 3")
        self.assertTrue(committed(self.step(root, 6)))
        before = harness.tree_digest(self.step(root, 6))

        coordinator = self.cluster.procs["coordinator"]
        coordinator.send_signal(signal.SIGKILL)
        coordinator.wait()
        # Step 9 commits during the outage (the pause ends) and training goes on to the end.
        # No report can be acknowledged, so retention deletes nothing: step 6, which the
        # registry names, stays, and so does every step committed since.
        deadline = time.time() + 120
        while not committed(self.step(root, steps)):
            self.assertLess(time.time(), deadline, "the job never saved its last step")
            time.sleep(0.1)
        time.sleep(2)
        self.assertEqual(sorted(int(d[5:]) for d in os.listdir(root) if d.startswith("step_")),
                         list(range(6, steps + 1, 3)))
        self.assertTrue(all(committed(self.step(root, n)) for n in range(6, steps + 1, 3)))
        self.assertEqual(harness.tree_digest(self.step(root, 6)), before)
        rank0_node = self.node_of(status, 0)
        rank0 = self.cluster.rank_log(rank0_node, job, 1, 0)
        self.assertIn("checkpoint step 9 (%s) is committed, but reporting it to the coordinator "
                      "failed" % self.step(root, 9), rank0)
        self.assertNotIn("finished %d steps" % steps, rank0)  # still waiting for the reports
        return job, root, rank0_node

    def step(self, root, n):
        return os.path.join(root, "step_%d" % n)

    def assert_registry_step_on_disk_until(self, job, root, done, timeout=120):
        """Polls until done(status); at every poll the step the registry names is on disk."""
        deadline = time.time() + timeout
        while True:
            status = self.cluster.job(job)
            latest = int(status.get("latest_checkpoint_step", 0))
            if not committed(self.step(root, latest)):
                # Retention may have run between the two looks, but only after a newer step was
                # acknowledged: the registry names a newer step now. (Not whether that one is on
                # disk: after a restart the acknowledgements come fast, and retention may have
                # followed the next one too by the time this looks.)
                status = self.cluster.job(job)
                newer = int(status.get("latest_checkpoint_step", 0))
                self.assertGreater(newer, latest,
                                   "the registry names step %d, which is not on disk" % latest)
            if done(status):
                return status
            self.assertLess(time.time(), deadline, "timed out; last status %s" % status)
            time.sleep(0.2)

    def test_coordinator_outage_across_a_save_keeps_the_acknowledged_checkpoint(self):
        steps = 30
        job, root, rank0_node = self.outage_across_the_save_of_step_9(steps)
        self.cluster.start_coordinator(self.cluster.address)  # same address and state dir
        # Rank 0's reports are acknowledged now, in order, and retention follows each: step 6
        # goes only once 9 is acknowledged. The job SUCCEEDS in attempt 1, keeping the last step.
        status = self.assert_registry_step_on_disk_until(
            job, root, lambda s: s.get("state") in ("SUCCEEDED", "FAILED"))
        self.assertEqual(status["state"], "SUCCEEDED", json.dumps(status["events"], indent=1))
        self.assertEqual(int(status["attempt"]), 1)
        self.assertEqual(int(status["latest_checkpoint_step"]), steps)
        rank0 = self.cluster.rank_log(rank0_node, job, 1, 0)
        self.assertRegex(rank0,
                         r"the coordinator acknowledged checkpoint step 9 after \d+ attempts")
        self.assertIn("finished %d steps" % steps, rank0)
        self.assertEqual(sorted(d for d in os.listdir(root) if d.startswith("step_")),
                         ["step_%d" % steps])
        committed_steps = [int(c["step"]) for c in
                           self.cluster.shardctl_json("checkpoints", job).get("checkpoints", [])
                           if c.get("committed")]
        self.assertEqual(committed_steps, [steps])

    def test_rank_lost_during_the_outage_restarts_from_the_acknowledged_checkpoint(self):
        # The failure: rank 0 dies before any report of the outage got through. The
        # registry still names step 6; it used to be deleted by then (keep_last 1), so every
        # restart failed NOT_FOUND and the job ended FAILED. Now attempt 2 resumes from it.
        steps = 30
        job, root, rank0_node = self.outage_across_the_save_of_step_9(steps)
        victim = self.cluster.rank_pid(rank0_node, job, 1, 0)
        self.assertIsNotNone(victim, "rank 0 is not waiting for its reports")
        os.kill(victim, signal.SIGKILL)
        self.cluster.start_coordinator(self.cluster.address)
        status = self.assert_registry_step_on_disk_until(
            job, root, lambda s: s.get("state") in ("SUCCEEDED", "FAILED"), timeout=240)
        self.assertEqual(status["state"], "SUCCEEDED", json.dumps(status["events"], indent=1))
        self.assertEqual(int(status["attempt"]), 2)
        self.assertEqual(int(status["step"]), steps)
        scheduled = [e["message"] for e in status["events"] if e["kind"] == "SCHEDULED"]
        self.assertTrue(scheduled[-1].endswith("; resuming from checkpoint step 6"), scheduled)
        rank0 = "".join(self.cluster.rank_log(i, job, 2, 0) for i in (0, 1))
        self.assertIn("resumed from %s " % self.step(root, 6), rank0)
        self.assertNotIn("CHECKPOINT_FALLBACK", [e["kind"] for e in status["events"]])
        self.assertEqual(sorted(d for d in os.listdir(root) if d.startswith("step_")),
                         ["step_%d" % steps])

    def test_missing_registry_step_falls_back_to_the_newest_committed_checkpoint(self):
        self.start(pause_s=600)
        steps = 15
        job = self.submit(self.spec(steps=steps, extra="restart: {max_restarts: 2, backoff_s: 1}"))
        root = os.path.join(self.cluster.dir, "checkpoints", job)
        status = self.wait_for_pause(job)
        self.cluster.wait_for(job, lambda s: int(s.get("latest_checkpoint_step", 0)) == 6,
                              timeout=30, what="step 6 acknowledged")
        self.assertTrue(committed(os.path.join(root, "step_3")))  # keep_last 2
        # The registry's step disappears from disk (moved where no listing looks).
        moved = os.path.join(root, "moved-away-step_6")
        os.rename(os.path.join(root, "step_6"), moved)
        moved_digest = harness.tree_digest(moved)

        victim = self.cluster.rank_pid(self.node_of(status, PAUSE_SHARD), job, 1, PAUSE_SHARD)
        self.assertIsNotNone(victim)
        os.kill(victim, signal.SIGKILL)
        status = self.cluster.wait_for(job, lambda s: s.get("state") in ("SUCCEEDED", "FAILED"),
                                       timeout=300, what="job end after the kill")
        self.assertEqual(status["state"], "SUCCEEDED", json.dumps(status["events"], indent=1))
        self.assertEqual(int(status["attempt"]), 2)
        self.assertEqual(int(status["step"]), steps)
        scheduled = [e["message"] for e in status["events"] if e["kind"] == "SCHEDULED"]
        self.assertTrue(scheduled[-1].endswith("; resuming from checkpoint step 6"), scheduled)
        fallback = [e["message"] for e in status["events"] if e["kind"] == "CHECKPOINT_FALLBACK"]
        self.assertEqual(fallback, [
            "resume step 6 is not a committed checkpoint in %s; attempt 2 resumed from step 3, "
            "the newest committed one there" % root], status["events"])
        self.assertIn("CHECKPOINT_FALLBACK", self.cluster.shardctl("status", job).stdout)
        rank0 = "".join(self.cluster.rank_log(i, job, 2, 0) for i in (0, 1))
        self.assertIn("resume step 6 from the coordinator is not a committed checkpoint on disk",
                      rank0)
        self.assertIn("resumed from %s " % os.path.join(root, "step_3"), rank0)
        # Nothing it could not verify was deleted: the moved directory is intact.
        self.assertEqual(harness.tree_digest(moved), moved_digest)
        self.assertTrue(committed(os.path.join(root, "step_%d" % steps)))


if __name__ == "__main__":
    harness.run_tests(__name__)
