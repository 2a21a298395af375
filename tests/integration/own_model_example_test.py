"""Issue #15 item 4 on a real cluster: examples/own_model as its README tells a new user to run it.
export.py scripts the example's decoder (ordinary PyTorch: a ModuleList of blocks, a causal-mask
buffer, a tied head) and checks the script against the eager model; `shardctl submit` of the
example's own spec.yaml (only the model file, the checkpoint directory and a shorter run set on
the command line) trains it at W = 4 FULL_SHARD on two workers of two slots; the job succeeds,
its validation loss falls, its final checkpoint is committed, and `shardctl export` writes
weights that model.py's class loads back."""
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import cluster_test  # noqa: E402  (imported as a module, so its tests are not collected here)

EXAMPLE = os.path.abspath(os.environ.get("SHARDLINE_OWN_MODEL", "examples/own_model"))
STEPS = 60


class OwnModelExampleTest(unittest.TestCase):
    def setUp(self):
        self.cluster = harness.Cluster(workers=2, slots=2, grace_period_s=3)

    tearDown = cluster_test.ClusterTest.tearDown

    def test_exported_example_trains_at_w4_and_validation_loss_falls(self):
        model_pt = os.path.join(self.cluster.dir, "model.pt")
        proc = subprocess.run([sys.executable, os.path.join(EXAMPLE, "export.py"),
                               "--out", model_pt], capture_output=True, text=True)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertIn("4 blocks of class Block", proc.stdout)

        ckpt = os.path.join(self.cluster.dir, "checkpoints")
        job = self.cluster.shardctl(
            "submit", os.path.join(EXAMPLE, "spec.yaml"),
            "--set", "model.torchscript_path=" + model_pt,
            "--set", "checkpoint.dir=" + ckpt,
            "--set", "train.steps=%d" % STEPS,
            "--set", "train.global_batch_size=16", "--set", "train.micro_batch_size=4",
            "--set", "train.eval_every=20", "--set", "train.eval_batches=4",
            "--set", "train.log_every=5", "--set", "checkpoint.every_steps=0",
            "--set", "restart.max_restarts=0").stdout.strip().splitlines()[0]
        status = self.cluster.wait_for(job, lambda s: s.get("state") in ("SUCCEEDED", "FAILED"),
                                       timeout=600, what="job end")
        self.assertEqual(status["state"], "SUCCEEDED", json.dumps(status, indent=1)[-3000:])
        self.assertEqual(int(status["step"]), STEPS)
        self.assertTrue(status.get("sample", "").startswith("ROMEO:"), status.get("sample"))

        # Rank 0's log: "step N/60 ... val_loss X" at steps 20, 40, 60.
        log = "".join(self.cluster.rank_log(w, job, 1, 0) for w in range(2))
        val = [float(v) for v in re.findall(r"val_loss ([0-9.]+)", log)]
        self.assertGreaterEqual(len(val), 3, log[-3000:])
        self.assertLess(val[-1], val[0] - 0.3, "validation loss did not fall: %s" % val)
        # Sharded over all four ranks, per block (fsdp.block_class: Block): the root plus one
        # unit per Block of the four.
        self.assertRegex(log, r"FSDP W=4 \(R=1 x S=4\) FULL_SHARD, 5 units")

        cps = self.cluster.shardctl_json("checkpoints", job)["checkpoints"]
        committed = [int(c["step"]) for c in cps if c.get("committed")]
        self.assertEqual(committed, [STEPS], cps)

        # The trained weights, under the model's own parameter names (the tied head as a copy),
        # load into model.py's class and predict the corpus better than the exported initial ones.
        out = os.path.join(self.cluster.dir, "model.safetensors")
        self.cluster.shardctl("export", job, "--out=" + out)
        import torch  # noqa: E402  (the venv's)
        import torch.nn.functional as F  # noqa: E402
        from safetensors.torch import load_file  # noqa: E402
        sys.path.insert(0, EXAMPLE)
        from model import TinyDecoder  # noqa: E402
        weights = load_file(out)
        self.assertTrue(torch.equal(weights["head.weight"], weights["tok_emb.weight"]))
        trained = TinyDecoder()
        trained.load_state_dict(weights)  # strict: every name and shape matches
        initial = torch.jit.load(model_pt)
        with open(cluster_test.CORPUS, "rb") as f:
            tail = f.read()[-4 * 65:]
        batch = torch.tensor(list(tail), dtype=torch.long).view(4, 65)

        def loss(model):
            with torch.no_grad():
                logits = model(batch[:, :-1])
            return F.cross_entropy(logits.reshape(-1, 256), batch[:, 1:].reshape(-1)).item()

        self.assertLess(loss(trained), loss(initial) - 1.0, (loss(trained), loss(initial)))

        # What is refused: a Hugging Face folder needs a GPT or Llama job.
        hf = self.cluster.shardctl("export", job, "--format=hf",
                                   "--out=" + os.path.join(self.cluster.dir, "hf"), check=False)
        self.assertEqual(hf.returncode, 3, hf.stdout + hf.stderr)
        self.assertIn("model.architecture: TORCHSCRIPT has no Hugging Face config (only GPT and "
                      "LLAMA)", hf.stderr)


if __name__ == "__main__":
    harness.run_tests(__name__)
