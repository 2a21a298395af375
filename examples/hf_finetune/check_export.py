"""Loads a fine-tuned export with transformers and shows it learned: the validation tokens'
loss of the exported model against the original folder's, and a greedy continuation decoded
with the folder's tokenizer.

Usage: check_export.py ORIGINAL_DIR EXPORTED_DIR VAL_BIN
"""
import sys

import numpy as np
import torch
import torch.nn.functional as F
import transformers
from tokenizers import Tokenizer


def val_loss(model, tokens, seq=128, batches=8):
    x = torch.tensor(tokens[: batches * (seq + 1)].astype(np.int64)).view(batches, seq + 1)
    with torch.no_grad():
        logits = model(x[:, :-1]).logits
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), x[:, 1:].reshape(-1)).item()


def main():
    original, exported, val_bin = sys.argv[1:4]
    tokens = np.fromfile(val_bin, dtype=np.uint16)
    before = transformers.AutoModelForCausalLM.from_pretrained(original, dtype=torch.float32)
    after = transformers.AutoModelForCausalLM.from_pretrained(exported, dtype=torch.float32)
    tied = after.lm_head.weight.data_ptr() == after.model.embed_tokens.weight.data_ptr()
    print(f"exported: {type(after).__name__}, rope {after.config.rope_parameters['rope_type']}, "
          f"head tied: {tied}")
    print(f"validation loss: original {val_loss(before, tokens):.3f}, "
          f"fine-tuned {val_loss(after, tokens):.3f}")
    tok = Tokenizer.from_file(f"{original}/tokenizer.json")
    prompt = torch.tensor([tok.encode("ROMEO:").ids])
    out = after.generate(prompt, max_new_tokens=24, do_sample=False)
    print("sample:", tok.decode(out[0].tolist()))


if __name__ == "__main__":
    main()
