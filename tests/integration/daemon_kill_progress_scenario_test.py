"""Found by the chaos soak (#30, bench/chaos.sh, seed 30 after the durable-progress fix): a
worker daemon SIGKILLed after its rank 0 committed a checkpoint, but before it relayed rank 0's
progress for the steps up to that checkpoint, lost those steps for good. The commit goes from the
trainer straight to the coordinator; progress goes through the daemon, which tails the trainer's
metrics file. The next attempt resumes after the commit, so nobody reports those steps again,
and the job SUCCEEDED with a hole in its series (the soak's job lacked step 10, its checkpoint
step).

Here a W = 4 HYBRID_SHARD job on two workers checkpoints every 10 steps. Once it is past step 3,
the daemon of rank 0's node is SIGSTOPped (its relay stops; the trainers train on), the test waits
until the coordinator lists a committed checkpoint above the last relayed step, and SIGKILLs the
daemon (its trainers die with it). The coordinator restarts the job from that checkpoint once the
node is back. Without the fix the steps between the last relayed one and the checkpoint were
missing from `shardctl metrics`. Now rank 0 sends the progress of every step it logged up to a
commit, on the commit's own path, before the commit (trainer/logged_steps.h).
"""
import json
import os
import signal
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import cluster_test  # noqa: E402

STEPS = 120


class DaemonKillProgressScenarioTest(unittest.TestCase):
    tearDown = cluster_test.ClusterTest.tearDown
    spec = cluster_test.ClusterTest.spec
    submit = cluster_test.ClusterTest.submit

    def setUp(self):
        self.cluster = harness.Cluster(workers=2, slots=2, grace_period_s=3)

    def test_steps_up_to_a_commit_reach_the_series_when_the_daemon_dies_unrelayed(self):
        job = self.submit(self.spec(steps=STEPS), "--set", "checkpoint.every_steps=10",
                          "--set", "restart.max_restarts=3", "--set", "restart.backoff_s=1")
        status = self.cluster.wait_for(job, lambda s: int(s.get("step", 0)) >= 3, timeout=300,
                                       what="step 3")
        worker = int(status["placement"][0]["node_name"].rsplit("-", 1)[1])  # rank 0's node
        daemon = self.cluster.procs["worker-%d" % worker]
        daemon.send_signal(signal.SIGSTOP)
        try:
            stopped_at = int(self.cluster.job(job)["step"])
            status = self.cluster.wait_for(
                job, lambda s: int(s.get("latest_checkpoint_step", 0)) > stopped_at + 1,
                timeout=60, what="a commit above step %d while the daemon is stopped"
                % stopped_at)
            # The daemon relayed up to about stopped_at; the steps after it up to the commit
            # reach the coordinator only through rank 0's commit path.
            committed = int(status["latest_checkpoint_step"])
        finally:
            daemon.send_signal(signal.SIGKILL)
            daemon.wait()
        self.cluster.start_worker(worker, 2, grace_period_s=3)
        status = self.cluster.wait_for(job, lambda s: s.get("state") in ("SUCCEEDED", "FAILED"),
                                       timeout=600, what="job end after the daemon's restart")
        self.assertEqual(status["state"], "SUCCEEDED", json.dumps(status["events"], indent=1))
        self.assertGreaterEqual(int(status["attempt"]), 2)  # it was restarted, from a checkpoint
        steps = {int(p["step"]) for p in self.cluster.shardctl_json("metrics", job)["points"]}
        missing = [s for s in range(1, STEPS + 1) if s not in steps]
        self.assertEqual(missing, [], "steps missing from the series (daemon stopped at step %d, "
                                      "checkpoint %d committed before its SIGKILL)"
                                      % (stopped_at, committed))


if __name__ == "__main__":
    harness.run_tests(__name__)
