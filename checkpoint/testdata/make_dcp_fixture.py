"""Writes checkpoint/testdata/dcp_fsdp2_w2/: a real PyTorch DCP checkpoint for dcp_reader_test.

Run under torchrun with two processes (Gloo):
  .venv/bin/torchrun --nproc_per_node=2 checkpoint/testdata/make_dcp_fixture.py OUT_DIR
It saves, with torch.distributed.checkpoint.save and the default FileSystemWriter (pickled
.metadata + __R_N.distcp): an FSDP2 model (uneven row shards: 7 rows over 2 ranks) with its AdamW
state from get_state_dict, a bfloat16 and a float16 tensor, a transposed (non-contiguous) view
and a 0-d tensor, plus byte entries (param_groups). OUT_DIR/expected.json holds every tensor
whole (gathered by torch itself), the answer the C++ reader must give.
"""
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn as nn
from torch.distributed.checkpoint.state_dict import get_state_dict
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

dist.init_process_group("gloo")
out = sys.argv[1]
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(5, 7, bias=True), nn.Linear(7, 3, bias=False))
fully_shard(model[0])
fully_shard(model)
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
model(torch.randn(2, 5)).sum().backward()
opt.step()
msd, osd = get_state_dict(model, opt)
extra = {
    "bf16": (torch.arange(12, dtype=torch.float32).reshape(3, 4) / 7).to(torch.bfloat16),
    "f16": (torch.arange(6, dtype=torch.float32) / 3 - 1).to(torch.float16),
    "transposed": torch.arange(6, dtype=torch.float32).reshape(2, 3).t(),
    "scalar": torch.tensor(2.5),
}
state = {"model": msd, "optimizer": osd, "extra": extra}
dcp.save(state, checkpoint_id=out)


def full(t):
    return t.full_tensor() if isinstance(t, DTensor) else t


expected = {}
for k, v in msd.items():
    expected["model." + k] = full(v).float().flatten().tolist()
for p, st in osd["state"].items():
    for name, v in st.items():
        expected[f"optimizer.state.{p}.{name}"] = full(v).float().flatten().tolist()
for k, v in extra.items():
    expected["extra." + k] = v.float().flatten().tolist()
if dist.get_rank() == 0:
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump(expected, f, indent=0, sort_keys=True)
dist.destroy_process_group()
