#!/usr/bin/env python3
"""Builds the example model (model.py), scripts it with torch.jit.script and saves it.

  .venv/bin/python examples/own_model/export.py --out examples/own_model/model.pt \
      [--vocab-size 256] [--dim 64] [--n-layer 4] [--n-head 4] [--block-size 64] [--seed 1337]

The saved file is what a job names in model.torchscript_path; its weights (drawn with --seed)
are the job's initial weights. Before saving, the scripted forward is checked against the eager
one on a random batch. --vocab-size must match the data: 256 for TEXT (bytes), the tokenizer's
vocabulary for token files (tools/prepare_data.py writes it to meta.json); --block-size must be
at least the job's data.seq_len (and the prompt plus sample_tokens, for samples).
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import TinyDecoder  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="where to write the TorchScript file")
    p.add_argument("--vocab-size", type=int, default=256)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--n-layer", type=int, default=4)
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--block-size", type=int, default=64)
    p.add_argument("--seed", type=int, default=1337, help="seed of the initial weights")
    a = p.parse_args(argv)

    torch.manual_seed(a.seed)
    model = TinyDecoder(vocab_size=a.vocab_size, dim=a.dim, n_layer=a.n_layer, n_head=a.n_head,
                        block_size=a.block_size).eval()
    scripted = torch.jit.script(model)

    # The script must compute what the Python model computes.
    tokens = torch.randint(0, a.vocab_size, (2, a.block_size), dtype=torch.long)
    with torch.no_grad():
        eager, script = model(tokens), scripted(tokens)
    if eager.shape != (2, a.block_size, a.vocab_size):
        sys.exit("logits have shape %s, expected [2, %d, %d]" % (
            tuple(eager.shape), a.block_size, a.vocab_size))
    torch.testing.assert_close(script, eager, rtol=1e-5, atol=1e-5)

    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    scripted.save(a.out)
    params = sum(t.numel() for t in model.parameters())  # the tied weight counted once
    print("wrote %s: %d parameters, vocab %d, block_size %d, %d blocks of class Block" % (
        a.out, params, a.vocab_size, a.block_size, a.n_layer))


if __name__ == "__main__":
    main()
