"""Writes the seed corpus of //fuzz:safetensors_fuzzer: a few small valid files (one written by
Python's own safetensors package, when it is installed) and hostile ones, one defect each.

Usage: python3 fuzz/make_safetensors_seeds.py fuzz/corpus/safetensors
"""
import json
import os
import struct
import sys


def pack(header, data=b""):
    text = header if isinstance(header, str) else json.dumps(header, separators=(",", ":"))
    raw = text.encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw + data


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    f32 = struct.pack("<6f", 0, 1, 2, 3, 4, 5)
    seeds = {
        "valid_two_tensors": pack(
            {
                "__metadata__": {"format": "pt", "step": "3"},
                "wte.weight": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
                "ln.bias": {"dtype": "BF16", "shape": [4], "data_offsets": [24, 32]},
            },
            f32 + b"\x01\x02" * 4,
        ),
        "valid_empty_and_scalar": pack(
            {
                "empty": {"dtype": "F16", "shape": [0, 7], "data_offsets": [0, 0]},
                "scalar": {"dtype": "I64", "shape": [], "data_offsets": [0, 8]},
            },
            struct.pack("<q", -5),
        ),
        "negative_dim": pack({"w": {"dtype": "F32", "shape": [-2, -3], "data_offsets": [0, 24]}}, f32),
        "fractional_dim": pack({"w": {"dtype": "F32", "shape": [1.5, 4], "data_offsets": [0, 24]}}, f32),
        "huge_dims": pack(
            {"w": {"dtype": "F64", "shape": [4294967296, 4294967296], "data_offsets": [0, 0]}}, f32
        ),
        "overlap": pack(
            {
                "a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                "b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]},
            },
            f32,
        ),
        "offsets_past_end": pack({"w": {"dtype": "U8", "shape": [64], "data_offsets": [0, 64]}}, f32),
        "offsets_wrap": pack(
            {"w": {"dtype": "U8", "shape": [8], "data_offsets": [9007199254740984, 9007199254740992]}},
            f32,
        ),
        "unknown_dtype": pack({"w": {"dtype": "F8_E4M3", "shape": [24], "data_offsets": [0, 24]}}, f32),
        "bad_metadata": pack({"__metadata__": {"step": 3}}),
        "header_length_past_end": struct.pack("<Q", 2**64 - 1) + b"{}",
        "not_json": pack("{\"w\": [", f32),
    }
    try:  # A file from the reference implementation.
        import torch
        from safetensors.torch import save_file

        path = os.path.join(out, "valid_python_safetensors")
        save_file({"a": torch.arange(6, dtype=torch.float32).reshape(2, 3),
                   "b": torch.ones(3, dtype=torch.bfloat16)}, path, metadata={"format": "pt"})
    except ImportError:
        pass
    for name, data in seeds.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
