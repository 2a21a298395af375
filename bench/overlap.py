"""overlap: what communication costs a training step, with and without prefetch. Run it with
bench/overlap.sh.

Our trainer, W = 2 (FULL_SHARD, bench/specs/gpt_small_bench.yaml), in four configurations:
  prefetch on   fsdp.forward_prefetch=true,  fsdp.backward_prefetch=BACKWARD_PRE
  prefetch off  fsdp.forward_prefetch=false, fsdp.backward_prefetch=BACKWARD_NONE
each with real collectives and with fsdp.fake_collectives=true (no-op collectives of the same
shapes; the loss all-reduce of the world group stays real). The four run one after the other
per repetition, their order rotating by repetition. Per run: the median step time over steps
(skip, steps) (the last step, which evaluates, is left out); per configuration: the median over
repetitions. The figure of merit is real / fake step time: 1.0 means communication is fully
hidden (or free); the target is <= 1.15 with prefetch on, judged on the median of the
per-repetition ratios (the ratio of the medians is printed too).
"""
import argparse
import json
import os
import sys
import tempfile

import benchlib

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trainer", required=True)
    ap.add_argument("--spec", default=os.path.join(HERE, "specs", "gpt_small_bench.yaml"))
    ap.add_argument("--world_size", type=int, default=2)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--skip", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--global_batch_size", type=int, default=16)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "overlap.txt"))
    ap.add_argument("--note", default="",
                    help="a line for the results file, e.g. what else loaded the machine")
    a = ap.parse_args()
    header = benchlib.machine_header("overlap: step time with real over no-op collectives")
    if a.note:
        header += f"note: {a.note}\n"
    work = tempfile.mkdtemp(prefix="overlap.")
    w = a.world_size
    prefetch = {"on": ["fsdp.forward_prefetch=true", "fsdp.backward_prefetch=BACKWARD_PRE"],
                "off": ["fsdp.forward_prefetch=false", "fsdp.backward_prefetch=BACKWARD_NONE"]}
    configs = [(p, fake) for p in ("on", "off") for fake in (False, True)]
    times, lines = {}, []
    for rep in range(a.reps):
        order = configs[rep % len(configs):] + configs[:rep % len(configs)]
        for p, fake in order:
            tag = f"p{p}.{'fake' if fake else 'real'}.r{rep}"
            sets = prefetch[p] + [f"fsdp.fake_collectives={'true' if fake else 'false'}",
                                  f"world_size={w}", f"train.steps={a.steps}",
                                  f"train.global_batch_size={a.global_batch_size}",
                                  f"train.micro_batch_size={a.global_batch_size // w}"]

            def argv(r, sets=sets, tag=tag):
                out = [a.trainer, "--spec", a.spec,
                       "--metrics_out", os.path.join(work, f"{tag}.{r}.jsonl")]
                for s in sets:
                    out += ["--set", s]
                return out

            run = benchlib.run_ranks(argv, w, os.path.join(work, tag))
            if not run.ok():
                sys.exit(f"{tag} failed {run.returncodes}:\n{run.tail(0)}")
            with open(os.path.join(work, f"{tag}.0.jsonl")) as f:
                rows = [json.loads(x) for x in f if x.strip()]
            step = benchlib.median([r["step_time_s"] for r in rows
                                    if a.skip < r["step"] < a.steps])
            times.setdefault((p, fake), []).append(step)
            line = (f"rep {rep} prefetch {p:3} {'fake' if fake else 'real'}: median step "
                    f"{step * 1e3:8.1f} ms  load {run.load_before} -> {run.load_after}")
            print(line, flush=True)
            lines.append(line)
    table = [f"{'prefetch':8} {'real ms':>9} {'fake ms':>9} {'real/fake':>9} "
             f"{'per-rep real/fake (median; all)':>32}  target"]
    for p in ("on", "off"):
        real = benchlib.median(times[(p, False)])
        fake = benchlib.median(times[(p, True)])
        # Real and fake of one repetition ran minutes apart at most: their ratio is less
        # exposed to a load that drifts over the whole benchmark.
        pairs = [r / f for r, f in zip(times[(p, False)], times[(p, True)])]
        ratio = benchlib.median(pairs)
        target = ("<= 1.15: " + ("met" if ratio <= 1.15 else "NOT met")) if p == "on" \
            else "(shown for comparison)"
        table.append(f"{p:8} {real * 1e3:9.1f} {fake * 1e3:9.1f} {real / fake:9.3f} "
                     f"{ratio:9.3f}; {' '.join(f'{x:.2f}' for x in pairs):>21}  {target}")
    text = header + (f"W={w}, bench/specs/gpt_small_bench.yaml (GPT 4.87M parameters), global "
                     f"batch {a.global_batch_size}, {a.steps} steps per run, step time = median "
                     f"of steps {a.skip + 1}..{a.steps - 1}, medians over {a.reps} "
                     f"repetitions\n\n") + "\n".join(table) + "\n\nruns:\n" + \
        "\n".join(lines) + f"\nload average at end {benchlib.load_average()}\n"
    print("\n" + "\n".join(table))
    benchlib.write_results(a.out, text)


if __name__ == "__main__":
    main()
