"""Failure scenarios on a real cluster (real coordinator, worker daemons and trainers on
loopback): a trainer killed, the coordinator killed and restarted (mid-job, and while an
attempt bootstraps its communicators), a worker node lost."""
import json
import os
import signal
import sqlite3
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import cluster_test  # noqa: E402  (imported as a module, so its tests are not collected here)


class FailureScenarioTest(unittest.TestCase):
    # The same cluster per test, spec helper and submit as the cluster tests.
    setUp = cluster_test.ClusterTest.setUp
    tearDown = cluster_test.ClusterTest.tearDown
    spec = cluster_test.ClusterTest.spec
    submit = cluster_test.ClusterTest.submit

    def test_killed_trainer_restarts_from_checkpoint_and_matches_uninterrupted_run(self):
        extra = "restart: {max_restarts: 2, backoff_s: 1}"
        reference = self.submit(self.spec(steps=40, extra=extra))
        ref = self.cluster.wait_for(reference, lambda s: s.get("state") in ("SUCCEEDED", "FAILED"),
                                    timeout=300, what="reference run")
        self.assertEqual(ref["state"], "SUCCEEDED")
        self.assertEqual(int(ref.get("attempt", 0)), 1)

        job = self.submit(self.spec(steps=40, extra=extra))
        # Wait for a committed checkpoint (every 3 steps), then kill one trainer mid-run.
        self.cluster.wait_for(job, lambda s: int(s.get("latest_checkpoint_step", 0)) >= 3,
                              timeout=300, what="first committed checkpoint")
        victims = harness.pids_of(os.path.join(self.cluster.worker_dir(1), "jobs", job))
        self.assertTrue(victims, "no trainer of the job on worker 1")
        os.kill(victims[0], signal.SIGKILL)
        status = self.cluster.wait_for(job, lambda s: s.get("state") in ("SUCCEEDED", "FAILED"),
                                       timeout=300, what="job end after the kill")
        self.assertEqual(status["state"], "SUCCEEDED", json.dumps(status["events"], indent=1))
        self.assertGreaterEqual(int(status["attempt"]), 2)
        kinds = [e["kind"] for e in status["events"]]
        self.assertIn("RANK_FAILED", kinds)
        # Resumed from its checkpoint with the same data order: the same final loss.
        self.assertEqual(int(status["step"]), 40)
        self.assertAlmostEqual(status["loss"], ref["loss"], delta=1e-5 * abs(ref["loss"]))

    def test_coordinator_killed_and_restarted_mid_job_keeps_history_and_job_completes(self):
        job = self.submit(self.spec(steps=60))
        self.cluster.wait_for(job, lambda s: int(s.get("latest_checkpoint_step", 0)) >= 3,
                              timeout=300, what="first committed checkpoint")
        before = self.cluster.job(job)
        coordinator = self.cluster.procs["coordinator"]
        coordinator.send_signal(signal.SIGKILL)
        coordinator.wait()
        time.sleep(1)
        # Same address and state dir: the workers reconnect by themselves.
        self.cluster.start_coordinator(self.cluster.address)
        status = self.cluster.wait_for(job, lambda s: s.get("state") in ("SUCCEEDED", "FAILED"),
                                       timeout=300, what="job end after the coordinator restart")
        self.assertEqual(status["state"], "SUCCEEDED", json.dumps(status["events"], indent=1))
        # The history from before the kill is all there, in order.
        old = [(e["kind"], e["message"]) for e in before["events"]]
        new = [(e["kind"], e["message"]) for e in status["events"]]
        self.assertEqual(new[:len(old)], old)
        self.assertEqual(int(status["step"]), 60)

    def rendezvous_rows(self, namespace):
        """Rows of `namespace` in the coordinator's rendezvous table (committed values)."""
        db = os.path.join(self.cluster.dir, "coordinator", "coordinator.db")
        try:
            with sqlite3.connect("file:%s?mode=ro" % db, uri=True, timeout=5) as conn:
                return conn.execute("SELECT COUNT(*) FROM rendezvous WHERE namespace = ?",
                                    (namespace,)).fetchone()[0]
        except sqlite3.Error:
            return 0  # not created yet, or busy: ask again

    def test_coordinator_killed_while_an_attempt_bootstraps_keeps_its_rendezvous_values(self):
        job = self.submit(self.spec(steps=6))
        # Hold worker 1's trainers (SIGSTOP) as soon as they exist, before they reach the
        # rendezvous; worker 0's set their keys and wait for theirs.
        held = set()
        deadline = time.time() + 120
        while len(held) < 2 and time.time() < deadline:
            for pid in harness.pids_of(os.path.join(self.cluster.worker_dir(1), "jobs", job)):
                if pid not in held:
                    os.kill(pid, signal.SIGSTOP)
                    held.add(pid)
            time.sleep(0.005)
        self.assertEqual(len(held), 2, "worker 1 did not start the job's 2 ranks")
        try:
            deadline = time.time() + 120
            while self.rendezvous_rows(job + "/1") == 0 and time.time() < deadline:
                time.sleep(0.1)
            self.assertGreater(self.rendezvous_rows(job + "/1"), 0,
                               "worker 0's ranks stored no rendezvous value")
            # Until worker 0's ranks all wait (no new value for 2 s); a Set during the restart
            # is retried anyway (trainer/rendezvous_kv_store.h).
            rows, since = self.rendezvous_rows(job + "/1"), time.time()
            while time.time() - since < 2 and time.time() < deadline:
                time.sleep(0.1)
                now = self.rendezvous_rows(job + "/1")
                if now != rows:
                    rows, since = now, time.time()
            coordinator = self.cluster.procs["coordinator"]
            coordinator.send_signal(signal.SIGKILL)
            coordinator.wait()
            time.sleep(1)
            self.cluster.start_coordinator(self.cluster.address)
        finally:
            for pid in held:
                os.kill(pid, signal.SIGCONT)
        # Worker 1's ranks find the keys worker 0's set before the restart: the same attempt
        # bootstraps and completes (without the values it would time out and be restarted).
        status = self.cluster.wait_for(job, lambda s: s.get("state") in ("SUCCEEDED", "FAILED"),
                                       timeout=300, what="job end after the coordinator restart")
        self.assertEqual(status["state"], "SUCCEEDED", json.dumps(status["events"], indent=1))
        self.assertEqual(int(status["attempt"]), 1, json.dumps(status["events"], indent=1))
        kinds = [e["kind"] for e in status["events"]]
        self.assertIn("COORDINATOR_RESTARTED", kinds)
        self.assertEqual(int(status["step"]), 6)
        # The attempt ended: its values are deleted (the writer's queue drains within moments).
        deadline = time.time() + 10
        while self.rendezvous_rows(job + "/1") > 0 and time.time() < deadline:
            time.sleep(0.1)
        self.assertEqual(self.rendezvous_rows(job + "/1"), 0)

    def test_lost_worker_job_continues_smaller_from_its_checkpoint(self):
        extra = "restart: {max_restarts: 2, backoff_s: 1}\nelastic: {min_world_size: 2}"
        job = self.submit(self.spec(steps=60, extra=extra))
        self.cluster.wait_for(job, lambda s: int(s.get("latest_checkpoint_step", 0)) >= 3,
                              timeout=300, what="first committed checkpoint")
        # The whole node goes: its daemon and (by the kernel) its trainers.
        self.cluster.procs["worker-1"].send_signal(signal.SIGKILL)
        self.cluster.procs["worker-1"].wait()
        status = self.cluster.wait_for(job, lambda s: s.get("state") in ("SUCCEEDED", "FAILED"),
                                       timeout=300, what="job end after the worker loss")
        self.assertEqual(status["state"], "SUCCEEDED", json.dumps(status["events"], indent=1))
        self.assertGreaterEqual(int(status["attempt"]), 2)
        self.assertEqual(int(status["world_size"]), 2)  # 2 slots left: W = 2 = 1 x 2
        self.assertEqual(int(status["step"]), 60)
        kinds = [e["kind"] for e in status["events"]]
        self.assertIn("WORKER_LOST", kinds)


if __name__ == "__main__":
    harness.run_tests(__name__)
