"""The chaos soak's jobs: the distinct specs, the stream that submits them, and the tracker that
records, while the soak runs, where each attempt was placed and when.

Specs (the tiny GPT on tiny Shakespeare, CPU, deterministic, as the integration tests):
  full_async  W = 2 FULL_SHARD, checkpoint.async_save, elastic down to 1
  hybrid      W = 4 HYBRID_SHARD (S = 2), elastic down to 2
  replica     W = 6 HYBRID_SHARD (S = 2), fault_tolerance REPLICA_GROUPS, min_replicas 1
Every spec: a checkpoint every 5 steps, keep_last 2, save_final, max_restarts 8, backoff 1 s.
"""
import os
import tempfile
import threading
import time

CORPUS = os.path.abspath(os.environ.get(
    "SHARDLINE_CORPUS", os.path.join(os.path.dirname(__file__), "..", "..", "data",
                                     "tinyshakespeare.txt")))
COLLECTIVE_TIMEOUT_S = 30
TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED")

SPECS = {
    "full_async": dict(world=2, strategy="FULL_SHARD", degree=0, steps=60, min_world=1,
                       extra="", sets=["checkpoint.async_save=true"]),
    "hybrid": dict(world=4, strategy="HYBRID_SHARD", degree=2, steps=60, min_world=2, extra="",
                   sets=[]),
    "replica": dict(world=6, strategy="HYBRID_SHARD", degree=2, steps=80, min_world=0,
                    extra="fault_tolerance: {mode: REPLICA_GROUPS, min_replicas: 1, "
                          "digest_every_steps: 1, vote_timeout_s: 5}", sets=[]),
}


def spec_text(name, ckpt_root):
    s = SPECS[name]
    w = s["world"]
    degree = ", hybrid_shard_degree: %d" % s["degree"] if s["degree"] else ""
    elastic = "elastic: {min_world_size: %d}" % s["min_world"] if s["min_world"] else ""
    return f"""
name: soak-{name.replace('_', '-')}
world_size: {w}
model: {{architecture: GPT, preset: tiny, init_seed: 1}}
data: {{path: {CORPUS}, format: TEXT, val_fraction: 0.1, seq_len: 32, shuffle_seed: 3}}
optimizer: {{kind: ADAMW, lr: 0.003, min_lr: 0.003, warmup_steps: 0}}
fsdp: {{sharding_strategy: {s["strategy"]}{degree}, collective_timeout_s: {COLLECTIVE_TIMEOUT_S}}}
train: {{steps: {s["steps"]}, global_batch_size: {w * 2}, micro_batch_size: 2, log_every: 1,
        eval_every: 0, eval_batches: 2, seed: 5, deterministic: true, sample_tokens: 0}}
device: {{kind: CPU, cpu_threads: 1}}
checkpoint: {{dir: {ckpt_root}, every_steps: 5, keep_last: 2, save_final: true}}
restart: {{max_restarts: 8, backoff_s: 1}}
{elastic}
{s["extra"]}
"""


def submit(sc, name, spec_dir):
    """Submits spec `name`; its job id, or None when the coordinator did not answer."""
    fd, path = tempfile.mkstemp(prefix=name + "-", suffix=".yaml", dir=spec_dir)
    with os.fdopen(fd, "w") as f:
        f.write(spec_text(name, sc.ckpt_root))
    args = ["submit", path] + [a for s in SPECS[name]["sets"] for a in ("--set", s)]
    for _ in range(20):  # the coordinator may be down for a few seconds: retry, bounded
        proc = sc.ctl(*args)
        if proc is not None:
            return proc.stdout.strip().splitlines()[0]
        time.sleep(1)
    return None


class Tracker:
    """Polls `shardctl status` of the live jobs about once a second and keeps, per job, its last
    status and the nodes of every (attempt, generation) placement it saw."""

    # `on_end(job)`: called once, from the polling thread, when a job is first seen ended (the
    # soak verifies and then removes its checkpoints there, so the tmpfs holds live jobs only).
    def __init__(self, sc, on_end=None):
        self.sc = sc
        self.jobs = {}  # job id -> {"spec", "submitted", "status", "placements": {(a, g): set}}
        self.lock = threading.Lock()
        self.on_end = on_end or (lambda job: None)

    def add(self, job, spec_name):
        with self.lock:
            self.jobs[job] = {"spec": spec_name, "submitted": time.time(), "status": {},
                              "placements": {}}

    def live(self):
        with self.lock:
            return [j for j, r in self.jobs.items() if r["status"].get("state") not in TERMINAL]

    def poll_once(self):
        for job in self.live():
            st = self.sc.ctl_json("status", job)
            if not st:
                continue
            with self.lock:
                rec = self.jobs[job]
                rec["status"] = st
                attempt = int(st.get("attempt", 0))
                for p in st.get("placement", []):
                    key = (attempt, int(p.get("generation", 0)))
                    rec["placements"].setdefault(key, set()).add(p["node_name"])
            if st.get("state") in TERMINAL:
                self.on_end(job)


def run_stream(sc, tracker, stop, spec_dir, max_in_flight=2, max_jobs=200):
    """Submits the specs in turn, keeping at most `max_in_flight` jobs live, until `stop` is set
    (or `max_jobs` were submitted); polls the tracker meanwhile."""
    order = list(SPECS)
    n = 0
    while not stop.is_set() and n < max_jobs:
        tracker.poll_once()
        if len(tracker.live()) < max_in_flight:
            name = order[n % len(order)]
            job = submit(sc, name, spec_dir)
            if job:
                tracker.add(job, name)
                print("soak: submitted %s (%s)" % (job, name), flush=True)
                n += 1
        stop.wait(1.0)


def drain(tracker, timeout_s):
    """Polls until every tracked job has ended, at most timeout_s; the jobs still live."""
    deadline = time.time() + timeout_s
    while tracker.live() and time.time() < deadline:
        tracker.poll_once()
        time.sleep(1.0)
    return tracker.live()
