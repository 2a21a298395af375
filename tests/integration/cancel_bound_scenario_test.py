"""A cancel ends every rank within a bounded, documented time (docs/failures.md, "A user cancels
a running job"): the STOP reaches each worker over its assignment stream, the daemon sends
SIGTERM to every rank's process group at once and SIGKILL to those still running when the grace
period (the coordinator's --stop_grace_s) has passed, so every trainer process is gone, and
reaped, within GRACE_S + MARGIN_S of `shardctl cancel`.

  - W = 4 trainers that honour SIGTERM: gone within the bound.
  - W = 4 trainers that ignore it (SHARDLINE_TEST_IGNORE_SIGTERM=1, a test-only trainer hook):
    alive through the grace period (the SIGKILL comes no earlier), gone within the bound.
  - Two jobs cancelled one right after the other on the same workers, trainers ignoring
    SIGTERM: each job's ranks are gone within the bound of its own cancel. The daemon used to
    act on a STOP on the thread that reads its stream and wait there for the ranks to end, so
    the second STOP was read only after the first one's SIGKILL: its ranks lived about two
    grace periods.

Pids come from the trainers' command lines (Cluster.rank_pid); every wait polls with a deadline.
"""
import os
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import cluster_test  # noqa: E402  (imported as a module, so its tests are not collected here)

GRACE_S = 5
# The documented bound past the grace period: the STOP's way to the daemons, the daemon's stop
# thread and the reaping. Measured from before `shardctl cancel` runs.
MARGIN_S = 2
BOUND_S = GRACE_S + MARGIN_S
# How long past the bound to keep looking, so a failure says how late the ranks were.
OVERRUN_S = 30


def spec_marker(cluster, worker, job, attempt, rank):
    """What the trainer's command line holds (Cluster.rank_pid looks for the same)."""
    return "%s/jobs/%s/attempt-%d/spec-rank-%d.yaml" % (cluster.worker_dir(worker), job, attempt,
                                                        rank)


def gone(pid, marker):
    """True once `pid` no longer is the trainer `marker` names: its /proc entry is gone (it was
    reaped) or another process has the pid. A zombie (not reaped yet) is not gone."""
    state = harness.proc_state(pid)
    if state is None:
        return True
    if state == "Z":
        return False
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return marker not in f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return True


class CancelBoundBase(unittest.TestCase):
    IGNORE_SIGTERM = False
    SLOTS = 2

    def setUp(self):
        self.cluster = harness.Cluster(workers=0, grace_period_s=GRACE_S)
        env = {"SHARDLINE_TEST_IGNORE_SIGTERM": "1"} if self.IGNORE_SIGTERM else None
        for i in range(2):
            self.cluster.start_worker(i, self.SLOTS, GRACE_S, env=env)
        self.cluster.wait_for_workers(2)

    tearDown = cluster_test.ClusterTest.tearDown
    spec = cluster_test.ClusterTest.spec
    submit = cluster_test.ClusterTest.submit

    def training_ranks(self, job, world_size):
        """Waits until `job` trains (attempt 1, step >= 1); returns {rank: (worker, pid, marker)}
        of its trainers."""
        status = self.cluster.wait_for(
            job, lambda s: int(s.get("step", 0)) >= 1 and
            len(s.get("placement", [])) == world_size, timeout=300, what=job + " training")
        self.assertEqual(int(status.get("attempt", 0)), 1, status)
        workers = {r: int(p["node_name"].rsplit("-", 1)[1])
                   for r, p in enumerate(status["placement"])}
        ranks = {}
        deadline = time.monotonic() + 30
        while len(ranks) < world_size and time.monotonic() < deadline:
            for r, w in workers.items():
                pid = self.cluster.rank_pid(w, job, 1, r)
                if pid is not None:
                    ranks[r] = (w, pid, spec_marker(self.cluster, w, job, 1, r))
            if len(ranks) < world_size:
                time.sleep(0.05)
        self.assertEqual(sorted(ranks), list(range(world_size)), "pids of %s: %s" % (job, ranks))
        return ranks

    def watch_until_gone(self, watched):
        """`watched`: [(ranks, started)] with `started` the monotonic time before that job's
        cancel. Polls until every pid is gone, or OVERRUN_S past the latest bound; returns
        {(index, rank): seconds after its `started` that it was first seen gone, or None}."""
        gone_after = {(i, r): None for i, (ranks, _) in enumerate(watched) for r in ranks}
        deadline = max(started for _, started in watched) + BOUND_S + OVERRUN_S
        while time.monotonic() < deadline and None in gone_after.values():
            for (i, r), seen in gone_after.items():
                ranks, started = watched[i]
                if seen is None and gone(ranks[r][1], ranks[r][2]):
                    gone_after[(i, r)] = time.monotonic() - started
            time.sleep(0.02)
        return gone_after

    def assert_within_bound(self, gone_after, at_least=0.0):
        late = {k: v for k, v in gone_after.items() if v is None or v > BOUND_S}
        self.assertEqual(late, {}, "ranks alive past the bound of %d s (--stop_grace_s %d + %d "
                         "s), seconds after their cancel (None: never gone): %s" %
                         (BOUND_S, GRACE_S, MARGIN_S, gone_after))
        early = {k: v for k, v in gone_after.items() if v < at_least}
        self.assertEqual(early, {}, "ranks gone before %.1f s after their cancel: %s" %
                         (at_least, gone_after))

    def cancel(self, job):
        started = time.monotonic()
        self.cluster.shardctl("cancel", job)
        return started

    def assert_cancelled(self, job):
        status = self.cluster.wait_for(job, lambda s: s.get("state") == "CANCELLED", timeout=30,
                                       what=job + " CANCELLED")
        self.assertEqual(status["state"], "CANCELLED")


class CancelBoundScenarioTest(CancelBoundBase):
    def test_cancel_ends_every_rank_within_the_bound(self):
        job = self.submit(self.spec(steps=100000))
        ranks = self.training_ranks(job, 4)
        self.assertEqual(len({w for w, _, _ in ranks.values()}), 2, ranks)  # both workers
        started = self.cancel(job)
        self.assert_within_bound(self.watch_until_gone([(ranks, started)]))
        self.assert_cancelled(job)
        self.assertEqual(self.cluster.trainer_pids(), [])


class CancelBoundIgnoringSigtermScenarioTest(CancelBoundBase):
    IGNORE_SIGTERM = True
    # Three slots per worker: the W = 4 job's two shard groups of 2 go one to each worker
    # (best fit), and the W = 2 job of the second test takes the last slot of each.
    SLOTS = 3

    def worker_logs(self):
        out = ""
        for w in (0, 1):
            path = os.path.join(self.cluster.worker_dir(w), "worker.log")
            if os.path.exists(path):
                out += open(path, errors="replace").read()
        return out

    def assert_ignored_sigterm_and_was_killed(self, job, ranks):
        logs = "".join(self.cluster.rank_log(w, job, 1, r) for r, (w, _, _) in ranks.items())
        self.assertIn("SHARDLINE_TEST_IGNORE_SIGTERM=1: ignoring SIGTERM", logs)
        # The daemon's SIGKILL ended them. (Not necessarily each: a rank whose peers on the other
        # worker were killed a moment earlier may end first by its failed collective.)
        daemon_logs = self.worker_logs()
        # (The stop thread logs this before it sends the SIGKILL, so it is there once the pid is
        # gone; the exit's own "killed by SIGKILL" line comes later, once the log is shipped.)
        self.assertTrue(any("rank %d of %s attempt 1 still runs at the end of its grace period: "
                            "SIGKILL" % (r, job) in daemon_logs for r in ranks),
                        daemon_logs[-3000:])

    def test_ranks_ignoring_sigterm_live_through_the_grace_and_are_gone_within_the_bound(self):
        job = self.submit(self.spec(steps=100000))
        ranks = self.training_ranks(job, 4)
        self.assertEqual(len({w for w, _, _ in ranks.values()}), 2, ranks)
        started = self.cancel(job)
        # The grace starts when the STOP reaches a daemon, after `started`: no rank may be gone
        # before it (0.1 s for the clocks' granularity).
        self.assert_within_bound(self.watch_until_gone([(ranks, started)]),
                                 at_least=GRACE_S - 0.1)
        self.assert_cancelled(job)
        self.assert_ignored_sigterm_and_was_killed(job, ranks)

    def test_a_cancel_right_after_another_ends_its_ranks_within_its_own_bound(self):
        first = self.submit(self.spec(steps=100000))
        second = self.submit(self.spec(steps=100000, world_size=2, degree=2))
        first_ranks = self.training_ranks(first, 4)
        second_ranks = self.training_ranks(second, 2)
        # The second job's ranks share both workers with the first's, so each daemon gets the
        # second STOP while the first one's ranks still hold out.
        self.assertEqual({w for w, _, _ in second_ranks.values()},
                         {w for w, _, _ in first_ranks.values()},
                         (first_ranks, second_ranks))
        first_started = self.cancel(first)
        second_started = self.cancel(second)
        gone_after = self.watch_until_gone([(first_ranks, first_started),
                                            (second_ranks, second_started)])
        self.assert_within_bound(gone_after, at_least=GRACE_S - 0.1)
        for job in (first, second):
            self.assert_cancelled(job)
        self.assert_ignored_sigterm_and_was_killed(second, second_ranks)
        self.assertEqual(self.cluster.trainer_pids(), [])


if __name__ == "__main__":
    harness.run_tests(__name__)
