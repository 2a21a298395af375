"""Issue #15 item 3 on a real cluster: tools/prepare_data.py trains a byte-level BPE (512 tokens,
offline) on the corpus split into two text files and writes TOKENS_U16 training files, a
validation file and the token vocabulary. A W = 4 job (HYBRID_SHARD 2) trains on data.paths,
evaluates on data.val_path, and its validation loss falls; the sample prompt is encoded and the
sample decoded with data.vocab_path, so the job's sample is text starting with the prompt. `shardctl export --format=hf` then writes the trained job
as a folder transformers loads."""
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

PREPARE = os.path.abspath(os.environ.get("SHARDLINE_PREPARE_DATA", "tools/prepare_data.py"))


class PreparedDataScenarioTest(unittest.TestCase):
    def setUp(self):
        self.cluster = harness.Cluster(workers=2, slots=2, grace_period_s=3)

    tearDown = cluster_test.ClusterTest.tearDown

    def prepare(self):
        base = tempfile.mkdtemp(prefix="prep_", dir=os.environ.get("TEST_TMPDIR"))
        with open(cluster_test.CORPUS, encoding="utf-8") as f:
            text = f.read()
        half = len(text) // 2
        texts = []
        for i, part in enumerate((text[:half], text[half:])):
            path = os.path.join(base, "part%d.txt" % i)
            with open(path, "w", encoding="utf-8") as f:
                f.write(part)
            texts.append(path)
        out = os.path.join(base, "tokens")
        proc = subprocess.run([sys.executable, PREPARE, "--out", out, "--train-bpe", "512",
                               "--val-fraction", "0.05"] + texts, capture_output=True, text=True)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        with open(os.path.join(out, "meta.json")) as f:
            return json.load(f)

    def test_bpe_token_files_train_at_w4_and_validation_loss_falls(self):
        meta = self.prepare()
        self.assertEqual(meta["format"], "TOKENS_U16")
        self.assertEqual(meta["dtype"], "uint16")
        self.assertEqual(meta["vocab_size"], 512)
        self.assertEqual(len(meta["train_files"]), 2)
        self.assertTrue(meta["tokenizer"].endswith("tokenizer.json"))
        # Absolute, like every other path in meta.json (it was the --out-relative path).
        self.assertTrue(os.path.isabs(meta["tokenizer"]), meta["tokenizer"])
        data = meta["spec"]["data"]
        paths = ", ".join(data["paths"])
        spec = f"""
name: it-bpe
world_size: 4
model: {{architecture: GPT, preset: tiny, vocab_size: {meta["vocab_size"]}, init_seed: 1}}
data: {{paths: [{paths}], val_path: {data["val_path"]}, vocab_path: {data["vocab_path"]},
        format: {data["format"]}, seq_len: 32, shuffle_seed: 3}}
optimizer: {{kind: ADAMW, lr: 0.003, min_lr: 0.003, warmup_steps: 0}}
fsdp: {{sharding_strategy: HYBRID_SHARD, hybrid_shard_degree: 2, collective_timeout_s: 60}}
train: {{steps: 30, global_batch_size: 16, micro_batch_size: 4, log_every: 1, eval_every: 10,
        eval_batches: 4, seed: 5, deterministic: true, sample_tokens: 20,
        sample_prompt: "ROMEO:"}}
device: {{kind: CPU, cpu_threads: 1}}
restart: {{max_restarts: 0}}
checkpoint: {{dir: {os.path.join(self.cluster.dir, "checkpoints")}, save_final: true}}
"""
        fd, path = tempfile.mkstemp(suffix=".yaml", dir=os.environ.get("TEST_TMPDIR"))
        with os.fdopen(fd, "w") as f:
            f.write(spec)
        job = self.cluster.shardctl("submit", path).stdout.strip().splitlines()[0]
        status = self.cluster.wait_for(job, lambda s: s.get("state") in ("SUCCEEDED", "FAILED"),
                                       timeout=600, what="job end")
        self.assertEqual(status["state"], "SUCCEEDED", json.dumps(status, indent=1)[-3000:])
        # Rank 0's log: "step N/30 ... val_loss X" at steps 10, 20, 30.
        log = "".join(self.cluster.rank_log(w, job, 1, 0) for w in range(2))
        val = [float(v) for v in re.findall(r"val_loss ([0-9.]+)", log)]
        self.assertGreaterEqual(len(val), 3, log[-3000:])
        self.assertLess(val[-1], val[0], "validation loss did not fall: %s" % val)
        # Decoded with the BPE vocabulary: text that starts with the prompt, not ids.
        sample = status.get("sample", "")
        self.assertTrue(sample.startswith("ROMEO:"), repr(sample))
        self.assertIsNone(re.fullmatch(r"[0-9 ]+", sample), repr(sample))
        # The trained job as a transformers folder (shardctl export --format=hf), loaded back.
        out = os.path.join(self.cluster.dir, "hf_export")
        self.cluster.shardctl("export", job, "--format=hf", "--out=" + out)
        import torch  # noqa: E402  (the venv's; only this part needs it)
        import transformers  # noqa: E402
        model = transformers.AutoModelForCausalLM.from_pretrained(out)
        self.assertEqual(model.config.model_type, "gpt2")
        with torch.no_grad():
            logits = model(torch.tensor([[1, 2, 3]])).logits
        self.assertEqual(tuple(logits.shape), (1, 3, 512))


if __name__ == "__main__":
    harness.run_tests(__name__)
