"""Makes a tiny Llama-3-style Hugging Face folder offline, as a stand-in for a downloaded one:

  DIR/tokenizer.json    byte-level BPE (Llama 3's pre-tokenizer shape) trained on the given text,
                        with Llama 3's special tokens <|begin_of_text|>, <|end_of_text|>,
                        <|eot_id|>
  DIR/config.json       LlamaForCausalLM: grouped-query attention, rope_type llama3, a tied head
                        (as Llama 3.2 1B/3B), the vocabulary padded to a multiple of 64 (as the
                        families pad theirs beyond the tokenizer's ids)
  DIR/model.safetensors random weights in bfloat16 (transformers' own initialisation)

Nothing is downloaded. Usage: make_model.py --out DIR TEXT...
"""
import argparse
import os

import torch
import transformers
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"]


def make_tokenizer(texts, vocab_size):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|"
                                   r"\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+"),
                             behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.train(texts, trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False,
                                         initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.add_special_tokens([AddedToken(t, special=True) for t in SPECIAL])
    return tok


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--bpe-size", type=int, default=1024, help="BPE tokens before the specials")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("texts", nargs="+")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    tok = make_tokenizer(a.texts, a.bpe_size)
    tok.save(os.path.join(a.out, "tokenizer.json"))
    n_ids = tok.get_vocab_size(with_added_tokens=True)
    vocab = (n_ids + 63) // 64 * 64
    config = transformers.LlamaConfig(
        vocab_size=vocab, hidden_size=128, intermediate_size=352, num_hidden_layers=4,
        num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=256,
        rms_norm_eps=1e-5, tie_word_embeddings=True,
        bos_token_id=tok.token_to_id("<|begin_of_text|>"),
        eos_token_id=tok.token_to_id("<|end_of_text|>"),
        rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                         "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 64})
    torch.manual_seed(a.seed)
    model = transformers.LlamaForCausalLM(config)
    model.to(torch.bfloat16).save_pretrained(a.out)
    n = sum(p.numel() for p in model.parameters())
    print(f"wrote {a.out}: Llama 3 style, {n} parameters (tied head), tokenizer {n_ids} ids, "
          f"model vocabulary {vocab}")


if __name__ == "__main__":
    main()
