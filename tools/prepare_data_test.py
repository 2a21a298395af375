"""tools/prepare_data.py with the tokenizer.json files the model families ship (issue 32 item 3),
built offline with the `tokenizers` package (nothing downloaded):

1. Llama 3 / Qwen style: byte-level BPE behind a split regex, with added special tokens
   (<|begin_of_text|>, <|eot_id|>) and added plain tokens (<think>, and "Ā", whose character is
   also in the byte-level alphabet). The token files hold exactly tokenizers' ids; tokens.vocab
   gives every id its bytes so that the ids' bytes concatenated are the text, byte for byte (a
   special token is empty, an added one its text).
2. Llama 2 / Mistral style: sentencepiece-converted BPE with byte fallback ("▁" for spaces,
   <0xNN> tokens for bytes outside the vocabulary, "思" and "é" here). The ids' bytes are the
   text after the tokenizer's normalizer (a leading space, as sentencepiece prepends).
3. meta.json's vocabulary size counts the added tokens and its spec names the files.

Argument: prepare_data=PATH.
"""
import importlib.util
import json
import os
import sys
import tempfile

import numpy as np
from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers
from tokenizers import trainers, Regex

FAILURES = []
TEXT = ("Hello world, this is Shardline.\n<think>a thought</think> Ā is a letter; "
        "café and 思 are not ASCII.\n") * 40


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        FAILURES.append(what)


def load_prepare(path):
    spec = importlib.util.spec_from_file_location("prepare_data", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def llama3_style(tmp):
    tok = Tokenizer(models.BPE())
    # Llama 3's pre-tokenizer shape: a split regex, then the byte-level alphabet.
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+|\s+"), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    corpus = os.path.join(tmp, "corpus.txt")
    with open(corpus, "w") as f:
        f.write(TEXT)
    tok.train([corpus], trainer)
    tok.add_special_tokens([AddedToken("<|begin_of_text|>", special=True),
                            AddedToken("<|eot_id|>", special=True)])
    tok.add_tokens([AddedToken("<think>", special=False), AddedToken("</think>", special=False),
                    AddedToken("Ā", special=False)])
    path = os.path.join(tmp, "llama3_tokenizer.json")
    tok.save(path)
    return path


def byte_fallback_style(tmp):
    specials = ["<unk>", "<s>", "</s>"]
    vocab = {t: i for i, t in enumerate(specials)}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for ch in ["▁"] + sorted(set("HelowrdthisShaLn,.abcfugpm;<>/kĀ")):
        vocab.setdefault(ch, len(vocab))
    merges = [("▁", "t"), ("▁t", "h"), ("▁th", "i"), ("l", "l"), ("e", "ll"), ("H", "ell")]
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, byte_fallback=True, unk_token="<unk>",
                               fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"),
                                           normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                     decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    tok.add_special_tokens([AddedToken(t, special=True) for t in specials])
    path = os.path.join(tmp, "mistral_tokenizer.json")
    tok.save(path)
    return path


def run(prepare, tok_path, out):
    text = os.path.join(os.path.dirname(out), "text.txt")
    with open(text, "w", encoding="utf-8") as f:
        f.write(TEXT)
    check(prepare.main(["--out", out, "--tokenizer", tok_path, text]) == 0,
          f"{os.path.basename(tok_path)}: prepare_data exits 0")
    with open(os.path.join(out, "meta.json")) as f:
        meta = json.load(f)
    dtype = np.dtype(meta["dtype"])
    ids = np.concatenate([np.fromfile(p, dtype=dtype) for p in meta["train_files"]] +
                         [np.fromfile(meta["val_file"], dtype=dtype)])
    with open(meta["vocab_file"]) as f:
        lines = f.read().splitlines()[1:]
    vocab = [bytes.fromhex(line) for line in lines]
    return meta, [int(i) for i in ids], vocab


def main():
    prepare = load_prepare(sys.argv[1].split("=", 1)[1])
    with tempfile.TemporaryDirectory() as tmp:
        path = llama3_style(tmp)
        tok = Tokenizer.from_file(path)
        meta, ids, vocab = run(prepare, path, os.path.join(tmp, "llama3"))
        name = "llama3-style byte-level BPE"
        check(ids == tok.encode(TEXT, add_special_tokens=False).ids,
              f"{name}: the token files hold tokenizers' ids")
        check(meta["vocab_size"] == tok.get_vocab_size(with_added_tokens=True) == len(vocab),
              f"{name}: vocab_size {meta['vocab_size']} counts the added tokens")
        check(b"".join(vocab[i] for i in ids) == TEXT.encode("utf-8"),
              f"{name}: the ids' bytes are the text, byte for byte")
        for t, want in [("<|begin_of_text|>", b""), ("<think>", b"<think>"), ("Ā", "Ā".encode())]:
            check(vocab[tok.token_to_id(t)] == want, f"{name}: {t} is {want!r}")
        check(meta["spec"]["model"]["vocab_size"] == meta["vocab_size"] and
              meta["spec"]["data"]["vocab_path"] == meta["vocab_file"],
              f"{name}: meta.json's spec names the vocabulary and the files")

        path = byte_fallback_style(tmp)
        tok = Tokenizer.from_file(path)
        meta, ids, vocab = run(prepare, path, os.path.join(tmp, "mistral"))
        name = "byte-fallback BPE"
        encoded = tok.encode(TEXT, add_special_tokens=False).ids
        check(ids == encoded, f"{name}: the token files hold tokenizers' ids")
        check(any(tok.id_to_token(i).startswith("<0x") for i in encoded),
              f"{name}: the text needs byte fallback")
        check(tok.decode(encoded) == TEXT, f"{name}: tokenizers itself round-trips the text")
        check(b"".join(vocab[i] for i in ids) == (" " + TEXT).encode("utf-8"),
              f"{name}: the ids' bytes are the normalized text (sentencepiece's leading space)")
    if FAILURES:
        print(f"{len(FAILURES)} failure(s)")
        sys.exit(1)
    print("all passed")


if __name__ == "__main__":
    main()
