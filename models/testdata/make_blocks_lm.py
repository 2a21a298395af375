"""Writes blocks_lm.pt: a scripted decoder LM written like an ordinary user's PyTorch model.

Not a Shardline model and no Shardline code inside: a ModuleList of `Block`s, an output head tied
to the token embedding, and blocks whose forward takes an extra tensor (a causal mask buffer
sliced by the caller), called from a helper method rather than from forward itself. Tests shard
it per block with fsdp.block_class "Block" (models/models_test, trainer/scripted_blocks_test.sh).
Also writes unsupported_blocks_lm.pt, whose block classes the refusal tests name.

Run from the repository root with the project's venv:
  .venv/bin/python models/testdata/make_blocks_lm.py [--out FILE --dim D --layers L]
The committed file was produced by this script with torch 2.11.0; regenerate it only if the
TorchScript format changes.
"""
import argparse
import math
from typing import Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F


class SelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q = q.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(c // self.heads)
        att = att.masked_fill(mask == 0, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.proj(y)


class Block(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = SelfAttention(dim, heads)
        self.ln2 = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, 4 * dim)
        self.out = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x), mask)
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class BlocksLm(nn.Module):
    def __init__(self, vocab: int = 256, dim: int = 64, heads: int = 4, layers: int = 4,
                 context: int = 64):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(context, dim)
        self.blocks = nn.ModuleList([Block(dim, heads) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.tok.weight  # Tied.
        self.register_buffer("mask", torch.tril(torch.ones(context, context)).view(
            1, 1, context, context))

    def trunk(self, x: torch.Tensor, t: int) -> torch.Tensor:
        mask = self.mask[:, :, :t, :t]
        for block in self.blocks:
            x = block(x, mask)
        return x

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        t = tokens.size(1)
        x = self.tok(tokens) + self.pos(torch.arange(t, device=tokens.device))
        return self.head(self.ln_f(self.trunk(x, t)))


class ScaledBlock(nn.Module):  # A non-tensor input: refused as a block class.
    def __init__(self, dim: int):
        super().__init__()
        self.fc = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, scale: float) -> torch.Tensor:
        return x + scale * self.fc(x)


class PairBlock(nn.Module):  # Two outputs: refused as a block class.
    def __init__(self, dim: int):
        super().__init__()
        self.fc = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        return x, self.fc(x)


class StepBlock(nn.Module):  # Called through another method: refused as a block class.
    def __init__(self, dim: int):
        super().__init__()
        self.fc = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)

    @torch.jit.export
    def step(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc(x)


class UnsupportedBlocksLm(nn.Module):
    def __init__(self, vocab: int = 256, dim: int = 8):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.scaled = ScaledBlock(dim)
        self.pair = PairBlock(dim)
        self.stepper = StepBlock(dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.scaled(self.tok(tokens), 0.5)
        a, b = self.pair(x)
        return self.head(self.stepper.step(a + b))


parser = argparse.ArgumentParser()
parser.add_argument("--out", help="write only a BlocksLm of --dim and --layers, to this file "
                    "(trainer/sharded_init_memory_test.sh makes a 73 MiB one)")
parser.add_argument("--dim", type=int, default=64)
parser.add_argument("--layers", type=int, default=4)
args = parser.parse_args()
torch.manual_seed(0)
if args.out:
    torch.jit.script(BlocksLm(dim=args.dim, layers=args.layers)).save(args.out)
else:
    torch.jit.script(BlocksLm()).save("models/testdata/blocks_lm.pt")
    torch.jit.script(UnsupportedBlocksLm()).save("models/testdata/unsupported_blocks_lm.pt")
