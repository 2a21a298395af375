"""End-to-end tests of the Python client (python/shardline, issue 17) against a real local
cluster: coordinator, worker daemons and trainers on loopback, started by harness.py.

Runs with the project venv's python (run_venv_python.sh: it has grpcio and grpcio-tools). The
package is imported from python/ in the runfiles, with its gRPC stubs generated from proto/ into
a temporary copy first, exactly as `pip install ./python` generates them.
"""
import json
import math
import os
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

CORPUS = os.path.abspath(os.environ.get("SHARDLINE_CORPUS", "data/tinyshakespeare.txt"))
TOKEN = "python-client-test-token"


shardline = None


def small_job(name, steps, checkpoint_dir, **train):
    """A spec as a user writes it: a preset, and optimizer, fsdp and most of train left out."""
    return {
        "name": name,
        "world_size": 2,
        "model": {"preset": "tiny"},
        "data": {"path": CORPUS, "seq_len": 32},
        "train": dict({"steps": steps, "micro_batch_size": 2, "eval_batches": 1}, **train),
        "device": {"cpu_threads": 1},
        "checkpoint": {"dir": checkpoint_dir, "every_steps": 2, "save_final": True},
    }


class PythonClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        global shardline
        shardline = harness.import_shardline()
        # The coordinator refuses calls without the token; workers join with it (on loopback the
        # worker token defaults to the user token) and the harness's shardctl calls send it from
        # the environment. The daemons keep both variables from their trainers.
        os.environ["SHARDLINE_TOKEN"] = TOKEN
        os.environ["SHARDLINE_JOIN_TOKEN"] = TOKEN
        cls.cluster = harness.Cluster(workers=2, slots=2, grace_period_s=3,
                                      coordinator_flags=["--token=" + TOKEN,
                                                         # Every list below takes several pages.
                                                         "--max_list_page_size=3",
                                                         # A cluster that will grow: a 64-rank
                                                         # job is taken, and waits.
                                                         "--max_world_size=64"])
        cls.client = shardline.Client(address=cls.cluster.address, timeout=30,
                                      shardctl=harness.BINARIES.shardctl)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.cluster.stop()
        # Bazel shows a test's output only when it fails: then these logs explain why.
        print(cls.cluster.logs())

    def test_submit_dict_with_preset_and_defaults_watches_to_success_with_manifests(self):
        ckpt = os.path.join(self.cluster.dir, "ckpt-success")
        job = self.client.submit(small_job("py-success", 4, ckpt), overrides=["train.seed=7"])
        resolved = self.client.get(job).spec  # the coordinator resolved preset and defaults
        self.assertEqual(resolved.model.n_embd, 64)
        self.assertEqual(resolved.model.architecture, shardline.JobSpec().model.GPT)
        self.assertEqual(resolved.optimizer.eps, 1e-8)
        self.assertEqual(resolved.train.seed, 7)
        self.assertEqual(resolved.train.global_batch_size, 4)  # micro_batch_size * world_size
        self.assertEqual(resolved.checkpoint.dir, ckpt)

        updates = list(self.client.watch(job, timeout=300))
        final = updates[-1]
        self.assertEqual(shardline.state_name(final), "SUCCEEDED", final.message)
        self.assertEqual(final.step, 4)
        steps = [u.step for u in updates]
        self.assertEqual(steps, sorted(steps))
        losses = [u.loss for u in updates if u.step > 0]
        self.assertTrue(losses and all(math.isfinite(l) and l > 0 for l in losses), losses)
        self.assertIn(job, [j.job_id for j in self.client.list(["SUCCEEDED"])])

        checkpoints = self.client.checkpoints(job)
        committed = [c for c in checkpoints if c.committed]
        self.assertEqual([c.step for c in committed][-1], 4)
        for c in committed:
            self.assertEqual(c.manifest.step, c.step)
            self.assertEqual(c.manifest.world_size, 2)
            self.assertTrue(c.manifest.tensors, "manifest lists no tensors")
            self.assertTrue(c.info.path.startswith(ckpt), c.info.path)

        out = os.path.join(self.cluster.dir, "model.safetensors")
        self.assertEqual(self.client.export(job, None, out), out)
        self.assertGreater(os.path.getsize(out), 0)
        with self.assertRaises(shardline.NotFoundError) as cm:
            self.client.export(job, 3, out)  # only even steps were saved
        self.assertIn("no committed checkpoint at step 3", cm.exception.message)
        # Without shardctl= (nor $SHARDLINE_SHARDCTL, nor one on PATH), from a directory holding
        # a build's bazel-bin/cli/shardctl, as the repository root does: the README's example.
        root = os.path.join(self.cluster.dir, "repo")
        os.makedirs(os.path.join(root, "bazel-bin", "cli"), exist_ok=True)
        os.symlink(harness.BINARIES.shardctl, os.path.join(root, "bazel-bin", "cli", "shardctl"))
        cwd, path = os.getcwd(), os.environ.get("PATH", "")
        saved = os.environ.pop("SHARDLINE_SHARDCTL", None)
        try:
            os.chdir(root)
            os.environ["PATH"] = "/usr/bin:/bin"
            with shardline.Client(address=self.cluster.address, timeout=30) as plain:
                self.assertEqual(plain.export(job, None, "from_root.safetensors"),
                                 "from_root.safetensors")
            self.assertGreater(os.path.getsize(os.path.join(root, "from_root.safetensors")), 0)
        finally:
            os.chdir(cwd)
            os.environ["PATH"] = path
            if saved is not None:
                os.environ["SHARDLINE_SHARDCTL"] = saved

    def test_coordinator_resolves_a_spec_file_exactly_as_shardctl_dry_run(self):
        # One implementation (spec::LoadJobSpecText) behind both: the same file and overrides give
        # the same resolved spec, relative paths taken against the file's directory by both.
        spec_dir = tempfile.mkdtemp(dir=self.cluster.dir)
        os.symlink(CORPUS, os.path.join(spec_dir, "corpus.txt"))
        path = os.path.join(spec_dir, "job.yaml")
        with open(path, "w") as f:
            f.write("name: py-file\nworld_size: 2\nmodel: {preset: tiny}\n"
                    "data: {path: corpus.txt, seq_len: 32}\n"
                    "train: {steps: 2, micro_batch_size: 2, eval_batches: 1}\n"
                    "device: {cpu_threads: 1}\ncheckpoint: {dir: ckpt}\n")
        overrides = ["optimizer.lr=1e-3", "optimizer.grad_clip=0"]
        jobs_before = len(self.client.list())
        dry = self.cluster.shardctl("submit", path, "--dry_run", "--json",
                                    *["--set=" + o for o in overrides])
        self.assertEqual(len(self.client.list()), jobs_before, "--dry_run submitted a job")
        job = self.client.submit(path, overrides=overrides)
        from google.protobuf import json_format
        resolved = json_format.MessageToDict(self.client.get(job).spec,
                                             preserving_proto_field_name=True)
        self.assertEqual(resolved, json.loads(dry.stdout))
        self.assertEqual(resolved["data"]["path"], os.path.join(spec_dir, "corpus.txt"))
        self.assertEqual(resolved["checkpoint"]["dir"], os.path.join(spec_dir, "ckpt"))
        self.assertNotIn("grad_clip", resolved["optimizer"])  # the explicit 0 was kept
        self.assertEqual(shardline.state_name(self.client.wait(job, timeout=300)), "SUCCEEDED")

    def test_cancel_ends_a_running_job_cancelled(self):
        job = self.client.submit(small_job("py-cancel", 100000,
                                           os.path.join(self.cluster.dir, "ckpt-cancel")))
        for status in self.client.watch(job, timeout=120):
            if status.state == shardline.RUNNING:
                break
        self.client.cancel(job, reason="test cancels it")
        final = self.client.wait(job, timeout=120)
        self.assertEqual(shardline.state_name(final), "CANCELLED")
        self.assertIn("test cancels it", final.message)
        # --token is the admin user "admin", who submitted (owns) the job.
        self.assertEqual(final.owner, "admin")
        with self.assertRaises(shardline.FailedPreconditionError):
            self.client.cancel(job)

    def test_bad_spec_raises_invalid_spec_naming_the_field(self):
        spec = small_job("py-bad", 2, os.path.join(self.cluster.dir, "ckpt-bad"))
        spec["model"]["n_head"] = 5
        with self.assertRaises(shardline.InvalidSpecError) as cm:
            self.client.submit(spec)
        self.assertEqual(cm.exception.code.name, "INVALID_ARGUMENT")
        self.assertIn("model.n_embd: 64 is not divisible by model.n_head 5", cm.exception.message)

        with self.assertRaises(shardline.InvalidSpecError) as cm:
            self.client.submit(small_job("py-bad", 2, "ckpt"), overrides=["optimizer.lr=-1"])
        self.assertIn("optimizer.lr: -1", cm.exception.message)

        with self.assertRaises(shardline.InvalidSpecError) as cm:
            self.client.submit({"model": {"preset": "huge"}, "data": {"path": CORPUS}})
        self.assertIn("huge", cm.exception.message)

    def test_relative_path_without_base_dir_is_refused_naming_the_field(self):
        # The client always sends a base_dir; a raw request without one must not be resolved
        # against the coordinator's working directory.
        from shardline._proto import coordinator_pb2
        request = coordinator_pb2.SubmitJobRequest(
            spec_text="model: {preset: tiny}\ndata: {path: corpus.txt}\n")
        with self.assertRaises(shardline.InvalidSpecError) as cm:
            self.client._call(self.client._stub.SubmitJob, request)
        self.assertIn('data.path: relative path "corpus.txt"', cm.exception.message)

    def test_resolved_jobspec_message_is_sent_as_is_and_gets_no_defaults(self):
        # The old SubmitJob form: a JobSpec is taken as resolved, so a bare one fails validation
        # (first by the scheduling checks: no sharding strategy was defaulted).
        spec = shardline.JobSpec(name="py-old", world_size=1)
        spec.model.preset = "tiny"
        with self.assertRaises(shardline.InvalidSpecError) as cm:
            self.client.submit(spec)
        self.assertIn("fsdp.sharding_strategy: SHARDING_STRATEGY_UNSPECIFIED is not a strategy",
                      cm.exception.message)
        spec.fsdp.sharding_strategy = spec.fsdp.FULL_SHARD
        with self.assertRaises(shardline.InvalidSpecError) as cm:
            self.client.submit(spec)
        self.assertIn("model.n_embd: 0 must be positive", cm.exception.message)

    def test_wrong_token_raises_unauthenticated(self):
        with shardline.Client(address=self.cluster.address, token="wrong") as bad:
            with self.assertRaises(shardline.UnauthenticatedError) as cm:
                bad.list()
            self.assertEqual(cm.exception.code.name, "UNAUTHENTICATED")
            with self.assertRaises(shardline.UnauthenticatedError):
                bad.submit(small_job("py-intruder", 2, "ckpt"))
        self.assertNotIn("py-intruder", [j.spec.name for j in self.client.list()])

    def test_whoami_names_the_token_user(self):
        me = self.client.whoami()
        self.assertEqual((me.user, me.admin, me.credential), ("admin", True, "user token"))
        with shardline.Client(address=self.cluster.address, token="wrong") as bad:
            with self.assertRaises(shardline.UnauthenticatedError) as cm:
                bad.whoami()
            self.assertIn("wrong token", cm.exception.message)

    def test_list_pages_through_every_job_and_refuses_a_page_over_the_max(self):
        spec = small_job("py-page", 2, os.path.join(self.cluster.dir, "ckpt-page"))
        spec["world_size"] = 64  # never fits: stays PENDING
        jobs = [self.client.submit(spec) for _ in range(8)]
        try:
            listed = [j.job_id for j in self.client.list(["PENDING"])]
            self.assertEqual([j for j in listed if j in jobs], jobs)  # all, in submission order
            self.assertEqual(len(set(listed)), len(listed))
            shown = self.cluster.shardctl("list").stdout
            for job in jobs:
                self.assertIn(job, shown)
            from shardline._proto import coordinator_pb2
            with self.assertRaises(shardline.ShardlineError) as cm:
                self.client._call(self.client._stub.ListJobs,
                                  coordinator_pb2.ListJobsRequest(page_size=4))
            self.assertIn("page_size 4 is not in [0, 3] (--max_list_page_size)",
                          str(cm.exception))
        finally:
            for job in jobs:
                self.client.cancel(job)

    def test_workers_lists_the_alive_workers_and_their_slots(self):
        workers = self.client.workers()
        self.assertEqual(sorted(w.node_name for w in workers), ["node-0", "node-1"])
        self.assertTrue(all(len(w.slots) == 2 for w in workers))

    def test_unknown_job_raises_not_found(self):
        with self.assertRaises(shardline.NotFoundError):
            self.client.get("job-does-not-exist")


if __name__ == "__main__":
    harness.run_tests(__name__)
