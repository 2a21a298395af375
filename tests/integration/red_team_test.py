"""Issue #14 item 9: the red-team table. One real cluster (coordinator with named users, a
distinct worker join token, path roots and small resource bounds; a real worker daemon; real
trainers), attacked one row at a time with raw gRPC requests (the Python stubs generated from
proto/), shardctl and plain sockets. Each row asserts the refusal's code and message; after every
row the coordinator still serves, and the other jobs are unchanged: a finished job of alice's (its
status and its checkpoint files, byte for byte) and a running job of bob's (still RUNNING in the
same attempt, still training).

Runs with the project venv's python (grpcio, prometheus_client's parser)."""
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import cluster_test  # noqa: E402  (imported as a module, so its tests are not collected here)

pb = None    # shardline._proto.coordinator_pb2
rpc = None   # shardline._proto.coordinator_pb2_grpc
jspb = None  # shardline._proto.job_spec_pb2
import grpc  # noqa: E402

TOKENS = {"alice": "alice-" + "a1" * 16, "bob": "bob-" + "b2" * 16, "ops": "ops-" + "c3" * 16}
JOIN = "join-" + "d4" * 16
FORGED_LINE = "FORGED by another worker: loss 0.0"


def import_stubs():
    harness.client_stub_root()
    global pb, rpc, jspb
    from shardline._proto import coordinator_pb2, coordinator_pb2_grpc, job_spec_pb2
    pb, rpc, jspb = coordinator_pb2, coordinator_pb2_grpc, job_spec_pb2


def owner_only(path, text):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return path


def spec_text(name, data, ckpt, steps, world_size=2, every=2, extra=""):
    return f"""
name: {name}
world_size: {world_size}
model: {{architecture: GPT, preset: tiny, init_seed: 1}}
data: {{path: {data}, format: TEXT, val_fraction: 0.1, seq_len: 32, shuffle_seed: 3}}
optimizer: {{kind: ADAMW, lr: 0.003, min_lr: 0.003, warmup_steps: 0}}
fsdp: {{sharding_strategy: FULL_SHARD, collective_timeout_s: 60}}
train: {{steps: {steps}, global_batch_size: {world_size * 2}, micro_batch_size: 2, log_every: 1,
        eval_every: 0, eval_batches: 1, seed: 5, sample_tokens: 0}}
device: {{kind: CPU, cpu_threads: 1}}
checkpoint: {{dir: {ckpt}, every_steps: {every}, keep_last: 2, save_final: true}}
restart: {{max_restarts: 0}}
{extra}
"""


class RedTeamTest(unittest.TestCase):
    attackers = 0  # nodes register_attacker registered

    @classmethod
    def setUpClass(cls):
        import_stubs()
        cls.base = tempfile.mkdtemp(prefix="redteam_", dir=os.environ.get("TEST_TMPDIR"))
        cls.data = os.path.join(cls.base, "data")
        cls.ckpt = os.path.join(cls.base, "ckpt")
        for d in (cls.data, cls.ckpt):
            os.makedirs(d)
        cls.corpus = shutil.copy(cluster_test.CORPUS, os.path.join(cls.data, "corpus.txt"))
        # Links to / under both roots (a user who can write under a root can make one).
        os.symlink("/", os.path.join(cls.data, "lnk"))
        os.symlink("/", os.path.join(cls.ckpt, "lnk2"))
        users = owner_only(os.path.join(cls.base, "users"),
                           "# name token [admin]\nalice %s\nbob %s\nops %s admin\n"
                           % (TOKENS["alice"], TOKENS["bob"], TOKENS["ops"]))
        join = owner_only(os.path.join(cls.base, "join.token"), JOIN + "\n")
        cls.token_file = {u: owner_only(os.path.join(cls.base, u + ".token"), t + "\n")
                          for u, t in TOKENS.items()}
        roots = ["--read_roots=" + cls.data, "--checkpoint_roots=" + cls.ckpt]
        cls.cluster = harness.Cluster(
            workers=0, grace_period_s=3,
            coordinator_flags=["--users_file=" + users, "--worker_token_file=" + join,
                               "--metrics_listen=127.0.0.1:0",
                               "--dashboard_listen=127.0.0.1:0",
                               "--rendezvous_max_keys_per_namespace=200",
                               "--rendezvous_max_bytes_per_namespace=65536",
                               "--max_list_page_size=5",
                               "--max_pending_jobs_per_user=2",
                               "--max_running_ranks_per_user=2",
                               "--grpc_max_receive_message_bytes=1048576"] + roots,
            shardctl_flags=["--token_file=" + cls.token_file["alice"]])
        cls.cluster.start_worker(0, 3, grace_period_s=3,
                                 flags=["--join_token_file=" + join] + roots)
        cls.cluster.wait_for_workers(1)
        cls.channel = grpc.insecure_channel(cls.cluster.address)
        cls.stub = rpc.CoordinatorStub(cls.channel)
        m = re.search(r"metrics on (\S+)", open(os.path.join(cls.cluster.dir,
                                                             "coordinator.log")).read())
        cls.metrics = m.group(1)
        cls.dashboard = re.search(r"dashboard on http://(\S+)/", open(os.path.join(
            cls.cluster.dir, "coordinator.log")).read()).group(1)

        # alice's finished job: its status and checkpoint files must never change.
        cls.done = cls.submit_as("alice", spec_text("done", cls.corpus, cls.ckpt, steps=4))
        cls.wait_state(cls.done, "SUCCEEDED")
        cls.done_status = cls.get(cls.done)
        cls.done_files = harness.tree_digest(os.path.join(cls.ckpt, cls.done))
        assert any(f.endswith("MANIFEST.json") for f in cls.done_files), cls.done_files
        # bob's running job (one rank, long): the attempt whose credential rows steal.
        cls.running = cls.submit_as("bob", spec_text("running", cls.corpus, cls.ckpt,
                                                     steps=100000, world_size=1, every=0,
                                                     extra="").replace(
            "save_final: true", "save_final: false"))
        cls.wait_state(cls.running, "RUNNING")
        deadline = time.time() + 120
        pid = None
        while time.time() < deadline and pid is None:
            pid = cls.cluster.rank_pid(0, cls.running, 1, 0)
            time.sleep(0.2)
        env = dict(kv.split("=", 1) for kv in
                   open("/proc/%d/environ" % pid, "rb").read().decode().split("\0") if "=" in kv)
        cls.attempt_secret = env["SHARDLINE_RDZV_SECRET"]
        cls.namespace = env["SHARDLINE_RDZV_NAMESPACE"]
        cls.wait_step(cls.running, 1)
        cls.victim_worker = cls.call("ListWorkers", pb.ListWorkersRequest(),
                                     TOKENS["alice"]).workers[0].worker_id

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        cls.cluster.stop()
        print(cls.cluster.logs())

    # ---- helpers

    @classmethod
    def call(cls, method, request, token=None, extra=()):
        md = [("authorization", "Bearer " + token)] if token else []
        return getattr(cls.stub, method)(request, metadata=md + list(extra), timeout=20)

    @classmethod
    def submit_as(cls, user, text):
        req = pb.SubmitJobRequest(spec_text=text)
        return cls.call("SubmitJob", req, TOKENS[user]).job_id

    @classmethod
    def get(cls, job):
        return cls.call("GetJob", pb.GetJobRequest(job_id=job), TOKENS["ops"])

    @classmethod
    def wait_state(cls, job, state, timeout=300):
        deadline = time.time() + timeout
        while time.time() < deadline:
            st = cls.get(job)
            if pb.JobState.Name(st.state) == state:
                return st
            if pb.JobState.Name(st.state) in ("FAILED", "CANCELLED", "SUCCEEDED"):
                raise AssertionError("job %s ended %s: %s" % (job, pb.JobState.Name(st.state),
                                                              st.message))
            time.sleep(0.2)
        raise AssertionError("job %s never reached %s" % (job, state))

    @classmethod
    def wait_step(cls, job, step, timeout=120):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if cls.get(job).step >= step:
                return
            time.sleep(0.2)
        raise AssertionError("job %s never reached step %d" % (job, step))

    def refused(self, fn, code, text):
        """fn() must raise an RpcError with `code` whose details contain `text` (a string, or a
        tuple of strings that must all be there)."""
        with self.assertRaises(grpc.RpcError) as ctx:
            fn()
        err = ctx.exception
        self.assertEqual(err.code(), getattr(grpc.StatusCode, code), err.details())
        for part in (text,) if isinstance(text, str) else text:
            self.assertIn(part, err.details())

    def assert_intact(self):
        """The coordinator serves; alice's finished job and bob's running job are unchanged."""
        jobs = self.call("ListJobs", pb.ListJobsRequest(), TOKENS["ops"])
        self.assertGreaterEqual(len(jobs.jobs), 2)
        done = self.get(self.done)
        self.assertEqual(done.state, self.done_status.state)
        self.assertEqual(done.step, self.done_status.step)
        self.assertEqual(done.latest_checkpoint_step, self.done_status.latest_checkpoint_step)
        self.assertEqual(len(done.events), len(self.done_status.events))
        self.assertEqual(harness.tree_digest(os.path.join(self.ckpt, self.done)), self.done_files)
        running = self.get(self.running)
        self.assertEqual(pb.JobState.Name(running.state), "RUNNING", running.message)
        self.assertEqual(running.attempt, 1)
        self.assertLess(running.latest_checkpoint_step, 10**6)
        for job in (self.done, self.running):  # no forged log line landed (ShipLogs rows)
            logs = self.call("GetLogs", pb.GetLogsRequest(job_id=job, all_ranks=True),
                             TOKENS["ops"])
            self.assertFalse([l.text for l in logs.lines if FORGED_LINE in l.text])

    def progress(self, job, attempt, step=1):
        return pb.ProgressReport(job_id=job, attempt=attempt, rank=0, step=step, loss=1.0)

    def checkpoint(self, job, attempt, step):
        return pb.CheckpointReport(job_id=job, attempt=attempt, rank=0, step=step,
                                   path=os.path.join(self.ckpt, "forged", "step_%d" % step),
                                   files=["MANIFEST.json", "shard_00000.bin"],
                                   manifest_committed=True, expected_files=1)

    def ship(self, worker, credential, job):
        req = pb.ShipLogsRequest(worker_id=worker)
        req.chunks.add(job_id=job, attempt=1, rank=0, lines=[FORGED_LINE])
        return self.call("ShipLogs", req, JOIN,
                         [("x-shardline-worker-credential", credential)])

    def starting_from(self, field, path):
        """A spec of bob's whose checkpoint section also names `field: path`."""
        return spec_text("from", self.corpus, self.ckpt, steps=2).replace(
            "save_final: true}", "save_final: true, %s: %s}" % (field, path))

    def register_attacker(self):
        # A node of its own each time: registering a live node again needs its credential.
        RedTeamTest.attackers += 1
        req = pb.RegisterWorkerRequest(node_name="attacker-%d" % RedTeamTest.attackers,
                                       address="127.0.0.1")
        req.slots.add(kind=pb.Slot.CPU, index=0)
        return self.call("RegisterWorker", req, JOIN)

    def fill_pending_quota(self):
        """bob (running 1 rank, quota 2) submits 2-rank jobs: they wait for his rank quota, not
        an error; the third is past --max_pending_jobs_per_user=2 and raises."""
        queued = [self.submit_as("bob", spec_text("queued-%d" % i, self.corpus, self.ckpt, 2))
                  for i in range(2)]
        for job in queued:
            st = self.get(job)
            self.assertEqual(pb.JobState.Name(st.state), "PENDING", st.message)
            self.assertIn("user bob runs 1 ranks", st.message)
            self.assertIn("(--max_running_ranks_per_user)", st.message)
        me = self.call("WhoAmI", pb.WhoAmIRequest(), TOKENS["bob"])
        self.assertEqual((me.usage.pending_jobs, me.usage.max_pending_jobs), (2, 2))
        self.assertEqual((me.usage.running_ranks, me.usage.max_running_ranks), (1, 2))
        self.submit_as("bob", spec_text("queued-2", self.corpus, self.ckpt, 2))

    # ---- the rows

    def rows(self):
        S = self  # noqa: N806
        attacker = self.register_attacker()
        cred = lambda c: ("x-shardline-worker-credential", c)  # noqa: E731
        ns_other = self.done + "/1"
        forged = jspb.JobSpec()
        forged.name = "unknown-field"
        # Field 4242 of JobSpec does not exist: protobuf keeps it as an unknown field.
        unknown_bytes = forged.SerializeToString() + bytes([0x90, 0x89, 0x02, 0x01])
        out_spec = spec_text("outside", "/etc/passwd", S.ckpt, steps=2)
        return [
            ("no token", lambda: S.call("ListJobs", pb.ListJobsRequest()),
             "UNAUTHENTICATED", 'missing "authorization: Bearer <token>" metadata'),
            ("unknown user token", lambda: S.call("ListJobs", pb.ListJobsRequest(), "guess"),
             "UNAUTHENTICATED", "wrong user token"),
            ("join token used to submit",
             lambda: S.call("SubmitJob", pb.SubmitJobRequest(spec_text=out_spec), JOIN),
             "UNAUTHENTICATED", "user token"),
            ("join token used to cancel",
             lambda: S.call("CancelJob", pb.CancelJobRequest(job_id=S.running), JOIN),
             "UNAUTHENTICATED", "user token"),
            ("forged heartbeat for another worker",
             lambda: S.call("Heartbeat", pb.HeartbeatRequest(worker_id=S.victim_worker), JOIN,
                            [cred(attacker.worker_credential)]),
             "PERMISSION_DENIED", "worker credential does not match worker " + S.victim_worker),
            ("heartbeat without a worker credential",
             lambda: S.call("Heartbeat", pb.HeartbeatRequest(worker_id=S.victim_worker), JOIN),
             "UNAUTHENTICATED", 'missing "x-shardline-worker-credential" metadata'),
            ("assignment stream hijack",
             lambda: next(iter(S.call("StreamAssignments",
                                      pb.StreamAssignmentsRequest(worker_id=S.victim_worker),
                                      JOIN, [cred(attacker.worker_credential)]))),
             "PERMISSION_DENIED", "worker credential does not match worker " + S.victim_worker),
            ("log lines shipped for another worker's running rank",
             lambda: S.ship(attacker.worker_id, attacker.worker_credential, S.running),
             "PERMISSION_DENIED", "worker %s may not ship logs of job %s attempt 1 rank 0: "
             "that rank is not placed on it" % (attacker.worker_id, S.running)),
            ("log lines shipped for another worker's ended attempt",
             lambda: S.ship(attacker.worker_id, attacker.worker_credential, S.done),
             "PERMISSION_DENIED", "worker %s may not ship logs of job %s attempt 1 rank 0: "
             "that rank is not placed on it" % (attacker.worker_id, S.done)),
            ("log lines shipped under another worker's id",
             lambda: S.ship(S.victim_worker, attacker.worker_credential, S.running),
             "PERMISSION_DENIED", "worker credential does not match worker " + S.victim_worker),
            ("progress report with the join token",
             lambda: S.call("ReportProgress", S.progress(S.running, 1), JOIN),
             "UNAUTHENTICATED", "credential of a running job attempt"),
            ("forged checkpoint at step 10^12 with a user token",
             lambda: S.call("ReportCheckpoint", S.checkpoint(S.running, 1, 10**12),
                            TOKENS["bob"]),
             "UNAUTHENTICATED", "credential of a running job attempt"),
            ("trainer credential used to submit",
             lambda: S.call("SubmitJob", pb.SubmitJobRequest(spec_text=out_spec),
                            S.attempt_secret),
             "PERMISSION_DENIED", "SubmitJob needs a user token"),
            ("trainer credential used to cancel its own job",
             lambda: S.call("CancelJob", pb.CancelJobRequest(job_id=S.running),
                            S.attempt_secret),
             "PERMISSION_DENIED", "CancelJob needs a user token"),
            ("trainer credential used to list jobs",
             lambda: S.call("ListJobs", pb.ListJobsRequest(), S.attempt_secret),
             "PERMISSION_DENIED", "ListJobs needs a user token"),
            ("report for another job with a valid attempt credential",
             lambda: S.call("ReportCheckpoint", S.checkpoint(S.done, 1, 10**12),
                            S.attempt_secret),
             "PERMISSION_DENIED", "may not report for job " + S.done),
            ("report for another attempt of the same job",
             lambda: S.call("ReportProgress", S.progress(S.running, 2), S.attempt_secret),
             "PERMISSION_DENIED", "may not report for job %s attempt 2" % S.running),
            ("rendezvous in another attempt's namespace",
             lambda: S.call("RendezvousSet", pb.RendezvousSetRequest(
                 namespace=ns_other, secret=S.attempt_secret, key="k", value=b"v"),
                 S.attempt_secret),
             "PERMISSION_DENIED", "may only use rendezvous namespace " + S.namespace),
            ("wrong user cancelling",
             lambda: S.call("CancelJob", pb.CancelJobRequest(job_id=S.running), TOKENS["alice"]),
             "PERMISSION_DENIED", "job %s is owned by bob" % S.running),
            ("wrong user exporting a checkpoint",
             lambda: S.call("GetCheckpoint", pb.GetCheckpointRequest(
                 job_id=S.done, step=S.done_status.latest_checkpoint_step), TOKENS["bob"]),
             "PERMISSION_DENIED", "job %s is owned by alice" % S.done),
            ("wrong user listing checkpoints",
             lambda: S.call("ListCheckpoints", pb.ListCheckpointsRequest(job_id=S.done),
                            TOKENS["bob"]),
             "PERMISSION_DENIED", "job %s is owned by alice" % S.done),
            ("data path outside the read roots",
             lambda: S.call("SubmitJob", pb.SubmitJobRequest(spec_text=out_spec),
                            TOKENS["bob"]),
             "PERMISSION_DENIED", "data.path: /etc/passwd is outside the read roots [%s]"
             % S.data),
            ("checkpoint dir climbing out with ..",
             lambda: S.submit_as("bob", spec_text("climb", S.corpus, S.ckpt + "/../x", 2)),
             "PERMISSION_DENIED", 'checkpoint.dir: %s/../x has a ".." component, which is '
             "refused under the checkpoint roots" % S.ckpt),
            # Found live by an audit: with data/lnk -> /, data/lnk/../etc/passwd is data/etc/passwd
            # to a lexical check and /etc/passwd to the kernel; the job trained on it.
            ("data path with .. after a link to /",
             lambda: S.submit_as("bob", spec_text("dotdot", S.data + "/lnk/../etc/passwd",
                                                  S.ckpt, 2)),
             "PERMISSION_DENIED", 'data.path: %s/lnk/../etc/passwd has a ".." component'
             % S.data),
            ("checkpoint dir with .. after a link to /",
             lambda: S.submit_as("bob", spec_text("dotdot2", S.corpus,
                                                  S.ckpt + "/lnk2/../tmp/planted", 2)),
             "PERMISSION_DENIED", 'checkpoint.dir: %s/lnk2/../tmp/planted has a ".." component'
             % S.ckpt),
            # #31 item 3: a checkpoint is continued only by its job's owner (or an admin), as
            # the registry says; GetJob shows every user a job's checkpoint directory.
            ("another user's checkpoint as checkpoint.resume_from",
             lambda: S.submit_as("bob", S.starting_from(
                 "resume_from", "%s/%s/step_%d" % (S.ckpt, S.done,
                                                   S.done_status.latest_checkpoint_step))),
             "PERMISSION_DENIED", "is a checkpoint of job %s, owned by alice; only its owner or "
             "an admin may continue it" % S.done),
            ("another user's job directory as checkpoint.resume_from",
             lambda: S.submit_as("bob", S.starting_from("resume_from",
                                                        "%s/%s" % (S.ckpt, S.done))),
             "PERMISSION_DENIED", "is a checkpoint of job %s, owned by alice" % S.done),
            ("a checkpoint the coordinator has no record of",
             lambda: S.submit_as("bob", S.starting_from("resume_from",
                                                        S.ckpt + "/planted/step_2")),
             "PERMISSION_DENIED", "is not a committed checkpoint of any job the coordinator "
             "knows"),
            ("a file in another user's checkpoint directory as init_from_safetensors",
             lambda: S.submit_as("bob", S.starting_from(
                 "init_from_safetensors", "%s/%s/w.safetensors" % (S.ckpt, S.done))),
             "PERMISSION_DENIED", "is in the checkpoint directory of job %s, owned by alice"
             % S.done),
            ("a folder in another user's checkpoint directory as init_from_dcp",
             lambda: S.submit_as("bob", S.starting_from(
                 "init_from_dcp", "%s/%s/dcp" % (S.ckpt, S.done))),
             "PERMISSION_DENIED", "checkpoint.init_from_dcp: %s/%s/dcp is in the checkpoint "
             "directory of job %s, owned by alice" % (S.ckpt, S.done, S.done)),
            # Found live: a 1 MiB value read 2,000 times in one 10 KB request built a 2,000 MiB
            # response (the coordinator peaked at 4 GiB).
            ("rendezvous get naming one key 2,000 times",
             lambda: S.call("RendezvousGet", pb.RendezvousGetRequest(
                 namespace=S.namespace, secret=S.attempt_secret, keys=["dup"] * 2000),
                 S.attempt_secret),
             "RESOURCE_EXHAUSTED", "rendezvous get of 2000 keys; a namespace holds at most 200"),
            ("rendezvous get naming one key 100 times (within the key count)",
             lambda: S.call("RendezvousGet", pb.RendezvousGetRequest(
                 namespace=S.namespace, secret=S.attempt_secret, keys=["dup"] * 100),
                 S.attempt_secret),
             "INVALID_ARGUMENT", "rendezvous get names key dup more than once"),
            ("TorchScript module outside the read roots (loading it runs code)",
             lambda: S.submit_as("bob", spec_text("ts", S.corpus, S.ckpt, 2).replace(
                 "architecture: GPT, preset: tiny,",
                 "architecture: TORCHSCRIPT, torchscript_path: /tmp/evil.pt,")),
             "PERMISSION_DENIED", "model.torchscript_path: /tmp/evil.pt is outside"),
            ("unknown spec field",
             lambda: S.call("SubmitJob", pb.SubmitJobRequest(
                 spec=jspb.JobSpec.FromString(unknown_bytes)), TOKENS["bob"]),
             "INVALID_ARGUMENT", "unknown field"),
            ("rendezvous byte flood",
             lambda: S.call("RendezvousSet", pb.RendezvousSetRequest(
                 namespace=S.namespace, secret=S.attempt_secret, key="big",
                 value=b"x" * 70000), S.attempt_secret),
             "RESOURCE_EXHAUSTED", "--rendezvous_max_bytes_per_namespace"),
            ("rendezvous key flood",
             lambda: [S.call("RendezvousSet", pb.RendezvousSetRequest(
                 namespace=S.namespace, secret=S.attempt_secret, key="flood-%d" % i,
                 value=b"x"), S.attempt_secret) for i in range(300)],
             "RESOURCE_EXHAUSTED", "--rendezvous_max_keys_per_namespace"),
            ("request over the receive limit",
             lambda: S.call("SubmitJob", pb.SubmitJobRequest(spec_text="#" * (2 << 20)),
                            TOKENS["bob"]),
             "RESOURCE_EXHAUSTED", "larger than max"),
            ("list page over the maximum",
             lambda: S.call("ListJobs", pb.ListJobsRequest(page_size=1000), TOKENS["bob"]),
             "INVALID_ARGUMENT", "page_size 1000 is not in [0, 5] (--max_list_page_size)"),
            ("world larger than the cluster's slots (it would wait forever)",
             # Rows above register attacker workers, so the alive slots are not fixed here: a
             # world far above any of them, and the message checked on both sides of the count.
             lambda: S.submit_as("bob", spec_text("huge", S.corpus, S.ckpt, 2, world_size=64)),
             "FAILED_PRECONDITION",
             ("world_size 64 needs 64 CPU slots; the ",
              "with that kind), so the job could never be placed. Add workers first, lower "
              "world_size 64 (or set elastic.min_world_size), or start the coordinator with "
              "--max_world_size=N for a cluster that will grow")),
            ("world larger than the user's running-rank quota",
             lambda: S.submit_as("bob", spec_text("wide", S.corpus, S.ckpt, 2, world_size=3)),
             "RESOURCE_EXHAUSTED", "job of world_size 3 could never start: user bob may run at "
             "most 2 ranks at once (--max_running_ranks_per_user)"),
            ("submit past the pending-job quota", S.fill_pending_quota,
             "RESOURCE_EXHAUSTED",
             "user bob has 2 pending jobs; at most 2 (--max_pending_jobs_per_user)"),
            ("cancel reason over the bound (the job must keep running)",
             lambda: S.call("CancelJob", pb.CancelJobRequest(job_id=S.running,
                                                              reason="r" * 5000), TOKENS["bob"]),
             "RESOURCE_EXHAUSTED", "cancel reason of 5000 bytes; at most 4096 (--max_reason_bytes)"),
            ("forged list page token",
             lambda: S.call("ListJobs", pb.ListJobsRequest(page_size=2, page_token="zzz"),
                            TOKENS["bob"]),
             "INVALID_ARGUMENT", "page"),
        ]

    def test_every_attack_is_refused_and_changes_nothing(self):
        rows = self.rows()
        for name, fn, code, text in rows:
            with self.subTest(row=name):
                self.refused(fn, code, text)
                self.assert_intact()
        # The rows run beside a training job: its step kept moving.
        self.assertGreater(self.get(self.running).step, 1)
        self.assertGreaterEqual(len(rows) + len(self.client_side_rows()), 25)

    def client_side_rows(self):
        """Rows refused before a request leaves the client, or outside gRPC."""
        return ["clear-text token off loopback", "token file readable by others",
                "slow metrics client", "worker reporting another worker's rank exited",
                "unknown gRPC method names", "metrics off loopback without a token"] + [
                    name for name, _, _, _ in self.dashboard_rows()]

    def http(self, method, path, headers=(), body=None):
        """(status, body) of one raw request to the dashboard (headers as given, Host too)."""
        host, port = self.dashboard.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=15) as s:
            lines = ["%s %s HTTP/1.1" % (method, path)] + ["%s: %s" % h for h in headers]
            if not any(k.lower() == "host" for k, _ in headers):
                lines.append("Host: " + self.dashboard)
            payload = (body or "").encode()
            if body is not None:
                lines += ["Content-Type: application/x-www-form-urlencoded",
                          "Content-Length: %d" % len(payload)]
            s.sendall(("\r\n".join(lines + ["Connection: close", "", ""])).encode() + payload)
            data = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        return int(head.split()[1]), head.decode(), rest.decode()

    def session_of(self, user):
        """A live dashboard session of `user` (an address-bar login)."""
        _, head, _ = self.http("GET", "/?token=" + TOKENS[user], [("Sec-Fetch-Site", "none")])
        return re.search(r"shardline_session=([0-9a-f]{64});", head).group(1)

    def dashboard_rows(self):
        """(name, request, code, text): HTTP attacks on the dashboard."""
        S = self  # noqa: N806
        own = "http://" + self.dashboard

        def after_logout():
            stolen = S.session_of("alice")
            S.http("POST", "/logout", [("Origin", own), ("Cookie", "shardline_session=" + stolen)],
                   "")
            return S.http("GET", "/api/jobs", [("Cookie", "shardline_session=" + stolen)])

        def swap_session():
            bob = S.session_of("bob")
            return S.http("GET", "/?token=" + TOKENS["alice"],
                          [("Sec-Fetch-Site", "none"), ("Cookie", "shardline_session=" + bob)])
        return [
            ("dashboard request with a forged Host (DNS rebinding)",
             lambda: S.http("GET", "/api/jobs", [("Host", "evil.example:80"),
                                                 ("Authorization", "Bearer " + TOKENS["bob"])]),
             421, 'evil.example:80\\" is not this dashboard\'s address'),
            ("cross-origin dashboard login form",
             lambda: S.http("POST", "/login", [("Origin", "http://evil.example")],
                            "token=" + TOKENS["bob"]),
             403, 'cross-origin request refused: Origin "http://evil.example"'),
            ("dashboard ?token= login from another site's link",
             lambda: S.http("GET", "/?token=" + TOKENS["bob"], [("Sec-Fetch-Site", "cross-site")]),
             403, "a ?token= login is taken only from the address bar"),
            ("dashboard ?token= login over another user's session",
             swap_session, 409, "already signed in as bob: sign out first"),
            ("stolen dashboard cookie after logout", after_logout,
             401, "no such session (expired, signed out, or not a session id)"),
            ("dashboard cookie holding the raw API token",
             lambda: S.http("GET", "/api/jobs",
                            [("Cookie", "shardline_session=" + TOKENS["ops"])]),
             401, "no such session"),
        ]

    def test_dashboard_attacks_are_refused_and_change_nothing(self):
        for name, fn, code, text in self.dashboard_rows():
            with self.subTest(row=name):
                status, head, body = fn()
                self.assertEqual(status, code, body)
                self.assertIn(text, body)
                self.assertNotIn("Set-Cookie", head)
                self.assert_intact()

    def test_clear_text_token_off_loopback_is_refused_by_the_client(self):
        proc = subprocess.run([harness.BINARIES.shardctl, "--coordinator=192.0.2.1:7070",
                               "--token_file=" + self.token_file["alice"], "list"],
                              capture_output=True, text=True, timeout=30)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("--insecure", proc.stderr)
        self.assertIn("clear text", proc.stderr)
        self.assert_intact()

    def test_token_file_readable_by_others_is_refused(self):
        loose = os.path.join(self.base, "loose.token")
        with open(loose, "w") as f:
            f.write(TOKENS["alice"])
        os.chmod(loose, 0o644)
        proc = self.cluster.shardctl("--token_file=" + loose, "list", check=False)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("chmod 600 " + loose, proc.stderr)
        self.assert_intact()

    def test_slow_metrics_client_does_not_stall_a_scrape(self):
        from prometheus_client.parser import text_string_to_metric_families
        host, port = self.metrics.rsplit(":", 1)
        # Fewer slow clients than --metrics_threads (4): each holds a thread until the request
        # deadline (--metrics_request_timeout_ms), and a scrape still gets one at once. (More slow
        # clients than threads delay a scrape by up to that deadline: docs/security.md.)
        slow = [socket.create_connection((host, int(port))) for _ in range(3)]
        for s in slow:
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # never finishes the request
        start = time.time()
        import urllib.request
        body = urllib.request.urlopen("http://%s/metrics" % self.metrics, timeout=15).read()
        self.assertLess(time.time() - start, 4)
        names = {f.name for f in text_string_to_metric_families(body.decode())}
        self.assertTrue(any(n.startswith("shardline_") for n in names), names)
        for s in slow:
            s.close()
        self.assert_intact()

    def scrape(self, address, token=None):
        import urllib.request
        req = urllib.request.Request("http://%s/metrics" % address)
        if token:
            req.add_header("Authorization", "Bearer " + token)
        return urllib.request.urlopen(req, timeout=15).read().decode()

    def test_unknown_methods_add_no_metric_series(self):
        for i in range(50):
            call = self.channel.unary_unary("/shardline.Coordinator/MadeUp%d" % i)
            with self.assertRaises(grpc.RpcError) as ctx:
                call(b"", metadata=[("authorization", "Bearer " + TOKENS["bob"])], timeout=20)
            self.assertEqual(ctx.exception.code(), grpc.StatusCode.UNIMPLEMENTED)
        body = self.scrape(self.metrics)
        self.assertNotIn("MadeUp", body)
        self.assertIn('shardline_rpc_total{code="UNIMPLEMENTED",method="unknown"}', body)
        self.assert_intact()

    def test_metrics_off_loopback_need_a_token(self):
        import urllib.error
        scrape = owner_only(os.path.join(self.base, "scrape.token"), "scrape-" + "e5" * 16 + "\n")
        users = os.path.join(self.base, "users")
        # All interfaces: not loopback, though this machine reaches it on 127.0.0.1.
        other = harness.Cluster(workers=0, coordinator_flags=[
            "--users_file=" + users, "--worker_token=" + JOIN, "--metrics_listen=0.0.0.0:0",
            "--metrics_token_file=" + scrape],
            shardctl_flags=["--token_file=" + self.token_file["alice"]])
        try:
            m = re.search(r"metrics on \S+:(\d+)",
                          open(os.path.join(other.dir, "coordinator.log")).read())
            address = "127.0.0.1:" + m.group(1)
            for token, why in ((None, 'metrics need "Authorization: Bearer <token>"'),
                               ("guess", "wrong token"), (JOIN, "wrong token")):
                with self.assertRaises(urllib.error.HTTPError) as ctx:
                    self.scrape(address, token)
                self.assertEqual(ctx.exception.code, 401)
                self.assertIn(why, ctx.exception.read().decode())
            for token in ("scrape-" + "e5" * 16, TOKENS["bob"]):
                self.assertIn("shardline_", self.scrape(address, token))
        finally:
            other.stop()
        self.assert_intact()

    def test_worker_reporting_another_workers_rank_exited_changes_nothing(self):
        attacker = self.register_attacker()
        req = pb.HeartbeatRequest(worker_id=attacker.worker_id)
        req.ranks.add(job_id=self.running, attempt=1, rank=0, state=pb.RankStatus.EXITED,
                      exit_code=0)
        self.call("Heartbeat", req, JOIN,
                  [("x-shardline-worker-credential", attacker.worker_credential)])
        time.sleep(1)
        self.assert_intact()  # bob's job did not "succeed"


if __name__ == "__main__":
    harness.run_tests(__name__)
