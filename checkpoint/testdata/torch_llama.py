"""A plain PyTorch Llama with torchtitan's module names (ours, and Meta's), for the DCP tests
(dcp_test.py, dcp_import_test.py): tok_embeddings, layers.N.attention.wq/wk/wv/wo,
layers.N.feed_forward.w1/w2/w3, layers.N.attention_norm / ffn_norm, norm, output. Rotary
embeddings in Meta's layout (channel pairs 2i, 2i + 1), grouped-query attention, SwiGLU, RMSNorm.
Its logits equal transformers' LlamaForCausalLM on our export of the same weights (dcp_test.py
checks it)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class RmsNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        d = c["n_embd"] // c["n_head"]
        self.h, self.kv, self.d = c["n_head"], c["n_kv_head"], d
        self.wq = nn.Linear(c["n_embd"], self.h * d, bias=False)
        self.wk = nn.Linear(c["n_embd"], self.kv * d, bias=False)
        self.wv = nn.Linear(c["n_embd"], self.kv * d, bias=False)
        self.wo = nn.Linear(self.h * d, c["n_embd"], bias=False)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape

        def heads(y, n):
            return y.view(b, t, n, self.d).transpose(1, 2)

        def rope(y):  # Meta's layout: channel pairs (2i, 2i + 1)
            a, bb = y[..., 0::2], y[..., 1::2]
            return torch.stack([a * cos - bb * sin, a * sin + bb * cos], -1).flatten(-2)

        q, k, v = rope(heads(self.wq(x), self.h)), rope(heads(self.wk(x), self.kv)), \
            heads(self.wv(x), self.kv)
        k = k.repeat_interleave(self.h // self.kv, 1)
        v = v.repeat_interleave(self.h // self.kv, 1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(y.transpose(1, 2).reshape(b, t, self.h * self.d))


class FeedForward(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.w1 = nn.Linear(c["n_embd"], c["ffn_hidden"], bias=False)
        self.w2 = nn.Linear(c["ffn_hidden"], c["n_embd"], bias=False)
        self.w3 = nn.Linear(c["n_embd"], c["ffn_hidden"], bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.attention_norm = RmsNorm(c["n_embd"], c["norm_eps"])
        self.attention = Attention(c)
        self.ffn_norm = RmsNorm(c["n_embd"], c["norm_eps"])
        self.feed_forward = FeedForward(c)

    def forward(self, x, cos, sin):
        h = x + self.attention(self.attention_norm(x), cos, sin)
        return h + self.feed_forward(self.ffn_norm(h))


class Llama(nn.Module):
    """torchtitan's Llama module names (tok_embeddings, layers.N.attention.wq, ..., output)."""

    def __init__(self, c):
        super().__init__()
        self.c = c
        self.tok_embeddings = nn.Embedding(c["vocab_size"], c["n_embd"])
        self.layers = nn.ModuleList(Block(c) for _ in range(c["n_layer"]))
        self.norm = RmsNorm(c["n_embd"], c["norm_eps"])
        self.output = nn.Linear(c["n_embd"], c["vocab_size"], bias=False)

    def forward(self, tokens):
        d = self.c["n_embd"] // self.c["n_head"]
        inv = self.c["rope_theta"] ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
        ang = torch.outer(torch.arange(tokens.shape[1], dtype=torch.float64), inv)
        cos, sin = ang.cos().float(), ang.sin().float()
        x = self.tok_embeddings(tokens)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.output(self.norm(x))
