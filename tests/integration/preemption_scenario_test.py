"""Issue 33 item 1 on a real cluster: a high-priority job preempts a low one through a checkpoint.

Two nodes of 2 slots. A low-priority W = 4 HYBRID_SHARD(2) job (checkpoints every 50 steps) is
training when a priority-5 W = 2 job is submitted: the coordinator asks the low job to save a
checkpoint at its next step and stop (PREEMPTING, naming the high job), its four trainers agree
on that step, save it, and the commit requeues the job (PREEMPTED). The high job runs in the
freed slots and succeeds; the low job then resumes from the preemption's checkpoint: its first
attempt trained no step past it and its second starts right after it (steps recomputed: 0), no
restart is counted, and its per-step losses equal an undisturbed run of the same spec.
"""
import glob
import json
import os
import re
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster_test  # noqa: E402
import harness  # noqa: E402

STEPS = 200
RTOL, ATOL = 1e-5, 1.2e-5  # two roundings to 6 significant digits (elastic_grow_scenario_test)


def series(cluster, job):
    """{step: loss} of the coordinator's series (the last attempt's value per step)."""
    out = {}
    for p in cluster.shardctl_json("metrics", job).get("points", []):
        if int(p.get("count", 1)) == 1:
            out.setdefault(int(p["step"]), []).append((int(p.get("attempt", 0)), float(p["loss"])))
    return {s: sorted(v)[-1][1] for s, v in out.items()}


def attempt_steps(cluster, job):
    """{attempt: [steps]} from rank 0's metrics file of each attempt, wherever it ran."""
    out = {}
    for path in glob.glob(os.path.join(cluster.dir, "worker-*", "jobs", job, "attempt-*",
                                       "metrics-rank-0.jsonl")):
        attempt = int(os.path.basename(os.path.dirname(path)).split("-", 1)[1])
        for line in open(path, errors="replace"):
            try:
                out.setdefault(attempt, []).append(int(json.loads(line)["step"]))
            except ValueError:
                continue
    return {a: sorted(s) for a, s in out.items()}


class PreemptionTest(unittest.TestCase):
    def setUp(self):
        self.cluster = harness.Cluster(workers=2, slots=2, grace_period_s=3)

    def tearDown(self):
        self.cluster.stop()
        print(self.cluster.logs())

    def test_a_high_priority_job_preempts_a_low_one_through_its_checkpoint(self):
        spec = cluster_test.write_spec(os.path.join(self.cluster.dir, "checkpoints"),
                                       steps=STEPS, world_size=4, degree=2)
        with open(spec) as f:
            text = f.read()
        # Periodic checkpoints far apart: the one the job resumes from is the preemption's.
        text = text.replace("every_steps: 3, keep_last: 2", "every_steps: 50, keep_last: 3")
        text = text.replace("lr: 0.003, min_lr: 0.003", "lr: 0.001, min_lr: 0.001")
        with open(spec, "w") as f:
            f.write(text)
        low = self.cluster.shardctl("submit", spec, "--set", "name=low").stdout.split()[0]
        self.cluster.wait_for(low, lambda s: int(s.get("step", 0)) >= 10, timeout=180,
                              what="low job at step 10")
        high = self.cluster.shardctl(
            "submit", spec, "--set", "name=high", "--set", "priority=5", "--set", "world_size=2",
            "--set", "train.global_batch_size=4", "--set", "train.steps=20").stdout.split()[0]
        st = self.cluster.wait_for(high, lambda s: s.get("state") in ("SUCCEEDED", "FAILED"),
                                   timeout=240, what="the high job's end")
        self.assertEqual(st["state"], "SUCCEEDED", json.dumps(st["events"], indent=1))
        st = self.cluster.wait_for(low, lambda s: s.get("state") in ("SUCCEEDED", "FAILED"),
                                   timeout=300, what="the low job's end")
        events = json.dumps(st["events"], indent=1)
        self.assertEqual(st["state"], "SUCCEEDED", events)
        self.assertEqual(int(st["attempt"]), 2, events)
        self.assertEqual(sum(e["kind"] == "RESTARTING" for e in st["events"]), 0, events)
        preempting = [e["message"] for e in st["events"] if e["kind"] == "PREEMPTING"]
        self.assertEqual(preempting, [
            "job %s (priority 5) needs the slots of this job (priority 0): saving a checkpoint "
            "at the next step, then requeued to resume from it" % high], events)
        preempted = [e["message"] for e in st["events"] if e["kind"] == "PREEMPTED"]
        self.assertEqual(len(preempted), 1, events)
        m = re.fullmatch(r"preempted by job %s: checkpoint step (\d+) committed; requeued, "
                         r"resumes from it when slots free" % re.escape(high), preempted[0])
        self.assertIsNotNone(m, preempted[0])
        saved = int(m.group(1))
        self.assertGreater(saved, 10)
        self.assertLess(saved, STEPS)
        scheduled = [e["message"] for e in st["events"] if e["kind"] == "SCHEDULED"]
        self.assertTrue(scheduled[-1].endswith("resuming from checkpoint step %d" % saved),
                        scheduled)
        # The high job started only once the low one had stopped.
        high_st = self.cluster.job(high)
        self.assertTrue(any(e["kind"] == "SCHEDULED" for e in high_st["events"]))
        # Steps recomputed: 0. Attempt 1 trained up to the saved step and no further; attempt 2
        # started right after it.
        steps = attempt_steps(self.cluster, low)
        self.assertEqual(sorted(steps), [1, 2], steps.keys())
        self.assertEqual(steps[1][-1], saved, "attempt 1 trained past the preemption's step")
        self.assertEqual(steps[2][0], saved + 1)
        self.assertEqual(steps[1] + steps[2], list(range(1, STEPS + 1)))

        # The undisturbed run: the same spec again, alone.
        ref = self.cluster.shardctl("submit", spec, "--set", "name=undisturbed").stdout.split()[0]
        ref_st = self.cluster.wait_for(ref, lambda s: s.get("state") in ("SUCCEEDED", "FAILED"),
                                       timeout=300, what="the undisturbed run's end")
        self.assertEqual(ref_st["state"], "SUCCEEDED")
        want, got = series(self.cluster, ref), series(self.cluster, low)
        self.assertEqual(sorted(got), list(range(1, STEPS + 1)))
        bad = ["step %d: %.6g vs %.6g" % (s, got[s], want[s]) for s in sorted(got)
               if abs(got[s] - want[s]) > RTOL * abs(want[s]) + ATOL]
        self.assertEqual(bad, [], "the preempted job's losses differ from an undisturbed run's")


if __name__ == "__main__":
    harness.run_tests(__name__)
