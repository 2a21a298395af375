"""Issue #19 on a real cluster: replica-group fault tolerance (docs/failures.md, "Replica-group
fault tolerance"). A real coordinator, worker daemons and trainers on loopback; the jobs use
HYBRID_SHARD (or HYBRID_SHARD_ZERO2) with shard groups of S = 2 ranks, each a whole replica of
the model, and `fault_tolerance: {mode: REPLICA_GROUPS, ...}` with a digest check every step.

  (a) W = 6 over three workers; one rank of replica group 1 is SIGKILLed after step 10. The job
      trains on in attempt 1 with groups 0 and 2 (REPLICA_GROUP_LOST), the coordinator places a
      replacement group (generation 1) that heals from a live peer and rejoins
      (REPLICA_GROUP_HEALED). The survivors are never restarted (one "started rank" line each,
      same pid), no checkpoint is read, rank 0's losses equal an uninterrupted run's (same spec,
      run first) up to the failure step, and every group holds the same state after healing
      (the coordinator checks the digests every step and would fail the job otherwise).
  (b) W = 6: the worker daemon hosting group 2 is SIGKILLed (its trainers die with it) and
      restarted; the replacement group is placed on it once it is back and the job SUCCEEDS in
      attempt 1.
  (c) W = 4 HYBRID_SHARD_ZERO2 over two workers, min_replicas 1: a rank of group 1 is stopped
      with SIGSTOP. Its group is lost after the collective timeout and the vote timeout, the
      stopped rank is killed (STOP_RANK ends with SIGKILL), group 0 trains on and the job
      SUCCEEDS.
  (d) W = 4, min_replicas 2: losing a group leaves fewer than min_replicas, so the attempt fails
      and the job restarts from its last committed checkpoint (attempt 2), as without fault
      tolerance.
  (e) W = 4 over two workers, saves every 6 steps: a writer of group 0 (the writer group) is
      SIGKILLed in the middle of the save of step 12 (the trainers' test pause holds it there).
      The save fails on the other ranks too; they vote not ok on the work after step 12, and
      group 1 does that save again as the new writer group: step 12 is committed, by group 1,
      in attempt 1 (it used to be skipped), and the job SUCCEEDS without a restart.
  (f) As (e) with checkpoint.async_save: rank 1 is held in its background write of step 12
      while training goes on, and SIGKILLed. Step 12 never commits; group 1, which cannot know
      that, saves the step it trains again after the loss synchronously, as the new writer group.

The trainer's log lines it relies on (trainer/replica_fault_tolerance.*): "step N aborted: ...",
"the work after step N aborted: ...","healed from replica group H at step N", "left the job: replica group G was lost".
"""
import glob
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

# Short, so a lost peer is noticed within the scenario; long enough for six trainers to
# bootstrap on a loaded two-core machine (the same timeout bounds the rendezvous).
COLLECTIVE_TIMEOUT_S = 10
VOTE_TIMEOUT_S = 5
S = 2  # hybrid_shard_degree: replica group g is ranks [g*S, (g+1)*S)
# Every wait is generous: up to six trainers share two cores with the daemons. (A job of these
# takes 15-40 s on an idle 2-core machine before any collective or vote timeout.)
JOB_TIMEOUT_S = 420
# Steps of the jobs whose replacement must rejoin: a step of the tiny model takes about 0.1 s
# here, while a replacement needs 2-5 s (placement, a restarted worker, building its model and
# engine, the next committed step) before it heals, so 40 steps ended before it could (the
# job then SUCCEEDS with 2 of 3 groups and no REPLICA_GROUP_HEALED). The failure comes at
# step 10.
HEAL_STEPS = 200

STARTED = re.compile(r"started rank (\d+)/(\d+) of (\S+) attempt (\d+) \(pid (\d+)"
                     r"(?:, generation (\d+))?")


def ft(min_replicas):
    return ("fault_tolerance: {mode: REPLICA_GROUPS, min_replicas: %d, digest_every_steps: 1, "
            "vote_timeout_s: %d}" % (min_replicas, VOTE_TIMEOUT_S))


def group_ranks(g):
    return "ranks %d-%d" % (g * S, (g + 1) * S - 1)


class ReplicaFaultToleranceScenarioTest(unittest.TestCase):
    cluster = None

    def tearDown(self):
        if self.cluster is not None:
            cluster_test.ClusterTest.tearDown(self)

    # ------------------------------------------------------------------ helpers

    def start_cluster(self, workers):
        self.cluster = harness.Cluster(workers=workers, slots=2, grace_period_s=3)

    def submit(self, steps, world_size, min_replicas, extra="", sets=()):
        spec = cluster_test.write_spec(os.path.join(self.cluster.dir, "checkpoints"), steps=steps,
                                       world_size=world_size, degree=S,
                                       extra=ft(min_replicas) + "\n" + extra)
        proc = self.cluster.shardctl(
            "submit", spec, "--set", "fsdp.collective_timeout_s=%d" % COLLECTIVE_TIMEOUT_S,
            *[a for s in sets for a in ("--set", s)])
        return proc.stdout.strip().splitlines()[0]

    def wait_end(self, job):
        return self.cluster.wait_for(job, lambda s: s.get("state") in (
            "SUCCEEDED", "FAILED", "CANCELLED"), timeout=JOB_TIMEOUT_S, what="job end")

    def wait_step(self, job, step):
        return self.cluster.wait_for(job, lambda s: int(s.get("step", 0)) >= step,
                                     timeout=JOB_TIMEOUT_S, what="step %d" % step)

    def assert_succeeded(self, status, steps, attempt=1):
        events = json.dumps(status.get("events", []), indent=1)
        self.assertEqual(status["state"], "SUCCEEDED", events)
        self.assertEqual(int(status["attempt"]), attempt, events)
        self.assertEqual(int(status["step"]), steps, events)

    def worker_of(self, status, rank):
        return int(status["placement"][rank]["node_name"].rsplit("-", 1)[1])

    def events(self, status, kind):
        return [e["message"] for e in status.get("events", []) if e["kind"] == kind]

    def event_index(self, status, kind, pattern):
        """Index in the job's events of the first `kind` event whose message matches."""
        for i, e in enumerate(status.get("events", [])):
            if e["kind"] == kind and re.search(pattern, e["message"]):
                return i
        self.fail("no %s event matching %r in:\n%s" % (
            kind, pattern, json.dumps(status.get("events", []), indent=1)))

    def starts(self, job):
        """{rank: [(pid, generation, worker), ...]} from every worker's "started rank" lines of
        the job's attempt 1, in the order each worker logged them."""
        out = {}
        for log in sorted(glob.glob(os.path.join(self.cluster.dir, "worker-*", "worker.log"))):
            worker = int(os.path.basename(os.path.dirname(log)).rsplit("-", 1)[1])
            for m in STARTED.finditer(open(log, errors="replace").read()):
                if m.group(3) == job and int(m.group(4)) == 1:
                    out.setdefault(int(m.group(1)), []).append(
                        (int(m.group(5)), int(m.group(6) or 0), worker))
        for r in out:
            out[r].sort(key=lambda t: t[1])  # by generation
        return out

    def rank_files(self, job, name):
        """Paths of `name` (e.g. "rank-3.gen1.log") under any worker's attempt-1 directory."""
        return glob.glob(os.path.join(self.cluster.dir, "worker-*", "jobs", job, "attempt-1",
                                      name))

    def read_rank_file(self, job, name):
        paths = self.rank_files(job, name)
        self.assertEqual(len(paths), 1, "%s: %s" % (name, paths))
        text = ""
        if os.path.exists(paths[0] + ".1"):
            text += open(paths[0] + ".1", errors="replace").read()
        return text + open(paths[0], errors="replace").read()

    def losses(self, job):
        """{step: loss} of rank 0's metrics (its first process, which must never be replaced)."""
        lines = self.read_rank_file(job, "metrics-rank-0.jsonl").splitlines()
        rows = [json.loads(l) for l in lines if l.strip()]
        steps = [int(r["step"]) for r in rows]
        # An aborted step is trained again and written once, when it commits.
        self.assertEqual(steps, sorted(set(steps)), "a step was written twice: %s" % steps)
        return {int(r["step"]): float(r["loss"]) for r in rows}

    def pids_of_ranks(self, status, job, ranks):
        out = {}
        for r in ranks:
            pid = self.cluster.rank_pid(self.worker_of(status, r), job, 1, r)
            self.assertIsNotNone(pid, "no trainer for rank %d" % r)
            out[r] = pid
        return out

    def assert_never_restarted(self, job, pids):
        """Each rank of `pids` was started once in attempt 1, as the process with that pid."""
        starts = self.starts(job)
        for r, pid in pids.items():
            self.assertEqual([t[:2] for t in starts.get(r, [])], [(pid, 0)],
                             "rank %d: %s" % (r, starts.get(r)))

    def all_logs_text(self):
        out = []
        for root, _, files in os.walk(self.cluster.dir):
            for f in files:
                if ".log" in f:
                    out.append(open(os.path.join(root, f), errors="replace").read())
        return "\n".join(out)

    def assert_replacement_healed(self, job, group):
        """Both ranks of the replacement group (generation 1) logged that they healed."""
        starts = self.starts(job)
        for r in range(group * S, (group + 1) * S):
            self.assertEqual([t[1] for t in starts.get(r, [])], [0, 1],
                             "rank %d: %s" % (r, starts.get(r)))
            log = self.read_rank_file(job, "rank-%d.gen1.log" % r)
            m = re.search(r"healed from replica group (\d+) at step (\d+)", log)
            self.assertIsNotNone(m, "rank %d's replacement did not log its heal:\n%s" % (
                r, log[-3000:]))
            self.assertNotEqual(int(m.group(1)), group)

    # ------------------------------------------------------------------ (a) a killed rank

    def test_killed_rank_loses_only_its_group_which_heals_without_a_checkpoint(self):
        steps = HEAL_STEPS
        self.start_cluster(3)
        # No save to read in this job: a checkpoint only costs time.
        sets = ["checkpoint.every_steps=50"]

        # The reference: the same job, uninterrupted.
        ref_job = self.submit(steps, 6, 2, sets=sets)
        self.assert_succeeded(self.wait_end(ref_job), steps)
        ref = self.losses(ref_job)
        self.assertEqual(sorted(ref), list(range(1, steps + 1)))

        job = self.submit(steps, 6, 2, sets=sets)
        status = self.wait_step(job, 10)
        self.assertEqual(int(status["attempt"]), 1)
        survivors = self.pids_of_ranks(status, job, [0, 1, 4, 5])
        victim_rank = 3  # of replica group 1
        victim = self.cluster.rank_pid(self.worker_of(status, victim_rank), job, 1, victim_rank)
        self.assertIsNotNone(victim, "no trainer for rank %d" % victim_rank)
        os.kill(victim, signal.SIGKILL)

        # The survivors keep running while the group is lost and healed: poll their pids
        # until the job ends.
        deadline = time.time() + JOB_TIMEOUT_S
        while time.time() < deadline:
            status = self.cluster.job(job)
            if status.get("state") in ("SUCCEEDED", "FAILED", "CANCELLED"):
                break
            for r, pid in survivors.items():
                now = self.cluster.rank_pid(self.worker_of(status, r), job, 1, r)
                # None once it exited at the end of the job.
                self.assertIn(now, (pid, None), "rank %d was restarted" % r)
            time.sleep(0.5)
        self.assert_succeeded(status, steps)
        self.assertEqual(self.events(status, "RESTARTING"), [])

        lost = self.event_index(status, "REPLICA_GROUP_LOST",
                                r"^replica group 1 \(%s\) lost at step \d+: " % group_ranks(1))
        healed = self.event_index(status, "REPLICA_GROUP_HEALED",
                                  r"^replica group 1 \(%s\) rejoined at step \d+, healed from "
                                  r"group [02]\b" % group_ranks(1))
        self.assertLess(lost, healed)
        fail_step = int(re.search(r"lost at step (\d+)",
                                  status["events"][lost]["message"]).group(1))
        self.assertGreaterEqual(fail_step, 10)
        self.assertEqual(self.events(status, "REPLICAS_DIVERGED"), [])

        self.assert_never_restarted(job, survivors)
        self.assert_replacement_healed(job, 1)
        # The healthy ranks dropped the step the failure hit and trained it again.
        rank0_log = self.read_rank_file(job, "rank-0.log")
        self.assertIn("step %d aborted: " % fail_step, rank0_log)
        # No checkpoint was read by anyone.
        self.assertNotIn("resumed from", self.all_logs_text())

        # Every step up to the failure saw all three groups: the losses are the uninterrupted
        # run's. (After it, steps with two groups average over two replicas, and after the heal
        # over three again, from a state that differs from the reference's.)
        got = self.losses(job)
        self.assertEqual(sorted(got), list(range(1, steps + 1)))
        for step in range(1, fail_step):
            self.assertLessEqual(abs(got[step] - ref[step]), 1e-9 * abs(ref[step]),
                                 "step %d: %r vs %r" % (step, got[step], ref[step]))

    # ------------------------------------------------------------------ (b) a lost worker

    def test_lost_worker_loses_its_group_which_heals_on_the_restarted_worker(self):
        steps = HEAL_STEPS
        self.start_cluster(3)
        job = self.submit(steps, 6, 2, sets=["checkpoint.every_steps=50"])
        status = self.wait_step(job, 10)
        # Shard groups are packed on one node each (coordinator/placement/planner.h): group 2's node.
        worker = self.worker_of(status, 4)
        self.assertEqual(self.worker_of(status, 5), worker, status["placement"])
        survivors = self.pids_of_ranks(status, job, [0, 1, 2, 3])
        daemon = self.cluster.procs["worker-%d" % worker]
        daemon.kill()  # SIGKILL: its trainers die with it (PR_SET_PDEATHSIG)
        daemon.wait()

        status = self.cluster.wait_for(
            job, lambda s: any(e["kind"] == "REPLICA_GROUP_LOST" for e in s.get("events", [])) or
            s.get("state") != "RUNNING", timeout=JOB_TIMEOUT_S, what="REPLICA_GROUP_LOST")
        self.event_index(status, "REPLICA_GROUP_LOST",
                         r"^replica group 2 \(%s\) lost at step \d+: " % group_ranks(2))
        # The other workers' slots are all taken: the replacement waits for this node.
        self.cluster.start_worker(worker, 2, grace_period_s=3)

        status = self.wait_end(job)
        self.assert_succeeded(status, steps)
        lost = self.event_index(status, "REPLICA_GROUP_LOST", r"^replica group 2 ")
        healed = self.event_index(status, "REPLICA_GROUP_HEALED",
                                  r"^replica group 2 \(%s\) rejoined at step \d+, healed from "
                                  r"group [01]\b" % group_ranks(2))
        self.assertLess(lost, healed)
        # The replacement (generation 1) ran on the restarted worker.
        starts = self.starts(job)
        for r in (4, 5):
            self.assertEqual([(t[1], t[2]) for t in starts.get(r, [])],
                             [(0, worker), (1, worker)], "rank %d: %s" % (r, starts.get(r)))
        self.assert_never_restarted(job, survivors)
        self.assert_replacement_healed(job, 2)
        self.assertNotIn("resumed from", self.all_logs_text())

    # ------------------------------------------------------------------ (c) a stalled rank

    def test_stalled_rank_loses_its_group_and_is_killed_while_the_other_trains_on(self):
        steps = 30
        self.start_cluster(2)
        job = self.submit(steps, 4, 1, sets=["fsdp.sharding_strategy=HYBRID_SHARD_ZERO2"])
        status = self.wait_step(job, 6)
        survivors = self.pids_of_ranks(status, job, [0, 1])
        victim_rank = 3
        worker = self.worker_of(status, victim_rank)
        victim = self.cluster.rank_pid(worker, job, 1, victim_rank)
        self.assertIsNotNone(victim)
        os.kill(victim, signal.SIGSTOP)
        try:
            status = self.cluster.wait_for(
                job, lambda s: any(e["kind"] == "REPLICA_GROUP_LOST"
                                   for e in s.get("events", [])) or s.get("state") != "RUNNING",
                timeout=JOB_TIMEOUT_S, what="REPLICA_GROUP_LOST")
            self.event_index(status, "REPLICA_GROUP_LOST",
                             r"^replica group 1 \(%s\) lost at step \d+: " % group_ranks(1))
            # STOP_RANK: SIGTERM stays pending on a stopped process; the SIGKILL after the grace
            # period ends it, and its daemon reaps it.
            deadline = time.time() + 60
            while harness.proc_state(victim) is not None and time.time() < deadline:
                time.sleep(0.1)
            self.assertIsNone(harness.proc_state(victim), "the stalled rank was not stopped")
            expected = "rank %d of %s killed by SIGKILL" % (victim_rank, job)
            log_path = os.path.join(self.cluster.worker_dir(worker), "worker.log")
            deadline = time.time() + 10
            while expected not in open(log_path).read() and time.time() < deadline:
                time.sleep(0.1)
            self.assertIn(expected, open(log_path).read())
        finally:
            if harness.proc_state(victim) is not None:
                os.kill(victim, signal.SIGCONT)

        status = self.wait_end(job)
        self.assert_succeeded(status, steps)
        self.assertEqual(self.events(status, "RESTARTING"), [])
        lost = self.event_index(status, "REPLICA_GROUP_LOST", r"^replica group 1 ")
        # A replacement may or may not rejoin before the last step; if it did, after the loss.
        healed = [i for i, e in enumerate(status["events"])
                  if e["kind"] == "REPLICA_GROUP_HEALED"]
        self.assertTrue(all(i > lost for i in healed), status["events"])
        self.assert_never_restarted(job, survivors)
        self.assertNotIn("resumed from", self.all_logs_text())

    # ------------------------------------------------------------------ (d) below min_replicas

    def test_fewer_groups_than_min_replicas_restart_from_the_checkpoint(self):
        steps = 30
        self.start_cluster(2)
        job = self.submit(steps, 4, 2, extra="restart: {max_restarts: 2, backoff_s: 1}")
        status = self.cluster.wait_for(
            job, lambda s: int(s.get("latest_checkpoint_step", 0)) >= 3 and
            int(s.get("step", 0)) >= 4, timeout=JOB_TIMEOUT_S, what="first committed checkpoint")
        self.assertEqual(int(status["attempt"]), 1)
        victim = self.cluster.rank_pid(self.worker_of(status, 3), job, 1, 3)
        self.assertIsNotNone(victim)
        os.kill(victim, signal.SIGKILL)

        status = self.wait_end(job)
        self.assert_succeeded(status, steps, attempt=2)
        self.assertTrue(self.events(status, "RANK_FAILED"), status["events"])
        self.assertTrue(self.events(status, "RESTARTING"), status["events"])
        self.assertEqual(self.events(status, "REPLICA_GROUP_HEALED"), [])
        starts = [e["message"] for e in status["events"] if e["kind"] == "SCHEDULED"]
        self.assertRegex(" | ".join(starts), r"resuming from checkpoint step \d+")

    # ------------------------------------------------------------------ (e) a writer killed mid-save

    def kill_writer_in_the_save(self, pause_step, pause_rank, sets):
        """Runs a W = 4, S = 2 job of 24 steps saving every 6 on two workers whose trainers
        hold global rank `pause_rank` (a writer of shard 1 of group 0, the writer group) in its
        save of `pause_step` (SHARDLINE_TEST_PAUSE_IN_SAVE: only that rank, so group 1's writer
        does not pause when it saves again), SIGKILLs it there and waits for the job's end.
        Checks what every such run must show (SUCCEEDED in attempt 1, group 0 lost, the
        survivors never restarted) and returns (job, status, committed steps)."""
        steps = 24
        self.cluster = harness.Cluster(workers=0, grace_period_s=3)
        pause = {"SHARDLINE_TEST_PAUSE_IN_SAVE": "%d:1:600:1:%d" % (pause_step, pause_rank)}
        for i in range(2):
            self.cluster.start_worker(i, 2, grace_period_s=3, env=pause)
        self.cluster.wait_for_workers(2)
        job = self.submit(steps, 4, 1,
                          sets=["checkpoint.every_steps=6", "checkpoint.keep_last=0"] + sets)
        status = self.cluster.wait_for(job, lambda s: len(s.get("placement", [])) == 4,
                                       timeout=JOB_TIMEOUT_S, what="placement")
        worker = self.worker_of(status, pause_rank)
        deadline = time.time() + JOB_TIMEOUT_S
        while ("test pause in save: step %d shard 1" % pause_step
               not in self.cluster.rank_log(worker, job, 1, pause_rank)):
            self.assertLess(time.time(), deadline, "rank %d never paused in the save" % pause_rank)
            self.assertEqual(self.cluster.job(job)["state"], "RUNNING")
            time.sleep(0.1)
        survivors = self.pids_of_ranks(status, job, [2, 3])
        victim = self.cluster.rank_pid(worker, job, 1, pause_rank)
        self.assertIsNotNone(victim)
        os.kill(victim, signal.SIGKILL)

        status = self.wait_end(job)
        self.assert_succeeded(status, steps)
        self.assertEqual(self.events(status, "RESTARTING"), [])
        self.assert_never_restarted(job, survivors)
        cps = self.cluster.shardctl_json("checkpoints", job).get("checkpoints", [])
        return job, status, sorted(int(c["step"]) for c in cps if c.get("committed"))

    def manifest_attempt(self, job, step):
        with open(os.path.join(self.cluster.dir, "checkpoints", job, "step_%d" % step,
                               "MANIFEST.json")) as f:
            return int(json.load(f)["attempt"])

    def test_writer_killed_mid_save_the_live_group_saves_that_step_again(self):
        pause_step = 12
        job, status, committed = self.kill_writer_in_the_save(pause_step, 1, [])
        self.event_index(status, "REPLICA_GROUP_LOST",
                         r"^replica group 0 \(%s\) lost at step 1[23]: " % group_ranks(0))
        # Group 1 did the work after step 12 again, the save with it.
        rank2_log = self.read_rank_file(job, "rank-2.log")
        self.assertIn("the work after step %d aborted: " % pause_step, rank2_log)
        self.assertEqual(self.manifest_attempt(job, pause_step), 1)
        self.assertEqual(committed, [6, 12, 18, 24])

    def test_writer_killed_in_an_async_save_the_live_group_saves_the_step_it_retries(self):
        # The pause is in rank 1's background write: its training goes on meanwhile.
        pause_step = 12
        job, status, committed = self.kill_writer_in_the_save(pause_step, 1,
                                                              ["checkpoint.async_save=true"])
        self.event_index(status, "REPLICA_GROUP_LOST",
                         r"^replica group 0 \(%s\) lost at step 1[2-7]: " % group_ranks(0))
        # Group 1 could not know whether group 0's background write of step 12 committed (it
        # did not: rank 1 died before writing its shard), so it saved the step it trained
        # again after the loss, synchronously, as the new writer group.
        rank2_log = self.read_rank_file(job, "rank-2.log")
        m = re.search(r"replica group 0, the writer of the asynchronous save of step %d, was "
                      r"lost: that save may not commit, so step (\d+) is saved" % pause_step,
                      rank2_log)
        self.assertIsNotNone(m, rank2_log[-3000:])
        resaved = int(m.group(1))
        self.assertTrue(pause_step < resaved < 18, resaved)
        self.assertEqual(self.manifest_attempt(job, resaved), 1)
        self.assertEqual(committed, [6, resaved, 18, 24])

if __name__ == "__main__":
    harness.run_tests(__name__)
