#!/usr/bin/env python3
"""Learning-rate sweep from Python: submits one tiny GPT job per learning rate, watches them all
until they end, and plots their training-loss curves to a PNG.

    bazel build //cli:shardctl //coordinator:coordinator //worker:worker //trainer:trainer
    bazel-bin/cli/shardctl cluster up              # 2 workers x 2 CPU slots on this machine
    .venv/bin/python examples/python/lr_sweep.py   # writes lr_sweep.png
    bazel-bin/cli/shardctl cluster down

The coordinator is found like shardctl finds it (--address, $SHARDLINE_COORDINATOR,
~/.shardline/config, or ./.cluster/cluster.json). The default run is short: 3 jobs of 1 rank x
30 steps, a minute or two on a laptop CPU.

Loss curves come from the coordinator's training series of each job (Client.metrics: every
logged step of rank 0, docs/observability.md), read once the job has ended.
"""
import argparse
import os
import threading
from typing import Dict, List, Tuple

import shardline

HERE = os.path.dirname(os.path.abspath(__file__))


def spec_for(lr: float, steps: int, data: str) -> dict:
    """The job as a user writes it: a preset and defaults for everything not about the sweep."""
    return {
        "name": "lr-sweep-%g" % lr,
        "world_size": 1,
        "model": {"preset": "tiny"},
        "data": {"path": data, "seq_len": 64},
        "optimizer": {"lr": lr, "min_lr": lr / 10, "warmup_steps": 2},
        "train": {"steps": steps, "micro_batch_size": 8, "log_every": 1, "eval_batches": 2},
        "device": {"cpu_threads": 1},
    }


def watch_losses(client: shardline.Client, job: str, out: List[Tuple[int, float]],
                 final: Dict[str, shardline.JobStatus]) -> None:
    final[job] = client.wait(job)
    out.extend((p.step, p.loss) for p in client.metrics(job).points)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lrs", default="1e-3,3e-3,1e-2", help="comma-separated learning rates")
    parser.add_argument("--steps", type=int, default=30, help="training steps per job")
    parser.add_argument("--data", default=os.path.join(HERE, "..", "..", "data",
                                                       "tinyshakespeare.txt"))
    parser.add_argument("--out", default="lr_sweep.png", help="PNG file to write")
    parser.add_argument("--address", default=None, help="coordinator host:port")
    args = parser.parse_args()
    lrs = [float(x) for x in args.lrs.split(",")]

    client = shardline.Client(address=args.address)
    jobs = {}
    for lr in lrs:
        job = client.submit(spec_for(lr, args.steps, os.path.abspath(args.data)))
        jobs[job] = lr
        print("submitted %s (lr=%g)" % (job, lr))

    curves: Dict[str, List[Tuple[int, float]]] = {job: [] for job in jobs}
    final: Dict[str, shardline.JobStatus] = {}
    threads = [threading.Thread(target=watch_losses, args=(client, job, curves[job], final))
               for job in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    import matplotlib
    matplotlib.use("Agg")  # no display needed
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    failed = 0
    for job, lr in jobs.items():
        state = shardline.state_name(final[job]) if job in final else "UNKNOWN"
        points = curves[job]
        print("%s lr=%g: %s, %d points, final loss %s" % (
            job, lr, state, len(points), "%.4f" % points[-1][1] if points else "-"))
        failed += state != "SUCCEEDED"
        if points:
            ax.plot([s for s, _ in points], [l for _, l in points], marker=".",
                    label="lr=%g (%s)" % (lr, job))
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (rank 0)")
    ax.set_title("Shardline LR sweep: tiny GPT on tiny Shakespeare")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print("wrote", args.out)
    client.close()
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
