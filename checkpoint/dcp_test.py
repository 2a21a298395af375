"""`shardctl export --format=dcp` read by PyTorch's own torch.distributed.checkpoint (issue 32
item 4, the export half), at two torch world sizes:

A W = 2 FULL_SHARD Llama job (grouped-query attention, AdamW) trains 3 steps in two real trainer
processes and commits its checkpoint; checkpoint_export --dcp --with_optimizer writes it.
1. torch W = 1: dcp.load with HuggingFaceStorageReader into the state dict of a plain PyTorch
   Llama written here with torchtitan's module names (ours), then AdamW's state through
   get/set_optimizer_state_dict(flatten_optimizer_state_dict=True): every tensor equals the
   checkpoint's (read through Shardline's other export, a plain safetensors file), the
   optimizer's step is the job's, and the loaded model's logits equal transformers' on the same
   checkpoint exported with --format=hf (1e-4): it is the same model.
2. torch W = 2 (two processes, Gloo, FSDP2 fully_shard per block): the same recipe loads into
   DTensor shards; gathered, every parameter and AdamW moment equals the checkpoint's.

Arguments: trainer=PATH checkpoint_export=PATH hf_export=PATH.
"""
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "testdata"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "tests", "integration"))
from trainer_ranks import free_port, run_ranks  # noqa: E402
from torch_llama import Llama  # noqa: E402

FAILURES = []
CONFIG = dict(n_embd=48, n_layer=2, n_head=4, n_kv_head=2, ffn_hidden=96, vocab_size=97,
              block_size=32, rope_theta=10000.0, norm_eps=1e-5)


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        FAILURES.append(what)


def load_recipe(model, optim, out_dir):
    """The documented recipe (docs/checkpoint_format.md): model and AdamW state from the export."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import HuggingFaceStorageReader
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions, get_model_state_dict, get_optimizer_state_dict,
        set_model_state_dict, set_optimizer_state_dict)
    opts = StateDictOptions(flatten_optimizer_state_dict=True)
    model_sd = get_model_state_dict(model)
    optim_sd = get_optimizer_state_dict(model, optim, options=opts)
    tensors = {k: v for k, v in optim_sd.items() if k.startswith("state.")}
    state = {**model_sd, "optimizer": tensors}
    dcp.load(state, storage_reader=HuggingFaceStorageReader(out_dir))
    set_model_state_dict(model, {k: state[k] for k in model_sd}, options=opts)
    optim_sd.update(state["optimizer"])
    set_optimizer_state_dict(model, optim, optim_state_dict=optim_sd, options=opts)


def prime_adamw(model):
    """An AdamW whose state exists (one zero-gradient step), so the state dict has its keys."""
    optim = torch.optim.AdamW(model.parameters(), lr=0.0)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    optim.step()
    optim.zero_grad()
    return optim


def full(t):
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def dump(model, optim, path):
    out = {}
    for name, p in model.named_parameters():
        out[name] = full(p.detach()).numpy()
        st = optim.state[p]
        out[f"optimizer.state.{name}.exp_avg"] = full(st["exp_avg"]).numpy()
        out[f"optimizer.state.{name}.exp_avg_sq"] = full(st["exp_avg_sq"]).numpy()
        out[f"optimizer.state.{name}.step"] = np.asarray(float(full(st["step"])))
    np.savez(path, **out)


def torch_rank(rank, world, port, out_dir, result):
    """One torch process: FSDP2 over `world` ranks (world 1: a plain module)."""
    torch.manual_seed(123)  # Any values: the load must overwrite them all.
    model = Llama(CONFIG)
    if world > 1:
        import torch.distributed as dist
        from torch.distributed.fsdp import fully_shard
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=world)
        for layer in model.layers:
            fully_shard(layer)
        fully_shard(model)
    optim = prime_adamw(model)
    load_recipe(model, optim, out_dir)
    # full_tensor() is a collective: every rank gathers, in the same order; rank 0 saves.
    dump(model, optim, result if rank == 0 else result + f".rank{rank}.npz")
    if world > 1:
        import torch.distributed as dist
        dist.barrier()
        dist.destroy_process_group()
    return model


def run_trainer(b, spec, tmp, world):
    losses, _ = run_ranks(b["trainer"], spec, world, os.path.join(tmp, "trainer"), "dcp")
    return losses is not None


def main():
    b = {k: os.path.abspath(v) for k, v in (a.split("=", 1) for a in sys.argv[1:])}
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "tokens.u16")
        np.random.default_rng(1).integers(0, 97, size=4096, dtype=np.uint16).tofile(data)
        ckpt = os.path.join(tmp, "ckpt")
        spec = os.path.join(tmp, "spec.yaml")
        with open(spec, "w") as f:
            f.write(f"""name: dcp-export
world_size: 2
model: {{architecture: LLAMA, n_embd: {CONFIG['n_embd']}, n_layer: {CONFIG['n_layer']},
        n_head: {CONFIG['n_head']}, n_kv_head: {CONFIG['n_kv_head']},
        ffn_hidden: {CONFIG['ffn_hidden']}, vocab_size: {CONFIG['vocab_size']},
        block_size: {CONFIG['block_size']}, init_seed: 3}}
data: {{path: {data}, format: TOKENS_U16, seq_len: 16}}
optimizer: {{kind: ADAMW, lr: 0.01, warmup_steps: 0}}
fsdp: {{sharding_strategy: FULL_SHARD, collective_timeout_s: 60}}
train: {{steps: 3, global_batch_size: 4, micro_batch_size: 2, eval_batches: 1, sample_tokens: 0,
        deterministic: true}}
checkpoint: {{dir: {ckpt}, save_final: true}}
device: {{kind: CPU, cpu_threads: 1}}
""")
        check(run_trainer(b, spec, tmp, 2), "a W = 2 FULL_SHARD Llama job trains 3 steps")
        step_dir = os.path.join(ckpt, "step_3")
        dcp_dir = os.path.join(tmp, "dcp")
        r = subprocess.run([b["checkpoint_export"], "--dcp", "--with_optimizer", step_dir,
                            dcp_dir], capture_output=True, text=True)
        check(r.returncode == 0, f"checkpoint_export --dcp --with_optimizer {r.stderr.strip()}")
        plain = os.path.join(tmp, "plain.safetensors")
        r = subprocess.run([b["checkpoint_export"], ckpt, "3", plain], capture_output=True,
                           text=True)
        check(r.returncode == 0, "the plain safetensors export (the reference values)")
        from safetensors.numpy import load_file
        reference = load_file(plain)
        exported = load_file(os.path.join(dcp_dir, "model-00001-of-00001.safetensors"))

        # 1. torch W = 1.
        w1 = os.path.join(tmp, "w1.npz")
        model = torch_rank(0, 1, 0, dcp_dir, w1)
        got = dict(np.load(w1))
        names = [n for n, _ in model.named_parameters()]
        check(sorted(names) == sorted(reference),
              f"the PyTorch model's parameters are the checkpoint's ({len(names)})")
        check(all(np.array_equal(got[n], reference[n]) for n in names),
              "torch W = 1: every parameter loaded equals the checkpoint's")
        moments = [k for k in exported if k.startswith("optimizer.") and not k.endswith(".step")]
        check(len(moments) == 2 * len(names) and
              all(np.array_equal(got[k], exported[k]) for k in moments),
              f"torch W = 1: AdamW's exp_avg and exp_avg_sq loaded ({len(moments)} tensors)")
        steps = {float(got[f"optimizer.state.{n}.step"]) for n in names}
        check(steps == {3.0}, f"torch W = 1: AdamW's step is the job's 3 ({steps})")
        check(np.abs(got[moments[0]]).max() > 0, "the moments are the trained ones (non-zero)")

        hf_dir = os.path.join(tmp, "hf")
        r = subprocess.run([b["hf_export"], spec, step_dir, hf_dir], capture_output=True,
                           text=True)
        check(r.returncode == 0, f"hf_export {r.stderr.strip()}")
        import transformers
        hf = transformers.AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32)
        tokens = torch.tensor([np.random.default_rng(0).integers(0, 97, size=20).tolist()])
        with torch.no_grad():
            ours, theirs = model(tokens), hf(tokens).logits
        diff = float((ours - theirs).abs().max())
        check(diff <= 1e-4, f"the loaded PyTorch model's logits equal transformers' on the "
                            f"same checkpoint: max difference {diff:.2e}")

        # 2. torch W = 2, FSDP2.
        port = free_port()
        w2 = os.path.join(tmp, "w2.npz")
        env = dict(os.environ, OMP_NUM_THREADS="1")
        procs = [subprocess.Popen([sys.executable, __file__, "--torch-rank", str(r), "2",
                                   str(port), dcp_dir, w2], env=env) for r in range(2)]
        codes = [p.wait(timeout=300) for p in procs]
        check(codes == [0, 0], f"torch W = 2 FSDP2 ranks load the export (exit {codes})")
        if codes == [0, 0]:
            got2 = dict(np.load(w2))
            check(all(np.array_equal(got2[k], got[k]) for k in got),
                  f"torch W = 2: every gathered parameter and AdamW state equals the checkpoint's "
                  f"({len(got)} tensors)")
    if FAILURES:
        print(f"{len(FAILURES)} failure(s)")
        sys.exit(1)
    print("all passed")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--torch-rank":
        rank, world, port, out_dir, result = sys.argv[2:7]
        torch_rank(int(rank), int(world), int(port), out_dir, result)
    else:
        main()
