"""The chaos soak's checks, run after every job has ended. Each returns a list of problems (an
empty list: the check passed) and what it counted; nothing here sleeps or waits.

  outcome      SUCCEEDED; or FAILED with a named cause after its restarts were used up (the
               cause listed); anything else (FAILED without a cause, not restarted, CANCELLED,
               still live) is a problem
  losses       the job's per-step losses (the coordinator's series; a step trained by several
               attempts counts as the last one's) equal the undisturbed run of the same spec
               within LOSS_RTOL. The same tolerance where an elastic restart changed the world
               size: the global batch stays the same (coordinator/placement/planner.cc WorldSizeFits),
               and the repo's resharding tests hold per-step losses of a W = 4 checkpoint
               resumed at W = 2 and W = 6 to 1e-5 relative (//checkpoint:sharded_checkpoint_test
               ReshardTest.*ContinuesAsTheUninterruptedRun), as //fsdp/tests:fsdp_parity_test
               holds N ranks to one process. fault_tolerance REPLICA_GROUPS jobs are compared up
               to their first REPLICA_GROUP_LOST step only: after it gradients are averaged
               over the live replicas by design (docs/failures.md), so the trajectory differs
  checkpoints  every committed step on disk verifies (checkpoint_verify: sizes and every
               range's CRC32C) and belongs to its job (manifest job_id), except the steps the
               injector corrupted, which must NOT verify (a check of the check)
  resumes      every "resumed from DIR" a trainer logged is a step of its own job, and none is a
               step the injector had corrupted before that line (silently loaded)
  placement    no attempt (SCHEDULED) and no replacement group (REPLICA_GROUP_PLACED) was placed
               on node-2 while its link was cut, from a heartbeat timeout (+2 s) after the cut
               (before that the coordinator cannot know) to the heal
"""
import datetime
import glob
import json
import os
import re
import subprocess
import time

import soak_cluster
import soak_jobs

LOSS_RTOL = 1e-5
# Losses are printed with 6 significant digits: two roundings of ~5e-6 on values of 2-6.
LOSS_ATOL = 1.2e-5
LOG_TIME = re.compile(r"^[DIWE](\d\d)(\d\d) (\d\d):(\d\d):(\d\d)\.(\d{3}) ")
RESUMED = re.compile(r"resumed from (\S+)")


def events(status, kind):
    return [e for e in status.get("events", []) if e.get("kind") == kind]


def outcome(job, status):
    """(outcome, restarts, cause, problems) of one job."""
    state = status.get("state", "UNKNOWN")
    restarts = len(events(status, "RESTARTING"))
    if state == "SUCCEEDED":
        return "SUCCEEDED", restarts, "", []
    failed = events(status, "FAILED")
    cause = failed[-1]["message"] if failed else status.get("message", "")
    if state == "FAILED" and "restarts are used up" in cause and ": " in cause:
        return "FAILED (restarts used up)", restarts, cause, []
    return state, restarts, cause, ["%s ended %s, not SUCCEEDED nor FAILED after its restarts: "
                                    "%s" % (job, state, cause or "(no cause)")]


def cause_check(job, cause, corrupted):
    """A FAILED job's cause names a checksum mismatch only if the injector corrupted one of that
    job's checkpoints (a corruption nobody injected is a lost checkpoint)."""
    if "checksum mismatch" in cause and not any(c["job"] == job for c in corrupted):
        return ["%s FAILED on a checksum mismatch the injector did not cause: %s" % (
            job, cause[:300])]
    return []


def series(sc, job):
    """({step: loss} with the last attempt's value per step, steps trained more than once), or
    (None, 0) when the coordinator did not answer."""
    m = sc.ctl_json("metrics", job)
    if m is None:
        return None, 0
    by_step = {}
    for p in m.get("points", []):
        if int(p.get("count", 1)) != 1:
            continue  # a merged point (the series is far below its capacity here)
        by_step.setdefault(int(p["step"]), []).append((int(p.get("attempt", 0)),
                                                      float(p["loss"])))
    out = {s: sorted(v)[-1][1] for s, v in by_step.items()}
    return out, sum(len(v) - 1 for v in by_step.values())


def attempt_losses(cluster_dir, job):
    """{attempt: {step: loss}} from rank 0's metrics file of each attempt (generation 0; a
    replacement group's rank 0 writes metrics-rank-0.gen<G>.jsonl), wherever it ran."""
    out = {}
    for path in glob.glob(os.path.join(cluster_dir, "worker-*", "jobs", job, "attempt-*",
                                       "metrics-rank-0.jsonl")):
        attempt = int(os.path.basename(os.path.dirname(path)).split("-", 1)[1])
        rows = out.setdefault(attempt, {})
        for line in open(path, errors="replace"):
            try:
                r = json.loads(line)
            except ValueError:
                continue  # a line cut short by a SIGKILL
            rows[int(r["step"])] = float(r["loss"])
    return out


def recompute_check(job, spec, by_attempt, ref, status):
    """(steps trained again by a later attempt, problems): every attempt's own losses must
    equal the reference too, not only the last one's (not for REPLICA_GROUPS jobs, whose
    trajectory may differ after a group loss by design)."""
    seen, again, problems = set(), 0, []
    ft = "fault_tolerance" in soak_jobs.SPECS[spec]["extra"]
    for attempt in sorted(by_attempt):
        for s, loss in sorted(by_attempt[attempt].items()):
            again += s in seen
            seen.add(s)
            if not ft and s in ref and abs(loss - ref[s]) > LOSS_RTOL * abs(ref[s]) + LOSS_ATOL:
                problems.append("%s (%s) attempt %d: step %d loss %.6g, undisturbed run %.6g"
                                % (job, spec, attempt, s, loss, ref[s]))
    return again, problems


def compare_losses(job, spec, got, ref, status):
    """(problems where `got` differs from the reference `ref` (both {step: loss}), steps
    compared, largest relative difference)."""
    steps = range(1, soak_jobs.SPECS[spec]["steps"] + 1)
    lost = events(status, "REPLICA_GROUP_LOST")
    if lost:
        first = min(int(m.group(1)) for m in (re.search(r"step (\d+)", e["message"])
                                              for e in lost) if m)
        steps = range(1, first)
    problems, worst, n, missing = [], 0.0, 0, []
    for s in steps:
        if s in ref and s in got:
            n += 1
            worst = max(worst, abs(got[s] - ref[s]) / abs(ref[s]))
        if s not in ref:
            problems.append("%s: the reference run of %s has no loss for step %d" % (job, spec, s))
        elif s not in got:
            missing.append(s)
        elif abs(got[s] - ref[s]) > LOSS_RTOL * abs(ref[s]) + LOSS_ATOL:
            problems.append("%s (%s): step %d loss %.6g, undisturbed run %.6g (rel diff %.2e)"
                            % (job, spec, s, got[s], ref[s], abs(got[s] - ref[s]) / abs(ref[s])))
    if missing and status.get("state") == "SUCCEEDED":
        problems.append("%s (%s) SUCCEEDED but the coordinator's series lacks %d step(s): %s" % (
            job, spec, len(missing), _ranges(missing)))
    return problems, n, worst


def _ranges(steps):
    out, start = [], None
    for i, s in enumerate(steps):
        if start is None:
            start = s
        if i + 1 == len(steps) or steps[i + 1] != s + 1:
            out.append(str(start) if start == s else "%d-%d" % (start, s))
            start = None
    return ", ".join(out)


def verify_checkpoints(verify_bin, ckpt_root, jobs, corrupted):
    """(problems, verified, bad_as_expected) over every committed step dir of `jobs`."""
    corrupt_dirs = {c["dir"] for c in corrupted}
    dirs = sorted(os.path.dirname(m) for j in jobs
                  for m in glob.glob(os.path.join(ckpt_root, j, "step_*", "MANIFEST.json")))
    if not dirs:
        return [], 0, 0
    proc = subprocess.run([verify_bin] + dirs, capture_output=True, text=True, timeout=600)
    problems, ok, bad_expected = [], 0, 0
    for line in proc.stdout.splitlines():
        m = re.match(r"(OK|BAD) (\S+?):? (.*)$", line)
        if not m:
            continue
        verdict, d, rest = m.groups()
        job = os.path.basename(os.path.dirname(d))
        if verdict == "OK" and d in corrupt_dirs:
            problems.append("%s was corrupted by the injector but verifies: %s" % (d, rest))
        elif verdict == "OK" and " job %s " % job not in " %s " % rest:
            problems.append("%s is in %s's folder but its manifest says %s" % (d, job, rest))
        elif verdict == "OK":
            ok += 1
        elif d in corrupt_dirs:
            bad_expected += 1
        else:
            problems.append("committed checkpoint %s does not verify: %s" % (d, rest))
    if proc.returncode not in (0, 1):
        problems.append("checkpoint_verify exited %d: %s" % (proc.returncode, proc.stderr[-500:]))
    return problems, ok, bad_expected


def log_time(line, year):
    m = LOG_TIME.match(line)
    if not m:
        return None
    mo, d, h, mi, s, ms = (int(x) for x in m.groups())
    return time.mktime((year, mo, d, h, mi, s, 0, 0, -1)) + ms / 1000.0


def check_resumes(cluster_dir, ckpt_root, corrupted):
    """(problems, resumes, loads_refused) from every trainer log of every job."""
    year = datetime.datetime.now().year
    corrupt_at = {c["dir"]: c["t"] for c in corrupted}
    problems, resumes, refused = [], 0, 0
    for log in glob.glob(os.path.join(cluster_dir, "worker-*", "jobs", "*", "attempt-*",
                                      "rank-*.log*")):
        job = log.split(os.sep + "jobs" + os.sep, 1)[1].split(os.sep, 1)[0]
        text = open(log, errors="replace").read()
        refused += text.count("checksum mismatch in checkpoint data file")
        for line in text.splitlines():
            m = RESUMED.search(line)
            if not m:
                continue
            resumes += 1
            d = os.path.normpath(m.group(1))
            if os.path.dirname(d) != os.path.join(ckpt_root, job):
                problems.append("%s resumed from %s, not a checkpoint of its own (%s)" % (
                    job, d, log))
            t = log_time(line, year)
            if d in corrupt_at and t is not None and t > corrupt_at[d]:
                problems.append("%s silently loaded %s, corrupted at %s (%s)" % (
                    job, d, time.strftime("%H:%M:%S", time.localtime(corrupt_at[d])), log))
    return problems, resumes, refused


def _placed_on_cut_node(status, rec):
    """[(t, what)]: placements of this job that include the cut node."""
    node = "node-%d" % soak_cluster.CUT_NODE
    out = []
    for e in events(status, "SCHEDULED"):
        nodes = set()
        for (a, _), ns in rec["placements"].items():
            if a == int(e.get("attempt", 0)):
                nodes |= ns
        if node in nodes:
            out.append((int(e["time_unix_ms"]) / 1000.0, "attempt %s" % e.get("attempt")))
    for e in events(status, "REPLICA_GROUP_PLACED"):
        if re.search(r"placed on .*\b%s\b" % node, e["message"]):
            out.append((int(e["time_unix_ms"]) / 1000.0, e["message"]))
    return out


def check_placement(statuses, tracker, cuts, log_starts):
    """Problems: a placement on the cut node inside a cut (after the coordinator could know).
    `log_starts`: {(job, attempt): set of nodes} from the workers' "started rank" lines."""
    slack = soak_cluster.HEARTBEAT_TIMEOUT_MS / 1000.0 + 2
    problems = []
    for job, status in statuses.items():
        rec = dict(tracker.jobs[job])
        rec["placements"] = {k: set(v) for k, v in rec["placements"].items()}
        for (j, a), nodes in log_starts.items():
            if j == job:
                rec["placements"].setdefault((a, 0), set()).update(nodes)
        for t, what in _placed_on_cut_node(status, rec):
            for down, up in cuts:
                if down + slack < t < up:
                    problems.append("%s: %s placed on node-%d at %s, inside its link cut "
                                    "%s-%s" % (job, what, soak_cluster.CUT_NODE,
                                               time.strftime("%H:%M:%S", time.localtime(t)),
                                               time.strftime("%H:%M:%S", time.localtime(down)),
                                               time.strftime("%H:%M:%S", time.localtime(up))))
    return problems


STARTED = re.compile(r"started rank \d+/\d+ of (\S+) attempt (\d+)")


def log_starts(cluster_dir):
    """{(job, attempt): nodes} from every worker's "started rank" lines."""
    out = {}
    for log in glob.glob(os.path.join(cluster_dir, "worker-*", "worker.log")):
        node = "node-" + os.path.basename(os.path.dirname(log)).rsplit("-", 1)[1]
        for m in STARTED.finditer(open(log, errors="replace").read()):
            out.setdefault((m.group(1), int(m.group(2))), set()).add(node)
    return out
