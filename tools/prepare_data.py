#!/usr/bin/env python3
"""Tokenizes text files into Shardline token files (TOKENS_U16 / TOKENS_U32), offline.

  prepare_data.py --out DIR (--tokenizer tokenizer.json | --sentencepiece m.model |
                             --train-bpe VOCAB_SIZE) [--val-fraction 0.1] TEXT [TEXT ...]

One of three tokenizers:
  --tokenizer F       a Hugging Face tokenizers file (tokenizer.json), `tokenizers` package;
  --sentencepiece F   a sentencepiece model (.model), `sentencepiece` package;
  --train-bpe N       trains a byte-level BPE of N tokens on the given texts (`tokenizers`;
                      nothing is downloaded) and saves it as DIR/tokenizer.json.

Writes to DIR:
  train_00000.bin ...  one token file per input text (its head), little-endian uint16 when the
                       vocabulary fits (< 65536 ids) else uint32: the spec's data.paths, in order;
  val.bin              the tail (--val-fraction) of every input, concatenated: data.val_path;
  tokens.vocab         each id's bytes, one line per id in hex (empty for special tokens):
                       data.vocab_path, with which the trainer encodes the sample prompt and
                       decodes samples (data/vocab.h);
  meta.json            {"format": "TOKENS_U16", "dtype": "uint16", "vocab_size": N,
                        "tokenizer": path, "tokenizer_kind": ..., "train_files": [...],
                        "val_file": ..., "train_tokens": n, "val_tokens": n, "spec": {...}}
                       where "spec" holds the data/model fields to put in a job spec.

The bytes of an id are exact for byte-level BPE tokenizers (GPT-2, Llama 3, Qwen2/3). For
others they are derived from the token's string (sentencepiece's "\u2581" is a space, a
byte-fallback "<0xNN>" is that byte: Llama 2, Mistral), which loses the leading-space rules a
real decoder applies: samples may differ from `decode` in spaces. Added tokens are their text;
special ones are empty. Tested by tools/prepare_data_test.py.
"""
import argparse
import json
import os
import sys

import numpy as np


def bytes_to_unicode():
    """GPT-2's byte <-> printable character table (as tokenizers' ByteLevel uses)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + \
        list(range(ord("\xae"), ord("\xff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


def piece_bytes(piece, byte_level, special, added=False):
    """The bytes a token stands for. Added tokens (tokenizer.json's added_tokens: a family's
    <|im_start|>, <think>) hold their text as is, not in the byte-level alphabet; special ones
    decode to nothing, as `decode(skip_special_tokens=True)` does."""
    if special:
        return b""
    if added:
        return piece.encode("utf-8")
    if byte_level:
        inverse = {c: b for b, c in bytes_to_unicode().items()}
        if all(ch in inverse for ch in piece):
            return bytes(inverse[ch] for ch in piece)
    if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
        return bytes([int(piece[3:5], 16)])
    return piece.replace("\u2581", " ").encode("utf-8")


class HfTokenizer:
    def __init__(self, tok, path, kind):
        self.tok, self.path, self.kind = tok, path, kind
        self.vocab_size = tok.get_vocab_size(with_added_tokens=True)
        spec = json.loads(tok.to_str())
        pre = json.dumps(spec.get("pre_tokenizer")) + json.dumps(spec.get("decoder"))
        self.byte_level = "ByteLevel" in pre
        added = tok.get_added_tokens_decoder()
        self.special = {t.content for t in added.values() if t.special}
        self.added = {t.content for t in added.values()}

    def encode(self, text):
        return self.tok.encode(text, add_special_tokens=False).ids

    def vocab_bytes(self):
        out = []
        for i in range(self.vocab_size):
            piece = self.tok.id_to_token(i)
            out.append(b"" if piece is None else
                       piece_bytes(piece, self.byte_level, piece in self.special,
                                   piece in self.added))
        return out


class SpTokenizer:
    def __init__(self, path):
        import sentencepiece
        self.sp = sentencepiece.SentencePieceProcessor(model_file=path)
        self.path, self.kind = path, "sentencepiece"
        self.vocab_size = self.sp.get_piece_size()

    def encode(self, text):
        return self.sp.encode(text)

    def vocab_bytes(self):
        out = []
        for i in range(self.vocab_size):
            special = self.sp.is_control(i) or self.sp.is_unknown(i)
            out.append(piece_bytes(self.sp.id_to_piece(i), False, special))
        return out


def train_bpe(texts, vocab_size, out_dir):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train(texts, trainer)
    path = os.path.join(out_dir, "tokenizer.json")
    tok.save(path)
    return HfTokenizer(tok, path, "bpe (trained here)")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--tokenizer", help="tokenizer.json (Hugging Face tokenizers)")
    g.add_argument("--sentencepiece", help="sentencepiece .model")
    g.add_argument("--train-bpe", type=int, metavar="VOCAB_SIZE",
                   help="train a byte-level BPE of this many tokens on the texts")
    p.add_argument("--val-fraction", type=float, default=0.1,
                   help="tail of each text held out for validation (default 0.1)")
    p.add_argument("texts", nargs="+")
    a = p.parse_args(argv)
    if not 0 < a.val_fraction < 1:
        p.error("--val-fraction must be in (0, 1)")
    os.makedirs(a.out, exist_ok=True)
    texts = [os.path.abspath(t) for t in a.texts]
    if a.tokenizer:
        from tokenizers import Tokenizer
        tok = HfTokenizer(Tokenizer.from_file(a.tokenizer), os.path.abspath(a.tokenizer),
                          "tokenizers")
    elif a.sentencepiece:
        tok = SpTokenizer(os.path.abspath(a.sentencepiece))
    else:
        if a.train_bpe < 257:
            p.error("--train-bpe needs at least 257 tokens (256 bytes + merges)")
        tok = train_bpe(texts, a.train_bpe, a.out)
    dtype = np.uint16 if tok.vocab_size <= 65536 else np.uint32
    fmt = "TOKENS_U16" if dtype == np.uint16 else "TOKENS_U32"
    train_files, val_parts = [], []
    n_train = 0
    for i, path in enumerate(texts):
        with open(path, encoding="utf-8", errors="replace") as f:
            ids = np.asarray(tok.encode(f.read()), dtype=dtype)
        cut = len(ids) - int(len(ids) * a.val_fraction)
        name = os.path.join(a.out, f"train_{i:05d}.bin")
        ids[:cut].tofile(name)
        train_files.append(os.path.abspath(name))
        val_parts.append(ids[cut:])
        n_train += cut
    val = np.concatenate(val_parts)
    val_file = os.path.abspath(os.path.join(a.out, "val.bin"))
    val.tofile(val_file)
    vocab_file = os.path.abspath(os.path.join(a.out, "tokens.vocab"))
    with open(vocab_file, "w") as f:
        f.write("# shardline token bytes v1: then one line per id (id 0 first), its bytes in hex\n")
        for b in tok.vocab_bytes():
            f.write(b.hex() + "\n")
    meta = {
        "format": fmt, "dtype": np.dtype(dtype).name, "vocab_size": tok.vocab_size,
        "tokenizer": os.path.abspath(tok.path), "tokenizer_kind": tok.kind,
        "train_files": train_files, "val_file": val_file, "vocab_file": vocab_file,
        "train_tokens": int(n_train), "val_tokens": int(len(val)),
        "spec": {"model": {"vocab_size": tok.vocab_size},
                 "data": {"format": fmt, "paths": train_files, "val_path": val_file,
                          "val_fraction": 0, "vocab_path": vocab_file}},
    }
    with open(os.path.join(a.out, "meta.json"), "w") as f:
        json.dump(meta, f, indent=2)
    print(f"{n_train} training and {len(val)} validation tokens ({fmt}, vocab {tok.vocab_size}) "
          f"in {a.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
