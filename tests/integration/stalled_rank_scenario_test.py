"""Failure scenario: a collective stalled by a stopped rank (SIGSTOP), on a real cluster.

One trainer is frozen with SIGSTOP mid-job. Its peers block in a collective with it until the
job's collective timeout (fsdp.collective_timeout_s, short here), then fail with
DEADLINE_EXCEEDED naming the group, its members, the operation and the step ("group world op
all_reduce step 9: timed out after 10s (group ranks [0, 1, 2, 3], this is rank 3): ..."). The coordinator fails the attempt, the worker daemon tears it down
(SIGTERM stays pending on a stopped process, so the SIGKILL after the grace period is what ends
it, and the daemon reaps it), and the next attempt resumes from the last committed checkpoint
and finishes.
"""
import json
import os
import re
import signal
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import cluster_test  # noqa: E402  (imported as a module, so its tests are not collected here)

# Short, so the scenario fits its time budget; long enough for four trainers to bootstrap on a
# loaded two-core machine (the same timeout bounds the rendezvous).
COLLECTIVE_TIMEOUT_S = 10
# The groups of W = 4 ranks in shard groups of S = 2, with their members' ranks.
GROUPS = {"shard[0]": [0, 1], "shard[1]": [2, 3], "replicate[0]": [0, 2],
          "replicate[1]": [1, 3], "world": [0, 1, 2, 3]}
_GROUP_OP_STEP = (r"group (?P<group>\S+) op (?P<op>all_gather|reduce_scatter|all_reduce|"
                  r"broadcast|barrier) step (?P<step>\d+): ")
_MEMBERS = r"\(group ranks \[(?P<members>[0-9, ]+)\], this is rank (?P<me>\d+)\)"
TIMEOUT_ERROR = re.compile(_GROUP_OP_STEP + r"timed out after %ds " % COLLECTIVE_TIMEOUT_S +
                           _MEMBERS)
LOST_PEER_ERROR = re.compile(_GROUP_OP_STEP + r"(lost a peer|gloo failed) " + _MEMBERS)
# Rank 0 commits checkpoints: caught between rank 1's files, it waits as long for them.
COMMIT_WAIT_ERROR = re.compile(r"checkpoint \S+: shard writers did not finish within %ds; "
                               r"missing shard_00001\.index\.json" % COLLECTIVE_TIMEOUT_S)


class StalledRankScenarioTest(unittest.TestCase):
    setUp = cluster_test.ClusterTest.setUp
    tearDown = cluster_test.ClusterTest.tearDown
    spec = cluster_test.ClusterTest.spec
    submit = cluster_test.ClusterTest.submit

    def check_comm_error(self, m, text, rank=None):
        """`m`, a match of TIMEOUT_ERROR or LOST_PEER_ERROR, names a real group of the layout
        with its members, the rank itself among them, at a step after the first checkpoint."""
        self.assertIsNotNone(m, text)
        self.assertIn(m.group("group"), GROUPS, text)
        members = [int(r) for r in m.group("members").split(", ")]
        self.assertEqual(members, GROUPS[m.group("group")], text)
        if rank is not None:
            self.assertEqual(int(m.group("me")), rank, text)
        self.assertIn(int(m.group("me")), members, text)
        self.assertGreaterEqual(int(m.group("step")), 3, text)

    def test_stopped_rank_times_out_peers_naming_group_and_op_and_job_restarts(self):
        steps = 30
        job = self.submit(self.spec(steps=steps, extra="restart: {max_restarts: 2, backoff_s: 1}"),
                          "--set", "fsdp.collective_timeout_s=%d" % COLLECTIVE_TIMEOUT_S)
        self.cluster.wait_for(job, lambda s: int(s.get("latest_checkpoint_step", 0)) >= 3,
                              timeout=120, what="first committed checkpoint")
        status = self.cluster.job(job)
        self.assertEqual(int(status["attempt"]), 1)
        # Rank 1 runs on the node of shard group 0.
        node = status["placement"][1]["node_name"]
        worker = int(node.rsplit("-", 1)[1])
        victim = self.cluster.rank_pid(worker, job, 1, 1)
        self.assertIsNotNone(victim, "no trainer for rank 1 on " + node)
        os.kill(victim, signal.SIGSTOP)
        deadline = time.time() + 10
        while harness.proc_state(victim) != "T" and time.time() < deadline:
            time.sleep(0.05)
        self.assertEqual(harness.proc_state(victim), "T")

        # The attempt fails on the others' timeouts; the frozen rank is torn down with it.
        status = self.cluster.wait_for(job, lambda s: int(s.get("attempt", 0)) >= 2, timeout=120,
                                       what="a second attempt")
        failures = [e["message"] for e in status["events"] if e["kind"] == "RANK_FAILED"]
        self.assertTrue(failures, json.dumps(status["events"], indent=1))
        # The attempt fails on a peer of the frozen rank that gave up: the message (the last
        # line of its log) names the group and its members, the operation and the step. It is
        # the timeout, or the lost peer a rank sees when another one gives up at the same moment
        # (exits that reach the coordinator in one heartbeat are applied in rank order).
        self.assertRegex(failures[0], r"^rank [023] on node node-\d exited with code 4: ")
        self.check_comm_error(TIMEOUT_ERROR.search(failures[0]) or
                              LOST_PEER_ERROR.search(failures[0]), failures[0])

        # The other ranks either failed the same way by themselves (exit 4; a rank whose peer
        # exited first may report the lost peer instead) or were still waiting (in a collective,
        # or rank 0 for the other shard's files before a commit) when the attempt was stopped.
        timeouts = []
        for rank in (0, 2, 3):
            log = "".join(self.cluster.rank_log(i, job, 1, rank) for i in (0, 1))
            if "; exit 4]" not in log:
                continue
            errors = list(TIMEOUT_ERROR.finditer(log)) + list(LOST_PEER_ERROR.finditer(log))
            self.assertTrue(errors or COMMIT_WAIT_ERROR.search(log),
                            "rank %d exited 4 without a collective error:\n%s" % (
                                rank, log[-2000:]))
            for m in errors:
                self.check_comm_error(m, m.group(0), rank)
            timeouts += [m.group(0) for m in TIMEOUT_ERROR.finditer(log)]
        self.assertTrue(timeouts, "no rank reported the collective timeout")
        # A rank may also time out waiting on a peer that itself waits on rank 1 (rank 2 in
        # replicate[0] behind rank 0, say), but the earliest waiters, blocked on rank 1
        # directly, name a group that contains it.
        self.assertTrue([t for t in timeouts if re.search(r"group ranks \[[0-9, ]*\b1\b", t)],
                        timeouts)

        # The frozen process is gone: killed (SIGKILL ends a stopped process) and reaped by its
        # daemon, not left as a zombie or still stopped.
        deadline = time.time() + 30
        while harness.proc_state(victim) is not None and time.time() < deadline:
            time.sleep(0.1)
        self.assertIsNone(harness.proc_state(victim), "the stopped rank outlived its attempt")
        # The daemon reports how it ended (its supervision loop looks every 200 ms).
        expected = "rank 1 of %s killed by SIGKILL" % job
        log_path = os.path.join(self.cluster.worker_dir(worker), "worker.log")
        deadline = time.time() + 10
        while expected not in open(log_path).read() and time.time() < deadline:
            time.sleep(0.1)
        self.assertIn(expected, open(log_path).read())

        status = self.cluster.wait_for(job, lambda s: s.get("state") in ("SUCCEEDED", "FAILED"),
                                       timeout=240, what="job end after the stall")
        self.assertEqual(status["state"], "SUCCEEDED", json.dumps(status["events"], indent=1))
        self.assertEqual(int(status["step"]), steps)
        starts = [e["message"] for e in status["events"] if e["kind"] == "SCHEDULED"]
        self.assertRegex(" | ".join(starts), r"resuming from checkpoint step \d+")


if __name__ == "__main__":
    harness.run_tests(__name__)
