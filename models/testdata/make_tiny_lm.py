"""Writes tiny_lm.pt: a TorchScript language model for models/ tests (bring-your-own path).

Run from the repository root with the project's venv: .venv/bin/python models/testdata/make_tiny_lm.py
The committed file was produced by this script with torch 2.11.0; regenerate it only if the
TorchScript format changes.
"""
import torch


class TinyLm(torch.nn.Module):
    def __init__(self, vocab: int = 256, dim: int = 32):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, dim)
        self.mix = torch.nn.Linear(dim, dim)
        self.head = torch.nn.Linear(dim, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        # Causal by construction: each position only sees its own token.
        return self.head(torch.tanh(self.mix(self.embed(tokens))))


torch.manual_seed(0)
torch.jit.script(TinyLm()).save("models/testdata/tiny_lm.pt")
