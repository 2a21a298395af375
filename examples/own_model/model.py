"""A small decoder-only language model in ordinary PyTorch: the model of examples/own_model.

Nothing here knows about Shardline. It is the kind of model a user brings: an nn.Module with a
ModuleList of identical blocks, pre-norm residuals, causal self-attention with a registered
causal-mask buffer, and an output head tied to the token embedding. export.py scripts it with
torch.jit.script and saves the file a job names in model.torchscript_path.

Shapes: B batch, T sequence length (<= block_size), C model width (dim), H heads, D = C / H,
V vocabulary size. forward: int64 token ids [B, T] -> float32 logits [B, T, V].
"""
import math

import torch
import torch.nn.functional as F
from torch import nn


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention in which position t sees positions <= t."""

    def __init__(self, dim: int, n_head: int, block_size: int):
        super().__init__()
        assert dim % n_head == 0, "dim must be divisible by n_head"
        self.n_head = n_head
        self.head_dim = dim // n_head
        self.qkv = nn.Linear(dim, 3 * dim)  # [C] -> [3C]: q, k, v side by side
        self.proj = nn.Linear(dim, dim)
        # [1, 1, block_size, block_size], True where attention is allowed. A buffer, not a
        # parameter: it is not trained, and persistent=False keeps it out of the state dict.
        mask = torch.tril(torch.ones(block_size, block_size, dtype=torch.bool))
        self.register_buffer("mask", mask.view(1, 1, block_size, block_size), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.size()
        q, k, v = self.qkv(x).split(C, dim=2)  # each [B, T, C]
        q = q.view(B, T, self.n_head, self.head_dim).transpose(1, 2)  # [B, H, T, D]
        k = k.view(B, T, self.n_head, self.head_dim).transpose(1, 2)
        v = v.view(B, T, self.n_head, self.head_dim).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.head_dim))  # [B, H, T, T]
        att = att.masked_fill(~self.mask[:, :, :T, :T], float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)  # [B, T, C]
        return self.proj(y)


class MLP(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.up = nn.Linear(dim, 4 * dim)
        self.down = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.gelu(self.up(x)))


class Block(nn.Module):
    """One pre-norm transformer block: x + attn(norm(x)), then x + mlp(norm(x)).

    The unit of sharding: with per-block sharding a job names this class (fsdp.block_class:
    Block) and each Block's parameters are gathered just before it runs and freed after.
    """

    def __init__(self, dim: int, n_head: int, block_size: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = CausalSelfAttention(dim, n_head, block_size)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = MLP(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class TinyDecoder(nn.Module):
    """Token and position embeddings, n_layer Blocks, a final norm, a head tied to the embedding."""

    def __init__(self, vocab_size: int = 256, dim: int = 64, n_layer: int = 4, n_head: int = 4,
                 block_size: int = 64):
        super().__init__()
        self.block_size = block_size
        self.tok_emb = nn.Embedding(vocab_size, dim)  # [V, C]
        self.pos_emb = nn.Embedding(block_size, dim)  # [block_size, C]
        self.blocks = nn.ModuleList([Block(dim, n_head, block_size) for _ in range(n_layer)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab_size, bias=False)  # [V, C]
        self.head.weight = self.tok_emb.weight  # tied: one parameter under two names
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        T = tokens.size(1)
        assert T <= self.block_size, "sequence longer than block_size"
        pos = torch.arange(T, dtype=torch.long, device=tokens.device)  # [T]
        x = self.tok_emb(tokens) + self.pos_emb(pos)  # [B, T, C]
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))  # [B, T, V]
