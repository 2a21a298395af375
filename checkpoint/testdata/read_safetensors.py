"""Reads two safetensors files with Python's safetensors + PyTorch and requires equal contents.

Usage: read_safetensors.py EXPORTED REFERENCE
EXPORTED is checkpoint/safetensors.h's export of a checkpoint, REFERENCE the model's full state
written by the training ranks. Prints "PYTHON_OK <tensors>" on success; exits 1 otherwise.
"""
import sys

import torch
from safetensors import safe_open
from safetensors.torch import load_file


def main():
    exported = load_file(sys.argv[1])
    reference = load_file(sys.argv[2])
    if sorted(exported) != sorted(reference):
        print("key mismatch", sorted(exported), sorted(reference))
        return 1
    for name, t in reference.items():
        e = exported[name]
        if e.dtype != torch.float32 or e.shape != t.shape or not torch.equal(e, t):
            print("tensor differs:", name, e.dtype, tuple(e.shape), tuple(t.shape))
            return 1
    with safe_open(sys.argv[1], framework="pt") as f:
        meta = f.metadata()
    if meta.get("format") != "pt" or "step" not in meta:
        print("bad metadata", meta)
        return 1
    print("PYTHON_OK", len(exported), "step", meta["step"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
