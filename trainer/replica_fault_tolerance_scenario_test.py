"""Replica-group fault tolerance of the trainer binary, before the real coordinator side exists:
four trainer processes (W = 4, HYBRID_SHARD S = 2) against a scripted coordinator in this process
that answers StepVote (and the rendezvous and checkpoint reports), like docs/failures.md's
"Replica-group fault tolerance" says the coordinator does:

  * every member voted ok: COMMIT with the mean loss (and, at a step's last vote, admits a group
    of replacements that all voted joining, healed from the lowest live group); a step with
    evaluation or a save has a second vote (phase AFTER_STEP) on that work;
  * a not-ok vote: waits 3 s for the missing votes; the groups still missing a vote are lost:
    ABORT (new epoch without them) to the others, LEAVE to their survivors.

Scenario 1: rank 2 is SIGKILLed at step 10; group 0 trains on alone; a replacement group (ranks 2
and 3, SHARDLINE_RANK_GENERATION=1) joins, is healed, and every replica's digest agrees with its
peer's until the end. Scenario 2: rank 1 (group 0) is killed with checkpoints every 10 steps;
group 1 writes and commits the later checkpoints, and its first rank logs and writes TensorBoard.

Run by sh_test through tests/integration/run_venv_python.sh (grpcio); args: trainer=PATH.
"""
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent import futures

S = 2
SPEC = "examples/tiny_gpt_shakespeare.yaml"


def stubs():
    root = tempfile.mkdtemp(prefix="ft_stubs_", dir=os.environ.get("TEST_TMPDIR"))
    sys.path.insert(0, "python")
    import gen_protos  # python/gen_protos.py
    gen_protos.generate("proto", root)
    open(os.path.join(root, "shardline", "__init__.py"), "w").close()
    sys.path.insert(0, root)


stubs()
import grpc  # noqa: E402
from shardline._proto import coordinator_pb2 as pb  # noqa: E402
from shardline._proto import coordinator_pb2_grpc as pbg  # noqa: E402


class ScriptedCoordinator(pbg.CoordinatorServicer):
    def __init__(self, groups):
        self.cv = threading.Condition()
        self.epoch, self.live = 0, list(range(groups))
        self.votes, self.decided, self.first_fail = {}, {}, {}
        self.joiners, self.admitted = {}, {}
        self.digests = {}  # step -> {rank: digest}
        self.events = []
        self.kv = {}

    def members(self):
        return [g * S + i for g in self.live for i in range(S)]

    def _decide(self, key):
        step, phase, epoch = key
        if key in self.decided or epoch != self.epoch:
            return
        v, m = self.votes.get(key, {}), self.members()
        if all(r in v for r in m) and all(v[r].ok for r in m):
            loss = sum(v[r].loss for r in m) / len(m)
            ds = {r: v[r].digest for r in m if v[r].has_digest}
            if ds:
                self.digests[step] = ds
            # Joiners wait for the step's last vote (they take no part in its evaluation or save).
            last_vote = phase == pb.StepVoteRequest.AFTER_STEP or \
                not any(v[r].after_step_follows for r in m)
            joining = sorted({r // S for r in self.joiners if last_vote and
                              all(r // S * S + i in self.joiners for i in range(S))})
            src = self.live[0]
            if joining:
                self.live, self.epoch = sorted(self.live + joining), self.epoch + 1
                self.events.append(("HEALED", joining, step))
            resp = dict(decision=pb.StepVoteResponse.COMMIT, step=step, phase=phase, loss=loss,
                        epoch=self.epoch, live_groups=self.live, joining_groups=joining,
                        heal_source_group=src)
            self.decided[key] = {r: pb.StepVoteResponse(**resp) for r in m}
            for g in joining:
                for i in range(S):
                    self.admitted[g * S + i] = pb.StepVoteResponse(**resp)
                    del self.joiners[g * S + i]
            return
        if any(not b.ok for b in v.values()):
            self.first_fail.setdefault(key, time.time())
            if time.time() - self.first_fail[key] < 3 and not all(r in v for r in m):
                return
            lost = sorted({r // S for r in m if r not in v}) or \
                sorted({r // S for r in m if not v[r].ok})[-1:]
            self.live, self.epoch = [g for g in self.live if g not in lost], self.epoch + 1
            self.events.append(("LOST", lost, step))
            kind = {True: pb.StepVoteResponse.LEAVE, False: pb.StepVoteResponse.ABORT}
            self.decided[key] = {
                r: pb.StepVoteResponse(decision=kind[r // S in lost], step=step, phase=phase,
                                       epoch=self.epoch, live_groups=self.live) for r in m}

    def StepVote(self, req, ctx):
        deadline = time.time() + 20
        with self.cv:
            if req.joining:
                self.joiners[req.rank] = req
                while req.rank not in self.admitted:
                    if time.time() > deadline:
                        ctx.abort(grpc.StatusCode.DEADLINE_EXCEEDED, "no decision yet")
                    self.cv.wait(0.2)
                return self.admitted.pop(req.rank)
            key = (req.step, req.phase, req.epoch)
            self.votes.setdefault(key, {})[req.rank] = req
            while True:
                self._decide(key)
                if key in self.decided and req.rank in self.decided[key]:
                    self.cv.notify_all()
                    return self.decided[key][req.rank]
                if time.time() > deadline:
                    ctx.abort(grpc.StatusCode.DEADLINE_EXCEEDED, "no decision yet")
                self.cv.wait(0.2)

    def RendezvousSet(self, req, ctx):
        with self.cv:
            self.kv[(req.namespace, req.key)] = req.value
            self.cv.notify_all()
        return pb.RendezvousSetResponse()

    def RendezvousGet(self, req, ctx):
        deadline = time.time() + req.timeout_ms / 1000.0
        with self.cv:
            while not all((req.namespace, k) in self.kv for k in req.keys):
                if time.time() > deadline:
                    ctx.abort(grpc.StatusCode.DEADLINE_EXCEEDED, "keys missing")
                self.cv.wait(0.2)
            return pb.RendezvousGetResponse(values=[self.kv[(req.namespace, k)] for k in req.keys])

    def ReportCheckpoint(self, req, ctx):
        return pb.ReportCheckpointResponse()


class Job:
    def __init__(self, trainer, name, steps, extra=()):
        self.trainer, self.name, self.steps, self.extra = trainer, name, steps, list(extra)
        self.coord = ScriptedCoordinator(groups=2)
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
        pbg.add_CoordinatorServicer_to_server(self.coord, self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()
        self.dir = tempfile.mkdtemp(prefix=name + "_", dir=os.environ.get("TEST_TMPDIR"))
        self.procs = {}

    def start(self, rank, generation=0):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="4", LOCAL_RANK=str(rank),
                   SHARDLINE_COORDINATOR="127.0.0.1:%d" % self.port, SHARDLINE_JOB_ID=self.name,
                   SHARDLINE_ATTEMPT="1", SHARDLINE_RDZV_NAMESPACE=self.name + "/1",
                   SHARDLINE_RDZV_SECRET="secret", SHARDLINE_RANK_GENERATION=str(generation),
                   OMP_NUM_THREADS="1")
        log = open(self.log(rank, generation), "w")
        cmd = [self.trainer, "--spec", SPEC, "--set", "fault_tolerance.mode=REPLICA_GROUPS",
               "--set", "fault_tolerance.digest_every_steps=5", "--set", "train.steps=%d" % self.steps,
               "--set", "train.log_every=1", "--set", "train.eval_every=0",
               "--set", "train.sample_tokens=0", "--set", "fsdp.collective_timeout_s=30"] + self.extra
        self.procs[(rank, generation)] = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL,
                                                          stderr=log)

    def log(self, rank, generation=0):
        return os.path.join(self.dir, "rank%d.gen%d.log" % (rank, generation))

    def text(self, rank, generation=0):
        with open(self.log(rank, generation)) as f:
            return f.read()

    def wait_for(self, rank, pattern, timeout=240):
        end = time.time() + timeout
        while time.time() < end:
            if re.search(pattern, self.text(rank)):
                return
            time.sleep(0.2)
        raise AssertionError("rank %d never logged %r:\n%s" % (rank, pattern, self.text(rank)[-3000:]))

    def exit_code(self, rank, generation=0, timeout=300):
        return self.procs[(rank, generation)].wait(timeout=timeout)

    def close(self):
        for p in self.procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
        self.server.stop(0)


def check(cond, what, job=None):
    if not cond:
        logs = ""
        if job is not None:
            for (r, g) in sorted(job.procs):
                logs += "\n---- rank %d gen %d\n%s" % (r, g, job.text(r, g)[-2500:])
        raise AssertionError(what + logs)


def test_lost_group_leaves_survivors_train_on_and_a_replacement_is_healed(trainer):
    job = Job(trainer, "ft-heal", steps=120)
    try:
        for r in range(4):
            job.start(r)
        job.wait_for(0, r"step 10/120 ")
        job.procs[(2, 0)].send_signal(signal.SIGKILL)
        job.wait_for(0, r"aborted: .*; training it again with replica groups \[0\] \(epoch 1\)")
        rc3 = job.exit_code(3)
        # Its LEAVE (7), or its own failure in a step's update after the commit (4).
        check(rc3 in (4, 7), "rank 3 exited %d" % rc3, job)
        job.start(2, generation=1)
        job.start(3, generation=1)
        for r in (0, 1):
            check(job.exit_code(r) == 0, "survivor rank %d failed" % r, job)
        for r in (2, 3):
            check(job.exit_code(r, 1) == 0, "replacement rank %d failed" % r, job)
            check(re.search(r"healed from replica group 0 at step \d+", job.text(r, 1)),
                  "replacement rank %d was not healed" % r, job)
        check(job.coord.events[0][:2] == ("LOST", [1]), "events %s" % job.coord.events, job)
        check(job.coord.events[1][:2] == ("HEALED", [1]), "events %s" % job.coord.events, job)
        healed_at = job.coord.events[1][2]
        after = [s for s in job.coord.digests if s > healed_at]
        check(after and max(after) == 120, "digests after the heal: %s" % after, job)
        for s in after:
            d = job.coord.digests[s]
            check(d[0] == d[2] and d[1] == d[3] and d[0] != d[1], "step %d digests %s" % (s, d), job)
        check("finished 120 steps" in job.text(0), "rank 0 did not finish", job)
    finally:
        job.close()


def test_group_zero_lost_then_group_one_writes_and_commits_the_checkpoints(trainer):
    ckpt = tempfile.mkdtemp(prefix="ft_ckpt_", dir=os.environ.get("TEST_TMPDIR"))
    tb = tempfile.mkdtemp(prefix="ft_tb_", dir=os.environ.get("TEST_TMPDIR"))
    job = Job(trainer, "ft-ckpt", steps=40,
              extra=["--set", "checkpoint.dir=" + ckpt, "--set", "checkpoint.every_steps=10",
                     "--set", "train.tensorboard_dir=" + tb])
    try:
        for r in range(4):
            job.start(r)
        job.wait_for(0, r"step 15/40 ")
        job.procs[(1, 0)].send_signal(signal.SIGKILL)
        check(job.exit_code(0) in (4, 7), "rank 0 should leave", job)
        for r in (2, 3):
            check(job.exit_code(r) == 0, "survivor rank %d failed" % r, job)
        check("finished 40 steps" in job.text(2), "rank 2 (the new leader) did not log", job)
        root = os.path.join(ckpt, "ft-ckpt")
        for step in (20, 30, 40):
            check(os.path.exists(os.path.join(root, "step_%d" % step, "MANIFEST.json")),
                  "step %d not committed: %s" % (step, sorted(os.listdir(root))), job)
        # TensorBoard goes on: rank 2, the new leader, opens an event file of its own in the run
        # (rank 0's ends at the kill); merged, the run's loss covers every step to the end.
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
        run = os.path.join(tb, "ft-ckpt")  # <tensorboard_dir>/<job id>
        files = sorted(os.listdir(run))
        check(len(files) == 2, "want rank 0's and rank 2's event files: %s" % files, job)
        check("leading the job: TensorBoard events go to " in job.text(2),
              "rank 2 did not open an event file", job)
        acc = EventAccumulator(run, size_guidance={"scalars": 0})
        acc.Reload()
        steps = sorted({e.step for e in acc.Scalars("loss")})
        check(steps == list(range(1, 41)), "loss steps in TensorBoard: %s" % steps, job)
    finally:
        job.close()


def main():
    paths = dict(a.split("=", 1) for a in sys.argv[1:] if "=" in a)
    trainer = os.path.abspath(paths["trainer"])
    failed = 0
    for name, fn in list(globals().items()):
        if name.startswith("test_"):
            t0 = time.time()
            try:
                fn(trainer)
                print("PASSED %s (%.0fs)" % (name, time.time() - t0), flush=True)
            except Exception as e:  # noqa: BLE001
                failed += 1
                print("FAILED %s: %s" % (name, e), flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
