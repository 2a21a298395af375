"""Coordinator memory under hostile clients (issue #31): the coordinator's resident set while a
client holding real credentials sends the worst request of each kind, all kinds at once, for
--seconds (default 60).

A real local cluster (tests/integration/harness.py's Cluster): a coordinator with users, a worker
join token and its default bounds (rendezvous 64 MiB and 65,536 keys per namespace, 8 MiB per
response, 4 MiB per request, 1,000 pending jobs and 64 MiB of specs per user, 4 KiB reasons, 1,000
rows per list page, 1 GiB gRPC memory quota), one worker daemon running one long rank of a job of
alice's, whose attempt credential (read from the trainer's environment, as job code could) is the
attacker's. One thread per kind, each on its own connection:

  rdzv_get_repeat   RendezvousGet naming one 1 MiB key 2,000 times (once a 2,000 MiB answer)
  rdzv_get_big      RendezvousGet of the namespace's values up to the response bound
  rdzv_set_flood    RendezvousSet of new 1 MiB values until the namespace's bound, then more
  oversize_request  SubmitJob of a 5 MiB spec (over the receive limit)
  submit_flood      SubmitJob of mallory's jobs until her pending quota refuses them
  cancel_reason     CancelJob of alice's job with a 1 MiB reason, by mallory
  list_pages        ListJobs with page_size 10^6, then the largest page allowed
  get_logs          GetLogs of the running job with tail_lines 10^9
  unknown_method    calls to made-up method names (no metric series, no state)
  ship_logs         ShipLogs from a registered attacker node for ranks not placed on it
  watch_streams     WatchJob streams opened, read once and dropped

It samples the coordinator's VmRSS every 0.25 s and prints a table (requests, answers, refusals
by code per kind) and the resident set at the start, its peak (VmHWM) and at the end, with the
peak of each tenth of the run, so a leak shows as a rising last tenth. Writes
bench/results/hostile_rss.txt. Exits 1 when the peak exceeds --bound_mib (default 1536: the gRPC
memory quota plus the namespace's 64 MiB and a margin), or the last tenth's peak is above the
first half's by more than 64 MiB (growth, not a plateau).

Before issue #31's fix the rendezvous row alone took the coordinator from 22 MiB to a 4 GiB peak.
"""
import argparse
import collections
import os
import re
import shutil
import sys
import tempfile
import threading
import time

import benchlib

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
import harness  # noqa: E402

TOKENS = {"alice": "alice-" + "a1" * 16, "mallory": "mallory-" + "m2" * 16}
JOIN = "join-" + "d4" * 16
MIB = 1 << 20


def owner_only(path, text):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return path


def spec_text(name, corpus, ckpt, steps):
    return f"""
name: {name}
world_size: 1
model: {{architecture: GPT, preset: tiny, init_seed: 1}}
data: {{path: {corpus}, format: TEXT, val_fraction: 0.1, seq_len: 32, shuffle_seed: 3}}
optimizer: {{kind: ADAMW, lr: 0.003, min_lr: 0.003, warmup_steps: 0}}
fsdp: {{sharding_strategy: FULL_SHARD, collective_timeout_s: 60}}
train: {{steps: {steps}, global_batch_size: 2, micro_batch_size: 2, log_every: 100,
        eval_every: 0, eval_batches: 1, seed: 5, sample_tokens: 0}}
device: {{kind: CPU, cpu_threads: 1}}
checkpoint: {{dir: {ckpt}, every_steps: 0, keep_last: 1, save_final: false}}
restart: {{max_restarts: 0}}
"""


def rss_kib(pid, field="VmRSS"):
    with open("/proc/%d/status" % pid) as f:
        return int(re.search(r"^%s:\s+(\d+) kB" % field, f.read(), re.M).group(1))


class Attack:
    """One kind: a function sending one request, run in a loop by its own thread."""

    def __init__(self, name, send):
        self.name = name
        self.send = send
        self.counts = collections.Counter()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True, help="bazel-bin")
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--bound_mib", type=float, default=1536)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "hostile_rss.txt"))
    a = ap.parse_args()
    harness.BINARIES = harness.Binaries([
        "coordinator=" + os.path.join(a.bin, "coordinator", "coordinator"),
        "worker=" + os.path.join(a.bin, "worker", "worker"),
        "trainer=" + os.path.join(a.bin, "trainer", "trainer"),
        "shardctl=" + os.path.join(a.bin, "cli", "shardctl")])
    harness.client_stub_root()
    import grpc
    from shardline._proto import coordinator_pb2 as pb, coordinator_pb2_grpc as rpc

    header = benchlib.machine_header(
        "hostile_rss: coordinator resident set under the worst request of each kind")
    print(header, flush=True)
    base = tempfile.mkdtemp(prefix="hostile_rss_")
    corpus = shutil.copy(os.path.join(REPO, "data", "tinyshakespeare.txt"),
                         os.path.join(base, "corpus.txt"))
    ckpt = os.path.join(base, "ckpt")
    os.makedirs(ckpt)
    users = owner_only(os.path.join(base, "users"), "".join(
        "%s %s\n" % kv for kv in TOKENS.items()))
    join = owner_only(os.path.join(base, "join.token"), JOIN + "\n")
    cluster = harness.Cluster(workers=0, grace_period_s=3, parent=base,
                              coordinator_flags=["--users_file=" + users,
                                                 "--worker_token_file=" + join],
                              shardctl_flags=["--token_file=" + owner_only(
                                  os.path.join(base, "alice.token"), TOKENS["alice"] + "\n")])
    try:
        cluster.start_worker(0, 1, grace_period_s=3, flags=["--join_token_file=" + join])
        cluster.wait_for_workers(1)
        coordinator = cluster.procs["coordinator"].pid

        setup = rpc.CoordinatorStub(grpc.insecure_channel(cluster.address))
        alice = [("authorization", "Bearer " + TOKENS["alice"])]
        mallory = [("authorization", "Bearer " + TOKENS["mallory"])]
        running = setup.SubmitJob(pb.SubmitJobRequest(
            spec_text=spec_text("long", corpus, ckpt, 10**7)), metadata=alice).job_id
        pid, deadline = None, time.time() + 120
        while pid is None and time.time() < deadline:
            pid = cluster.rank_pid(0, running, 1, 0)
            time.sleep(0.2)
        env = dict(kv.split("=", 1) for kv in open("/proc/%d/environ" % pid, "rb").read()
                   .decode().split("\0") if "=" in kv)
        secret, namespace = env["SHARDLINE_RDZV_SECRET"], env["SHARDLINE_RDZV_NAMESPACE"]
        attempt = [("authorization", "Bearer " + secret)]
        setup.RendezvousSet(pb.RendezvousSetRequest(namespace=namespace, secret=secret,
                                                    key="big-0", value=b"x" * MIB),
                            metadata=attempt)
        reg = pb.RegisterWorkerRequest(node_name="attacker", address="127.0.0.1")
        reg.slots.add(kind=pb.Slot.CPU, index=0)
        attacker = setup.RegisterWorker(reg, metadata=[("authorization", "Bearer " + JOIN)])
        worker_md = [("authorization", "Bearer " + JOIN),
                     ("x-shardline-worker-credential", attacker.worker_credential)]
        time.sleep(1)
        start_kib = rss_kib(coordinator)

        def per_thread(make):
            """A sender with a connection of its own per thread: make(stub, channel, n)."""
            local = threading.local()

            def send():
                if not hasattr(local, "channel"):
                    local.channel = grpc.insecure_channel(cluster.address, options=[
                        ("grpc.max_receive_message_length", 64 * MIB),
                        ("grpc.max_send_message_length", 64 * MIB)])
                    local.stub = rpc.CoordinatorStub(local.channel)
                    local.n = 0
                local.n += 1
                return make(local.stub, local.channel, local.n)
            return send

        big_keys = []

        def rdzv_set(s, c, n):
            s.RendezvousSet(pb.RendezvousSetRequest(namespace=namespace, secret=secret,
                                                    key="flood-%d" % n, value=b"y" * MIB),
                            metadata=attempt, timeout=30)
            if len(big_keys) < 7:
                big_keys.append("flood-%d" % n)

        def ship(s, c, n):
            req = pb.ShipLogsRequest(worker_id=attacker.worker_id)
            req.chunks.add(job_id=running, attempt=1, rank=0, lines=["forged %d" % n] * 1000)
            s.ShipLogs(req, metadata=worker_md, timeout=30)

        def watch(s, c, n):
            stream = s.WatchJob(pb.WatchJobRequest(job_id=running), metadata=alice, timeout=30)
            next(stream)
            stream.cancel()

        def unknown(s, c, n):
            c.unary_unary("/shardline.Coordinator/Nope%d" % (n % 1000))(
                b"", metadata=alice, timeout=30)

        attacks = [
            Attack("rdzv_get_repeat", per_thread(lambda s, c, n: s.RendezvousGet(
                pb.RendezvousGetRequest(namespace=namespace, secret=secret,
                                        keys=["big-0"] * 2000), metadata=attempt, timeout=30))),
            Attack("rdzv_get_big", per_thread(lambda s, c, n: s.RendezvousGet(
                pb.RendezvousGetRequest(namespace=namespace, secret=secret,
                                        keys=["big-0"] + big_keys[:7]), metadata=attempt,
                timeout=30))),
            Attack("rdzv_set_flood", per_thread(rdzv_set)),
            Attack("oversize_request", per_thread(lambda s, c, n: s.SubmitJob(
                pb.SubmitJobRequest(spec_text="#" * (5 * MIB)), metadata=mallory,
                timeout=30))),
            Attack("submit_flood", per_thread(lambda s, c, n: s.SubmitJob(
                pb.SubmitJobRequest(spec_text=spec_text("flood-%d" % n, corpus, ckpt, 2)),
                metadata=mallory, timeout=30))),
            Attack("cancel_reason", per_thread(lambda s, c, n: s.CancelJob(
                pb.CancelJobRequest(job_id=running, reason="r" * MIB), metadata=mallory,
                timeout=30))),
            Attack("list_pages", per_thread(lambda s, c, n: s.ListJobs(
                pb.ListJobsRequest(page_size=10**6 if n % 2 else 1000), metadata=mallory,
                timeout=30))),
            Attack("get_logs", per_thread(lambda s, c, n: s.GetLogs(
                pb.GetLogsRequest(job_id=running, all_ranks=True, tail_lines=10**9),
                metadata=alice, timeout=30))),
            Attack("unknown_method", per_thread(unknown)),
            Attack("ship_logs", per_thread(ship)),
            Attack("watch_streams", per_thread(watch)),
        ]
        stop = threading.Event()

        def loop(attack):
            while not stop.is_set():
                try:
                    attack.send()
                    attack.counts["OK"] += 1
                except grpc.RpcError as e:
                    attack.counts[e.code().name] += 1
                except StopIteration:
                    attack.counts["ended"] += 1

        samples = []
        threads = [threading.Thread(target=loop, args=(at,), daemon=True) for at in attacks]
        t0 = time.time()
        for t in threads:
            t.start()
        while time.time() - t0 < a.seconds:
            samples.append((time.time() - t0, rss_kib(coordinator)))
            time.sleep(0.25)
        stop.set()
        for t in threads:
            t.join(timeout=60)
        end_kib = rss_kib(coordinator)
        peak_kib = rss_kib(coordinator, "VmHWM")
        serving = setup.GetJob(pb.GetJobRequest(job_id=running), metadata=alice)
        still_running = pb.JobState.Name(serving.state) == "RUNNING"
    finally:
        cluster.stop()
    shutil.rmtree(base, ignore_errors=True)

    lines = [header.rstrip(),
             "coordinator defaults (bounds above); %d attack threads for %.0f s; rdzv values 1 MiB"
             % (len(attacks), a.seconds), "",
             "%-17s %9s  %s" % ("kind", "requests", "answers by code")]
    for at in attacks:
        total = sum(at.counts.values())
        codes = ", ".join("%s %d" % kv for kv in sorted(at.counts.items()))
        lines.append("%-17s %9d  %s" % (at.name, total, codes))
    tenth = max(1, len(samples) // 10)
    tenths = [max(r for _, r in samples[i:i + tenth]) for i in range(0, len(samples), tenth)]
    first_half = max(r for _, r in samples[:len(samples) // 2])
    last_tenth = tenths[-1]
    lines += ["",
              "coordinator VmRSS: %.1f MiB at the start, peak %.1f MiB (VmHWM), %.1f MiB at the end"
              % (start_kib / 1024, peak_kib / 1024, end_kib / 1024),
              "peak of each tenth of the run (MiB): " +
              " ".join("%.0f" % (r / 1024) for r in tenths),
              "alice's job still RUNNING after the run: %s" % ("yes" if still_running else "NO")]
    bounded = peak_kib / 1024 <= a.bound_mib and last_tenth <= first_half + 64 * 1024
    lines.append("RESULT: %s (peak bound %.0f MiB; last tenth within 64 MiB of the first half's "
                 "peak)" % ("PASS" if bounded and still_running else "FAIL", a.bound_mib))
    text = "\n".join(lines) + "\n"
    print(text)
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        f.write(text)
    return 0 if bounded and still_running else 1


if __name__ == "__main__":
    sys.exit(main())
