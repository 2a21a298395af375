"""One rank of the PyTorch FSDP2 side of bench/fsdp_vs_torch.py.

Started like a torchrun worker (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT in the environment)
by the benchmark driver. Trains bench/gpt_mirror.py's GPT with torch.distributed.fsdp.fully_shard
(FSDP2) on CPU over Gloo, with the same wrapping as our TRANSFORMER_BLOCK policy (one unit per
Block, the root unit holding wte, wpe and ln_f; parameters resharded after forward: FULL_SHARD;
with --shard_degree S, hybrid sharding over a 2-D (replicate, shard) device mesh: HYBRID_SHARD),
AdamW, gradient clipping, the trainer's warmup + cosine schedule, and the global batches our
sampler produced (bench/batch_dump_main.cc), sliced per rank and micro-step as
data::DistributedSampler slices them. Writes one JSON line per step (rank 0):
{"step", "loss", "lr", "grad_norm", "step_time_s"}; the step time covers what the trainer's
does: forward/backward of the micro-batches, clipping, the optimizer step and the all-reduce of
the logged loss.
"""
import argparse
import json
import os
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from safetensors.torch import load_file
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

import gpt_mirror


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--init", required=True, help="safetensors with the initial weights")
    ap.add_argument("--batches", required=True, help="batch_dump output")
    ap.add_argument("--n_embd", type=int, required=True)
    ap.add_argument("--n_layer", type=int, required=True)
    ap.add_argument("--n_head", type=int, required=True)
    ap.add_argument("--vocab_size", type=int, default=256)
    ap.add_argument("--block_size", type=int, required=True)
    ap.add_argument("--seq_len", type=int, required=True)
    ap.add_argument("--global_batch_size", type=int, required=True)
    ap.add_argument("--micro_batch_size", type=int, required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--lr", type=float, required=True)
    ap.add_argument("--min_lr", type=float, required=True)
    ap.add_argument("--warmup_steps", type=int, required=True)
    ap.add_argument("--weight_decay", type=float, required=True)
    ap.add_argument("--beta1", type=float, required=True)
    ap.add_argument("--beta2", type=float, required=True)
    ap.add_argument("--eps", type=float, default=1e-8)
    ap.add_argument("--grad_clip", type=float, required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--shard_degree", type=int, default=0,
                    help="HSDP: shard over groups of S ranks, replicate across them (0: FULL_SHARD)")
    ap.add_argument("--metrics_out", required=True)
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    torch.use_deterministic_algorithms(True)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    b, g, t = a.micro_batch_size, a.global_batch_size, a.seq_len
    assert g % (b * world) == 0, "global batch must divide into micro-batches of every rank"
    accum = g // (b * world)

    model = gpt_mirror.Gpt(a.n_embd, a.n_layer, a.n_head, a.vocab_size, a.block_size)
    state = load_file(a.init)
    names = [n for n, _ in model.named_parameters()]
    assert names == gpt_mirror.expected_names(a.n_layer), names
    assert sorted(state) == sorted(names), (sorted(state), names)
    model.load_state_dict(state, strict=True)
    mesh = None
    if a.shard_degree > 0:
        assert world % a.shard_degree == 0, "--shard_degree must divide the world size"
        # FSDP2's HSDP: a 2-D mesh, replicated over dim 0, sharded over dim 1 (ranks
        # [r*S, (r+1)*S) shard together: our layout's shard groups).
        mesh = init_device_mesh("cpu", (world // a.shard_degree, a.shard_degree),
                                mesh_dim_names=("replicate", "shard"))
    for block in model.blocks:
        fully_shard(block, mesh=mesh)  # reshard_after_forward=True: FULL_SHARD / HYBRID_SHARD.
    fully_shard(model, mesh=mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(a.beta1, a.beta2), eps=a.eps,
                            weight_decay=a.weight_decay)
    rows = np.fromfile(a.batches, dtype=np.int64).reshape(-1, g, t + 1)
    assert rows.shape[0] >= a.steps, f"{a.batches} holds {rows.shape[0]} steps < {a.steps}"

    out = open(a.metrics_out, "w") if rank == 0 else None
    model.train()
    for step in range(a.steps):
        t0 = time.perf_counter()
        lr = gpt_mirror.lr_at(step, a.lr, a.min_lr, a.warmup_steps, a.steps)
        for group in opt.param_groups:
            group["lr"] = lr
        loss_sum = 0.0
        for m in range(accum):
            start = m * world * b + rank * b
            batch = torch.from_numpy(rows[step, start:start + b].copy())
            x, y = batch[:, :t], batch[:, 1:]
            model.set_requires_gradient_sync(m == accum - 1)
            logits = model(x)
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1))
            (loss / accum).backward()
            loss_sum += loss.item()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), a.grad_clip)
        if hasattr(norm, "full_tensor"):
            norm = norm.full_tensor()
        opt.step()
        opt.zero_grad()
        mean = torch.tensor([loss_sum / accum, 1.0], dtype=torch.float64)
        dist.all_reduce(mean)
        seconds = time.perf_counter() - t0
        if out is not None:
            out.write(json.dumps({"step": step + 1, "loss": mean[0].item() / mean[1].item(),
                                  "lr": lr, "grad_norm": float(norm),
                                  "step_time_s": seconds}) + "\n")
            out.flush()
    if out is not None:
        out.close()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
