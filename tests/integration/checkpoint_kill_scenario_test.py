"""Failure scenario: a trainer killed (SIGKILL) in the middle of a checkpoint save.

The kill lands at a known point of the save through the trainers' test-only pause
(SHARDLINE_TEST_PAUSE_IN_SAVE, trainer/checkpointing.h), set on the worker daemons
and so inherited by their trainers: in attempt 1, the writer of shard 1 stops in the save of
step 9 before writing its data file, while shard 0's files are written and rank 0 waits to
commit. The test kills that writer there, then checks that

  - the previous committed checkpoint (step 6) is intact, byte for byte, to the end of the job;
  - the half-written step 9 is not listed as committed by `shardctl checkpoints` (it has no
    MANIFEST.json), `shardctl export --step=9` refuses it and the latest export is step 6;
  - the next attempt resumes from step 6 (the coordinator's RESUME step and the trainer's log),
    and the job finishes, committing step 9 afresh.
"""
import json
import os
import signal
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import cluster_test  # noqa: E402

PAUSE_STEP = 9   # Saves every 3 steps: 3 and 6 are committed before it.
PAUSE_SHARD = 1  # Written by rank 1 (replicate index 0 of shard group 0's second shard).


class CheckpointKillScenarioTest(unittest.TestCase):
    tearDown = cluster_test.ClusterTest.tearDown
    spec = cluster_test.ClusterTest.spec
    submit = cluster_test.ClusterTest.submit

    def setUp(self):
        self.cluster = harness.Cluster(workers=0, grace_period_s=3)
        # Long enough never to end by itself within the test; attempt 1 only.
        pause = {"SHARDLINE_TEST_PAUSE_IN_SAVE": "%d:%d:600:1" % (PAUSE_STEP, PAUSE_SHARD)}
        for i in range(2):
            self.cluster.start_worker(i, 2, grace_period_s=3, env=pause)
        self.cluster.wait_for_workers(2)

    def committed_steps(self, job):
        cps = self.cluster.shardctl_json("checkpoints", job).get("checkpoints", [])
        return sorted(int(c["step"]) for c in cps if c.get("committed")), cps

    def test_kill_during_save_keeps_previous_checkpoint_which_the_restart_resumes(self):
        steps = 15
        # keep_last 0 keeps every checkpoint, so step 6 can be compared to the end; a restart
        # backoff of 5 s leaves time to look at the checkpoints before attempt 2 saves again.
        job = self.submit(self.spec(steps=steps, extra="restart: {max_restarts: 2, backoff_s: 5}"),
                          "--set", "checkpoint.keep_last=0",
                          "--set", "fsdp.collective_timeout_s=30")
        job_root = os.path.join(self.cluster.dir, "checkpoints", job)
        step6 = os.path.join(job_root, "step_6")
        step9 = os.path.join(job_root, "step_%d" % PAUSE_STEP)

        status = self.cluster.wait_for(job, lambda s: int(s.get("attempt", 0)) >= 1 and
                                       len(s.get("placement", [])) == 4,
                                       timeout=60, what="placement")
        worker = int(status["placement"][PAUSE_SHARD]["node_name"].rsplit("-", 1)[1])
        deadline = time.time() + 120
        while ("test pause in save: step %d shard %d" % (PAUSE_STEP, PAUSE_SHARD)
               not in self.cluster.rank_log(worker, job, 1, PAUSE_SHARD)):
            self.assertLess(time.time(), deadline, "rank 1 never paused in the save of step 9")
            self.assertEqual(self.cluster.job(job)["state"], "RUNNING")
            time.sleep(0.1)

        # Mid-save: shard 0 of step 9 is written (rank 0 is not paused), shard 1 is not, and
        # there is no manifest; 3 and 6 are committed.
        shard0 = os.path.join(step9, "shard_00000.index.json")
        deadline = time.time() + 30
        while not os.path.exists(shard0) and time.time() < deadline:
            time.sleep(0.1)
        self.assertTrue(os.path.exists(os.path.join(step9, "shard_00000.bin")))
        self.assertTrue(os.path.exists(shard0))
        self.assertFalse(os.path.exists(os.path.join(step9, "shard_00001.index.json")))
        committed, cps = self.committed_steps(job)
        self.assertEqual(committed, [3, 6], cps)
        self.assertTrue(os.path.exists(os.path.join(step6, "MANIFEST.json")))
        self.assertFalse(os.path.exists(os.path.join(step9, "MANIFEST.json")))
        before = harness.tree_digest(step6)
        with open(os.path.join(step6, "MANIFEST.json")) as f:
            manifest_before = json.load(f)

        victim = self.cluster.rank_pid(worker, job, 1, PAUSE_SHARD)
        self.assertIsNotNone(victim)
        os.kill(victim, signal.SIGKILL)

        status = self.cluster.wait_for(
            job, lambda s: any(e["kind"] == "RANK_FAILED" for e in s["events"]),
            timeout=60, what="the attempt to fail")
        failed = [e["message"] for e in status["events"] if e["kind"] == "RANK_FAILED"]
        self.assertIn("rank %d on node node-%d was killed by signal 9" % (PAUSE_SHARD, worker),
                      failed[0])
        # The half-written save is not a committed checkpoint (the coordinator may list it, from
        # rank 0's report of its data file, but only as not committed), nothing exports it, the
        # latest checkpoint is still step 6, and step 6 is untouched.
        committed, cps = self.committed_steps(job)
        self.assertEqual(committed, [3, 6], cps)
        for c in cps:
            if int(c["step"]) == PAUSE_STEP:
                self.assertFalse(c.get("committed", False), c)
        self.assertFalse(os.path.exists(os.path.join(step9, "MANIFEST.json")))
        out = os.path.join(self.cluster.dir, "export.safetensors")
        proc = self.cluster.shardctl("export", job, "--step=%d" % PAUSE_STEP, "--out=" + out,
                                     check=False)
        self.assertNotEqual(proc.returncode, 0, proc.stdout)
        self.assertIn("has no committed checkpoint at step %d" % PAUSE_STEP, proc.stderr)
        proc = self.cluster.shardctl("export", job, "--out=" + out)
        self.assertIn("(step 6 of %s)" % job, proc.stdout)
        self.assertEqual(harness.tree_digest(step6), before)

        status = self.cluster.wait_for(job, lambda s: s.get("state") in ("SUCCEEDED", "FAILED"),
                                       timeout=180, what="job end after the kill")
        self.assertEqual(status["state"], "SUCCEEDED", json.dumps(status["events"], indent=1))
        self.assertEqual(int(status["attempt"]), 2)
        self.assertEqual(int(status["step"]), steps)
        scheduled = [e["message"] for e in status["events"] if e["kind"] == "SCHEDULED"]
        self.assertTrue(scheduled[-1].endswith("; resuming from checkpoint step 6"), scheduled)
        # The trainers of attempt 2 got RESUME step 6 and loaded it.
        rank0 = "".join(self.cluster.rank_log(i, job, 2, 0) for i in (0, 1))
        self.assertIn("resumed from %s " % step6, rank0)
        # Attempt 2 saved 9 again, over the leftovers, and committed it; 6 never changed.
        committed, cps = self.committed_steps(job)
        self.assertEqual(committed, [3, 6, 9, 12, 15], cps)
        self.assertTrue(os.path.exists(os.path.join(step9, "MANIFEST.json")))
        self.assertEqual(harness.tree_digest(step6), before)
        with open(os.path.join(step6, "MANIFEST.json")) as f:
            self.assertEqual(json.load(f), manifest_before)


if __name__ == "__main__":
    harness.run_tests(__name__)
