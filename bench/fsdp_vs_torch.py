"""fsdp_vs_torch: our trainer (FSDP engine, FULL_SHARD) against PyTorch FSDP2 (fully_shard), on CPU
with Gloo, the same GPT, the same initial weights, the same global batches, the same AdamW.
With --shard_degree S: our HYBRID_SHARD (hybrid_shard_degree S) against FSDP2's HSDP (fully_shard
over a 2-D (replicate, shard) device mesh), written to results/fsdp_vs_torch_hsdp.txt.

Run it with bench/fsdp_vs_torch.sh (builds the binaries, then calls this with the venv's python).

For each repetition and each world size W, it runs both sides one after the other (which one
goes first alternates by repetition), W processes each, launched like torchrun's workers:
  ours    trainer/trainer --spec bench/specs/gpt_small_bench.yaml
          --set checkpoint.init_from_safetensors=<init> ... --metrics_out ...
  theirs  python bench/torch_fsdp2_rank.py --init <init> --batches <batches> ...
Shared inputs, made once per invocation:
  <init>     the initial weights: bench/gpt_mirror.py's GPT-2 init written as safetensors under
             our parameter names (the trainer loads it through init_from_safetensors, the
             PyTorch side through load_state_dict(strict=True));
  <batches>  our sampler's global batches (bench/batch_dump), which the PyTorch side slices per
             rank and micro-step exactly as data::DistributedSampler does.
Per run: the median step time over steps [skip, steps) (the last step is left out: the trainer
evaluates there), tokens/s = global batch tokens / median step, each rank's peak RSS (wait4),
and rank 0's per-step losses. Across repetitions: medians. Loss difference: the largest
|ours - theirs| / |theirs| over the first `steps` steps (both sides are deterministic; the
repetitions are checked to agree).
"""
import argparse
import json
import os
import sys
import tempfile

import yaml

import benchlib

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def read_metrics(path):
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                rows.append(json.loads(line))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trainer", required=True)
    ap.add_argument("--batch_dump", required=True)
    ap.add_argument("--spec", default=os.path.join(HERE, "specs", "gpt_small_bench.yaml"))
    ap.add_argument("--world_sizes", default="2,4")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--skip", type=int, default=3, help="warm-up steps left out of the median")
    ap.add_argument("--shard_degree", type=int, default=0,
                    help="hybrid sharding: our HYBRID_SHARD with this degree against FSDP2 on a "
                         "2-D (replicate, shard) mesh (0: FULL_SHARD against fully_shard)")
    ap.add_argument("--out", default="",
                    help="default results/fsdp_vs_torch.txt, or fsdp_vs_torch_hsdp.txt with "
                         "--shard_degree")
    ap.add_argument("--workdir", default="")
    a = ap.parse_args()

    with open(a.spec) as f:
        spec = yaml.safe_load(f)
    m, d, o, t = spec["model"], spec["data"], spec["optimizer"], spec["train"]
    data_path = os.path.normpath(os.path.join(os.path.dirname(a.spec), d["path"]))
    g, seq = t["global_batch_size"], d["seq_len"]
    worlds = [int(w) for w in a.world_sizes.split(",") if w]
    work = a.workdir or tempfile.mkdtemp(prefix="fsdp_vs_torch.")
    os.makedirs(work, exist_ok=True)
    hsdp = a.shard_degree > 0
    if not a.out:
        a.out = os.path.join(HERE, "results",
                             "fsdp_vs_torch_hsdp.txt" if hsdp else "fsdp_vs_torch.txt")
    for w in worlds:
        if hsdp and (w % a.shard_degree != 0 or w == a.shard_degree):
            sys.exit(f"--shard_degree {a.shard_degree} must divide W = {w} and be smaller")
    header = benchlib.machine_header(
        f"fsdp_vs_torch: our trainer (HYBRID_SHARD, degree {a.shard_degree}) vs PyTorch FSDP2 "
        f"fully_shard on a (replicate, shard) mesh of shard size {a.shard_degree}, CPU + Gloo"
        if hsdp else
        "fsdp_vs_torch: our trainer (FULL_SHARD) vs PyTorch FSDP2 fully_shard, CPU + Gloo")
    strategy = ([] if not hsdp else
                ["--set", "fsdp.sharding_strategy=HYBRID_SHARD",
                 "--set", f"fsdp.hybrid_shard_degree={a.shard_degree}"])

    # Shared inputs.
    batches = os.path.join(work, "batches.bin")
    rc = os.spawnv(os.P_WAIT, a.batch_dump, [
        a.batch_dump, f"--data={data_path}", f"--seq_len={seq}",
        f"--val_fraction={d['val_fraction']}", f"--global_batch_size={g}",
        f"--shuffle_seed={d['shuffle_seed']}", f"--steps={a.steps}", f"--out={batches}"])
    if rc != 0:
        sys.exit(f"batch_dump failed with {rc}")
    import torch
    from safetensors.torch import save_file
    import gpt_mirror
    init = os.path.join(work, "init.safetensors")
    model = gpt_mirror.Gpt(m["n_embd"], m["n_layer"], m["n_head"], m["vocab_size"],
                           m["block_size"])
    gpt_mirror.init_gpt2(model, m["n_layer"], seed=m["init_seed"])
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, init)
    num_params = sum(p.numel() for p in model.parameters())
    del model, torch

    def ours(world, tag):
        def argv(r):
            return [a.trainer, "--spec", a.spec, "--set", f"world_size={world}",
                    "--set", f"train.micro_batch_size={g // world}",
                    "--set", f"train.steps={a.steps}",
                    "--set", f"checkpoint.init_from_safetensors={init}", *strategy,
                    "--metrics_out", os.path.join(work, f"{tag}.{r}.jsonl")]
        return argv

    def theirs(world, tag):
        def argv(r):
            return [sys.executable, os.path.join(HERE, "torch_fsdp2_rank.py"),
                    "--init", init, "--batches", batches,
                    "--n_embd", str(m["n_embd"]), "--n_layer", str(m["n_layer"]),
                    "--n_head", str(m["n_head"]), "--vocab_size", str(m["vocab_size"]),
                    "--block_size", str(m["block_size"]), "--seq_len", str(seq),
                    "--global_batch_size", str(g), "--micro_batch_size", str(g // world),
                    "--steps", str(a.steps), "--lr", str(o["lr"]), "--min_lr", str(o["min_lr"]),
                    "--warmup_steps", str(o["warmup_steps"]),
                    "--weight_decay", str(o["weight_decay"]), "--beta1", str(o["beta1"]),
                    "--beta2", str(o["beta2"]), "--eps", str(o.get("eps", 1e-8)),
                    "--grad_clip", str(o["grad_clip"]),
                    "--threads", str(spec["device"]["cpu_threads"]),
                    "--shard_degree", str(a.shard_degree),
                    "--metrics_out", os.path.join(work, f"{tag}.{r}.jsonl")]
        return argv

    sides = {"ours": ours, "torch": theirs}
    results = {}  # (side, world) -> list of per-run dicts
    raw_lines = []
    for rep in range(a.reps):
        for world in worlds:
            order = ["ours", "torch"] if rep % 2 == 0 else ["torch", "ours"]
            for side in order:
                tag = f"{side}.w{world}.r{rep}"
                run = benchlib.run_ranks(sides[side](world, tag), world,
                                         os.path.join(work, tag))
                if not run.ok():
                    sys.exit(f"{tag} failed (exit codes {run.returncodes}); rank 0 log tail:\n"
                             f"{run.tail(0)}")
                rows = read_metrics(os.path.join(work, f"{tag}.0.jsonl"))
                steps = [r for r in rows if a.skip < r["step"] < a.steps]
                step_s = benchlib.median([r["step_time_s"] for r in steps])
                entry = {"step_s": step_s, "tok_s": g * seq / step_s,
                         "rss": run.maxrss_bytes, "cpu": run.cpu_s,
                         "losses": [r["loss"] for r in rows],
                         "load": run.load_before, "wall": run.wall_s}
                results.setdefault((side, world), []).append(entry)
                line = (f"rep {rep} W={world} {side:5s} median step {step_s * 1e3:8.1f} ms  "
                        f"{entry['tok_s']:8.0f} tok/s  peak RSS/rank MiB "
                        f"{[round(x / 2**20) for x in run.maxrss_bytes]}  CPU s/rank "
                        f"{[round(x, 1) for x in run.cpu_s]}  wall {run.wall_s:5.1f}s"
                        f"  load {run.load_before} -> {run.load_after}")
                print(line, flush=True)
                raw_lines.append(line)

    table = []
    table.append(f"model: GPT n_embd {m['n_embd']}, n_layer {m['n_layer']}, n_head "
                 f"{m['n_head']}, vocab {m['vocab_size']}: {num_params / 1e6:.2f}M parameters; "
                 f"seq_len {seq}, global batch {g} ({g * seq} tokens/step), one micro-batch "
                 f"per rank, fp32, AdamW (lr {o['lr']}, wd {o['weight_decay']}, betas "
                 f"{o['beta1']}/{o['beta2']}), clip {o['grad_clip']}, {a.steps} steps, "
                 f"{spec['device']['cpu_threads']} intra-op thread(s) per rank")
    table.append("theirs: torch " + __import__("torch").__version__ +
                 " FSDP2 (torch.distributed.fsdp.fully_shard per Block + root" +
                 (f", mesh (W/{a.shard_degree}, {a.shard_degree}) (replicate, shard)" if hsdp
                  else "") + "), Gloo backend")
    table.append(f"medians over {a.reps} alternating repetitions; step time = median of steps "
                 f"{a.skip + 1}..{a.steps - 1} of each run; peak RSS and CPU s (user + system, "
                 f"whole process including start-up) from wait4, largest rank")
    table.append("")
    head = (f"{'W':>2} {'side':6} {'step ms':>9} {'tok/s':>8} {'peak RSS/rank MiB':>18} "
            f"{'CPU s/rank':>10} {'ratio step':>10} {'ratio RSS':>9} {'ratio CPU':>9} "
            f"{'max rel loss diff':>17}")
    table.append(head)
    verdicts = []
    for world in worlds:
        o_runs, t_runs = results[("ours", world)], results[("torch", world)]
        o_step = benchlib.median([r["step_s"] for r in o_runs])
        t_step = benchlib.median([r["step_s"] for r in t_runs])
        o_rss = benchlib.median([max(r["rss"]) for r in o_runs])
        t_rss = benchlib.median([max(r["rss"]) for r in t_runs])
        o_cpu = benchlib.median([max(r["cpu"]) for r in o_runs])
        t_cpu = benchlib.median([max(r["cpu"]) for r in t_runs])
        diffs = []
        for orun, trun in zip(o_runs, t_runs):
            n = min(len(orun["losses"]), len(trun["losses"]), 20)
            diffs.append(max(abs(x - y) / abs(y)
                             for x, y in zip(orun["losses"][:n], trun["losses"][:n])))
        diff = max(diffs)
        table.append(f"{world:>2} {'torch':6} {t_step * 1e3:9.1f} {g * seq / t_step:8.0f} "
                     f"{t_rss / 2**20:18.0f} {t_cpu:10.1f}")
        table.append(f"{world:>2} {'ours':6} {o_step * 1e3:9.1f} {g * seq / o_step:8.0f} "
                     f"{o_rss / 2**20:18.0f} {o_cpu:10.1f} {o_step / t_step:10.2f} "
                     f"{o_rss / t_rss:9.2f} {o_cpu / t_cpu:9.2f} {diff:17.2e}")
        verdicts.append(
            f"W={world}: step time ratio {o_step / t_step:.2f} (target <= 0.8: "
            f"{'met' if o_step / t_step <= 0.8 else 'NOT met'}), peak RSS ratio "
            f"{o_rss / t_rss:.2f} (target <= 0.8: {'met' if o_rss / t_rss <= 0.8 else 'NOT met'})"
            f", loss diff {diff:.2e} (target <= 1e-4: {'met' if diff <= 1e-4 else 'NOT met'})")
    table.append("")
    table += verdicts
    table.append("")
    table.append("per-step losses, first repetition (ours / torch):")
    for world in worlds:
        ol, tl = results[("ours", world)][0]["losses"], results[("torch", world)][0]["losses"]
        table.append(f"  W={world}: " + "  ".join(f"{x:.6f}/{y:.6f}" for x, y in zip(ol, tl)))
    text = header + "\n".join(table) + "\n\nruns:\n" + "\n".join(raw_lines) + \
        f"\nload average at end {benchlib.load_average()}; work dir {work}\n"
    print("\n" + "\n".join(table))
    benchlib.write_results(a.out, text)


if __name__ == "__main__":
    main()
