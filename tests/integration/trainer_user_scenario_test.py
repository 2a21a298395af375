"""Issue #31 item 4: trainers run as a Unix user of their own (worker --trainer_user), so job
code cannot read the node's credentials.

A real cluster with two worker daemons run as root, both holding the join token in a 0600 file:
node-0 runs its trainers as the daemon's user (the control), node-1 as shardline-trainer (made by
tools/setup.sh). A TorchScript model that calls aten::from_file on the join-token file and prints
the bytes (job code may do anything its user may) runs on each: on node-0 the token's bytes reach
the rank log its owner reads; on node-1 the trainer gets EACCES, the job fails and the bytes are
nowhere in the log. A real FSDP job (W = 2) then trains and checkpoints as the trainer user: the
trainers' uid is that user's, the checkpoint files are its, the rank files are root:<its group>
0750/0640 with the metrics file its own. The daemon refuses to start when the flag cannot hold: not
root, an unknown user, a credential file the trainer user can read, a trainer it cannot run.

Needs root (CI and the sessions run as root): the daemon switches user. The trainer binary is
copied out of Bazel's tree (under root's 0700 home) into this test's directory, which the trainer
user can reach; its libraries come from the venv, linked into that directory if the trainer user
cannot reach the venv where it is."""
import os
import pwd
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import cluster_test  # noqa: E402  (imported as a module, so its tests are not collected here)

TRAINER_USER = "shardline-trainer"
JOIN = "join-" + "e5" * 16


def as_user(user, argv):
    """argv run as `user` (its groups only), as the daemon's child would be."""
    pw = pwd.getpwnam(user)
    return ["setpriv", "--reuid=%d" % pw.pw_uid, "--regid=%d" % pw.pw_gid, "--init-groups",
            "--"] + list(argv)


def owner_only(path, text, owner=0):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chown(path, owner, -1)
    return path


def stage(binary, bin_dir, lib_dir):
    """Copies `binary` where the trainer user can run it; returns (path, extra env). When the
    user cannot load its libraries where the binary's run path names them (a checkout under a
    0700 home), links them into `lib_dir` for LD_LIBRARY_PATH."""
    os.makedirs(bin_dir, exist_ok=True)
    path = shutil.copy(binary, os.path.join(bin_dir, os.path.basename(binary)))
    os.chmod(path, 0o755)
    probe = subprocess.run(as_user(TRAINER_USER, [path, "--helpshort"]),
                           capture_output=True, text=True, timeout=60)
    if "error while loading shared libraries" not in probe.stderr:
        return path, {}
    os.makedirs(lib_dir, exist_ok=True)
    ldd = subprocess.run(["ldd", path], capture_output=True, text=True, check=True).stdout
    for lib in re.findall(r"=> (/\S+)", ldd):
        dest = os.path.join(lib_dir, os.path.basename(lib))
        if os.path.exists(dest):
            continue
        try:
            os.link(os.path.realpath(lib), dest)  # the same inode: its mode is the venv's
        except OSError:
            shutil.copy(lib, dest)
            os.chmod(dest, 0o755)
    return path, {"LD_LIBRARY_PATH": lib_dir}


def leak_model(path, secret, size):
    """A TorchScript LM whose forward reads `secret` with aten::from_file and prints its bytes."""
    import torch
    from typing import List

    class Leak(torch.nn.Module):
        def __init__(self, secret: str, size: int):
            super().__init__()
            self.secret = secret
            self.size = size
            self.embed = torch.nn.Embedding(256, 16)
            self.head = torch.nn.Linear(16, 256)

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            stolen = torch.from_file(self.secret, False, self.size, dtype=torch.uint8)
            leaked: List[int] = stolen.to(torch.long).tolist()
            print("STOLEN", leaked)
            return self.head(self.embed(tokens))

    torch.jit.script(Leak(secret, size)).save(path)
    os.chmod(path, 0o644)
    return path


def spec_text(name, model, data, ckpt, steps, world_size):
    return f"""
name: {name}
world_size: {world_size}
model: {model}
data: {{path: {data}, format: TEXT, val_fraction: 0.1, seq_len: 32, shuffle_seed: 3}}
optimizer: {{kind: ADAMW, lr: 0.003, min_lr: 0.003, warmup_steps: 0}}
fsdp: {{sharding_strategy: FULL_SHARD, collective_timeout_s: 60}}
train: {{steps: {steps}, global_batch_size: {world_size * 2}, micro_batch_size: 2, log_every: 1,
        eval_every: 0, eval_batches: 1, seed: 5, sample_tokens: 0}}
device: {{kind: CPU, cpu_threads: 1}}
checkpoint: {{dir: {ckpt}, every_steps: 2, keep_last: 2, save_final: true}}
restart: {{max_restarts: 0}}
"""


class TrainerUserScenarioTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("needs root: the daemon switches its trainers' user")
        try:
            cls.pw = pwd.getpwnam(TRAINER_USER)
        except KeyError:
            raise AssertionError("no user %s: tools/setup.sh creates it when run as root"
                                 % TRAINER_USER)
        # A directory the trainer user can search ($TEST_TMPDIR is under root's 0700 home).
        cls.base = tempfile.mkdtemp(prefix="trainer_user_", dir="/tmp")
        os.chmod(cls.base, 0o755)
        cls.data = os.path.join(cls.base, "data")
        cls.ckpt = os.path.join(cls.base, "ckpt")
        os.makedirs(cls.data)
        os.makedirs(cls.ckpt)
        os.chown(cls.ckpt, cls.pw.pw_uid, cls.pw.pw_gid)  # the trainers write checkpoints here
        cls.corpus = shutil.copy(cluster_test.CORPUS, os.path.join(cls.data, "corpus.txt"))
        os.chmod(cls.corpus, 0o644)
        cls.secrets = os.path.join(cls.base, "secrets")
        os.makedirs(cls.secrets)
        cls.join = owner_only(os.path.join(cls.secrets, "join.token"), JOIN + "\n")
        cls.model = leak_model(os.path.join(cls.data, "leak.pt"), cls.join, len(JOIN) + 1)
        cls.trainer, cls.lib_env = stage(harness.BINARIES.trainer,
                                         os.path.join(cls.base, "bin"),
                                         os.path.join(cls.base, "lib"))
        cls.roots = ["--read_roots=" + cls.data, "--checkpoint_roots=" + cls.ckpt]
        cls.cluster = harness.Cluster(workers=0, grace_period_s=3, parent=cls.base,
                                      coordinator_flags=["--worker_token_file=" + cls.join] +
                                      cls.roots)
        os.chmod(cls.cluster.dir, 0o755)
        cls.cluster.start_worker(0, 1, grace_period_s=3, trainer=cls.trainer, env=cls.lib_env,
                                 flags=["--join_token_file=" + cls.join] + cls.roots)
        cls.start_trainer_user_worker(1)
        cls.cluster.wait_for_workers(2)

    @classmethod
    def start_trainer_user_worker(cls, i):
        cls.cluster.start_worker(i, 1, grace_period_s=3, trainer=cls.trainer, env=cls.lib_env,
                                 flags=["--join_token_file=" + cls.join,
                                        "--trainer_user=" + TRAINER_USER] + cls.roots)

    @classmethod
    def tearDownClass(cls):
        cls.cluster.stop()
        print(cls.cluster.logs())
        shutil.rmtree(cls.base, ignore_errors=True)

    def submit(self, text):
        path = os.path.join(self.base, "spec-%d.yaml" % time.monotonic_ns())
        with open(path, "w") as f:
            f.write(text)
        return self.cluster.shardctl("submit", path).stdout.split()[0]

    def ended(self, job, timeout=240):
        return self.cluster.wait_for(job, lambda s: s.get("state") in ("SUCCEEDED", "FAILED"),
                                     timeout=timeout, what="job end")

    def nodes_of(self, job):
        """The worker indices whose work dirs hold `job`'s files."""
        return [i for i in (0, 1, 2)
                if os.path.isdir(os.path.join(self.cluster.worker_dir(i), "jobs", job))]

    def test_1_job_code_reads_the_join_token_only_without_a_trainer_user(self):
        model = ("{architecture: TORCHSCRIPT, torchscript_path: %s, vocab_size: 256, "
                 "block_size: 64}" % self.model)
        # Two one-rank jobs on two one-slot nodes: one each side.
        jobs = [self.submit(spec_text("leak-%d" % i, model, self.corpus, self.ckpt, 2, 1))
                for i in range(2)]
        ended = {job: self.ended(job) for job in jobs}
        by_node = {self.nodes_of(job)[0]: job for job in jobs}
        self.assertEqual(sorted(by_node), [0, 1], by_node)
        stolen = str(list((JOIN + "\n").encode()))

        control = self.cluster.rank_log(0, by_node[0], 1, 0)
        self.assertIn("STOLEN " + stolen, control)  # as the daemon's user: the token leaks

        job = by_node[1]
        log = self.cluster.rank_log(1, job, 1, 0)
        self.assertNotIn(stolen[1:-1], log)
        self.assertIn("unable to open file <%s> in read-only mode: Permission denied" % self.join,
                      log)
        self.assertEqual(ended[job]["state"], "FAILED", ended[job])

    def test_2_fsdp_trains_and_checkpoints_as_the_trainer_user(self):
        # node-0 (trainers as root) leaves and node-2 (as the trainer user) joins: the W = 2 job
        # has one rank on node-1 and one on node-2.
        self.cluster.procs["worker-0"].terminate()
        self.cluster.procs["worker-0"].wait(timeout=30)
        self.start_trainer_user_worker(2)
        deadline = time.time() + 60
        while time.time() < deadline:
            alive = {w.get("node_name") for w in self.cluster.shardctl_json("workers")["workers"]
                     if w.get("state") == "ALIVE"}
            if alive == {"node-1", "node-2"}:
                break
            time.sleep(0.2)
        self.assertEqual(alive, {"node-1", "node-2"})
        model = "{architecture: GPT, preset: tiny, init_seed: 1}"
        job = self.submit(spec_text("fsdp", model, self.corpus, self.ckpt, 6, 2))
        self.cluster.wait_for(job, lambda s: s.get("state") == "RUNNING", what="RUNNING")
        pids, deadline = {}, time.time() + 120
        while len(pids) < 2 and time.time() < deadline:
            for node in (1, 2):
                for rank in (0, 1):
                    pid = self.cluster.rank_pid(node, job, 1, rank)
                    if pid is not None:
                        pids[rank] = pid
            time.sleep(0.1)
        self.assertEqual(sorted(pids), [0, 1])
        for pid in pids.values():
            with open("/proc/%d/status" % pid) as f:
                ids = re.search(r"^Uid:\s+(.*)$", f.read(), re.M).group(1).split()
            self.assertEqual(ids, [str(self.pw.pw_uid)] * 4)  # real, effective, saved, fs

        status = self.ended(job)
        self.assertEqual(status["state"], "SUCCEEDED", status)
        ckpt_files = [os.path.join(root, f) for root, _, files in os.walk(
            os.path.join(self.ckpt, job)) for f in files]
        self.assertTrue(any(f.endswith("MANIFEST.json") for f in ckpt_files), ckpt_files)
        for f in ckpt_files:
            self.assertEqual(os.stat(f).st_uid, self.pw.pw_uid, f)

        self.assertEqual(self.nodes_of(job), [1, 2])
        for node in (1, 2):
            attempt = os.path.join(self.cluster.worker_dir(node), "jobs", job, "attempt-1")
            rank = re.search(r"spec-rank-(\d+)\.yaml", " ".join(os.listdir(attempt))).group(1)
            for path, mode, uid in (
                    (os.path.dirname(attempt), 0o750, 0), (attempt, 0o750, 0),
                    (os.path.join(attempt, "spec-rank-%s.yaml" % rank), 0o640, 0),
                    (os.path.join(attempt, "metrics-rank-%s.jsonl" % rank), 0o640,
                     self.pw.pw_uid)):
                st = os.stat(path)
                self.assertEqual((stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid),
                                 (mode, uid, self.pw.pw_gid), path)

    def daemon(self, flags, user=None, name="refused"):
        """Runs a worker daemon that should refuse to start; returns (exit code, output)."""
        work = os.path.join(self.base, "work-" + name)
        os.makedirs(work, exist_ok=True)
        os.chmod(work, 0o777)
        argv = [self.worker_copy, "--coordinator=" + self.cluster.address,
                "--node_name=" + name, "--slots=1", "--work_dir=" + work,
                "--trainer=" + self.trainer] + flags
        proc = subprocess.run(as_user(user, argv) if user else argv, capture_output=True,
                              text=True, timeout=60, env=dict(os.environ, **self.lib_env))
        return proc.returncode, proc.stdout + proc.stderr

    def test_3_the_daemon_refuses_a_trainer_user_that_cannot_hold(self):
        self.worker_copy, _ = stage(harness.BINARIES.worker, os.path.join(self.base, "bin"),
                                    os.path.join(self.base, "lib"))
        join = ["--join_token_file=" + self.join]
        flag = "--trainer_user=" + TRAINER_USER

        code, out = self.daemon(["--join_token=" + JOIN, flag], user="nobody", name="notroot")
        self.assertEqual(code, 2, out)
        self.assertRegex(out, r"--trainer_user shardline-trainer: the daemon runs as uid \d+, "
                              r"not root, so it cannot start trainers as another user")

        code, out = self.daemon(join + ["--trainer_user=no-such-user"], name="unknown")
        self.assertEqual(code, 2, out)
        self.assertIn("--trainer_user no-such-user: no such user", out)

        # A credential file of the trainer user's own (0600, so the daemon's mode check passes).
        theirs = owner_only(os.path.join(self.secrets, "theirs.token"), JOIN + "\n",
                            owner=self.pw.pw_uid)
        code, out = self.daemon(["--join_token_file=" + theirs, flag], name="readable")
        self.assertEqual(code, 2, out)
        self.assertIn("--trainer_user %s (uid %d) can read credential file %s"
                      % (TRAINER_USER, self.pw.pw_uid, theirs), out)

        private = os.path.join(self.secrets, "trainer")
        shutil.copy(self.trainer, private)
        os.chmod(self.secrets, 0o700)
        try:
            code, out = self.daemon(join + [flag, "--trainer=" + private], name="private")
        finally:
            os.chmod(self.secrets, 0o755)
        self.assertEqual(code, 2, out)
        self.assertIn("cannot run --trainer %s: Permission denied" % private, out)
        # None of them registered.
        names = [w.get("node_name") for w in self.cluster.shardctl_json("workers")["workers"]]
        self.assertFalse({"notroot", "unknown", "readable", "private"} & set(names), names)


if __name__ == "__main__":
    harness.run_tests(__name__)
