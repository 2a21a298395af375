"""Found by the chaos soak (#30, bench/chaos.sh): a replica-group job's progress series kept
every step although the daemon relaying its leader's reports was frozen.

A W = 4 HYBRID_SHARD job (S = 2: replica groups 0 and 1, one per worker) with
`fault_tolerance: REPLICA_GROUPS`. The worker daemon of group 0 (rank 0, the progress leader) is
stopped with SIGSTOP mid-job. Its trainers are not stopped: they vote with the coordinator
directly and train on with group 1, writing their metrics, which the frozen daemon does not
relay. After the heartbeat timeout the coordinator declares the worker dead and group 0 lost
(REPLICA_GROUP_LOST at step N); rank 2 leads the progress from there. Then the daemon continues
and relays rank 0's backlog: the steps group 0 trained (and the votes committed) during the
freeze. Those reports used to be dropped (rank 0 was no longer the leader), and the job
SUCCEEDED with those steps missing from `shardctl metrics` for good. Now a lost group's first
rank's report counts when it advances the job (coordinator/core/rank_reports.cc): every step is in
the series, with rank 0's own losses.
"""
import json
import os
import re
import signal
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import cluster_test  # noqa: E402

STEPS = 400
FT = ("fault_tolerance: {mode: REPLICA_GROUPS, min_replicas: 1, digest_every_steps: 1, "
      "vote_timeout_s: 5}")


class ProgressRelayScenarioTest(unittest.TestCase):
    tearDown = cluster_test.ClusterTest.tearDown

    def setUp(self):
        # A short heartbeat timeout: the freeze has to outlast it while the job still runs.
        self.cluster = harness.Cluster(workers=2, slots=2, grace_period_s=3,
                                       heartbeat_timeout_ms=4000)

    def test_steps_trained_while_the_leaders_daemon_was_frozen_stay_in_the_series(self):
        spec = cluster_test.write_spec(os.path.join(self.cluster.dir, "checkpoints"),
                                       steps=STEPS, extra=FT)
        job = self.cluster.shardctl("submit", spec, "--set", "fsdp.collective_timeout_s=20",
                                    "--set", "checkpoint.every_steps=50").stdout.split()[0]
        status = self.cluster.wait_for(job, lambda s: int(s.get("step", 0)) >= 5, timeout=300,
                                       what="step 5")
        worker = int(status["placement"][0]["node_name"].rsplit("-", 1)[1])
        daemon = self.cluster.procs["worker-%d" % worker]
        daemon.send_signal(signal.SIGSTOP)
        frozen_from = int(self.cluster.job(job)["step"])  # rank 0's last relayed step
        try:
            status = self.cluster.wait_for(
                job, lambda s: any(e["kind"] == "REPLICA_GROUP_LOST" for e in s["events"]) or
                s.get("state") != "RUNNING", timeout=120, what="group 0 lost")
        finally:
            daemon.send_signal(signal.SIGCONT)
        lost = [e["message"] for e in status["events"] if e["kind"] == "REPLICA_GROUP_LOST"]
        self.assertTrue(lost, json.dumps(status["events"], indent=1))
        self.assertIn("replica group 0 (ranks 0-1) lost at step", lost[0])
        lost_step = int(re.search(r"lost at step (\d+)", lost[0]).group(1))

        status = self.cluster.wait_for(job, lambda s: s.get("state") in (
            "SUCCEEDED", "FAILED"), timeout=400, what="job end")
        self.assertEqual(status["state"], "SUCCEEDED", json.dumps(status["events"], indent=1))
        self.assertEqual(int(status["attempt"]), 1)
        self.assertEqual(int(status["step"]), STEPS)

        # Rank 0's own metrics (written by the trainer while its daemon was frozen).
        path = os.path.join(self.cluster.worker_dir(worker), "jobs", job, "attempt-1",
                            "metrics-rank-0.jsonl")
        rank0 = {int(r["step"]): float(r["loss"]) for r in
                 (json.loads(l) for l in open(path) if l.strip())}
        # The freeze mattered: group 0 trained steps its daemon relayed only after the loss.
        self.assertGreater(max(rank0), frozen_from + 1, "rank 0 trained nothing in the freeze")
        self.assertLessEqual(max(rank0), lost_step)

        metrics = self.cluster.shardctl_json("metrics", job)
        series = {}
        for p in metrics["points"]:
            self.assertEqual(int(p["count"]), 1, p)
            series.setdefault(int(p["step"]), float(p["loss"]))
        missing = [s for s in range(1, STEPS + 1) if s not in series]
        self.assertEqual(missing, [], "steps missing from the job's series (group 0 lost at "
                                      "step %d, its daemon frozen from step %d)" % (
                                          lost_step, frozen_from))
        for s, loss in rank0.items():
            self.assertAlmostEqual(series[s], loss, delta=1e-9, msg="step %d" % s)


if __name__ == "__main__":
    harness.run_tests(__name__)
