"""Chaos soak (issue #30): "nothing lost under faults", measured. Run it with bench/chaos.sh.

A real local cluster (soak_cluster.py: coordinator, three worker daemons of two CPU slots, node-2
in a network namespace, checkpoints on a small tmpfs) runs a stream of jobs (soak_jobs.py:
FULL_SHARD with async saves, HYBRID_SHARD, REPLICA_GROUPS fault tolerance) for --minutes while
a seeded injector (faults.py; --seed, printed at the start: the same seed replays the same
schedule) kills and stops trainers, daemons and the coordinator, cuts node-2's link, fills the
checkpoint disk and corrupts committed shard files. First every distinct spec runs once without
faults (the reference losses). After the soak, every fault is undone, every job is waited for,
and soak_checks.py checks outcomes, losses, checkpoints, resumes and placement. Prints a table,
writes it to --out (default bench/results/chaos_soak.txt) and exits 0 only when nothing was lost.

  .venv/bin/python tests/soak/chaos_soak.py --bin $(bazel info bazel-bin) [--minutes 20]
      [--seed S] [--out FILE]
Needs root and iproute2 (exit 2 with the reason otherwise).
"""
import argparse
import collections
import os
import platform
import random
import shutil
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
import harness  # noqa: E402
import faults  # noqa: E402
import soak_checks  # noqa: E402
import soak_cluster  # noqa: E402
import soak_jobs  # noqa: E402

REFERENCE_TIMEOUT_S = 600
DRAIN_TIMEOUT_S = 900


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", required=True, help="bazel-bin (coordinator, worker, trainer, "
                    "shardctl, checkpoint_verify under it)")
    ap.add_argument("--minutes", type=float, default=20)
    ap.add_argument("--seed", type=int, default=None, help="default: drawn and printed")
    ap.add_argument("--out", default=os.path.join(REPO, "bench", "results", "chaos_soak.txt"))
    a = ap.parse_args(argv)
    if a.seed is None:
        a.seed = random.SystemRandom().randrange(1, 10 ** 6)
    return a


def run_references(sc, spec_dir):
    """{spec: {step: loss}} of one undisturbed run per spec (two at a time where they fit)."""
    refs = {}
    for batch in (["full_async", "hybrid"], ["replica"]):
        jobs = {soak_jobs.submit(sc, name, spec_dir): name for name in batch}
        deadline = time.time() + REFERENCE_TIMEOUT_S
        pending = dict(jobs)
        while pending and time.time() < deadline:
            for job in list(pending):
                st = sc.ctl_json("status", job) or {}
                if st.get("state") in soak_jobs.TERMINAL:
                    if st["state"] != "SUCCEEDED" or int(st.get("attempt", 0)) != 1:
                        raise RuntimeError("reference run %s (%s) ended %s in attempt %s: %s" % (
                            job, pending[job], st["state"], st.get("attempt"), st.get("events")))
                    refs[pending.pop(job)], _ = soak_checks.series(sc, job)
            time.sleep(1)
        if pending:
            raise RuntimeError("reference runs did not end in %d s: %s" % (
                REFERENCE_TIMEOUT_S, pending))
        for job in jobs:  # their checkpoints are not needed: room on the tmpfs
            shutil.rmtree(os.path.join(sc.ckpt_root, job), ignore_errors=True)
    for name, ref in refs.items():
        print("soak: reference %s: %d steps, final loss %.6g" % (name, len(ref), ref[max(ref)]))
    return refs


class EndedJobs:
    """Verifies an ended job's committed checkpoints at once (soak_checks.verify_checkpoints),
    keeps the verdicts, and removes the job's checkpoint folder, so the small checkpoint tmpfs
    holds the live jobs' checkpoints only (without this it filled up within minutes)."""

    def __init__(self, args, sc):
        self.verify_bin = os.path.join(args.bin, "checkpoint", "checkpoint_verify")
        self.sc = sc
        self.injector = None
        self.problems, self.verified, self.bad_expected = [], 0, 0

    def __call__(self, job):
        corrupted = self.injector.corrupted if self.injector else []
        p, ok, bad = soak_checks.verify_checkpoints(self.verify_bin, self.sc.ckpt_root, [job],
                                                    corrupted)
        self.problems += p
        self.verified += ok
        self.bad_expected += bad
        shutil.rmtree(os.path.join(self.sc.ckpt_root, job), ignore_errors=True)


def soak(sc, args, spec_dir):
    """Runs the stream under the injector for args.minutes; (tracker, injector, ended, s)."""
    schedule = faults.make_schedule(args.seed, args.minutes)
    print("soak: schedule %s" % ", ".join("%s@+%.0fs" % (k, g) for g, k, _, _ in schedule[:8]) +
          (" ..." if len(schedule) > 8 else ""), flush=True)
    start = time.time()
    deadline = start + args.minutes * 60
    ended = EndedJobs(args, sc)
    tracker = soak_jobs.Tracker(sc, on_end=ended)
    injector = faults.Injector(sc, tracker, schedule, deadline)
    ended.injector = injector
    stop = threading.Event()
    timer = threading.Timer(max(0.0, deadline - time.time()), stop.set)
    timer.start()
    injector.start()
    try:
        soak_jobs.run_stream(sc, tracker, stop, spec_dir)
    finally:
        stop.set()
        timer.cancel()
        injector.join(timeout=120)
    ran = time.time() - start
    print("soak: faults over after %.0f s; healing and draining" % ran, flush=True)
    sc.heal_all()
    if not sc.wait_workers_alive():
        print("soak: not every worker is ALIVE again", flush=True)
    soak_jobs.drain(tracker, DRAIN_TIMEOUT_S)
    return tracker, injector, ended, ran


def check_all(sc, args, tracker, injector, ended, refs):
    """(rows of the table, problems)."""
    problems, outcomes, failed = [], collections.Counter(), []
    restarts = recomputed = compared = 0
    worst = 0.0
    statuses = {}
    for job, rec in sorted(tracker.jobs.items()):
        st = sc.ctl_json("status", job) or rec["status"]
        statuses[job] = st
        kind, n_restarts, cause, p = soak_checks.outcome(job, st)
        outcomes[kind] += 1
        restarts += n_restarts
        problems += p
        if kind.startswith("FAILED"):
            failed.append("%s (%s): %s" % (job, rec["spec"], cause[:300]))
            problems += soak_checks.cause_check(job, cause, injector.corrupted)
        again, p = soak_checks.recompute_check(
            job, rec["spec"], soak_checks.attempt_losses(sc.dir, job), refs[rec["spec"]], st)
        recomputed += again
        problems += p
        got, _ = soak_checks.series(sc, job)
        if got is None:
            problems.append("%s: the coordinator did not answer its metrics" % job)
            continue
        p, n, w = soak_checks.compare_losses(job, rec["spec"], got, refs[rec["spec"]], st)
        problems += p
        compared += n
        worst = max(worst, w)
    # Jobs still live after the drain keep their checkpoints: verify those here.
    ended.injector = injector
    for job in tracker.live():
        ended(job)
    problems += ended.problems
    verified, bad_expected = ended.verified, ended.bad_expected
    problems += ["%s did not end within %d s of the soak's end" % (j, DRAIN_TIMEOUT_S)
                 for j in tracker.live()]
    p, resumes, refused = soak_checks.check_resumes(sc.dir, sc.ckpt_root, injector.corrupted)
    problems += p
    problems += soak_checks.check_placement(statuses, tracker, injector.cuts,
                                            soak_checks.log_starts(sc.dir))
    done = collections.Counter(f["kind"] for f in injector.log if f["done"])
    skipped = collections.Counter(f["kind"] for f in injector.log if not f["done"])
    rows = ["faults injected by kind (skipped: no victim at that moment):"]
    rows += ["  %-17s %3d   (skipped %d)" % (k, done[k], skipped[k]) for k in faults.KINDS]
    rows.append("  %-17s %3d" % ("total", sum(done.values())))
    rows.append("link cuts of node-%d: %d, %.0f s in all" % (
        soak_cluster.CUT_NODE, len(injector.cuts), sum(u - d for d, u in injector.cuts)))
    rows.append("jobs by outcome (%d jobs):" % len(tracker.jobs))
    rows += ["  %-30s %3d" % (k, v) for k, v in sorted(outcomes.items())]
    rows += ["    " + f for f in failed]
    rows.append("restarts (RESTARTING events): %d" % restarts)
    rows.append("steps recomputed (trained again by a later attempt, from rank 0's metrics "
                "files; each attempt's losses checked too): %d" % recomputed)
    rows.append("steps compared with the undisturbed run: %d, largest relative difference "
                "%.2e (tolerance %.0e)" % (compared, worst, soak_checks.LOSS_RTOL))
    rows.append("committed checkpoints verified: %d OK; corrupted by the injector: %d, still on "
                "disk and refused by checkpoint_verify: %d" % (
                    verified, len(injector.corrupted), bad_expected))
    rows.append("trainer resumes checked: %d; loads that refused a corrupted checkpoint "
                "(checksum mismatch): %d" % (resumes, refused))
    rows.append("anything lost (problems below): %d" % len(problems))
    rows += ["  LOST: " + p for p in problems]
    return rows, problems


def tree_state():
    """(short commit, whether tracked files differ from it), taken when the soak starts."""
    commit = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    return commit, bool(dirty)


def header(args, ran, tree):
    commit, dirty = tree
    return ["Chaos soak (tests/soak/chaos_soak.py): seed %d, --minutes %g (faults for %.0f s)"
            % (args.seed, args.minutes, ran),
            "commit %s%s, %s, host %s, %d cores, load %s" % (
                commit, " (with local changes)" if dirty else "",
                time.strftime("%Y-%m-%d %H:%M"), platform.node(), os.cpu_count(),
                " ".join("%.1f" % x for x in os.getloadavg())),
            "replay: bench/chaos.sh --seed %d --minutes %g" % (args.seed, args.minutes), ""]


def _interrupt(signum, frame):
    raise KeyboardInterrupt("signal %d" % signum)


def main(argv):
    args = parse_args(argv)
    tree = tree_state()
    # SIGTERM and SIGINT (ignored by default in a background job) end the soak through the
    # cleanup below: faults undone, processes stopped, the tmpfs and the namespace removed.
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)
    print("soak: seed %d, %g minutes" % (args.seed, args.minutes), flush=True)
    why = soak_cluster.unavailable()
    if why:
        print("soak: cannot run: " + why)
        return 2
    harness.BINARIES = harness.Binaries(["%s=%s/%s/%s" % (n, args.bin, d, n) for n, d in (
        ("coordinator", "coordinator"), ("worker", "worker"), ("trainer", "trainer"),
        ("shardctl", "cli"))])
    sc = soak_cluster.SoakCluster()
    try:
        spec_dir = os.path.join(sc.dir, "specs")
        os.makedirs(spec_dir)
        refs = run_references(sc, spec_dir)
        tracker, injector, ended, ran = soak(sc, args, spec_dir)
        rows, problems = check_all(sc, args, tracker, injector, ended, refs)
        text = "\n".join(header(args, ran, tree) + rows + [
            "", "RESULT: %s" % ("PASS: nothing lost" if not problems else "FAIL")]) + "\n"
        print(text)
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            f.write(text)
        if problems:
            print("soak: logs kept in %s" % sc.dir)
        return 0 if not problems else 1
    except BaseException:
        print("soak: logs kept in %s" % sc.dir)
        raise
    finally:
        sc.destroy()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
