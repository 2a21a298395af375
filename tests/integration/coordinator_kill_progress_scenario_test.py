"""Found by the chaos soak (#30, bench/chaos.sh): a SIGKILLed coordinator lost the progress
points it had acknowledged but not yet written to its state store, and the job's series kept
that hole for good.

A W = 4 HYBRID_SHARD job on two workers, without checkpoints, under a coordinator that writes
each job's series at most once a minute (--metrics_flush_ms=60000: its first point is written
at once, the next ones only a minute later). Once the coordinator has taken 20 more steps than
the first, it is SIGKILLed, and restarted on its address and state directory a second later:
it comes back with its series at step 1 or so. The worker daemons used to drop a report once
the coordinator acknowledged it, so steps 2..20 were missing from `shardctl metrics` although
the job SUCCEEDED. Now every ReportProgress answer carries the job's durable step (the newest
step its stored series holds); the daemons keep each rank's reports above it
(worker/progress_relay.h) and, having lost the coordinator, send them again; the coordinator
fills its series with the steps it lacks and takes the ones it has as no-ops. So the series has
every step once (count 1) with rank 0's own losses, and the job SUCCEEDS in attempt 1.
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
from coordinator_outage_progress_scenario_test import logged_steps  # noqa: E402

STEPS = 600
BEFORE_KILL = 20


class CoordinatorKillProgressScenarioTest(unittest.TestCase):
    tearDown = cluster_test.ClusterTest.tearDown
    spec = cluster_test.ClusterTest.spec
    submit = cluster_test.ClusterTest.submit

    def setUp(self):
        self.cluster = harness.Cluster(workers=2, slots=2, grace_period_s=3,
                                       coordinator_flags=["--metrics_flush_ms=60000"])

    def test_steps_acknowledged_but_not_written_before_a_sigkill_reach_the_series(self):
        job = self.submit(self.spec(steps=STEPS), "--set", "checkpoint.every_steps=0",
                          "--set", "checkpoint.save_final=false")
        status = self.cluster.wait_for(job, lambda s: int(s.get("step", 0)) >= 1, timeout=300,
                                       what="step 1")
        first = int(status["step"])
        status = self.cluster.wait_for(job, lambda s: int(s.get("step", 0)) >= first + BEFORE_KILL,
                                       timeout=300, what="%d more steps" % BEFORE_KILL)
        acknowledged = int(status["step"])
        worker = int(status["placement"][0]["node_name"].rsplit("-", 1)[1])  # rank 0's
        self.assertLess(acknowledged, STEPS, "the job ended before the kill: raise STEPS")
        coordinator = self.cluster.procs["coordinator"]
        coordinator.send_signal(signal.SIGKILL)
        coordinator.wait()
        time.sleep(1)
        self.cluster.start_coordinator(self.cluster.address)
        status = self.cluster.wait_for(job, lambda s: s.get("state") in (
            "SUCCEEDED", "FAILED"), timeout=600, what="job end after the coordinator restart")
        self.assertEqual(status["state"], "SUCCEEDED", json.dumps(status["events"], indent=1))
        self.assertEqual(int(status["attempt"]), 1, json.dumps(status["events"], indent=1))
        self.assertEqual(int(status["step"]), STEPS)

        series = {}
        for p in self.cluster.shardctl_json("metrics", job)["points"]:
            self.assertEqual(int(p["count"]), 1, p)
            self.assertNotIn(int(p["step"]), series, p)
            series[int(p["step"])] = float(p["loss"])
        missing = [s for s in range(1, STEPS + 1) if s not in series]
        self.assertEqual(missing, [], "steps missing from the series (coordinator SIGKILLed "
                                      "at step %d, its series written at step %d)"
                                      % (acknowledged, first))
        metrics = os.path.join(self.cluster.worker_dir(worker), "jobs", job, "attempt-1",
                               "metrics-rank-0.jsonl")
        logged = logged_steps(metrics)
        self.assertEqual(sorted(logged), sorted(series))
        for s, loss in logged.items():
            self.assertAlmostEqual(series[s], loss, delta=1e-9, msg="step %d" % s)


class CoordinatorKillAtTheEndScenarioTest(unittest.TestCase):
    """Found by the chaos soak (#30, seed 30, after the fixes above): a coordinator SIGKILLed
    just after a job SUCCEEDED lost the series points it had not written yet; the job's end was
    durable, so no daemon's resent report was taken any more (an ended job takes none) and the
    job kept the hole (the soak's lacked steps 6-60). The ended job's series used to be written
    at the next tick; here ticks are 3 s apart (--tick_ms=3000) and the series' periodic writes a
    minute, and the coordinator is SIGKILLed as soon as shardctl shows the job SUCCEEDED. Now the
    series is queued to the state writer just before the job's terminal record (JobTable's
    before-end hook), so an end that survives the kill has its whole series with it."""

    tearDown = cluster_test.ClusterTest.tearDown
    spec = cluster_test.ClusterTest.spec
    submit = cluster_test.ClusterTest.submit

    def setUp(self):
        self.flags = ["--metrics_flush_ms=60000", "--tick_ms=3000"]
        self.cluster = harness.Cluster(workers=2, slots=2, grace_period_s=3,
                                       coordinator_flags=self.flags)

    def test_a_sigkill_right_after_the_end_keeps_the_whole_series(self):
        steps = 30
        job = self.submit(self.spec(steps=steps), "--set", "checkpoint.every_steps=0",
                          "--set", "checkpoint.save_final=false")
        self.cluster.wait_for(job, lambda s: s.get("state") in ("SUCCEEDED", "FAILED"),
                              timeout=300, what="job end")
        coordinator = self.cluster.procs["coordinator"]
        coordinator.send_signal(signal.SIGKILL)
        coordinator.wait()
        self.cluster.start_coordinator(self.cluster.address)
        status = self.cluster.wait_for(job, lambda s: s.get("state") in ("SUCCEEDED", "FAILED"),
                                       timeout=300, what="job end after the restart")
        self.assertEqual(status["state"], "SUCCEEDED", json.dumps(status["events"], indent=1))
        steps_seen = {int(p["step"]) for p in self.cluster.shardctl_json("metrics", job)["points"]}
        missing = [s for s in range(1, steps + 1) if s not in steps_seen]
        self.assertEqual(missing, [], "steps missing from the series after a SIGKILL at the end")


if __name__ == "__main__":
    harness.run_tests(__name__)
