"""PyTorch side of bench/gpu/throughput.sh: one training run of one configuration, one JSON line.

  gpt2:  GPT-2 small (bench/gpt_mirror.py: 768 x 12 layers, 12 heads, vocab 50257, block 1024),
         bf16 compute, fp32 master weights, fused AdamW, grad clip 1.0, on tiny Shakespeare bytes,
         --batch sequences of --seq_len tokens a step, as one of
           fsdp2          fully_shard per Block + root, MixedPrecisionPolicy(bf16, reduce fp32)
           fsdp2_compile  the same with each Block torch.compile'd before fully_shard (the
                          torchtitan recipe: FSDP2's hooks stay outside the compiled regions)
           compile        no FSDP: torch.compile(model) under torch.autocast(bf16)
  llama: a Llama-style decoder (LlamaMirror below, the shape of models/llama.cc: RMSNorm, rotary,
         SwiGLU, no biases, untied head) of the given size, fsdp2 with or without
         CPUOffloadPolicy: does it train --steps steps, at what step time and memory peak.

Prints {"side", "model", "batch", "seq_len", "step_s", "tokens_per_s", "mfu", "peak_gib",
"params", "last_loss", "ok"} (step_s: median over the steps after --warmup; peak_gib: the CUDA
caching allocator's max allocated; MFU: models/gpt.cc's or models/llama.cc's training FLOPs per
token over --peak_flops). On an exception (out of memory, say) prints ok false and the error, and
exits 3.

--cpu_smoke: the same code paths on the CPU with a tiny model, Gloo instead of NCCL and
torch.compile's aot_eager backend (no C++ toolchain needed), so that this script is known to run
before a GPU session spends time on it. Started as one torchrun-style rank (RANK=0, WORLD_SIZE=1,
MASTER_ADDR, MASTER_PORT; defaults are filled in).
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import gpt_mirror  # noqa: E402


class RmsNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def apply_rotary(x, cos, sin):  # x [B, H, T, D]; pairs (2i, 2i+1) as models/llama.cc
    b, h, t, d = x.shape
    pairs = x.reshape(b, h, t, d // 2, 2)
    a, c = pairs[..., 0], pairs[..., 1]
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return torch.stack((a * cos - c * sin, a * sin + c * cos), -1).reshape(b, h, t, d)


class LlamaBlock(nn.Module):
    def __init__(self, c, h, f):
        super().__init__()
        self.h = h
        self.attention_norm, self.ffn_norm = RmsNorm(c), RmsNorm(c)
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(c, c, bias=False) for _ in range(4))
        self.w1, self.w3 = nn.Linear(c, f, bias=False), nn.Linear(c, f, bias=False)
        self.w2 = nn.Linear(f, c, bias=False)

    def forward(self, x, cos, sin):
        b, t, c = x.shape
        n = self.attention_norm(x)

        def heads(y):
            return y.view(b, t, self.h, c // self.h).transpose(1, 2)

        q = apply_rotary(heads(self.wq(n)), cos, sin)
        k = apply_rotary(heads(self.wk(n)), cos, sin)
        y = F.scaled_dot_product_attention(q, k, heads(self.wv(n)), is_causal=True)
        x = x + self.wo(y.transpose(1, 2).contiguous().view(b, t, c))
        m = self.ffn_norm(x)
        return x + self.w2(F.silu(self.w1(m)) * self.w3(m))


class LlamaMirror(nn.Module):
    def __init__(self, c, l, h, v, f, block, theta=10000.0):
        super().__init__()
        self.tok_embeddings = nn.Embedding(v, c)
        self.blocks = nn.ModuleList(LlamaBlock(c, h, f) for _ in range(l))
        self.norm = RmsNorm(c)
        self.output = nn.Linear(c, v, bias=False)
        d = c // h
        inv = theta ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
        angles = torch.outer(torch.arange(block, dtype=torch.float64), inv)
        self.cos, self.sin = angles.cos().float(), angles.sin().float()  # not parameters

    def forward(self, tokens):
        t = tokens.shape[1]
        if self.cos.device != tokens.device:
            self.cos, self.sin = self.cos.to(tokens.device), self.sin.to(tokens.device)
        cos, sin = self.cos[:t], self.sin[:t]
        x = self.tok_embeddings(tokens)
        for block in self.blocks:
            x = block(x, cos, sin)
        return self.output(self.norm(x))


def llama_flops_per_token(c, l, v, f, seq_len):  # models/llama.cc TrainingFlopsPerToken
    return 6 * (l * (4 * c * c + 3 * c * f) + v * c) + 12 * l * c * seq_len


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model", choices=["gpt2", "llama"])
    ap.add_argument("--side", default="fsdp2", choices=["fsdp2", "fsdp2_compile", "compile"])
    ap.add_argument("--offload", action="store_true", help="llama: FSDP2 CPUOffloadPolicy")
    ap.add_argument("--data", default="data/tinyshakespeare.txt")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq_len", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--peak_flops", type=float, default=989e12)
    # llama sizes (models/llama.cc's names); vocab for both models' embedding.
    ap.add_argument("--n_embd", type=int, default=2048)
    ap.add_argument("--n_layer", type=int, default=16)
    ap.add_argument("--n_head", type=int, default=16)
    ap.add_argument("--ffn_hidden", type=int, default=5632)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--cpu_smoke", action="store_true")
    a = ap.parse_args()
    for k, v in (("RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0"),
                 ("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "29519")):
        os.environ.setdefault(k, v)
    smoke = a.cpu_smoke
    if smoke:
        # Tiny sizes, few steps: the code paths, not the speed.
        a.batch, a.seq_len, a.steps, a.warmup = 2, 32, 3, 1
    dev = torch.device("cpu") if smoke else torch.device("cuda", 0)
    dist.init_process_group("gloo" if smoke else "nccl")
    mesh = init_device_mesh(dev.type, (1,))
    if not smoke:
        torch.cuda.set_device(0)
        torch.cuda.reset_peak_memory_stats()
    bf16 = torch.bfloat16
    result = {"side": a.side + ("_offload" if a.offload else ""), "model": a.model,
              "batch": a.batch, "seq_len": a.seq_len, "ok": False}
    try:
        # Build on the device (CPU for offload: FSDP2 keeps the shards there).
        build_dev = torch.device("cpu") if a.offload else dev
        if a.model == "gpt2":
            c, l, h, v, blk = (64, 2, 4, 256, 64) if smoke else (768, 12, 12, 50257, 1024)
            with build_dev:
                model = gpt_mirror.Gpt(c, l, h, v, blk)
            gpt_mirror.init_gpt2(model, l, seed=1337)
            blocks = model.blocks
            flops_per_token = gpt_mirror.training_flops_per_token(c, l, v, a.seq_len)
        else:
            c, l, h, v, f = ((64, 2, 4, 256, 160) if smoke else
                             (a.n_embd, a.n_layer, a.n_head, a.vocab, a.ffn_hidden))
            with build_dev:
                model = LlamaMirror(c, l, h, v, f, a.seq_len)  # nn defaults' init
            blocks = model.blocks
            flops_per_token = llama_flops_per_token(c, l, v, f, a.seq_len)
        result["params"] = sum(p.numel() for p in model.parameters())
        compile_kw = {"backend": "aot_eager"} if smoke else {}
        autocast = a.side == "compile"
        if a.side == "compile":
            model = torch.compile(model, **compile_kw)
        else:
            mp = MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=torch.float32)
            # (Pinning needs CUDA: the CPU smoke offloads to unpinned memory.)
            extra = ({"offload_policy": CPUOffloadPolicy(pin_memory=not smoke)} if a.offload
                     else {})
            for i, block in enumerate(blocks):
                if a.side == "fsdp2_compile":
                    block = torch.compile(block, **compile_kw)
                    blocks[i] = block
                fully_shard(block, mesh=mesh, mp_policy=mp, **extra)
            fully_shard(model, mesh=mesh, mp_policy=mp, **extra)
        # Fused AdamW on device parameters; the offloaded shards are CPU tensors (foreach there,
        # as PyTorch recommends for CPUOffloadPolicy).
        fused = not a.offload and dev.type == "cuda"
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95),
                                weight_decay=0.1, **({"fused": True} if fused else {"foreach": True}))
        data = np.fromfile(a.data, dtype=np.uint8).astype(np.int64)
        rng = np.random.default_rng(0)
        times, loss = [], None
        sync = (lambda: torch.cuda.synchronize()) if dev.type == "cuda" else (lambda: None)
        for step in range(a.steps):
            starts = rng.integers(0, len(data) - a.seq_len - 1, size=a.batch)
            rows = torch.from_numpy(np.stack([data[s:s + a.seq_len + 1] for s in starts])).to(dev)
            sync()
            t0 = time.perf_counter()
            with torch.autocast(dev.type, dtype=bf16, enabled=autocast):
                logits = model(rows[:, :-1])
            loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]),
                                   rows[:, 1:].reshape(-1))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            loss_value = loss.item()  # Synchronises once a step, as the trainer's logging does.
            times.append(time.perf_counter() - t0)
            if not math.isfinite(loss_value):
                raise RuntimeError(f"loss {loss_value} at step {step}")
        step_s = statistics.median(times[a.warmup:] or times)
        tokens = a.batch * a.seq_len
        result.update(ok=True, step_s=step_s, first_step_s=times[0], tokens_per_s=tokens / step_s,
                      mfu=flops_per_token * tokens / step_s / a.peak_flops, last_loss=loss_value)
    except Exception as e:  # noqa: BLE001 - OOM and compile errors are results here
        result["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
    if dev.type == "cuda":
        result["peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
    print(json.dumps(result), flush=True)
    dist.destroy_process_group()
    sys.exit(0 if result["ok"] else 3)


if __name__ == "__main__":
    main()
