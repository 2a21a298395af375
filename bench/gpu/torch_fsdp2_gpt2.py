"""PyTorch FSDP2 side of bench/gpu/run_all.sh: GPT-2 small (bench/gpt_mirror.py at n_embd 768,
12 layers, 12 heads, vocab 50257, block 1024) trained on one GPU with fully_shard (per Block +
root) and MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32), AdamW (fp32 master
weights), on tiny Shakespeare bytes. Prints one JSON line: median step time over the steps
after the warm-up, tokens/s and MFU with models/gpt.cc's FLOP count and the given peak.

Started as one torchrun-style rank (RANK=0, WORLD_SIZE=1, MASTER_ADDR, MASTER_PORT set), or
with --mode hsdp under torchrun on W GPUs (bench/gpu/multi_gpu.sh): fully_shard over a 2-D
device mesh (W/S replicas x S shards, PyTorch's hybrid sharding), each rank on cuda:LOCAL_RANK
with its own batch; rank 0 prints the line (tokens/s counts all ranks).
"""
import argparse
import json
import os
import statistics
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import gpt_mirror  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--seq_len", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
    ap.add_argument("--peak_flops", type=float, default=989e12)
    # fsdp2: fully_shard per Block + root; fsdp2_offload: the same with CPUOffloadPolicy (shards,
    # gradients and the optimizer step on the CPU); autocast: no FSDP, the plain single-GPU
    # recipe (fp32 parameters, torch.autocast to the dtype), the reference for FSDP's overhead.
    ap.add_argument("--mode", default="fsdp2",
                    choices=["fsdp2", "fsdp2_offload", "autocast", "hsdp"])
    ap.add_argument("--shard", type=int, default=1, help="hsdp: the shard degree S")
    a = ap.parse_args()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    world, rank = dist.get_world_size(), dist.get_rank()
    torch.backends.cuda.matmul.allow_tf32 = True
    dev = torch.device("cuda", local_rank)
    c, l, h, v, blk = 768, 12, 12, 50257, 1024
    model = gpt_mirror.Gpt(c, l, h, v, blk)
    gpt_mirror.init_gpt2(model, l, seed=1337)
    model.to(dev)
    compute_dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    if a.mode != "autocast":
        mp = MixedPrecisionPolicy(param_dtype=compute_dtype, reduce_dtype=torch.float32)
        extra = {"offload_policy": CPUOffloadPolicy()} if a.mode == "fsdp2_offload" else {}
        if a.mode == "hsdp":
            from torch.distributed.device_mesh import init_device_mesh
            extra = {"mesh": init_device_mesh("cuda", (world // a.shard, a.shard),
                                              mesh_dim_names=("replicate", "shard"))}
        for block in model.blocks:
            fully_shard(block, mp_policy=mp, **extra)
        fully_shard(model, mp_policy=mp, **extra)
    # Fused AdamW on GPU parameters; with offload the parameters are CPU tensors (foreach).
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1,
                            **({"foreach": True} if a.mode == "fsdp2_offload" else {"fused": True}))
    data = np.fromfile(a.data, dtype=np.uint8).astype(np.int64)
    rng = np.random.default_rng(rank)
    times = []
    for step in range(a.steps):
        starts = rng.integers(0, len(data) - a.seq_len - 1, size=a.batch)
        rows = torch.from_numpy(np.stack([data[s:s + a.seq_len + 1] for s in starts])).to(dev)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=compute_dtype, enabled=a.mode == "autocast"):
            logits = model(rows[:, :-1])
        loss = F.cross_entropy(logits.float().reshape(-1, v), rows[:, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad()
        loss_value = loss.item()  # Synchronizes, as the trainer's logging does.
        times.append(time.perf_counter() - t0)
    step_s = statistics.median(times[a.warmup:])
    tokens = a.batch * a.seq_len * world
    flops = gpt_mirror.training_flops_per_token(c, l, v, a.seq_len) * tokens / step_s
    if rank == 0:
        print(json.dumps({"side": "torch_" + a.mode, "dtype": a.dtype, "step_s": step_s,
                          "tokens_per_s": tokens / step_s,
                          "mfu": flops / a.peak_flops / world, "last_loss": loss_value,
                          "max_memory_allocated_gib": torch.cuda.max_memory_allocated() / 2**30}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
