"""Issue #32 item 3 on a real cluster: examples/hf_finetune as its README runs it. make_model.py
writes a tiny Llama 3 style folder offline (byte-level BPE tokenizer.json with special tokens,
llama3 rope scaling, a tied head, a padded vocabulary, bfloat16 weights); tools/prepare_data.py
tokenizes the corpus with that tokenizer.json; `shardctl submit` of the example's spec.yaml
(paths relative to a copy of it, a shorter run) fine-tunes it at W = 4 FULL_SHARD on two
workers; the job succeeds with its validation loss falling and a sample decoded as text;
`shardctl export --format=hf` writes a folder of the same family, rope scaling and tie, which
check_export.py loads with transformers and which predicts the validation text better than
the original folder."""
import json
import os
import re
import shutil
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import cluster_test  # noqa: E402  (imported as a module, so its tests are not collected here)

EXAMPLE = os.path.abspath(os.environ.get("SHARDLINE_HF_FINETUNE", "examples/hf_finetune"))
PREPARE = os.path.abspath("tools/prepare_data.py")
STEPS = 60


class HfFinetuneExampleTest(unittest.TestCase):
    def setUp(self):
        self.cluster = harness.Cluster(workers=2, slots=2, grace_period_s=3)

    tearDown = cluster_test.ClusterTest.tearDown

    def run_tool(self, *args):
        env = dict(os.environ, OMP_NUM_THREADS="1")
        proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr[-3000:])
        return proc.stdout + proc.stderr

    def test_llama3_style_folder_fine_tunes_at_w4_and_exports_for_transformers(self):
        work = os.path.join(self.cluster.dir, "example")
        os.makedirs(work)
        shutil.copy(os.path.join(EXAMPLE, "spec.yaml"), work)
        out = self.run_tool(os.path.join(EXAMPLE, "make_model.py"), "--out",
                            os.path.join(work, "model"), cluster_test.CORPUS)
        self.assertRegex(out, r"tokenizer 1027 ids, model vocabulary 1088")
        out = self.run_tool(PREPARE, "--out", os.path.join(work, "data"), "--tokenizer",
                            os.path.join(work, "model", "tokenizer.json"), cluster_test.CORPUS)
        self.assertIn("vocab 1027", out)

        job = self.cluster.shardctl(
            "submit", os.path.join(work, "spec.yaml"),
            "--set", "train.steps=%d" % STEPS, "--set", "train.eval_every=20",
            "--set", "checkpoint.every_steps=0",
            "--set", "restart.max_restarts=0").stdout.strip().splitlines()[0]
        status = self.cluster.wait_for(job, lambda s: s.get("state") in ("SUCCEEDED", "FAILED"),
                                       timeout=600, what="job end")
        self.assertEqual(status["state"], "SUCCEEDED", json.dumps(status, indent=1)[-3000:])
        self.assertEqual(int(status["step"]), STEPS)
        # Decoded with the model's own tokenizer's bytes (data.vocab_path): text, not ids.
        self.assertTrue(status.get("sample", "").startswith("ROMEO:"), status.get("sample"))

        log = "".join(self.cluster.rank_log(w, job, 1, 0) for w in range(2))
        self.assertIn("initialized the weights from the Hugging Face folder", log)
        self.assertRegex(log, r"Llama 4x128, 8 heads of 16 \(2 kv\), ffn 352, vocab 1088, "
                              r"block 128, tied head, scaled rope")
        self.assertRegex(log, r"FSDP W=4 \(R=1 x S=4\) FULL_SHARD")
        val = [float(v) for v in re.findall(r"val_loss ([0-9.]+)", log)]
        self.assertGreaterEqual(len(val), 3, log[-3000:])
        # Measured at steps 20, 40, 60 (6.03, 5.96, 5.87 in one run); the original folder's
        # random weights are near ln(1088) = 7.0, which check_export.py compares below.
        self.assertLess(val[-1], val[0] - 0.05, "validation loss did not fall: %s" % val)

        exported = os.path.join(work, "exported")
        self.cluster.shardctl("export", job, "--format=hf", "--out=" + exported)
        with open(os.path.join(exported, "config.json")) as f:
            config = json.load(f)
        self.assertEqual(config["model_type"], "llama")
        self.assertTrue(config["tie_word_embeddings"])
        self.assertEqual(config["rope_parameters"]["rope_type"], "llama3")
        self.assertEqual(config["vocab_size"], 1088)
        from safetensors import safe_open  # noqa: E402  (the venv's)
        with safe_open(os.path.join(exported, "model.safetensors"), "pt") as f:
            self.assertNotIn("lm_head.weight", set(f.keys()))

        # The same checkpoint for PyTorch's torch.distributed.checkpoint (checkpoint/dcp_test.py
        # loads such a folder with torch itself), model and AdamW state.
        dcp = os.path.join(work, "dcp")
        self.cluster.shardctl("export", job, "--format=dcp", "--with_optimizer", "--out=" + dcp)
        with safe_open(os.path.join(dcp, "model-00001-of-00001.safetensors"), "pt") as f:
            keys = set(f.keys())
            self.assertIn("DCP_SHARDING_INFO", f.metadata())
        self.assertIn("tok_embeddings.weight", keys)
        self.assertIn("optimizer.state.tok_embeddings.weight.exp_avg", keys)
        self.assertIn("optimizer.state.tok_embeddings.weight.step", keys)
        refused = self.cluster.shardctl("export", job, "--format=hf", "--with_optimizer",
                                        "--out=" + os.path.join(work, "x"), check=False)
        self.assertNotEqual(refused.returncode, 0)
        self.assertIn("--with_optimizer is only for --format=dcp", refused.stderr)

        out = self.run_tool(os.path.join(EXAMPLE, "check_export.py"), os.path.join(work, "model"),
                            exported, os.path.join(work, "data", "val.bin"))
        self.assertIn("exported: LlamaForCausalLM, rope llama3, head tied: True", out)
        m = re.search(r"validation loss: original ([0-9.]+), fine-tuned ([0-9.]+)", out)
        self.assertIsNotNone(m, out)
        self.assertLess(float(m.group(2)), float(m.group(1)) - 0.5, out)
        self.assertRegex(out, r"sample: ROMEO:")


if __name__ == "__main__":
    harness.run_tests(__name__)
