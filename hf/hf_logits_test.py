"""Hugging Face interop against transformers itself (issue 15 item 2).

1. Import: tiny random transformers models (Llama with grouped-query attention, an untied head
   and rope_theta 5e5; Llama with a tied head, saved as a sharded index; GPT-2 with its tied
   head) are read by our hf_logits tool (our model, weights through hf/weights.h); its next-token
   logits match transformers' within 1e-4.
2. Round trip: the trainer fine-tunes each imported model for 2 steps from model.hf_dir and saves
   a checkpoint; hf_export writes it as a transformers folder; from_pretrained of that folder
   gives the same next-token logits as our model with the checkpoint's weights (1e-4), and they
   differ from the untrained model's (the trained weights, not the originals, went through).

Arguments: hf_logits=PATH hf_export=PATH trainer=PATH (Bazel locations).
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import transformers

TOL = 1e-4
FAILURES = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        FAILURES.append(what)


def bins():
    out = {}
    for a in sys.argv[1:]:
        k, v = a.split("=", 1)
        out[k] = os.path.abspath(v)
    return out


def randomize(model, seed):
    """Weights large enough that a wrong permutation or transpose shows far above 1e-4."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:  # norms and biases
                p.copy_(1.0 + 0.3 * torch.randn(p.shape, generator=g) if "weight" in name
                        else 0.2 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) * (1.0 / p.shape[-1] ** 0.5))
    return model


def hf_logits(model_dir, tokens):
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.eval()
    with torch.no_grad():
        return model(torch.tensor([tokens])).logits[0].numpy()


def our_logits(b, model_dir, tokens, vocab, step_dir=None):
    with tempfile.NamedTemporaryFile(suffix=".bin") as out:
        cmd = [b["hf_logits"], model_dir, ",".join(map(str, tokens)), out.name]
        if step_dir:
            cmd.append(step_dir)
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"hf_logits failed: {r.stderr}")
        return np.fromfile(out.name, dtype=np.float32).reshape(len(tokens), vocab)


def compare(name, ours, theirs):
    diff = float(np.abs(ours - theirs).max())
    scale = float(np.abs(theirs).max())
    check(diff <= TOL and scale > 0.5,
          f"{name}: max |ours - transformers| = {diff:.2e} (logits up to {scale:.2f})")


def train_and_export(b, tmp, name, model_dir, vocab, tokens):
    """Fine-tunes from model_dir for 2 steps, exports, compares; returns nothing."""
    data = os.path.join(tmp, f"{name}.u16")
    rng = np.random.default_rng(1)
    rng.integers(0, vocab, size=4096, dtype=np.uint16).tofile(data)
    spec = os.path.join(tmp, f"{name}.yaml")
    ckpt = os.path.join(tmp, f"{name}_ckpt")
    with open(spec, "w") as f:
        f.write(f"""name: {name}
model:
  hf_dir: {model_dir}
data:
  path: {data}
  format: TOKENS_U16
  seq_len: 16
optimizer:
  lr: 0.01
  warmup_steps: 0
fsdp:
  sharding_strategy: NO_SHARD
train:
  steps: 2
  micro_batch_size: 2
  eval_batches: 1
  sample_tokens: 0
  deterministic: true
checkpoint:
  dir: {ckpt}
  save_final: true
device:
  kind: CPU
""")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    r = subprocess.run([b["trainer"], "--spec", spec], capture_output=True, text=True, env=env)
    check(r.returncode == 0, f"{name}: trainer fine-tunes from model.hf_dir (exit {r.returncode})")
    if r.returncode != 0:
        print(r.stderr[-3000:])
        return
    check("initialized the weights from the Hugging Face folder" in r.stderr,
          f"{name}: the trainer logs the Hugging Face initialisation")
    step_dir = os.path.join(ckpt, "step_2")
    out_dir = os.path.join(tmp, f"{name}_exported")
    r = subprocess.run([b["hf_export"], spec, step_dir, out_dir], capture_output=True, text=True)
    check(r.returncode == 0, f"{name}: hf_export (exit {r.returncode}) {r.stderr.strip()}")
    if r.returncode != 0:
        return
    theirs = hf_logits(out_dir, tokens)
    ours = our_logits(b, model_dir, tokens, vocab, step_dir)
    compare(f"{name}: checkpoint -> export -> from_pretrained", ours, theirs)
    before = hf_logits(model_dir, tokens)
    check(float(np.abs(theirs - before).max()) > 1e-3,
          f"{name}: the exported (trained) logits differ from the original model's")
    check(int(theirs[-1].argmax()) == int(ours[-1].argmax()),
          f"{name}: same next token after the round trip")


def main():
    b = bins()
    torch.manual_seed(0)
    tokens = [int(t) for t in np.random.default_rng(0).integers(0, 97, size=24)]
    cases = {
        "llama_gqa": transformers.LlamaForCausalLM(transformers.LlamaConfig(
            vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
            num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=64,
            rope_theta=500000.0, rms_norm_eps=1e-6, tie_word_embeddings=False)),
        "llama_tied": transformers.LlamaForCausalLM(transformers.LlamaConfig(
            vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=32,
            tie_word_embeddings=True)),
        "gpt2": transformers.GPT2LMHeadModel(transformers.GPT2Config(
            vocab_size=97, n_embd=32, n_layer=2, n_head=4, n_positions=32,
            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)),
    }
    with tempfile.TemporaryDirectory() as tmp:
        for i, (name, model) in enumerate(cases.items()):
            randomize(model, seed=i + 1)
            if name == "llama_tied":
                model.tie_weights()
            model_dir = os.path.join(tmp, name)
            # The tied Llama as several shards behind model.safetensors.index.json.
            kwargs = {"max_shard_size": "40KB"} if name == "llama_tied" else {}
            model.save_pretrained(model_dir, **kwargs)
            if name == "llama_tied":
                check(os.path.exists(os.path.join(model_dir, "model.safetensors.index.json")),
                      "llama_tied: saved as a sharded index")
            theirs = hf_logits(model_dir, tokens)
            ours = our_logits(b, model_dir, tokens, 97)
            compare(f"{name}: imported", ours, theirs)
            train_and_export(b, tmp, name, model_dir, 97, tokens)
    if FAILURES:
        print(f"{len(FAILURES)} failure(s)")
        sys.exit(1)
    print("all passed")


if __name__ == "__main__":
    main()
