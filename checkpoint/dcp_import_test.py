"""checkpoint.init_from_dcp reads what PyTorch's own torch.distributed.checkpoint.save writes from
FSDP2 (issue 32 item 4, the import half), and Shardline continues training as torch does:

1. torch W = 2 (two processes, Gloo, FSDP2 fully_shard per block and at the root) trains a Llama
   with torchtitan's module names for K = 3 AdamW steps, saves model and optimizer with
   get_state_dict + dcp.save (the default FileSystemWriter: pickled .metadata and __R_N.distcp
   files), then goes on for 3 more steps and records their losses.
2. Shardline at W = 4 FULL_SHARD, and at W = 4 HYBRID_SHARD(2), start from that directory
   (checkpoint.init_from_dcp) and train steps 4 to 6: their losses equal torch's within 1e-5
   relative: the parameters, both AdamW moments and the step (bias correction) were all read.
3. The same with the optimizer state left out of the save (weights only): Shardline starts at
   step 0 with a fresh optimizer and its first loss equals torch's loss of the saved weights.
4. A hostile copy (a chunk file named "../x") is refused at submit-free trainer start, naming
   the field and the path.

Every step uses the whole training set (N = G = 8 sequences), so the loss does not depend on
the order our sampler draws them in: torch needs no copy of our shuffle.
Arguments: trainer=PATH.
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "testdata"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "tests", "integration"))
from trainer_ranks import free_port, run_ranks  # noqa: E402
from torch_llama import Llama  # noqa: E402

FAILURES = []
CONFIG = dict(n_embd=48, n_layer=2, n_head=4, n_kv_head=2, ffn_hidden=96, vocab_size=97,
              block_size=32, rope_theta=10000.0, norm_eps=1e-5)
SEQ, N, K, STEPS = 16, 8, 3, 6
LR, WD, BETAS, EPS = 0.01, 0.1, (0.9, 0.95), 1e-8


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        FAILURES.append(what)


def batch(tokens_path):
    t = torch.from_numpy(np.fromfile(tokens_path, dtype=np.uint16).astype(np.int64))
    seqs = torch.stack([t[i * SEQ:i * SEQ + SEQ + 1] for i in range(N)])
    return seqs[:, :-1], seqs[:, 1:]


def torch_rank(rank, world, port, tokens_path, out_dir, with_optimizer, result):
    """One FSDP2 rank: K steps, dcp.save, then STEPS - K more; rank 0 writes the losses."""
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict
    from torch.distributed.fsdp import fully_shard
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    torch.manual_seed(7)
    model = Llama(CONFIG)
    for layer in model.layers:
        fully_shard(layer)
    fully_shard(model)
    optim = torch.optim.AdamW(model.parameters(), lr=LR, betas=BETAS, eps=EPS, weight_decay=WD)
    x, y = batch(tokens_path)
    per = N // world
    x, y = x[rank * per:(rank + 1) * per], y[rank * per:(rank + 1) * per]
    losses = []
    for step in range(STEPS):
        if step == K:
            msd, osd = get_state_dict(model, optim)
            dcp.save({"model": msd, "optimizer": osd} if with_optimizer else {"model": msd},
                     checkpoint_id=out_dir)
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        loss.backward()
        optim.step()
        optim.zero_grad()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        losses.append(float(mean) / world)
    if rank == 0:
        with open(result, "w") as f:
            json.dump(losses, f)
    dist.barrier()
    dist.destroy_process_group()


def run_torch(tmp, tokens, out_dir, with_optimizer):
    port, result = free_port(), os.path.join(tmp, "torch_losses.json")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, __file__, "--torch-rank", str(r), "2", str(port),
                               tokens, out_dir, str(int(with_optimizer)), result], env=env)
             for r in range(2)]
    codes = [p.wait(timeout=300) for p in procs]
    if codes != [0, 0]:
        return None
    with open(result) as f:
        return json.load(f)


def write_spec(path, tokens, val, dcp_dir, strategy, hybrid):
    c = CONFIG
    with open(path, "w") as f:
        f.write(f"""name: dcp-import
world_size: 4
model: {{architecture: LLAMA, n_embd: {c['n_embd']}, n_layer: {c['n_layer']},
        n_head: {c['n_head']}, n_kv_head: {c['n_kv_head']}, ffn_hidden: {c['ffn_hidden']},
        vocab_size: {c['vocab_size']}, block_size: {c['block_size']}, init_seed: 99}}
data: {{path: {tokens}, val_path: {val}, val_fraction: 0, format: TOKENS_U16, seq_len: {SEQ}}}
optimizer: {{kind: ADAMW, lr: {LR}, min_lr: {LR}, weight_decay: {WD}, beta1: {BETAS[0]},
            beta2: {BETAS[1]}, eps: {EPS}, grad_clip: 0, warmup_steps: 0}}
fsdp: {{sharding_strategy: {strategy}, hybrid_shard_degree: {hybrid}, collective_timeout_s: 60}}
train: {{steps: {STEPS}, global_batch_size: {N}, micro_batch_size: 2, eval_batches: 1,
        sample_tokens: 0, deterministic: true, log_every: 1}}
checkpoint: {{init_from_dcp: {dcp_dir}}}
device: {{kind: CPU, cpu_threads: 1}}
""")


def close(a, b):
    return abs(a - b) <= 1e-5 * abs(b)


def main():
    args = {k: os.path.abspath(v) for k, v in (a.split("=", 1) for a in sys.argv[1:])}
    trainer = args["trainer"]
    with tempfile.TemporaryDirectory() as tmp:
        tokens, val = os.path.join(tmp, "train.u16"), os.path.join(tmp, "val.u16")
        rng = np.random.default_rng(5)
        rng.integers(0, CONFIG["vocab_size"], size=N * SEQ + 1, dtype=np.uint16).tofile(tokens)
        rng.integers(0, CONFIG["vocab_size"], size=4 * SEQ + 1, dtype=np.uint16).tofile(val)

        # 1-2. With the optimizer state.
        dcp_dir = os.path.join(tmp, "torch_dcp")
        ref = run_torch(tmp, tokens, dcp_dir, True)
        check(ref is not None and len(ref) == STEPS, f"torch W = 2 FSDP2 trains and saves ({ref})")
        files = sorted(os.listdir(dcp_dir)) if os.path.isdir(dcp_dir) else []
        check(".metadata" in files and "__0_0.distcp" in files and "__1_0.distcp" in files,
              f"dcp.save wrote the pickled layout: {files}")
        for strategy, hybrid in (("FULL_SHARD", 0), ("HYBRID_SHARD", 2)):
            spec = os.path.join(tmp, f"spec_{strategy}.yaml")
            write_spec(spec, tokens, val, dcp_dir, strategy, hybrid)
            losses, log = run_ranks(trainer, spec, 4, os.path.join(tmp, f"sl_{strategy}"),
                                    "dcp-import")
            got = [losses.get(s) for s in range(K + 1, STEPS + 1)] if losses else None
            want = ref[K:] if ref else None
            check(got is not None and want is not None and all(
                g is not None and close(g, w) for g, w in zip(got, want)),
                f"Shardline W = 4 {strategy}({hybrid}) from torch's DCP: steps {K + 1}-{STEPS} "
                f"losses {got} equal torch's {want} within 1e-5 relative")
            check(losses is not None and min(losses) == K + 1,
                  f"{strategy}: training went on from torch's step {K} (first step logged "
                  f"{min(losses) if losses else None})")
            check("optimizer state, step 3" in log, f"{strategy}: the log says what was loaded")

        # 3. Weights only.
        weights = os.path.join(tmp, "torch_weights")
        ref_w = run_torch(tmp, tokens, weights, False)
        spec = os.path.join(tmp, "spec_weights.yaml")
        write_spec(spec, tokens, val, weights, "FULL_SHARD", 0)
        losses, log = run_ranks(trainer, spec, 4, os.path.join(tmp, "sl_weights"), "dcp-import")
        check(ref_w is not None and losses is not None and min(losses) == 1 and
              close(losses[1], ref_w[K]),
              f"weights only: Shardline starts at step 1 with a fresh optimizer; its first loss "
              f"{losses.get(1) if losses else None} is torch's loss of the saved weights "
              f"{ref_w[K] if ref_w else None}")
        check("weights only" in log, "weights only: the log says so")

        # 4. A chunk file outside the directory.
        hostile = os.path.join(tmp, "hostile")
        os.makedirs(hostile)
        for name in os.listdir(dcp_dir):
            with open(os.path.join(dcp_dir, name), "rb") as f:
                data = f.read()
            if name == ".metadata":
                data = data.replace(b"__0_0.distcp", b"../x.distcp.")
            with open(os.path.join(hostile, name), "wb") as f:
                f.write(data)
        spec = os.path.join(tmp, "spec_hostile.yaml")
        write_spec(spec, tokens, val, hostile, "FULL_SHARD", 0)
        losses, log = run_ranks(trainer, spec, 4, os.path.join(tmp, "sl_hostile"), "dcp-import")
        check(losses is None and "\"../x.distcp.\" is not a plain file name" in log,
              "a chunk file named ../x is refused, naming it")
    if FAILURES:
        print(f"{len(FAILURES)} failure(s)")
        sys.exit(1)
    print("all passed")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--torch-rank":
        rank, world, port, tokens, out_dir, with_opt, result = sys.argv[2:9]
        torch_rank(int(rank), int(world), int(port), tokens, out_dir, with_opt == "1", result)
    else:
        main()
