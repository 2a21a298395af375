"""Trainer ranks started by hand, as torchrun would start them (no cluster): the one helper of the
tests that run //trainer directly at several world sizes (hf/hf_fsdp_test.py,
checkpoint/dcp_test.py, checkpoint/dcp_import_test.py).

    losses, log0 = run_ranks(trainer, spec, 4, os.path.join(tmp, "w4"), "hf-fsdp")

Rank R gets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT (a free loopback port), one thread,
and a store secret named after `tag` and the port; it writes PREFIX.log.R (stderr) and
PREFIX.R.jsonl (--metrics_out). Each rank may run 300 s.
"""
import json
import os
import socket
import subprocess


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(trainer, spec, world, prefix, tag):
    """Runs `world` ranks of `trainer` on `spec`; returns ({step: loss} logged by rank 0, rank 0's
    log), or (None, rank 0's log) when a rank failed (each failed rank's log tail is printed)."""
    port = free_port()
    procs = []
    for r in range(world):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(world), LOCAL_RANK=str(r),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1",
                   SHARDLINE_STORE_SECRET=f"{tag}-{port}")
        log = open(f"{prefix}.log.{r}", "w")
        procs.append((subprocess.Popen(
            [trainer, "--spec", spec, "--metrics_out", f"{prefix}.{r}.jsonl"],
            stdout=subprocess.DEVNULL, stderr=log, env=env), log))
    codes = []
    for p, log in procs:
        try:
            codes.append(p.wait(timeout=300))
        except subprocess.TimeoutExpired:
            p.kill()
            codes.append(-9)
        log.close()
    with open(f"{prefix}.log.0") as f:
        log0 = f.read()
    if any(codes):
        for r, c in enumerate(codes):
            if c:
                with open(f"{prefix}.log.{r}") as f:
                    print(f"rank {r} exited {c}:\n" + f.read()[-2000:])
        return None, log0
    losses = {}
    with open(f"{prefix}.0.jsonl") as f:
        for line in f:
            rec = json.loads(line)
            if "loss" in rec and "step" in rec:
                losses[rec["step"]] = rec["loss"]
    return losses, log0
