"""Writes the TorchScript files the sharded load (models/torchscript_file.h) is tested on.

layout_lm.pt: parameter layouts a file can hold besides one contiguous tensor per storage: a
transposed weight (strides (1, 48)), two parameters that are views into one storage at different
offsets, a buffer, and a plain tensor attribute that is neither. Loaded range by range.
constant_lm.pt: a traced model whose code holds a tensor constant. Loaded whole.

Run from the repository root with the project's venv:
  .venv/bin/python models/testdata/make_layout_lm.py [output directory]
The committed files were produced by this script with torch 2.11.0; regenerate them only if the
TorchScript format changes.
"""
import sys
import torch
import torch.nn as nn


class LayoutLm(nn.Module):
    def __init__(self, vocab: int = 256, dim: int = 48):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        # Stored as its transpose: the parameter is a non-contiguous view of a [dim, dim] storage.
        self.mix_t = nn.Parameter(torch.randn(dim, dim).t())
        # Two parameters in one storage, at element offsets 0 and dim * vocab.
        base = torch.randn(2 * dim * vocab) * 0.02
        self.head_a = nn.Parameter(base[: dim * vocab].view(vocab, dim))
        self.head_b = nn.Parameter(base[dim * vocab:].view(vocab, dim))
        self.register_buffer("scale", torch.linspace(0.5, 1.5, dim))
        self.offset = torch.full([vocab], 0.25)  # A tensor attribute, not a buffer.

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = torch.tanh(self.embed(tokens) @ self.mix_t) * self.scale
        return x @ self.head_a.t() + x @ self.head_b.t() * 0.5 + self.offset


class ConstantLm(nn.Module):
    def __init__(self, vocab: int = 256, dim: int = 16):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.head = nn.Linear(dim, vocab)
        self.bias = torch.linspace(-1.0, 1.0, vocab)  # Captured by the trace as a constant.

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.embed(tokens)) + self.bias


out = sys.argv[1] if len(sys.argv) > 1 else "models/testdata"
torch.manual_seed(0)
torch.jit.script(LayoutLm()).save(f"{out}/layout_lm.pt")
torch.manual_seed(0)
torch.jit.trace(ConstantLm(), torch.zeros(1, 4, dtype=torch.long)).save(f"{out}/constant_lm.pt")
