"""collectives: all-gather and reduce-scatter bandwidth over loopback, ours against Gloo's own
algorithms and against torch.distributed on Gloo. Run it with bench/collectives.sh.

Per repetition and world size W (the order of the two programs, and of ours and Gloo inside
comm_bench, alternates by repetition):
  fsdp/comm_bench --impls=ours,gloo   ours (GlooCommunicator, repeated calls through its public
                                      API; reduce-scatter in FSDP's form, ReduceScatterConsuming,
                                      which may reduce in its input) and Gloo's algorithms called
                                      directly (one ReduceScatterHalvingDoubling instance run
                                      repeatedly in place), size by size in one set of processes;
  bench/torch_collectives_rank.py     torch.distributed (Gloo backend): all_gather_into_tensor,
                                      reduce_scatter_tensor (which PyTorch's Gloo group
                                      implements as clone + all_reduce + copy of a chunk).
Bandwidth is the NCCL-tests "bus" rate: (W-1)/W of the buffer per second for all-gather and
reduce-scatter, 2 (W-1)/W for all-reduce; medians over repetitions of each run's time.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import benchlib

HERE = os.path.dirname(os.path.abspath(__file__))


def parse_results(text, rows, rep):
    for line in text.splitlines():
        f = line.split()
        if len(f) == 6 and f[0] == "RESULT":
            op, impl, w, mib, ms = f[1], f[2], int(f[3]), int(f[4]), float(f[5])
            rows.setdefault((op, w, mib), {}).setdefault(impl, []).append(ms)


def bus_gbps(op, w, mib, ms):
    factor = (2.0 if op == "all_reduce" else 1.0) * (w - 1) / w
    return factor * mib * 2**20 / (ms / 1e3) / 1e9


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--comm_bench", required=True)
    ap.add_argument("--world_sizes", default="2,4")
    ap.add_argument("--sizes_mib", default="1,4,16,64,256")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "collectives.txt"))
    ap.add_argument("--note", default="",
                    help="a line for the results file, e.g. what else loaded the machine")
    a = ap.parse_args()
    header = benchlib.machine_header(
        "collectives: loopback bus bandwidth, ours vs Gloo direct vs torch.distributed (Gloo)")
    if a.note:
        header += f"note: {a.note}\n"
    work = tempfile.mkdtemp(prefix="collectives.")
    rows, runs = {}, []
    for rep in range(a.reps):
        for w in [int(x) for x in a.world_sizes.split(",") if x]:
            order = ["comm_bench", "torch"] if rep % 2 == 0 else ["torch", "comm_bench"]
            for prog in order:
                load = benchlib.load_average()
                if prog == "comm_bench":
                    out = subprocess.run(
                        [a.comm_bench, f"--world_sizes={w}", f"--sizes_mib={a.sizes_mib}",
                         f"--iters={a.iters}",
                         "--impls=ours,gloo" if rep % 2 == 0 else "--impls=gloo,ours",
                         f"--out={os.path.join(work, f'cb.{w}.{rep}.tsv')}"],
                        capture_output=True, text=True, timeout=1800)
                    if out.returncode != 0:
                        sys.exit(f"comm_bench W={w} failed:\n{out.stdout[-3000:]}"
                                 f"{out.stderr[-3000:]}")
                    # comm_bench prints its own table; re-read the TSV as RESULT lines.
                    with open(os.path.join(work, f"cb.{w}.{rep}.tsv")) as f:
                        next(f)
                        text = "\n".join(
                            "RESULT {0} {1} {2} {3} {4}".format(*line.split("\t")[:5])
                            for line in f if line.strip())
                else:
                    run = benchlib.run_ranks(
                        lambda r: [sys.executable, os.path.join(HERE, "torch_collectives_rank.py"),
                                   f"--sizes_mib={a.sizes_mib}", f"--iters={a.iters}"],
                        w, os.path.join(work, f"torch.{w}.{rep}"), timeout_s=1800)
                    if not run.ok():
                        sys.exit(f"torch W={w} failed: {run.returncodes}\n{run.tail(0)}")
                    with open(run.logs[0]) as f:
                        text = f.read()
                parse_results(text, rows, rep)
                line = f"rep {rep} W={w} {prog}: load average {load} -> {benchlib.load_average()}"
                print(line, flush=True)
                runs.append(line)

    table = [f"{'op':15} {'W':>2} {'MiB':>4} {'ours GB/s':>9} {'gloo GB/s':>9} "
             f"{'torch GB/s':>10} {'ours/gloo':>9} {'ours/torch':>10}  torch impl"]
    worst_gloo = {}
    for (op, w, mib) in sorted(rows, key=lambda k: (k[0] != "all_gather", k[0], k[1], k[2])):
        impls = rows[(op, w, mib)]
        med = {k: benchlib.median(v) for k, v in impls.items()}
        torch_impl = "torch" if "torch" in med else ("torch_ar" if "torch_ar" in med else "")
        g = {k: bus_gbps(op, w, mib, v) for k, v in med.items()}
        ours, gloo, tor = g.get("ours", float("nan")), g.get("gloo", float("nan")), \
            g.get(torch_impl, float("nan"))
        table.append(f"{op:15} {w:>2} {mib:>4} {ours:9.3f} {gloo:9.3f} {tor:10.3f} "
                     f"{ours / gloo:9.2f} {ours / tor:10.2f}  {torch_impl}")
        if op in ("all_gather", "reduce_scatter"):
            worst_gloo.setdefault(op, []).append(ours / gloo)
    notes = ["",
             "ours reduce_scatter = GlooCommunicator::ReduceScatterConsuming, the form FSDP uses "
             "(the flat gradient is dropped after it, so the input is reduced in place: no working "
             "copy); Gloo direct = one ReduceScatterHalvingDoubling instance run in place.",
             "ours/gloo targets (>= 0.90 of Gloo's algorithm bandwidth): " + "; ".join(
                 f"{op}: median {benchlib.median(v):.2f}, min {min(v):.2f}"
                 for op, v in worst_gloo.items()),
             "torch's Gloo reduce_scatter_tensor is clone + all_reduce + copy of the rank's "
             "chunk (ProcessGroupGloo::reduce_scatter_tensor_coalesced in torch 2.11), so it "
             "moves about twice the bytes of a real reduce-scatter."]
    text = header + f"sizes {a.sizes_mib} MiB, fp32, {a.iters} timed iterations per run, " \
        f"medians over {a.reps} repetitions\n\n" + "\n".join(table + notes) + \
        "\n\nruns:\n" + "\n".join(runs) + \
        f"\nload average at end {benchlib.load_average()}\n"
    print("\n" + "\n".join(table + notes))
    benchlib.write_results(a.out, text)


if __name__ == "__main__":
    main()
