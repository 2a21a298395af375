"""A PyTorch mirror of models/gpt.cc (GPT-2 style decoder), parameter for parameter.

Dimension legend: B batch, T sequence, C n_embd, H n_head, D = C / H, V vocab, L n_layer.

What it must match in models/gpt.cc, and does:
  - names and shapes: wte.weight [V, C], wpe.weight [block, C],
    blocks.<i>.{ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj}.{weight, bias},
    ln_f.{weight, bias}; torch.nn.Linear stores [out, in] like torch::nn::Linear;
  - LayerNorm eps 1e-5 with affine weight and bias (torch::nn::LayerNormOptions' defaults);
  - attention: one c_attn projection split into q, k, v; scaled_dot_product_attention with
    is_causal=True; no dropout (the benchmarks set model.dropout 0);
  - MLP C -> 4C -> C with GELU, tanh approximation;
  - pre-norm residual blocks, final ln_f, head tied to wte (logits = ln_f(x) @ wte^T, no
    separate head parameter);
  - init (models/init.cc's GPT-2 scheme): weights N(0, 0.02), residual projections
    (names ending c_proj.weight) N(0, 0.02 / sqrt(2 L)), biases 0, LayerNorm weights 1.
    The draws come from torch's CPU generator here, not in LibTorch's visiting order: the
    benchmark writes these weights to safetensors and both sides load that file, so the two
    sides start equal whatever each would draw itself.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.n_head = n_head
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)  # [3C, C] + [3C]
        self.c_proj = nn.Linear(n_embd, n_embd)      # [C, C] + [C]

    def forward(self, x):
        b, t, c = x.shape
        d = c // self.n_head
        q, k, v = self.c_attn(x).split(c, dim=2)

        def heads(y):
            return y.view(b, t, self.n_head, d).transpose(1, 2)

        y = F.scaled_dot_product_attention(heads(q), heads(k), heads(v), is_causal=True)
        y = y.transpose(1, 2).contiguous().view(b, t, c)
        return self.c_proj(y)


class Mlp(nn.Module):
    def __init__(self, n_embd):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.c_proj = nn.Linear(4 * n_embd, n_embd)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd, eps=1e-5)
        self.attn = CausalSelfAttention(n_embd, n_head)
        self.ln_2 = nn.LayerNorm(n_embd, eps=1e-5)
        self.mlp = Mlp(n_embd)

    def forward(self, x):
        h = x + self.attn(self.ln_1(x))
        return h + self.mlp(self.ln_2(h))


class Gpt(nn.Module):
    def __init__(self, n_embd, n_layer, n_head, vocab_size, block_size):
        super().__init__()
        self.block_size = block_size
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.blocks = nn.ModuleList(Block(n_embd, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd, eps=1e-5)

    def forward(self, tokens):  # [B, T] -> [B, T, V]
        t = tokens.size(1)
        assert t <= self.block_size
        pos = torch.arange(t, dtype=torch.long, device=tokens.device)
        x = self.wte(tokens) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        return F.linear(self.ln_f(x), self.wte.weight)


def expected_names(n_layer):
    """Parameter names of models/gpt.h's header comment, in registration order."""
    names = ["wte.weight", "wpe.weight"]
    for i in range(n_layer):
        for sub in ("ln_1", "attn.c_attn", "attn.c_proj", "ln_2", "mlp.c_fc", "mlp.c_proj"):
            names += [f"blocks.{i}.{sub}.weight", f"blocks.{i}.{sub}.bias"]
    return names + ["ln_f.weight", "ln_f.bias"]


@torch.no_grad()
def init_gpt2(model, n_layer, seed):
    gen = torch.Generator().manual_seed(seed)
    residual_std = 0.02 / math.sqrt(2.0 * n_layer)
    for name, p in model.named_parameters():
        if name.endswith(".bias"):
            p.zero_()
        elif "ln_" in name:
            p.fill_(1.0)
        else:
            std = residual_std if name.endswith("c_proj.weight") else 0.02
            p.copy_(torch.empty(p.shape).normal_(0.0, std, generator=gen))


def training_flops_per_token(n_embd, n_layer, vocab_size, seq_len):
    """models/gpt.cc's GptModel::TrainingFlopsPerToken (the MFU numerator of both sides)."""
    return 6 * n_layer * 12 * n_embd ** 2 + 6 * vocab_size * n_embd + 12 * n_layer * n_embd * seq_len


def lr_at(step, lr, min_lr, warmup, total):
    """trainer/lr_schedule.cc's LearningRateAt: linear warmup, then cosine to min_lr."""
    if step < warmup:
        return lr * (step + 1) / warmup
    if step >= total:
        return min_lr
    progress = (step - warmup) / max(1, total - warmup)
    return min_lr + (lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))
