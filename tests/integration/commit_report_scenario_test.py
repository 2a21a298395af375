"""Issue #21 item 2 on a real cluster (coordinator with --state_dir, worker daemons, trainers):
commit, then report (retried until the coordinator acknowledges), then retention; and a restart
whose registry step is missing on disk falls back to the newest committed checkpoint there.

Both tests stop the writer of shard 1 in the save of step 9 (attempt 1) through the trainers'
test-only pause (SHARDLINE_TEST_PAUSE_IN_SAVE, trainer/checkpointing.h), set on the worker
daemons, so the test acts at a known point of a save:

  - an outage: the coordinator is SIGKILLed during that save and restarted after step 9 has
    committed, with keep_last 1. Retention used to run right after the commit, deleting step 6,
    the step the coordinator's registry still named, so every restart failed NOT_FOUND. Now step
    6 stays until the coordinator acknowledges step 9, after its restart; the step the registry
    names is on disk at every poll; a rank killed afterwards restarts from it and the job
    SUCCEEDS.
  - a missing registry step: step_6 (the registry's latest) is moved away and the paused rank
    killed. Attempt 2 gets RESUME 6, finds no committed step 6, resumes from step 3 (the newest
    committed checkpoint of the job on disk), the coordinator notes CHECKPOINT_FALLBACK, and the
    job SUCCEEDS. The moved directory is left alone.
"""
import hashlib
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


def tree_digest(path):
    out = {}
    for root, _, files in os.walk(path):
        for f in files:
            p = os.path.join(root, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, path)] = hashlib.sha256(fh.read()).hexdigest()
    return out


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

    def test_coordinator_outage_across_a_save_keeps_the_acknowledged_checkpoint(self):
        self.start(pause_s=8)
        steps = 45
        job = self.submit(self.spec(steps=steps, extra="restart: {max_restarts: 2, backoff_s: 1}"),
                          "--set", "checkpoint.keep_last=1")
        root = os.path.join(self.cluster.dir, "checkpoints", job)
        step = lambda n: os.path.join(root, "step_%d" % n)  # noqa: E731
        status = self.wait_for_pause(job)
        rank0_node = self.node_of(status, 0)
        # Step 6 is committed and acknowledged, and retention after it removed step 3.
        self.cluster.wait_for(job, lambda s: int(s.get("latest_checkpoint_step", 0)) == 6,
                              timeout=30, what="step 6 acknowledged")
        deadline = time.time() + 30
        while os.path.exists(step(3)) and time.time() < deadline:
            time.sleep(0.1)
        self.assertFalse(os.path.exists(step(3)), "retention after step 6 did not remove step 3")
        self.assertTrue(committed(step(6)))
        before = tree_digest(step(6))

        coordinator = self.cluster.procs["coordinator"]
        coordinator.send_signal(signal.SIGKILL)
        coordinator.wait()
        # Step 9 commits during the outage (the pause ends); its report cannot be acknowledged,
        # so retention does not run: step 6, which the registry names, stays.
        deadline = time.time() + 90
        while not committed(step(PAUSE_STEP)):
            self.assertLess(time.time(), deadline, "step 9 never committed")
            time.sleep(0.1)
        time.sleep(3)
        self.assertTrue(committed(step(6)), "step 6 was deleted before step 9 was acknowledged")
        self.assertEqual(tree_digest(step(6)), before)
        rank0 = self.cluster.rank_log(rank0_node, job, 1, 0)
        self.assertIn("checkpoint step 9 (%s) is committed, but reporting it to the coordinator "
                      "failed" % step(9), rank0)

        self.cluster.start_coordinator(self.cluster.address)  # same address and state dir
        # The report of 9 is acknowledged now, and only then does retention remove step 6. At
        # every poll the step the registry names is committed on disk.
        latest_of = lambda: int(self.cluster.job(job).get("latest_checkpoint_step", 0))  # noqa
        deadline = time.time() + 90
        while True:
            latest = latest_of()
            if not committed(step(latest)):
                # Retention may have run between the two looks, after a newer acknowledgement.
                newer = latest_of()
                self.assertTrue(newer > latest and committed(step(newer)),
                                "the registry names step %d, which is not on disk" % latest)
                latest = newer
            if latest >= PAUSE_STEP and not os.path.exists(step(6)):
                break
            self.assertLess(time.time(), deadline, "step 9 never acknowledged, or 6 kept")
            time.sleep(0.2)
        rank0 = self.cluster.rank_log(rank0_node, job, 1, 0)
        self.assertRegex(rank0, r"the coordinator acknowledged checkpoint step 9 after \d+ attempts")
        self.assertLess(int(self.cluster.job(job).get("step", 0)), steps,
                        "the job finished before the rank kill; make it longer")

        # A forced restart resumes from the registry's step, which is on disk.
        victims = harness.pids_of(os.path.join(self.cluster.worker_dir(1), "jobs", job))
        self.assertTrue(victims, "no trainer of the job on worker 1")
        os.kill(victims[0], signal.SIGKILL)
        status = self.cluster.wait_for(job, lambda s: s.get("state") in ("SUCCEEDED", "FAILED"),
                                       timeout=300, what="job end after the rank kill")
        self.assertEqual(status["state"], "SUCCEEDED", json.dumps(status["events"], indent=1))
        self.assertEqual(int(status["attempt"]), 2)
        self.assertEqual(int(status["step"]), steps)
        scheduled = [e["message"] for e in status["events"] if e["kind"] == "SCHEDULED"]
        resumed = int(scheduled[-1].rsplit(" ", 1)[1])
        self.assertGreaterEqual(resumed, PAUSE_STEP, scheduled)
        rank0 = "".join(self.cluster.rank_log(i, job, 2, 0) for i in (0, 1))
        self.assertIn("resumed from %s " % step(resumed), rank0)
        kinds = [e["kind"] for e in status["events"]]
        self.assertNotIn("CHECKPOINT_FALLBACK", kinds)
        # keep_last 1 after the last acknowledged save.
        self.assertTrue(committed(step(steps)))
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
        moved_digest = tree_digest(moved)

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
        self.assertEqual(tree_digest(moved), moved_digest)
        self.assertTrue(committed(os.path.join(root, "step_%d" % steps)))


if __name__ == "__main__":
    harness.run_tests(__name__)
