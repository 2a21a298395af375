"""End-to-end tests of the cluster: a real coordinator, real worker daemons and real trainer
processes on loopback, driven through shardctl (issue: worker daemon + CLI)."""
import json
import os
import signal
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

CORPUS = os.path.abspath(os.environ.get("SHARDLINE_CORPUS", "data/tinyshakespeare.txt"))


def write_spec(ckpt_root, steps, world_size=4, degree=2, log_every=1, extra=""):
    spec = f"""
name: it-tiny
world_size: {world_size}
model: {{architecture: GPT, preset: tiny, init_seed: 1}}
data: {{path: {CORPUS}, format: TEXT, val_fraction: 0.1, seq_len: 32, shuffle_seed: 3}}
optimizer: {{kind: ADAMW, lr: 0.003, min_lr: 0.003, warmup_steps: 0}}
fsdp: {{sharding_strategy: HYBRID_SHARD, hybrid_shard_degree: {degree}, collective_timeout_s: 60}}
train: {{steps: {steps}, global_batch_size: {world_size * 2}, micro_batch_size: 2, log_every: {log_every},
        eval_every: 0, eval_batches: 2, seed: 5, deterministic: true, sample_tokens: 40,
        sample_prompt: "ROMEO:"}}
device: {{kind: CPU, cpu_threads: 1}}
checkpoint: {{dir: {ckpt_root}, every_steps: 3, keep_last: 2, save_final: true}}
{extra}
"""
    fd, path = tempfile.mkstemp(suffix=".yaml", dir=os.environ.get("TEST_TMPDIR"))
    with os.fdopen(fd, "w") as f:
        f.write(spec)
    return path


class ClusterTest(unittest.TestCase):
    def setUp(self):
        self.cluster = harness.Cluster(workers=2, slots=2, grace_period_s=3)

    def tearDown(self):
        self.cluster.stop()
        # Bazel shows a test's output only when it fails: then these logs explain why.
        print(self.cluster.logs())

    def spec(self, **kwargs):
        # Checkpoints under this test's cluster's directory, removed with it.
        return write_spec(os.path.join(self.cluster.dir, "checkpoints"), **kwargs)

    def submit(self, spec, *args):
        proc = self.cluster.shardctl("submit", spec, *args)
        return proc.stdout.strip().splitlines()[0]

    def test_submit_runs_to_success_with_progress_and_sample(self):
        job = self.submit(self.spec(steps=6))
        status = self.cluster.wait_for(job, lambda s: s.get("state") in ("SUCCEEDED", "FAILED"),
                                       timeout=300, what="job end")
        self.assertEqual(status["state"], "SUCCEEDED", json.dumps(status, indent=1))
        self.assertEqual(int(status["step"]), 6)
        self.assertEqual(int(status["total_steps"]), 6)
        self.assertGreater(status["loss"], 0.0)
        self.assertTrue(any("2 shard group(s) of 2" in e.get("message", "")
                            for e in status["events"]), status["events"])
        self.assertIn("ROMEO:", status.get("sample", ""))
        self.assertEqual(self.cluster.trainer_pids(), [])
        # Checkpoints: every 3 steps, keep 2, in the job's own directory; the final one exports.
        cps = self.cluster.shardctl_json("checkpoints", job)["checkpoints"]
        committed = sorted(int(c["step"]) for c in cps if c.get("committed"))
        self.assertEqual(committed, [3, 6], cps)
        # The trainer puts each job's checkpoints in <checkpoint.dir>/<job id>.
        job_root = os.path.join(self.cluster.dir, "checkpoints", job)
        self.assertTrue(all(c["path"].startswith(job_root) for c in cps), cps)
        self.assertTrue(os.path.exists(os.path.join(job_root, "step_6", "MANIFEST.json")))
        out = os.path.join(self.cluster.dir, "model.safetensors")
        self.cluster.shardctl("export", job, "--out=" + out)
        with open(out, "rb") as f:
            header_len = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(header_len))
        self.assertEqual(header["__metadata__"]["step"], "6")
        names = [k for k in header if k != "__metadata__"]
        self.assertGreater(len(names), 4, names)
        self.assertTrue(all(header[n]["dtype"] == "F32" for n in names), header)

    def test_watch_prints_progress_lines_and_exits_zero(self):
        job = self.submit(self.spec(steps=4))
        proc = self.cluster.shardctl("watch", job, timeout=300)
        self.assertIn("step 4/4", proc.stdout)
        self.assertIn("SUCCEEDED", proc.stdout)
        # Into a pipe each progress line is printed once, events or not (an event used to make
        # the line before it print again).
        lines = [l for l in proc.stdout.splitlines()
                 if l.split(" ", 1)[0] in ("PENDING", "RUNNING", "SUCCEEDED")]
        self.assertEqual(len(lines), len(set(lines)), proc.stdout)

    def test_cancel_stops_every_trainer_within_the_grace_period(self):
        job = self.submit(self.spec(steps=100000))
        self.cluster.wait_for(job, lambda s: int(s.get("step", 0)) >= 1, timeout=300,
                              what="first step")
        self.assertEqual(len(self.cluster.trainer_pids()), 4)
        status = self.cluster.job(job)
        self.assertEqual(len(status["placement"]), 4)
        # Each shard group of 2 is packed onto one node.
        nodes_by_group = {}
        for p in status["placement"]:
            nodes_by_group.setdefault(p.get("shard_group", 0), set()).add(p["node_name"])
        self.assertEqual(len(nodes_by_group), 2, status["placement"])
        self.assertTrue(all(len(n) == 1 for n in nodes_by_group.values()), status["placement"])
        started = time.time()
        self.cluster.shardctl("cancel", job)
        while self.cluster.trainer_pids() and time.time() - started < 3 + 5:
            time.sleep(0.1)
        self.assertEqual(self.cluster.trainer_pids(), [], "trainers outlived the grace period")
        status = self.cluster.wait_for(job, lambda s: s.get("state") == "CANCELLED", timeout=30,
                                       what="CANCELLED")
        self.assertEqual(status["state"], "CANCELLED")

    def test_killed_worker_daemon_leaves_no_trainer_behind(self):
        job = self.submit(self.spec(steps=100000))
        self.cluster.wait_for(job, lambda s: int(s.get("step", 0)) >= 1, timeout=300,
                              what="first step")
        worker0_dir = self.cluster.worker_dir(0)
        self.assertEqual(len(harness.pids_of(worker0_dir + "/jobs")), 2)
        self.cluster.procs["worker-0"].send_signal(signal.SIGKILL)
        self.cluster.procs["worker-0"].wait()
        deadline = time.time() + 5
        while harness.pids_of(worker0_dir + "/jobs") and time.time() < deadline:
            time.sleep(0.05)
        self.assertEqual(harness.pids_of(worker0_dir + "/jobs"), [])
        self.cluster.shardctl("cancel", job)

    def test_json_output_carries_what_the_text_shows(self):
        job = self.submit(self.spec(steps=2))
        self.cluster.wait_for(job, lambda s: s.get("state") == "SUCCEEDED", timeout=300,
                              what="SUCCEEDED")
        text = self.cluster.shardctl("status", job).stdout
        status = self.cluster.job(job)
        self.assertIn(status["job_id"], text)
        self.assertIn(status["state"], text)
        self.assertIn("step %s/%s" % (status["step"], status["total_steps"]), text)
        jobs = self.cluster.shardctl_json("list")["jobs"]
        self.assertIn(job, [j["job_id"] for j in jobs])
        workers = self.cluster.shardctl_json("workers")["workers"]
        self.assertEqual(sorted(w["node_name"] for w in workers), ["node-0", "node-1"])
        self.assertIn("node-0", self.cluster.shardctl("workers").stdout)
        checkpoints = self.cluster.shardctl_json("checkpoints", job)
        self.assertIsInstance(checkpoints.get("checkpoints", []), list)

    def test_bad_spec_is_refused_locally_naming_the_field(self):
        proc = self.cluster.shardctl("submit", self.spec(steps=2),
                                     "--set", "fsdp.hybrid_shard_degree=3", check=False)
        self.assertEqual(proc.returncode, 3, proc.stderr)
        self.assertIn("fsdp.hybrid_shard_degree", proc.stderr)
        self.assertIn("3", proc.stderr)
        # The coordinator keeps serving.
        self.assertEqual(len(self.cluster.shardctl_json("workers")["workers"]), 2)


if __name__ == "__main__":
    harness.run_tests(__name__)
