"""Issue #15 item 1 on a real cluster: a scripted model (models/testdata/blocks_lm.pt, written in
ordinary PyTorch) sharded per block with fsdp.block_class trains to success at W = 2; a block
class the file lacks is found only when the trainers load the model (shardctl and the coordinator
do not link LibTorch), so the job fails with the trainer's message, naming the field and the
class, in its RANK_FAILED event; spec-level mistakes are refused at submit."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import cluster_test  # noqa: E402  (imported as a module, so its tests are not collected here)


def model_path():
    for a in sys.argv[1:]:
        if a.startswith("model="):
            return os.path.abspath(a[len("model="):])
    raise RuntimeError("no model=PATH argument (models/testdata/blocks_lm.pt)")


class ScriptedModelScenarioTest(unittest.TestCase):
    def setUp(self):
        self.cluster = harness.Cluster(workers=1, slots=2, grace_period_s=3)

    tearDown = cluster_test.ClusterTest.tearDown

    def spec(self, block_class="Block", extra_fsdp=""):
        path = cluster_test.write_spec(os.path.join(self.cluster.dir, "checkpoints"), steps=3,
                                       world_size=2, degree=2,
                                       extra="restart: {max_restarts: 0}")
        with open(path) as f:
            text = f.read()
        text = text.replace(
            "{architecture: GPT, preset: tiny, init_seed: 1}",
            "{architecture: TORCHSCRIPT, torchscript_path: %s, vocab_size: 256, block_size: 64}"
            % model_path())
        text = text.replace(
            "{sharding_strategy: HYBRID_SHARD, hybrid_shard_degree: 2,",
            "{sharding_strategy: FULL_SHARD, block_class: \"%s\", activation_checkpointing: true,%s"
            % (block_class, extra_fsdp))
        with open(path, "w") as f:
            f.write(text)
        return path

    def finished(self, job):
        return self.cluster.wait_for(job, lambda s: s.get("state") in ("SUCCEEDED", "FAILED"),
                                     timeout=240, what="job end")

    def test_blocks_train_and_a_missing_block_class_fails_the_job_naming_it(self):
        job = self.cluster.shardctl("submit", self.spec()).stdout.split()[0]
        status = self.finished(job)
        self.assertEqual(status["state"], "SUCCEEDED", status)

        job = self.cluster.shardctl("submit", self.spec(block_class="Blok")).stdout.split()[0]
        status = self.finished(job)
        self.assertEqual(status["state"], "FAILED", status)
        message = " ".join(e.get("message", "") for e in status["events"])
        self.assertRegex(message, r"exited with code 2: .*model: fsdp\.block_class: no submodule "
                                  r"of the TorchScript model has class \"Blok\"; its classes: "
                                  r".*Block.* \[INVALID_ARGUMENT; exit 2\]")

        # Spec mistakes: shardctl refuses them before anything runs.
        proc = self.cluster.shardctl("submit", self.spec(block_class="my-Block"), check=False)
        self.assertNotEqual(proc.returncode, 0, proc.stdout)
        self.assertIn("fsdp.block_class: \"my-Block\" is not a class name", proc.stderr)
        proc = self.cluster.shardctl(
            "submit", self.spec(block_class="", extra_fsdp=" auto_wrap_policy: TRANSFORMER_BLOCK,"),
            check=False)
        self.assertNotEqual(proc.returncode, 0, proc.stdout)
        self.assertIn("fsdp.block_class: must name the TorchScript model's block class", proc.stderr)


if __name__ == "__main__":
    harness.run_tests(__name__)
