"""Jobs train from Hugging Face folders of every Llama-family variant under FSDP (issue 32).

For tiny random transformers models of Llama 3.1 (llama3 rope scaling, head_dim apart from the
width, a tied head), Qwen2 (q/k/v biases, tied), Qwen3 (q/k norm, head_dim, attention biases)
and Mistral (a sliding window shorter than the sequence), the trainer starts from model.hf_dir
as W = 4 FULL_SHARD and W = 4 HYBRID_SHARD(2) jobs (four real trainer processes on loopback,
Gloo) and logs the per-step losses of the same job at W = 1 within 1e-5 relative. The tied head
is one parameter in the root unit: the FSDP memory line names no separate head.

Arguments: trainer=PATH (Bazel location).
"""
import os
import re
import sys
import tempfile

import numpy as np
import torch
import transformers

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "tests", "integration"))
from trainer_ranks import run_ranks  # noqa: E402

FAILURES = []
STEPS = 4


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        FAILURES.append(what)


def randomize(model, seed):
    """Weights far from transformers' small init, so the losses depend on every variant."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:  # norms and biases
                p.copy_(1.0 + 0.3 * torch.randn(p.shape, generator=g) if "weight" in name
                        else 0.2 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) * (1.0 / p.shape[-1] ** 0.5))
    return model


def models():
    C = transformers
    return {
        "llama31": C.LlamaForCausalLM(C.LlamaConfig(
            vocab_size=97, hidden_size=48, intermediate_size=80, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            max_position_embeddings=64, tie_word_embeddings=True,
            rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0,
                             "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                             "original_max_position_embeddings": 16})),
        "qwen2": C.Qwen2ForCausalLM(C.Qwen2Config(
            vocab_size=97, hidden_size=48, intermediate_size=80, num_hidden_layers=2,
            num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=64,
            tie_word_embeddings=True)),
        "qwen3": C.Qwen3ForCausalLM(C.Qwen3Config(
            vocab_size=97, hidden_size=40, intermediate_size=72, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            max_position_embeddings=64, attention_bias=True)),
        "mistral": C.MistralForCausalLM(C.MistralConfig(
            vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
            sliding_window=6)),
    }


def write_spec(tmp, name, model_dir, data, strategy):
    spec = os.path.join(tmp, f"{name}_{strategy}.yaml")
    degree = "\n  hybrid_shard_degree: 2" if strategy == "HYBRID_SHARD" else ""
    with open(spec, "w") as f:
        f.write(f"""name: {name}
world_size: 4
model:
  hf_dir: {model_dir}
data:
  path: {data}
  format: TOKENS_U16
  seq_len: 16
  shuffle_seed: 3
optimizer:
  lr: 0.01
  warmup_steps: 0
fsdp:
  sharding_strategy: {strategy}{degree}
  collective_timeout_s: 60
train:
  steps: {STEPS}
  global_batch_size: 8
  micro_batch_size: 2
  log_every: 1
  eval_batches: 1
  sample_tokens: 0
  deterministic: true
device:
  kind: CPU
  cpu_threads: 1
""")
    return spec


def run(trainer, spec, world, out_prefix):
    """Runs `world` ranks as torchrun would; returns rank 0's losses in step order and its log."""
    losses, log0 = run_ranks(trainer, spec, world, out_prefix, "hf-fsdp")
    return (None if losses is None else [losses[s] for s in sorted(losses)]), log0


def main():
    trainer = os.path.abspath(sys.argv[1].split("=", 1)[1])
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "tokens.u16")
        np.random.default_rng(1).integers(0, 97, size=8192, dtype=np.uint16).tofile(data)
        for i, (name, model) in enumerate(models().items()):
            randomize(model, seed=i + 1)
            if model.config.tie_word_embeddings:
                model.tie_weights()
            model_dir = os.path.join(tmp, name)
            model.save_pretrained(model_dir)
            base_spec = write_spec(tmp, name, model_dir, data, "FULL_SHARD")
            base, base_log = run(trainer, base_spec, 1, os.path.join(tmp, f"{name}_w1"))
            check(base is not None and len(base) == STEPS,
                  f"{name}: W = 1 trains {STEPS} steps from model.hf_dir ({base})")
            if base is None:
                continue
            for strategy in ("FULL_SHARD", "HYBRID_SHARD"):
                spec = write_spec(tmp, name, model_dir, data, strategy)
                losses, log = run(trainer, spec, 4, os.path.join(tmp, f"{name}_{strategy}"))
                what = f"{name}: W = 4 {strategy}{'(2)' if strategy == 'HYBRID_SHARD' else ''}"
                ok = losses is not None and len(losses) == STEPS and all(
                    abs(a - b) <= 1e-5 * abs(b) for a, b in zip(losses, base))
                check(ok, f"{what} losses {losses} equal W = 1's {base} within 1e-5 relative")
                if model.config.tie_word_embeddings and losses is not None:
                    # The root unit holds the embedding and the final norm, not a second
                    # [V, C] head: fewer than 2 V C elements (padded to the shard group).
                    root = re.search(r"units \(padded elements\): root=(\d+)", log)
                    c = model.config.hidden_size
                    check("tied head" in log and root is not None and int(root.group(1)) < 2 * 97 * c,
                          f"{name}: the tied head is the embedding, one parameter in the root "
                          f"unit (root {root.group(1) if root else '?'} elements, V C = {97 * c})")
    if FAILURES:
        print(f"{len(FAILURES)} failure(s)")
        sys.exit(1)
    print("all passed")


if __name__ == "__main__":
    main()
