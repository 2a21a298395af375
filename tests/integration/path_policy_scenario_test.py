"""Issue #14 item 4 on a real cluster: a coordinator and a worker started with --read_roots and
--checkpoint_roots. A spec naming a path outside them is refused at submit (naming the field and
the allowed roots), ".." cannot climb out, and a symbolic link under a root that points outside
it, which the coordinator cannot see, is refused by the worker before any trainer starts. A spec
inside the roots trains as usual, and the coordinator keeps serving throughout."""
import os
import re
import shutil
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import cluster_test  # noqa: E402  (imported as a module, so its tests are not collected here)


class PathPolicyScenarioTest(unittest.TestCase):
    def setUp(self):
        self.base = tempfile.mkdtemp(prefix="roots_", dir=os.environ.get("TEST_TMPDIR"))
        self.data = os.path.join(self.base, "data")
        self.ckpt = os.path.join(self.base, "ckpt")
        self.outside = os.path.join(self.base, "outside")
        for d in (self.data, self.ckpt, self.outside):
            os.makedirs(d)
        shutil.copy(cluster_test.CORPUS, os.path.join(self.data, "corpus.txt"))
        shutil.copy(cluster_test.CORPUS, os.path.join(self.outside, "corpus.txt"))
        os.symlink(self.outside, os.path.join(self.data, "escape"))
        roots = ["--read_roots=" + self.data, "--checkpoint_roots=" + self.ckpt]
        self.cluster = harness.Cluster(workers=0, grace_period_s=3, coordinator_flags=roots)
        self.cluster.start_worker(0, 2, grace_period_s=3, flags=roots)
        self.cluster.wait_for_workers(1)

    tearDown = cluster_test.ClusterTest.tearDown

    def spec(self, data, ckpt, steps=2):
        path = cluster_test.write_spec(ckpt, steps=steps, world_size=2, degree=2,
                                       extra="restart: {max_restarts: 0}")
        with open(path) as f:
            text = f.read().replace("path: " + cluster_test.CORPUS, "path: " + data)
        with open(path, "w") as f:
            f.write(text)
        return path

    def refused(self, spec):
        proc = self.cluster.shardctl("submit", spec, check=False)
        self.assertNotEqual(proc.returncode, 0, proc.stdout)
        return proc.stderr

    def test_paths_outside_the_roots_are_refused_and_inside_ones_train(self):
        corpus = os.path.join(self.data, "corpus.txt")
        read_roots = "the read roots [%s] allowed by the coordinator (--read_roots)" % self.data
        ckpt_roots = ("the checkpoint roots [%s] allowed by the coordinator (--checkpoint_roots)"
                      % self.ckpt)

        # Data outside the read roots, and a checkpoint dir outside the checkpoint roots.
        err = self.refused(self.spec(os.path.join(self.outside, "corpus.txt"), self.ckpt))
        self.assertIn("shardctl: SubmitJob: ", err)  # the coordinator refused it, not shardctl
        self.assertIn("data.path: %s/corpus.txt is outside %s" % (self.outside, read_roots), err)
        err = self.refused(self.spec(corpus, "/tmp/elsewhere"))
        self.assertIn("checkpoint.dir: /tmp/elsewhere is outside " + ckpt_roots, err)
        # ".." cannot climb out of a root: refused wherever it stands, since after a link the
        # kernel's ".." is not the text's (with data/root -> /, data/root/../<outside> is
        # <outside> to the kernel but data/<outside> to the text: it passed every check before).
        climb = os.path.join(self.ckpt, "..", "outside")
        err = self.refused(self.spec(corpus, climb))
        self.assertIn('checkpoint.dir: %s has a ".." component, which is refused under %s'
                      % (climb, ckpt_roots), err)
        os.symlink("/", os.path.join(self.data, "root"))
        sneaky = os.path.join(self.data, "root", "..") + os.path.join(self.outside, "corpus.txt")
        err = self.refused(self.spec(sneaky, self.ckpt))
        self.assertIn("shardctl: SubmitJob: ", err)
        self.assertIn('data.path: %s has a ".." component, which is refused under %s'
                      % (sneaky, read_roots), err)
        self.assertEqual(self.cluster.shardctl_json("list").get("jobs", []), [])

        # A link under the read root pointing outside it: lexically inside, so the coordinator
        # accepts it; the worker resolves it and refuses before starting a trainer.
        linked = os.path.join(self.data, "escape", "corpus.txt")
        job = self.cluster.shardctl("submit", self.spec(linked, self.ckpt)).stdout.split()[0]
        status = self.cluster.wait_for(job, lambda s: s.get("state") in ("SUCCEEDED", "FAILED"),
                                       timeout=120, what="job end")
        self.assertEqual(status["state"], "FAILED", status)
        message = " ".join(e.get("message", "") for e in status["events"])
        self.assertIn("exited with code 2: data.path: %s resolves to %s/corpus.txt (a symbolic "
                      "link), which is outside the read roots [%s] allowed by the worker node-0 "
                      "(--read_roots)" % (linked, self.outside, self.data), message)
        self.assertFalse(os.path.exists(os.path.join(self.ckpt, job)))  # no trainer ran

        # Inside the roots: trains and checkpoints as usual.
        job = self.cluster.shardctl("submit", self.spec(corpus, self.ckpt)).stdout.split()[0]
        status = self.cluster.wait_for(job, lambda s: s.get("state") in ("SUCCEEDED", "FAILED"),
                                       timeout=300, what="job end")
        self.assertEqual(status["state"], "SUCCEEDED", status)
        self.assertTrue(os.path.exists(os.path.join(self.ckpt, job, "step_2", "MANIFEST.json")))
        self.assertEqual(len(self.cluster.shardctl_json("list")["jobs"]), 2)


class SwappedAfterTheCheckScenarioTest(unittest.TestCase):
    """The window the worker's check leaves (#31 item 1): the worker checks a spec's paths when it
    starts a rank, the trainer opens the files afterwards. Here the trainer is started through a
    wrapper (the worker's --trainer) that, after the check and before the trainer runs, swaps the
    checked data file for a link to a file outside the roots, as a user who can write under a
    root could. The trainer opens its data beneath the roots (SHARDLINE_OPEN_ROOTS, openat2
    RESOLVE_BENEATH) and refuses it; before, it trained on the outside file."""

    def setUp(self):
        self.base = tempfile.mkdtemp(prefix="swap_", dir=os.environ.get("TEST_TMPDIR"))
        self.data = os.path.join(self.base, "data")
        self.ckpt = os.path.join(self.base, "ckpt")
        self.outside = os.path.join(self.base, "outside")
        for d in (self.data, self.ckpt, self.outside):
            os.makedirs(d)
        self.checked = shutil.copy(cluster_test.CORPUS, os.path.join(self.data, "checked.txt"))
        shutil.copy(cluster_test.CORPUS, os.path.join(self.outside, "corpus.txt"))
        wrapper = os.path.join(self.base, "swap_then_train.sh")
        with open(wrapper, "w") as f:
            # Rank 1's wrapper swaps: the daemon checks rank 1 before it starts rank 1, so the
            # swap comes after both ranks' checks (rank 0's wrapper, run beside rank 1's
            # check, would race it).
            f.write('#!/bin/sh\n[ "$RANK" = 1 ] && ln -sfn "%s" "%s"\nexec "%s" "$@"\n'
                    % (os.path.join(self.outside, "corpus.txt"), self.checked,
                       harness.BINARIES.trainer))
        os.chmod(wrapper, 0o755)
        roots = ["--read_roots=" + self.data, "--checkpoint_roots=" + self.ckpt]
        self.cluster = harness.Cluster(workers=0, grace_period_s=3, coordinator_flags=roots)
        self.cluster.start_worker(0, 2, grace_period_s=3, flags=roots + ["--trainer=" + wrapper])
        self.cluster.wait_for_workers(1)

    tearDown = cluster_test.ClusterTest.tearDown
    spec = PathPolicyScenarioTest.spec

    def test_a_file_swapped_for_a_link_out_of_the_roots_after_the_check_is_refused(self):
        job = self.cluster.shardctl("submit", self.spec(self.checked, self.ckpt)).stdout.split()[0]
        status = self.cluster.wait_for(job, lambda s: s.get("state") in ("SUCCEEDED", "FAILED"),
                                       timeout=180, what="job end")
        self.assertEqual(status["state"], "FAILED", status)
        message = " ".join(e.get("message", "") for e in status["events"])
        self.assertIn('data file "%s" resolves to %s/corpus.txt outside the roots [%s, %s]'
                      % (self.checked, self.outside, self.data, self.ckpt), message)
        self.assertTrue(os.path.islink(self.checked))  # the swap happened after the check
        self.assertFalse(os.path.exists(os.path.join(self.ckpt, job, "step_2")))


class PlantedJobFolderScenarioTest(unittest.TestCase):
    """Writes (#31 item 1): the worker checks `checkpoint.dir`, but the trainer writes below it,
    under names it makes later: `<checkpoint.dir>/<job id>/step_N/...`. A job's id is known from
    submit on, so a user who can write under the checkpoint root can plant a link at that name to
    a folder outside the roots while the job waits. Here the worker's --trainer is a wrapper that
    plants it after the worker's checks of every rank, just before the trainers run. The trainer writes beneath the
    checkpoint roots (SHARDLINE_WRITE_ROOTS, openat2 RESOLVE_BENEATH) and refuses; before, its
    shards and MANIFEST.json landed in the outside folder."""

    def setUp(self):
        self.base = tempfile.mkdtemp(prefix="plant_", dir=os.environ.get("TEST_TMPDIR"))
        self.data = os.path.join(self.base, "data")
        self.ckpt = os.path.join(self.base, "ckpt")
        self.outside = os.path.join(self.base, "outside")
        for d in (self.data, self.ckpt, self.outside):
            os.makedirs(d)
        self.corpus = shutil.copy(cluster_test.CORPUS, os.path.join(self.data, "corpus.txt"))
        # The plant waits until every rank's wrapper runs: the worker checks each rank's
        # checkpoint folder just before starting it, so a plant by the first rank started could
        # meet the check of a later one (a fresh-clone run: refused there, exit 2, not at the
        # write this test is about). Bounded: after 60 s the plant happens anyway.
        wrapper = os.path.join(self.base, "plant_then_train.sh")
        started = os.path.join(self.base, "started")
        os.makedirs(started)
        with open(wrapper, "w") as f:
            f.write('#!/bin/sh\n'
                    'touch "%(started)s/$RANK"\n'
                    'i=0\n'
                    'while [ "$(ls "%(started)s" | wc -l)" -lt "$WORLD_SIZE" ] && [ $i -lt 1200 ]; do\n'
                    '  sleep 0.05; i=$((i + 1))\n'
                    'done\n'
                    'ln -sfn "%(outside)s" "%(ckpt)s/$SHARDLINE_JOB_ID"\n'
                    'exec "%(trainer)s" "$@"\n'
                    % {"started": started, "outside": self.outside, "ckpt": self.ckpt,
                       "trainer": harness.BINARIES.trainer})
        os.chmod(wrapper, 0o755)
        roots = ["--read_roots=" + self.data, "--checkpoint_roots=" + self.ckpt]
        self.cluster = harness.Cluster(workers=0, grace_period_s=3, coordinator_flags=roots)
        self.cluster.start_worker(0, 2, grace_period_s=3, flags=roots + ["--trainer=" + wrapper])
        self.cluster.wait_for_workers(1)

    tearDown = cluster_test.ClusterTest.tearDown
    spec = PathPolicyScenarioTest.spec

    def test_a_link_planted_at_the_jobs_folder_is_refused_at_the_write(self):
        job = self.cluster.shardctl("submit", self.spec(self.corpus, self.ckpt)).stdout.split()[0]
        status = self.cluster.wait_for(job, lambda s: s.get("state") in ("SUCCEEDED", "FAILED"),
                                       timeout=180, what="job end")
        self.assertEqual(status["state"], "FAILED", status)
        message = " ".join(e.get("message", "") for e in status["events"])
        self.assertRegex(message, r'checkpoint path "%s/[^"]+" resolves outside the root %s '
                                  r'\(a symbolic link or "\.\." leaves it\); refused at the write'
                         % (re.escape(os.path.join(self.ckpt, job)), re.escape(self.ckpt)))
        self.assertTrue(os.path.islink(os.path.join(self.ckpt, job)))  # the plant happened
        self.assertEqual(os.listdir(self.outside), [])  # nothing written through it


if __name__ == "__main__":
    harness.run_tests(__name__)
