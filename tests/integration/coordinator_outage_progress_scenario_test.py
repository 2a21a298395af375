"""Found by the chaos soak (#30, bench/chaos.sh): the steps a job trains while the coordinator
cannot take progress reports stay in its progress series.

A W = 4 HYBRID_SHARD job on two workers, without checkpoints (so its trainers make no call to the
coordinator between steps: see below). Mid-job the coordinator is stopped with SIGSTOP; the
trainers train on, and each worker daemon reads its ranks' metrics files but cannot relay them
(ReportProgress times out). Once the daemon's calls have timed out (10 s) and rank 0 has logged 10 more steps, the
coordinator is continued.
The daemon kept only the latest unsent report per rank, so the steps of the outage were missing
from `shardctl metrics` for good (the job SUCCEEDED all the same); it now keeps them in order
(worker/worker_daemon.cc SuperviseLoop, at most 4096 a rank) and sends them when the coordinator
answers again: every step is in the series, with rank 0's own losses.

The outage also outlasts the heartbeat timeout (8 s here): no heartbeat could be served while
the coordinator was stopped, and it used to declare both workers dead when it continued (every
running attempt failed WORKER_LOST). The gap between its ticks now reads as its own blindness
(coordinator/placement/worker_registry.h): the job goes on in attempt 1, with no WORKER_LOST.

A SIGKILLed coordinator, which loses the progress points it had acknowledged but not yet written
(up to --metrics_flush_ms), is coordinator_kill_progress_scenario_test's.
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

STEPS = 1500
OUTAGE_STEPS = 10


def logged_steps(path):
    if not os.path.exists(path):
        return {}
    out = {}
    for line in open(path):
        try:
            r = json.loads(line)
        except ValueError:
            continue  # a line being written
        out[int(r["step"])] = float(r["loss"])
    return out


class CoordinatorOutageProgressScenarioTest(unittest.TestCase):
    tearDown = cluster_test.ClusterTest.tearDown
    spec = cluster_test.ClusterTest.spec
    submit = cluster_test.ClusterTest.submit

    def setUp(self):
        # The harness's 8 s heartbeat timeout, below the outage (at least the daemon's 10 s call
        # deadline).
        self.cluster = harness.Cluster(workers=2, slots=2, grace_period_s=3)

    def test_steps_logged_while_the_coordinator_was_stopped_reach_the_series(self):
        job = self.submit(self.spec(steps=STEPS), "--set", "checkpoint.every_steps=0",
                          "--set", "checkpoint.save_final=false")
        status = self.cluster.wait_for(job, lambda s: int(s.get("step", 0)) >= 5, timeout=300,
                                       what="step 5")
        worker = int(status["placement"][0]["node_name"].rsplit("-", 1)[1])
        metrics = os.path.join(self.cluster.worker_dir(worker), "jobs", job, "attempt-1",
                               "metrics-rank-0.jsonl")
        worker_log = os.path.join(self.cluster.worker_dir(worker), "worker.log")
        log_from = os.path.getsize(worker_log)
        coordinator = self.cluster.procs["coordinator"]
        coordinator.send_signal(signal.SIGSTOP)
        try:
            start = max(logged_steps(metrics))
            # The outage must outlast the daemon's 10 s call deadline (a call that waits it out
            # and then succeeds loses nothing): until the daemon logs a timed-out heartbeat,
            # then 10 more steps of rank 0.
            deadline = time.time() + 45
            while "DEADLINE_EXCEEDED: Heartbeat" not in open(worker_log).read()[log_from:]:
                self.assertLess(time.time(), deadline, "no heartbeat of worker %d timed out "
                                                       "while the coordinator was stopped" % worker)
                time.sleep(0.2)
            timed_out_at = max(logged_steps(metrics))
            while max(logged_steps(metrics)) < min(STEPS, timed_out_at + OUTAGE_STEPS):
                self.assertLess(time.time(), deadline, "rank 0 did not train on while the "
                                                       "coordinator was stopped")
                time.sleep(0.1)
        finally:
            coordinator.send_signal(signal.SIGCONT)
        status = self.cluster.wait_for(job, lambda s: s.get("state") in (
            "SUCCEEDED", "FAILED"), timeout=600, what="job end")
        self.assertEqual(status["state"], "SUCCEEDED", json.dumps(status["events"], indent=1))
        self.assertEqual(int(status["attempt"]), 1, json.dumps(status["events"], indent=1))
        self.assertEqual([e for e in status["events"] if "WORKER_LOST" in json.dumps(e)], [])

        series = {}
        for p in self.cluster.shardctl_json("metrics", job)["points"]:
            self.assertEqual(int(p["count"]), 1, p)
            series[int(p["step"])] = float(p["loss"])
        missing = [s for s in range(1, STEPS + 1) if s not in series]
        self.assertEqual(missing, [], "steps missing from the series (coordinator stopped "
                                      "from about step %d)" % start)
        for s, loss in logged_steps(metrics).items():
            self.assertAlmostEqual(series[s], loss, delta=1e-9, msg="step %d" % s)


if __name__ == "__main__":
    harness.run_tests(__name__)
