"""Issue #21 item 3 on a real cluster: ranks that ignore SIGTERM (SHARDLINE_TEST_IGNORE_SIGTERM=1,
a test-only hook in the trainer) keep their devices through the whole STOP grace period. Slots
used to be freed when the STOP was sent, so the next job (or attempt) could be started on a slot
whose rank was still alive. Now a slot stays reserved until its rank is reported EXITED: no
worker ever runs more trainers than it has slots."""
import json
import os
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import cluster_test  # noqa: E402  (imported as a module, so its tests are not collected here)

GRACE_S = 4
SLOTS = 2


class StopGraceScenarioTest(unittest.TestCase):
    def setUp(self):
        self.cluster = harness.Cluster(workers=0, grace_period_s=GRACE_S)
        for i in range(2):
            self.cluster.start_worker(i, SLOTS, GRACE_S,
                                      env={"SHARDLINE_TEST_IGNORE_SIGTERM": "1"})
        self.cluster.wait_for_workers(2)

    tearDown = cluster_test.ClusterTest.tearDown
    spec = cluster_test.ClusterTest.spec
    submit = cluster_test.ClusterTest.submit

    def trainers_on(self, worker):
        return len(harness.pids_of(os.path.join(self.cluster.worker_dir(worker), "jobs") + "/"))

    def test_slots_of_ranks_ignoring_sigterm_stay_reserved_until_they_exit(self):
        first = self.submit(self.spec(steps=100000))
        self.cluster.wait_for(first, lambda s: int(s.get("step", 0)) >= 2, timeout=300,
                              what="first job training")
        self.assertEqual([self.trainers_on(w) for w in (0, 1)], [SLOTS, SLOTS])
        self.cluster.shardctl("cancel", first)
        second = self.submit(self.spec(steps=3))
        # Through the grace period (its trainers ignore SIGTERM) and after: never more trainers
        # on a worker than it has slots, and the second job waits while the first's live.
        most = [0, 0]
        waited = False
        deadline = time.time() + GRACE_S + 60
        status = {}
        while time.time() < deadline:
            counts = [self.trainers_on(w) for w in (0, 1)]
            most = [max(m, c) for m, c in zip(most, counts)]
            status = self.cluster.job(second)
            old_alive = any(self.cluster.rank_pid(w, first, 1, r) for w in (0, 1)
                            for r in range(4))
            if old_alive and status.get("state") == "PENDING":
                waited = True
            if status.get("state") in ("SUCCEEDED", "FAILED"):
                break
            time.sleep(0.05)
        self.assertEqual(status.get("state"), "SUCCEEDED", json.dumps(status, indent=1))
        self.assertLessEqual(max(most), SLOTS, "a worker ran more trainers than slots: %s" % most)
        self.assertTrue(waited, "the second job never waited for the first job's ranks")
        first_status = self.cluster.job(first)
        self.assertEqual(first_status["state"], "CANCELLED")
        logs = "".join(self.cluster.rank_log(w, first, 1, r) for w in (0, 1) for r in range(4))
        self.assertIn("SHARDLINE_TEST_IGNORE_SIGTERM=1: ignoring SIGTERM", logs)


if __name__ == "__main__":
    harness.run_tests(__name__)
