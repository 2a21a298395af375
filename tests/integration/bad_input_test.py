"""Bad input against a real cluster: a coordinator with a user token and a worker join token, one
real worker daemon, and a real job that ran to SUCCEEDED with committed checkpoints.

Then, row by row, malformed job specs and requests go in through shardctl (each with its exit
code and a message substring naming the field, file or value), and raw gRPC requests that bypass
shardctl's local checks go in through bad_input_raw_test (C++). After every row the coordinator
must still serve; at the end the finished job's checkpoint files are byte-for-byte what they were
and its status and history are unchanged.

shardctl exit codes (cli/shardctl_main.cc): 2 usage, 3 invalid spec (INVALID_ARGUMENT), 4
unreachable, 5 not found, 6 unauthenticated/permission denied, 7 other.
"""
import json
import os
import socket
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

CORPUS = os.path.abspath(os.environ.get("SHARDLINE_CORPUS", "data/tinyshakespeare.txt"))
USER_TOKEN = "bad-input-user-token"
WORKER_TOKEN = "bad-input-join-token"


def raw_client_path():
    for a in sys.argv[1:]:
        if a.startswith("raw="):
            return os.path.abspath(a[len("raw="):])
    raise RuntimeError("no raw=PATH argument (the bad_input_raw_test binary)")


class TokenCluster(harness.Cluster):
    """harness.Cluster with a user token and a worker join token (the harness starts an open
    coordinator). Same processes and flags otherwise."""

    def __init__(self, **kwargs):
        super().__init__(coordinator_flags=["--token=" + USER_TOKEN,
                                            "--worker_token=" + WORKER_TOKEN], **kwargs)

    def start_worker(self, i, slots, grace_period_s=5, **kwargs):
        env = dict(kwargs.pop("env", None) or {}, SHARDLINE_JOIN_TOKEN=WORKER_TOKEN)
        super().start_worker(i, slots, grace_period_s, env=env, **kwargs)

    def shardctl(self, *args, timeout=120, check=True, token=USER_TOKEN):
        """shardctl against this cluster; token=None sends none. The config file and local
        cluster lookups are pointed at empty places so nothing but these flags counts."""
        cmd = [harness.BINARIES.shardctl, "--coordinator=" + self.address,
               "--config=" + os.path.join(self.dir, "no-config"),
               "--state_dir=" + os.path.join(self.dir, "no-local-cluster")]
        if token is not None:
            cmd.append("--token=" + token)
        env = dict(os.environ)
        env.pop("SHARDLINE_TOKEN", None)
        env.pop("SHARDLINE_COORDINATOR", None)
        proc = subprocess.run(cmd + list(args), capture_output=True, text=True, timeout=timeout,
                              env=env)
        if check and proc.returncode != 0:
            raise AssertionError("shardctl %s exited %d:\n%s%s" % (
                " ".join(args), proc.returncode, proc.stdout, proc.stderr))
        return proc


BASE_SPEC = """name: bad-input-ref
world_size: 2
model: {{architecture: GPT, preset: tiny, init_seed: 1}}
data: {{path: {corpus}, format: TEXT, val_fraction: 0.1, seq_len: 32, shuffle_seed: 3}}
optimizer: {{kind: ADAMW, lr: 0.003, min_lr: 0.003, warmup_steps: 0}}
fsdp: {{sharding_strategy: FULL_SHARD, collective_timeout_s: 60}}
train: {{steps: 4, global_batch_size: 4, micro_batch_size: 2, log_every: 1, eval_every: 0,
        eval_batches: 1, seed: 5, deterministic: true, sample_tokens: 0}}
device: {{kind: CPU, cpu_threads: 1}}
checkpoint: {{dir: {ckpt}, every_steps: 2, keep_last: 0, save_final: true}}
"""


def closed_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class BadInputTest(unittest.TestCase):
    cluster = None

    @classmethod
    def setUpClass(cls):
        cls.cluster = TokenCluster(workers=1, slots=2, grace_period_s=3)
        try:
            cls.tmp = tempfile.mkdtemp(prefix="bad_input_", dir=cls.cluster.dir)
            cls.ckpt_root = os.path.join(cls.cluster.dir, "checkpoints")
            cls.base = BASE_SPEC.format(corpus=CORPUS, ckpt=cls.ckpt_root)
            path = cls.write("reference.yaml", cls.base)
            proc = cls.cluster.shardctl("submit", path)
            cls.job = proc.stdout.strip().splitlines()[0]
            status = cls.cluster.wait_for(
                cls.job, lambda s: s.get("state") in ("SUCCEEDED", "FAILED", "CANCELLED"),
                timeout=300, what="reference job end")
            assert status["state"] == "SUCCEEDED", json.dumps(status, indent=1)
            cps = cls.cluster.shardctl_json("checkpoints", cls.job)["checkpoints"]
            assert sorted(int(c["step"]) for c in cps if c.get("committed")) == [2, 4], cps
            cls.job_dir = os.path.join(cls.ckpt_root, cls.job)
            cls.digest_before = harness.tree_digest(cls.job_dir)
            assert any(p.endswith("MANIFEST.json") for p in cls.digest_before), cls.digest_before
            cls.status_before = status
            cls.checkpoints_before = cps
        except BaseException:
            cls.cluster.stop()
            print(cls.cluster.logs())
            raise

    @classmethod
    def tearDownClass(cls):
        cls.cluster.stop()

    @classmethod
    def write(cls, name, text, mode="w"):
        path = os.path.join(cls.tmp, name)
        with open(path, mode) as f:
            f.write(text)
        return path

    def assert_serving(self, after):
        proc = self.cluster.shardctl("list", "--json", check=False)
        self.assertEqual(proc.returncode, 0, "coordinator stopped serving after %s: %s" % (
            after, proc.stderr))
        self.assertIn(self.job, [j["job_id"] for j in json.loads(proc.stdout)["jobs"]])

    def run_rows(self, rows):
        for name, args, kwargs, code, needles in rows:
            with self.subTest(row=name):
                proc = self.cluster.shardctl(*args, check=False, **kwargs)
                self.assertEqual(proc.returncode, code, "%s: exit %d\nstdout: %s\nstderr: %s" % (
                    name, proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:]))
                for needle in needles:
                    self.assertIn(needle, proc.stderr, name)
                # A message names the problem; it does not echo megabytes of input back.
                self.assertLess(len(proc.stderr), 8192, name)
                self.assert_serving(name)

    # ------------------------------------------------------------------ job specs

    def test_1_bad_job_specs_are_refused_naming_the_field(self):
        base = self.base
        w = self.write
        missing = os.path.join(self.tmp, "no-such-file")
        a_file = w("plain-file.txt", "not a directory\n")
        rows = []

        def spec_row(name, text, code, *needles, sets=(), fname=None):
            path = w(fname or (name + ".yaml"), text)
            args = ["submit", path]
            for s in sets:
                args += ["--set", s]
            rows.append((name, args, {}, code, needles))

        def set_row(name, assignment, code, *needles):
            spec_row(name, base, code, *needles, sets=(assignment,))

        # Syntax.
        spec_row("malformed_yaml", base + "fsdp: {sharding_strategy: [\n", 3, "malformed_yaml.yaml:",
                 "not valid YAML or JSON")
        spec_row("malformed_json", '{"name": "x", "world_size": 2,', 3, "malformed_json.json:1",
                 "not valid YAML or JSON",
                 fname="malformed_json.json")
        spec_row("empty_file", "", 3, "data.path: must name the training data file")
        spec_row("binary_garbage", "\x00\x01\x02\xff" * 64, 3, "binary_garbage.yaml:1",
                 "is not a mapping of field names to values")
        spec_row("top_level_list", "- 1\n- 2\n", 3, "top_level_list.yaml:1",
                 "a list is not a mapping of field names to values")
        # Unknown keys.
        spec_row("unknown_top_level_key", base + "wrld_size: 4\n", 3, "wrld_size")
        spec_row("unknown_nested_key", base.replace("collective_timeout_s: 60",
                                                    "collective_timeout_s: 60, shard_degree: 2"),
                 3, "shard_degree")
        set_row("unknown_set_path", "fsdp.nope=3", 3, "unknown field \"fsdp.nope\"")
        set_row("set_without_value", "train.steps", 3, "--set \"train.steps\": expected path=value")
        # Types.
        spec_row("string_for_int", base.replace("world_size: 2", "world_size: two"), 3,
                 "world_size: \"two\" is not an integer")
        spec_row("float_for_int", base.replace("world_size: 2", "world_size: 2.5"), 3,
                 "world_size: \"2.5\" is not an integer")
        spec_row("list_for_int", base.replace("steps: 4", "steps: [1, 2]"), 3,
                 "train.steps: a list is not an integer")
        spec_row("map_for_string", base.replace("name: bad-input-ref", "name: {a: 1}"), 3,
                 "name: a mapping is not a string")
        spec_row("string_for_bool", base.replace("save_final: true", "save_final: maybe"), 3,
                 "checkpoint.save_final", "maybe")
        spec_row("unknown_enum", base.replace("FULL_SHARD", "QUAD_SHARD"), 3,
                 "fsdp.sharding_strategy", "QUAD_SHARD")
        set_row("int32_overflow", "world_size=99999999999", 3,
                "world_size: \"99999999999\" is out of range for int32")
        # Ranges and cross-field rules.
        set_row("world_size_zero", "world_size=0", 3, "world_size: 0 must be positive")
        set_row("negative_steps", "train.steps=-1", 3, "train.steps: -1 must be positive")
        set_row("lr_zero", "optimizer.lr=0", 3, "optimizer.lr: 0 must be > 0")
        set_row("beta2_one", "optimizer.beta2=1", 3, "optimizer.beta2: 1 is not in [0, 1)")
        set_row("val_fraction_high", "data.val_fraction=0.9", 3, "data.val_fraction: 0.9")
        set_row("seq_len_over_block", "data.seq_len=100000", 3,
                "data.seq_len: 100000 exceeds model.block_size")
        spec_row("degree_does_not_divide", base.replace("world_size: 2", "world_size: 4")
                 .replace("global_batch_size: 4", "global_batch_size: 8"), 3,
                 "fsdp.hybrid_shard_degree: 3 does not divide world_size 4",
                 sets=("fsdp.hybrid_shard_degree=3",))
        set_row("degree_one", "fsdp.hybrid_shard_degree=1", 3, "fsdp.hybrid_shard_degree: 1 is invalid")
        set_row("batch_not_divisible", "train.global_batch_size=6", 3,
                "train.global_batch_size: 6 is not divisible by micro_batch_size * world_size")
        set_row("min_world_above_world", "elastic.min_world_size=3", 3,
                "elastic.min_world_size: 3 is not in [0, world_size = 2]")
        set_row("name_with_slash", "name=../../etc", 3, "name: \"../../etc\"")
        set_row("cpu_offload_on_cpu", "fsdp.cpu_offload=true", 3,
                "fsdp.cpu_offload: true needs device.kind CUDA")
        # Oversized values.
        set_row("huge_world_size", "world_size=2147483647", 3, "train.global_batch_size")
        set_row("name_70_chars", "name=" + "n" * 70, 3, "name:", "1-64 characters")
        spec_row("megabyte_name", base.replace("name: bad-input-ref", "name: " + "n" * (1 << 20)),
                 3, "name:", "1-64 characters")
        set_row("prompt_longer_than_block", "train.sample_prompt=" + "p" * 5000, 3,
                "train.sample_prompt: 5000 bytes do not fit model.block_size")
        # Paths.
        rows.append(("spec_file_missing", ["submit", missing + ".yaml"], {}, 5,
                     ("cannot be read",)))
        set_row("data_path_missing", "data.path=" + missing, 3,
                "data.path: \"%s\" does not exist" % missing)
        set_row("data_path_is_directory", "data.path=" + self.tmp, 3,
                "data.path: \"%s\" is not a regular file" % self.tmp)
        set_row("init_from_safetensors_missing",
                "checkpoint.init_from_safetensors=" + missing + ".safetensors", 3,
                "checkpoint.init_from_safetensors: \"%s.safetensors\" does not exist" % missing)
        set_row("init_from_safetensors_not_safetensors",
                "checkpoint.init_from_safetensors=" + a_file, 3,
                "checkpoint.init_from_safetensors: \"%s\" is not a safetensors file" % a_file)
        set_row("resume_from_no_checkpoint", "checkpoint.resume_from=" + self.tmp, 3,
                "checkpoint.resume_from: \"%s\" holds no committed checkpoint" % self.tmp)
        set_row("checkpoint_dir_under_a_file", "checkpoint.dir=" + a_file + "/ckpt", 3,
                "checkpoint.dir: \"%s/ckpt\" cannot be created: \"%s\" is not a directory" % (
                    a_file, a_file))
        set_row("torchscript_path_missing", "model.architecture=TORCHSCRIPT", 3,
                "model.torchscript_path: must be set for architecture TORCHSCRIPT")
        spec_row("torchscript_file_missing", base, 3,
                 "model.torchscript_path: \"%s.pt\" does not exist" % missing,
                 sets=("model.architecture=TORCHSCRIPT", "model.torchscript_path=" + missing + ".pt"))
        # A PyTorch FSDP name gets Shardline's (the nearest spelling would not help).
        set_row("pytorch_fsdp_name", "fsdp.transformer_layer_cls=Block", 3,
                "unknown field \"fsdp.transformer_layer_cls\" (did you mean \"block_class\"?")
        set_row("torchscript_path_on_gpt", "model.torchscript_path=/tmp/m.pt", 3,
                "model.torchscript_path: \"/tmp/m.pt\" is only used with architecture TORCHSCRIPT")
        self.run_rows(rows)

    # ------------------------------------------------------------------ requests

    def test_2_bad_requests_get_their_exit_code(self):
        good_spec = self.write("good.yaml", self.base)
        rows = [
            ("no_token", ["list"], {"token": None}, 6, ("missing \"authorization",)),
            ("wrong_token", ["list"], {"token": "guess"}, 6, ("wrong user token",)),
            ("worker_token_as_user_token", ["status", self.job], {"token": WORKER_TOKEN}, 6,
             ("wrong user token",)),
            ("submit_with_wrong_token", ["submit", good_spec], {"token": "guess"}, 6,
             ("wrong user token",)),
            ("status_unknown_job", ["status", "job-424242"], {}, 5, ("unknown job job-424242",)),
            ("checkpoints_unknown_job", ["checkpoints", "job-424242"], {}, 5,
             ("unknown job job-424242",)),
            ("watch_unknown_job", ["watch", "job-424242"], {}, 5, ("unknown job job-424242",)),
            ("cancel_unknown_job", ["cancel", "job-424242"], {}, 5, ("unknown job job-424242",)),
            ("cancel_finished_job", ["cancel", self.job], {}, 7,
             (self.job, "has already ended (SUCCEEDED)")),
            ("export_step_not_committed", ["export", self.job, "--step=3",
                                           "--out=" + os.path.join(self.tmp, "m.safetensors")],
             {}, 5, ("has no committed checkpoint at step 3",)),
            ("export_to_missing_dir", ["export", self.job,
                                       "--out=" + os.path.join(self.tmp, "no", "dir", "m.st")],
             {}, 7, ("m.st",)),
            ("export_without_out", ["export", self.job], {}, 2, ("--out",)),
            ("unknown_command", ["frobnicate"], {}, 2, ("unknown command \"frobnicate\"",)),
            ("help", ["help"], {}, 0, ()),
            ("submit_without_spec", ["submit"], {}, 2, ("usage: shardctl submit",)),
            # Logs come from the coordinator now (GetLogs), which names the unknown job.
            ("logs_unknown_job", ["logs", "job-424242"], {}, 5, ("unknown job job-424242",)),
            ("logs_rank_and_all", ["logs", self.job, "--rank=0", "--all"], {}, 2,
             ("--rank and --all exclude each other",)),
            ("logs_bad_since", ["logs", self.job, "--since=yesterday"], {}, 2,
             ("--since=yesterday",)),
            ("metrics_unknown_job", ["metrics", "job-424242"], {}, 5, ("unknown job job-424242",)),
            # A rank the job never had used to print nothing and exit 0.
            ("logs_rank_outside_the_world", ["logs", self.job, "--rank=9"], {}, 3,
             ("job %s has no rank 9" % self.job,)),
        ]
        self.run_rows(rows)
        # Unreachable: a port nobody listens on (the cluster is not involved).
        proc = subprocess.run(
            [harness.BINARIES.shardctl, "--coordinator=127.0.0.1:%d" % closed_port(),
             "--timeout_s=3", "--config=" + os.path.join(self.tmp, "none"),
             "--state_dir=" + os.path.join(self.tmp, "none"), "list"],
            capture_output=True, text=True, timeout=60)
        self.assertEqual(proc.returncode, 4, proc.stderr)
        self.assertIn("is the coordinator running?", proc.stderr)
        self.assert_serving("unreachable")

    # ------------------------------------------------------------------ raw gRPC

    def test_3_raw_grpc_requests_that_bypass_shardctl(self):
        proc = subprocess.run(
            [raw_client_path(), "--coordinator=" + self.cluster.address,
             "--user_token=" + USER_TOKEN, "--worker_token=" + WORKER_TOKEN,
             "--done_job=" + self.job],
            capture_output=True, text=True, timeout=600)
        print(proc.stdout[-20000:])
        print(proc.stderr[-5000:])
        self.assertEqual(proc.returncode, 0, "raw gRPC table failed (output above)")
        self.assertIn("[  PASSED  ]", proc.stdout)
        self.assert_serving("the raw gRPC table")

    # ------------------------------------------------------------------ what must not change

    def test_4_committed_checkpoints_and_history_unchanged(self):
        self.assert_serving("everything")
        self.assertEqual(harness.tree_digest(self.job_dir), self.digest_before)
        status = self.cluster.job(self.job)
        self.assertEqual(status, self.status_before)
        self.assertEqual(self.cluster.shardctl_json("checkpoints", self.job)["checkpoints"],
                         self.checkpoints_before)
        # No bad row left a job behind that the scheduler would now be holding slots for.
        jobs = self.cluster.shardctl_json("list")["jobs"]
        self.assertEqual([j["job_id"] for j in jobs if j["state"] in ("PENDING", "RUNNING")], [],
                         json.dumps(jobs, indent=1)[-3000:])


if __name__ == "__main__":
    harness.run_tests(__name__)
