"""Hugging Face interop against transformers itself (issue 15 item 2, issue 32 item 1).

1. Import: tiny random transformers models of every family we read (Llama with grouped-query
   attention, an untied head and rope_theta 5e5; Llama with a tied head, saved as a sharded
   index; Llama 3.1 with llama3 rope scaling, head_dim apart from the width, a tied head, in
   bfloat16; Llama with linear and dynamic rope scaling; Qwen2 with q/k/v biases, tied, sharded;
   Qwen2 untied in bfloat16; Qwen3 with q/k norm, head_dim and attention biases; Mistral with a
   sliding window shorter than the sequence, and without one; GPT-2 with its tied head) are read
   by our hf_logits tool (our model, weights through hf/weights.h); its logits at every position
   match transformers' within 1e-4. Each variant is shown to matter: the same weights under the
   plain Llama config give logits far from transformers' (so a variant ignored would fail).
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
    import json
    from safetensors import safe_open
    with open(os.path.join(model_dir, "config.json")) as f:
        source = json.load(f)
    with open(os.path.join(out_dir, "config.json")) as f:
        exported = json.load(f)
    check(exported["model_type"] == source["model_type"],
          f"{name}: exported as model_type {exported['model_type']} "
          f"(the source's {source['model_type']})")
    with safe_open(os.path.join(out_dir, "model.safetensors"), "pt") as f:
        names = set(f.keys())
    tied = bool(source.get("tie_word_embeddings", name == "gpt2"))
    check(exported.get("tie_word_embeddings") == tied and ("lm_head.weight" in names) != tied,
          f"{name}: the head is exported {'tied (no lm_head.weight)' if tied else 'untied'}")
    theirs = hf_logits(out_dir, tokens)
    ours = our_logits(b, model_dir, tokens, vocab, step_dir)
    compare(f"{name}: checkpoint -> export -> from_pretrained", ours, theirs)
    before = hf_logits(model_dir, tokens)
    check(float(np.abs(theirs - before).max()) > 1e-3,
          f"{name}: the exported (trained) logits differ from the original model's")
    check(int(theirs[-1].argmax()) == int(ours[-1].argmax()),
          f"{name}: same next token after the round trip")


def plain_llama_logits(model_dir, tokens, tmp):
    """transformers' logits for the folder's weights read as a plain Llama: the same tensors
    without rope scaling, window, biases and q/k norms (which a plain Llama has no names for)."""
    import json
    import shutil
    plain = os.path.join(tmp, os.path.basename(model_dir) + "_as_plain_llama")
    shutil.copytree(model_dir, plain)
    with open(os.path.join(plain, "config.json")) as f:
        config = json.load(f)
    config.update(model_type="llama", architectures=["LlamaForCausalLM"], attention_bias=False,
                  rope_parameters={"rope_type": "default",
                                   "rope_theta": (config.get("rope_parameters") or {}).get(
                                       "rope_theta", 10000.0)})
    config.pop("rope_scaling", None)
    with open(os.path.join(plain, "config.json"), "w") as f:
        json.dump(config, f)
    return hf_logits(plain, tokens)


def cases():
    C = transformers
    llama3_rope = {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0,
                   "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 16}
    # name: (model, save dtype, max_shard_size or None, is a variant of the plain Llama)
    return {
        "llama_gqa": (C.LlamaForCausalLM(C.LlamaConfig(
            vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
            num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=64,
            rope_theta=500000.0, rms_norm_eps=1e-6, tie_word_embeddings=False)),
            torch.float32, None, False),
        "llama_tied": (C.LlamaForCausalLM(C.LlamaConfig(
            vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=32,
            tie_word_embeddings=True)), torch.float32, "40KB", False),
        "llama31": (C.LlamaForCausalLM(C.LlamaConfig(
            vocab_size=97, hidden_size=48, intermediate_size=80, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            max_position_embeddings=64, rope_parameters=llama3_rope,
            tie_word_embeddings=True)), torch.bfloat16, None, True),
        "llama_linear": (C.LlamaForCausalLM(C.LlamaConfig(
            vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
            num_attention_heads=4, max_position_embeddings=64,
            rope_parameters={"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0})),
            torch.float32, None, True),
        "llama_dynamic": (C.LlamaForCausalLM(C.LlamaConfig(
            vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
            num_attention_heads=4, max_position_embeddings=64,
            rope_parameters={"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0})),
            torch.float32, None, False),  # within max_position_embeddings it is the default
        "qwen2_tied": (C.Qwen2ForCausalLM(C.Qwen2Config(
            vocab_size=97, hidden_size=48, intermediate_size=80, num_hidden_layers=2,
            num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=64,
            tie_word_embeddings=True)), torch.float32, "30KB", True),
        "qwen2": (C.Qwen2ForCausalLM(C.Qwen2Config(
            vocab_size=97, hidden_size=48, intermediate_size=80, num_hidden_layers=2,
            num_attention_heads=6, num_key_value_heads=3, max_position_embeddings=64,
            tie_word_embeddings=False)), torch.bfloat16, None, True),
        "qwen3": (C.Qwen3ForCausalLM(C.Qwen3Config(
            vocab_size=97, hidden_size=40, intermediate_size=72, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            max_position_embeddings=64, attention_bias=True)), torch.float32, None, True),
        "mistral": (C.MistralForCausalLM(C.MistralConfig(
            vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
            sliding_window=8)), torch.float32, None, True),
        "mistral_no_window": (C.MistralForCausalLM(C.MistralConfig(
            vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
            sliding_window=None)), torch.bfloat16, None, False),
        "gpt2": (C.GPT2LMHeadModel(C.GPT2Config(
            vocab_size=97, n_embd=32, n_layer=2, n_head=4, n_positions=32,
            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)), torch.float32, None, False),
    }


def main():
    b = bins()
    torch.manual_seed(0)
    tokens = [int(t) for t in np.random.default_rng(0).integers(0, 97, size=24)]
    with tempfile.TemporaryDirectory() as tmp:
        for i, (name, (model, dtype, shard, variant)) in enumerate(cases().items()):
            randomize(model, seed=i + 1)
            if model.config.tie_word_embeddings:
                model.tie_weights()
            model_dir = os.path.join(tmp, name)
            kwargs = {"max_shard_size": shard} if shard else {}
            model.to(dtype).save_pretrained(model_dir, **kwargs)
            if shard:
                check(os.path.exists(os.path.join(model_dir, "model.safetensors.index.json")),
                      f"{name}: saved as a sharded index")
            theirs = hf_logits(model_dir, tokens)
            ours = our_logits(b, model_dir, tokens, 97)
            compare(f"{name} ({str(dtype).split('.')[-1]}): imported", ours, theirs)
            if variant:
                plain = plain_llama_logits(model_dir, tokens, tmp)
                check(float(np.abs(plain - theirs).max()) > 1e-2,
                      f"{name}: the variant matters (the plain Llama reading differs by "
                      f"{float(np.abs(plain - theirs).max()):.2e})")
            train_and_export(b, tmp, name, model_dir, 97, tokens)
    if FAILURES:
        print(f"{len(FAILURES)} failure(s)")
        sys.exit(1)
    print("all passed")


if __name__ == "__main__":
    main()
