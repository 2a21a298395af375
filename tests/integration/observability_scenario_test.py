"""Observability end to end (issue 16 items 1, 2, 5): rank logs, training metrics and TensorBoard
event files of a real job on a real cluster, read the way a user on another machine reads them.

The shardctl processes here run in a directory of their own with a --state_dir that does not
exist, so nothing but the coordinator's API can give them the logs (the workers' files are under
the cluster's directory, which only this test reads, to compare). Runs with the venv's python:
tensorboard's EventAccumulator reads the event files, prometheus_client's parser the /metrics
text, and the Python client's logs() and metrics() are checked against the same job.
"""
import glob
import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

CORPUS = os.path.abspath(os.environ.get("SHARDLINE_CORPUS", "data/tinyshakespeare.txt"))
STEPS = 20
EVAL_EVERY = 5
# Rank 1 sleeps this long before the final sample (and says so in its log, its only line): the
# job is RUNNING with rank 0's step STEPS - 1 reported meanwhile.
PAUSE_S = 8


def write_spec(tmp, tensorboard_dir):
    spec = f"""
name: observed
world_size: 2
model: {{architecture: GPT, preset: tiny, init_seed: 1}}
data: {{path: {CORPUS}, format: TEXT, val_fraction: 0.1, seq_len: 32, shuffle_seed: 3}}
optimizer: {{kind: ADAMW, lr: 0.003, min_lr: 0.0003, warmup_steps: 2}}
fsdp: {{sharding_strategy: FULL_SHARD, collective_timeout_s: 60}}
train: {{steps: {STEPS}, global_batch_size: 4, micro_batch_size: 2, log_every: 1,
        eval_every: {EVAL_EVERY}, eval_batches: 1, seed: 5, deterministic: true, sample_tokens: 8,
        sample_prompt: "ROMEO:", tensorboard_dir: {tensorboard_dir}}}
device: {{kind: CPU, cpu_threads: 1}}
"""
    path = os.path.join(tmp, "job.yaml")
    with open(path, "w") as f:
        f.write(spec)
    return path


def proto_int(v):
    return int(v) if v is not None else 0


class ObservabilityTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.cluster = harness.Cluster(
            workers=0, coordinator_flags=["--metrics_listen=127.0.0.1:0", "--metrics_flush_ms=500"])
        for i in range(2):
            cls.cluster.start_worker(i, 2, env={"SHARDLINE_TEST_PAUSE_IN_SAMPLE": "1:%d" % PAUSE_S})
        cls.cluster.wait_for_workers(2)
        log = open(os.path.join(cls.cluster.dir, "coordinator.log")).read()
        cls.metrics_address = re.search(r"metrics on (\S+)", log).group(1)
        # The CLI's own place: no cluster.json, no worker directories.
        cls.cli_dir = tempfile.mkdtemp(prefix="cli_", dir=os.environ.get("TEST_TMPDIR"))
        cls.tensorboard_dir = os.path.join(cls.cluster.dir, "tensorboard")
        cls.run_job()

    @classmethod
    def tearDownClass(cls):
        cls.cluster.stop()
        print(cls.cluster.logs())

    @classmethod
    def cli(cls, *args, check=True, timeout=120):
        proc = subprocess.run(cls.cli_cmd(*args), capture_output=True, text=True, timeout=timeout,
                              cwd=cls.cli_dir)
        if check and proc.returncode != 0:
            raise AssertionError("shardctl %s exited %d:\n%s%s" % (
                " ".join(args), proc.returncode, proc.stdout, proc.stderr))
        return proc

    @classmethod
    def cli_cmd(cls, *args):
        return [harness.BINARIES.shardctl, "--coordinator=" + cls.cluster.address,
                "--state_dir=" + os.path.join(cls.cli_dir, "no-cluster"),
                "--config=" + os.path.join(cls.cli_dir, "no-config")] + list(args)

    @classmethod
    def run_job(cls):
        """Submits the job and, while it runs, follows its logs, watches it as JSON and reads
        /metrics during rank 0's pause before the final sample."""
        spec = write_spec(cls.cli_dir, cls.tensorboard_dir)
        cls.job = cls.cli("submit", spec).stdout.split()[0]
        cls.follow_lines = []  # (time, line)
        follower = subprocess.Popen(cls.cli_cmd("logs", cls.job, "--follow"), cwd=cls.cli_dir,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        watcher = subprocess.Popen(cls.cli_cmd("watch", cls.job, "--json"), cwd=cls.cli_dir,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

        def read_follower():
            for line in follower.stdout:
                cls.follow_lines.append((time.time(), line.rstrip("\n")))
        reader = threading.Thread(target=read_follower, daemon=True)
        reader.start()
        # During the pause: the job runs, rank 0 has reported steps, its lines reached the CLI.
        cls.during = None
        metrics_text = None
        deadline = time.time() + 240
        while time.time() < deadline and cls.during is None:
            status = cls.cluster.job(cls.job)
            if status.get("state") not in (None, "PENDING", "RUNNING"):
                break
            if proto_int(status.get("step")) >= STEPS - 1:
                if metrics_text is None:
                    metrics_text = urllib.request.urlopen(
                        "http://%s/metrics" % cls.metrics_address, timeout=10).read().decode()
                # Workers ship log lines in batches, so the report of step STEPS - 1 can reach
                # the coordinator before the lines do; the pause leaves PAUSE_S for them.
                if cls.follow_lines:
                    cls.during = {"status": status, "metrics_text": metrics_text,
                                  "follow_lines": len(cls.follow_lines),
                                  "state": cls.cluster.job(cls.job).get("state")}
            time.sleep(0.2)
        if cls.during is None and metrics_text is not None:
            cls.during = {"status": status, "metrics_text": metrics_text, "follow_lines": 0,
                          "state": status.get("state")}
        cls.final = cls.cluster.wait_for(cls.job, lambda s: s.get("state") in (
            "SUCCEEDED", "FAILED", "CANCELLED"), timeout=300, what="job end")
        cls.follow_rc = follower.wait(timeout=60)
        reader.join(timeout=10)
        cls.follow_stderr = follower.stderr.read()
        watch_out, cls.watch_err = watcher.communicate(timeout=60)
        cls.watch_rc = watcher.returncode
        cls.watch_lines = watch_out.splitlines()

    # ------------------------------------------------------------------ helpers

    def rank_file_lines(self, rank):
        """The rank's log as its worker wrote it (rank-N.log.1 then rank-N.log)."""
        paths = glob.glob(os.path.join(self.cluster.dir, "worker-*", "jobs", self.job,
                                       "attempt-1", "rank-%d.log" % rank))
        self.assertEqual(len(paths), 1, paths)
        text = ""
        if os.path.exists(paths[0] + ".1"):
            text += open(paths[0] + ".1", errors="replace").read()
        text += open(paths[0], errors="replace").read()
        return text.splitlines()

    def jsonl(self):
        paths = glob.glob(os.path.join(self.cluster.dir, "worker-*", "jobs", self.job,
                                       "attempt-1", "metrics-rank-0.jsonl"))
        self.assertEqual(len(paths), 1, paths)
        return [json.loads(l) for l in open(paths[0]) if l.strip()]

    @staticmethod
    def strip_label(lines):
        out = []
        for l in lines:
            label, _, text = l.partition("| ")
            out.append((label, text))
        return out

    # ------------------------------------------------------------------ tests

    def test_job_succeeded(self):
        self.assertEqual(self.final["state"], "SUCCEEDED", json.dumps(self.final, indent=1))

    def test_logs_equal_the_workers_files_for_every_rank_without_access_to_them(self):
        for rank in (0, 1):
            proc = self.cli("logs", self.job, "--rank=%d" % rank)
            got = self.strip_label(proc.stdout.splitlines())
            self.assertTrue(all(label == "attempt-1/rank-%d" % rank for label, _ in got), got[:3])
            self.assertEqual([t for _, t in got], self.rank_file_lines(rank))
        both = self.strip_label(self.cli("logs", self.job, "--all").stdout.splitlines())
        self.assertEqual(len(both), len(self.rank_file_lines(0)) + len(self.rank_file_lines(1)))
        self.assertTrue(any("step %d/%d" % (STEPS, STEPS) in t for _, t in both))

    def test_logs_tail_and_since_select(self):
        tail = self.strip_label(self.cli("logs", self.job, "--tail=2").stdout.splitlines())
        # The last two lines of each rank (rank 1 prints few: its FSDP memory line, and the
        # pause line of the sample test; --tail takes what there is).
        self.assertGreaterEqual(len(self.rank_file_lines(0)), 3)
        self.assertEqual(len(tail), sum(min(2, len(self.rank_file_lines(r))) for r in (0, 1)))
        for rank in (0, 1):
            self.assertEqual([t for l, t in tail if l.endswith("rank-%d" % rank)],
                             self.rank_file_lines(rank)[-2:])
        self.assertEqual(self.cli("logs", self.job, "--since=2099-01-01T00:00:00Z").stdout, "")
        hour = self.cli("logs", self.job, "--since=1h").stdout.splitlines()
        self.assertEqual(len(hour), len(self.cli("logs", self.job).stdout.splitlines()))

    def test_follow_streamed_while_the_job_ran_and_ended_with_its_last_lines(self):
        self.assertIsNotNone(self.during, "never saw the job running at its last steps")
        self.assertEqual(self.during["state"], "RUNNING")
        self.assertGreater(self.during["follow_lines"], 0,
                           "logs --follow printed nothing while the job ran")
        self.assertEqual(self.follow_rc, 0, self.follow_stderr)
        self.assertIn("attempt-1/rank-1| test pause in sample: rank 1 for %ds" % PAUSE_S,
                      [l.split(" (")[0] for _, l in self.follow_lines])
        texts = [l.partition("| ")[2] for _, l in self.follow_lines]
        self.assertTrue(any("step %d/%d" % (STEPS, STEPS) in t for t in texts), texts[-5:])
        # Everything the ranks wrote, each line once.
        self.assertEqual(len(texts), len(self.rank_file_lines(0)) + len(self.rank_file_lines(1)))

    def test_watch_json_prints_one_job_status_object_per_line(self):
        self.assertEqual(self.watch_rc, 0, self.watch_err)
        self.assertGreater(len(self.watch_lines), 2)
        statuses = [json.loads(l) for l in self.watch_lines]
        self.assertTrue(all(s["job_id"] == self.job for s in statuses))
        self.assertEqual(statuses[-1]["state"], "SUCCEEDED")
        steps = [proto_int(s.get("step")) for s in statuses]
        self.assertEqual(steps, sorted(steps))

    def test_metrics_series_equals_the_trainers_jsonl(self):
        m = json.loads(self.cli("metrics", self.job, "--json").stdout)
        lines = self.jsonl()
        self.assertEqual(len(lines), STEPS)
        points = m["points"]
        self.assertEqual(len(points), STEPS)
        self.assertEqual(proto_int(m["reported_steps"]), STEPS)
        self.assertEqual(proto_int(m["stride"]), 1)
        self.assertEqual(m["state"], "SUCCEEDED")
        self.assertEqual(len(m["per_rank_peak_memory_bytes"]), 2)
        for p, l in zip(points, lines):
            self.assertEqual(proto_int(p["step"]), l["step"])
            for key in ("loss", "lr", "grad_norm", "tokens_per_s", "mfu", "step_time_s"):
                self.assertAlmostEqual(float(p.get(key, 0)), l[key], delta=1e-12 * abs(l[key]),
                                       msg="%s at step %d" % (key, l["step"]))
            if "val_loss" in l:
                self.assertEqual(proto_int(p.get("val_count")), 1)
                self.assertAlmostEqual(float(p["val_loss"]), l["val_loss"], places=12)
            else:
                self.assertTrue(math.isnan(float(p.get("val_loss", "NaN"))), p)
            self.assertGreaterEqual(proto_int(p["peak_memory_bytes"]), l["peak_memory_bytes"])
        self.assertEqual([proto_int(p["step"]) for p in points if proto_int(p.get("val_count"))],
                         list(range(EVAL_EVERY, STEPS + 1, EVAL_EVERY)))
        text = self.cli("metrics", self.job).stdout
        self.assertIn("%d logged steps in %d points" % (STEPS, STEPS), text)

    def test_prometheus_gauges_of_the_running_job_parse_and_match_its_report(self):
        from prometheus_client.parser import text_string_to_metric_families
        self.assertIsNotNone(self.during, "never saw the job running at its last steps")
        samples = {}
        for family in text_string_to_metric_families(self.during["metrics_text"]):
            for s in family.samples:
                if s.labels.get("job") == self.job:
                    samples[(s.name, s.labels.get("rank"))] = s
        step = int(samples[("shardline_job_step", None)].value)
        self.assertGreaterEqual(step, STEPS - 1)
        self.assertEqual(samples[("shardline_job_step", None)].labels["name"], "observed")
        self.assertEqual(int(samples[("shardline_job_total_steps", None)].value), STEPS)
        line = self.jsonl()[step - 1]
        self.assertEqual(line["step"], step)
        self.assertAlmostEqual(samples[("shardline_job_loss", None)].value, line["loss"],
                               delta=1e-6 * line["loss"])
        self.assertAlmostEqual(samples[("shardline_job_tokens_per_second", None)].value,
                               line["tokens_per_s"], delta=1e-6 * line["tokens_per_s"])
        self.assertAlmostEqual(samples[("shardline_job_mfu", None)].value, line["mfu"],
                               delta=1e-6 * line["mfu"])
        self.assertIn(("shardline_job_eta_seconds", None), samples)
        self.assertIn(("shardline_job_peak_memory_bytes", "0"), samples)
        self.assertIn(("shardline_job_peak_memory_bytes", "1"), samples)

    def test_tensorboard_scalars_equal_the_trainers_jsonl(self):
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
        run = os.path.join(self.tensorboard_dir, self.job)
        self.assertTrue(glob.glob(os.path.join(run, "events.out.tfevents.*")), run)
        acc = EventAccumulator(run, size_guidance={"scalars": 0})
        acc.Reload()
        lines = self.jsonl()
        self.assertEqual(sorted(acc.Tags()["scalars"]),
                         ["grad_norm", "loss", "lr", "tokens_per_s", "val_loss"])
        for tag in ("loss", "lr", "grad_norm", "tokens_per_s"):
            events = acc.Scalars(tag)
            self.assertEqual([e.step for e in events], [l["step"] for l in lines], tag)
            # The event file has the value as float32, the JSON line with 6 significant digits
            # (trainer/metrics.cc): they agree to 1e-5 relative.
            for e, l in zip(events, lines):
                self.assertAlmostEqual(e.value, l[tag], delta=1e-5 * abs(l[tag]) + 1e-30, msg=tag)
        val = acc.Scalars("val_loss")
        self.assertEqual([e.step for e in val], [l["step"] for l in lines if "val_loss" in l])
        for e, l in zip(val, [l for l in lines if "val_loss" in l]):
            self.assertAlmostEqual(e.value, l["val_loss"], delta=1e-5 * l["val_loss"])

    def test_python_client_logs_and_metrics(self):
        shardline = harness.import_shardline()
        with shardline.Client(self.cluster.address, token="", state_dir=self.cli_dir,
                              config=os.path.join(self.cli_dir, "no-config")) as client:
            lines = list(client.logs(self.job, rank=1))
            self.assertEqual([l.text for l in lines], self.rank_file_lines(1))
            self.assertTrue(all(l.rank == 1 and l.attempt == 1 for l in lines))
            tail = list(client.logs(self.job, tail=1))
            self.assertEqual(sorted(l.rank for l in tail), [0, 1])
            self.assertEqual(tail[-1].text if tail[-1].rank == 0 else tail[0].text,
                             self.rank_file_lines(0)[-1])
            followed = list(client.logs(self.job, follow=True, poll_interval=0.1))
            self.assertEqual(len(followed), len(self.rank_file_lines(0)) +
                             len(self.rank_file_lines(1)))
            m = client.metrics(self.job)
            self.assertEqual(len(m.points), STEPS)
            self.assertEqual([p.step for p in m.points], list(range(1, STEPS + 1)))
            self.assertEqual(m.latest.step, STEPS)
            self.assertEqual(len(client.metrics(self.job, after_step=STEPS - 3).points), 3)
            with self.assertRaises(shardline.NotFoundError):
                client.metrics("job-424242")

    def test_zz_metrics_survive_a_coordinator_killed_with_sigkill(self):
        # Runs last (name order): the coordinator comes back on another port.
        before = json.loads(self.cli("metrics", self.job, "--json").stdout)
        time.sleep(1.5)  # > --metrics_flush_ms: the batched write is due and queued
        self.cluster.procs["coordinator"].send_signal(signal.SIGKILL)
        self.cluster.procs["coordinator"].wait()
        self.cluster.start_coordinator("127.0.0.1:0")
        after = json.loads(self.cli("metrics", self.job, "--json").stdout)
        self.assertEqual(after["points"], before["points"])
        self.assertEqual(after["latest"], before["latest"])
        self.assertEqual(after["reported_steps"], before["reported_steps"])


if __name__ == "__main__":
    harness.run_tests(__name__)
