"""Orchestrates bench/gpu/throughput.sh (which sets up the environment and calls this).

Section gpt2: GPT-2 small (124M) bf16 at sequence 1024, micro-batches 8, 16 and 32 (one
micro-batch a step, W = 1): our trainer (bench/gpu/gpt2_bf16.yaml), PyTorch FSDP2 eager, FSDP2
with each block torch.compile'd, and plain torch.compile without FSDP (bench/gpu/throughput.py),
run alternately (for each batch size, each side in turn) in one session: tokens/s, MFU, peak GPU
memory (the caching allocator's max allocated).

Section llama: the largest Llama-style model (models/llama.cc's shape) that trains LLAMA_STEPS steps
on one GPU, for ours and FSDP2, each with and without CPU offload: the sizes of --llama_sizes are
tried in increasing order until one fails (out of memory, error) or runs past the attempt's time
cap, or the series' time budget is spent. Sizes whose host memory need (16 bytes a parameter with
offload, 4 without: the fp32 model built on the host first) exceeds 80% of MemAvailable are not
tried (an out-of-memory kill on the host could take the benchmark with it).

Every child has a timeout; the whole run keeps to --budget_s (sections share it: gpt2 first, then
llama with what is left). Writes a results file: the machine, date and commit, then one table per
section, and every run's JSON line in <work>/runs.jsonl.
--cpu_smoke: tiny models on the CPU (throughput.py --cpu_smoke; our trainer with device.kind=CPU
and a tiny GPT), one batch size and one Llama size, to check that the script runs end to end.
"""
import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

# name, n_embd, n_layer, n_head, ffn_hidden (vocab 32000, block = seq 1024): the usual
# Llama / Llama-2 shapes and two between them.
LLAMA_SIZES = {
    "1.0B": (2048, 16, 16, 5632),
    "2.1B": (2560, 24, 20, 6912),
    "3.4B": (3072, 28, 24, 8192),
    "5.1B": (4096, 24, 32, 11008),
    "6.7B": (4096, 32, 32, 11008),
    "9.2B": (4096, 44, 32, 11008),
    "13B": (5120, 40, 40, 13824),
    "20B": (6144, 44, 48, 16384),
}
VOCAB = 32000


def llama_params(c, l, f, v=VOCAB):
    return l * (4 * c * c + 3 * c * f + 2 * c) + 2 * v * c + c


def mem_available_bytes():
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class Runner:
    def __init__(self, a):
        self.a = a
        self.deadline = time.monotonic() + a.budget_s
        self.log = open(os.path.join(a.work, "runs.jsonl"), "a")
        self.port = 29600

    def left(self):
        return self.deadline - time.monotonic()

    def run(self, label, cmd, timeout_s, env_extra=None):
        """Runs a child with a timeout; returns (rc, seconds, log path)."""
        timeout_s = max(1, min(timeout_s, self.left()))
        path = os.path.join(self.a.work, re.sub(r"[^A-Za-z0-9._-]", "_", label) + ".log")
        self.port += 1
        env = dict(os.environ, RANK="0", WORLD_SIZE="1", LOCAL_RANK="0",
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(self.port),
                   SHARDLINE_PEAK_FLOPS=str(self.a.peak_flops), **(env_extra or {}))
        t0 = time.monotonic()
        with open(path, "w") as out:
            out.write("$ " + " ".join(cmd) + "\n")
            out.flush()
            try:
                rc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                    cwd=REPO, timeout=timeout_s).returncode
            except subprocess.TimeoutExpired:
                rc = 124
        secs = time.monotonic() - t0
        print(f"[throughput] {label}: rc {rc}, {secs:.0f}s", file=sys.stderr, flush=True)
        return rc, secs, path

    def record(self, row):
        self.log.write(json.dumps(row) + "\n")
        self.log.flush()
        return row

    # ---- ours: the trainer binary ------------------------------------------------------------
    def ours(self, label, spec, sets, steps, timeout_s):
        metrics = os.path.join(self.a.work, label + ".jsonl")
        if os.path.exists(metrics):
            os.remove(metrics)
        cmd = [self.a.trainer, "--spec", spec, "--metrics_out", metrics]
        for s in sets + [f"train.steps={steps}"]:
            cmd += ["--set", s]
        rc, secs, log = self.run(label, cmd, timeout_s)
        row = {"label": label, "side": "ours", "ok": False, "wall_s": secs}
        rows = []
        if os.path.exists(metrics):
            rows = [json.loads(l) for l in open(metrics) if l.strip()]
        rows = [r for r in rows if "step_time_s" in r]
        if rc == 0 and rows:
            body = [r for r in rows if r["step"] > min(self.a.warmup, len(rows) - 1)] or rows
            med = lambda k: statistics.median(r[k] for r in body if r.get(k) is not None)
            peaks = [r["cuda_max_allocated_bytes"] for r in rows if "cuda_max_allocated_bytes" in r]
            row.update(ok=True, step_s=med("step_time_s"), tokens_per_s=med("tokens_per_s"),
                       mfu=med("mfu"), peak_gib=max(peaks) / 2**30 if peaks else None,
                       last_loss=rows[-1].get("loss"), steps=len(rows))
        else:
            row["error"] = "time cap" if rc == 124 else f"exit {rc}: {last_error(log)}"
        return self.record(row)

    # ---- theirs: throughput.py ---------------------------------------------------------------
    def theirs(self, label, args, timeout_s):
        cmd = [sys.executable, os.path.join(HERE, "throughput.py")] + args + [
            "--peak_flops", str(self.a.peak_flops), "--warmup", str(self.a.warmup)]
        if self.a.cpu_smoke:
            cmd.append("--cpu_smoke")
        rc, secs, log = self.run(label, cmd, timeout_s)
        row = {"label": label, "ok": False, "wall_s": secs}
        lines = [l for l in open(log) if l.startswith("{")]
        if lines:
            row.update(json.loads(lines[-1]))
            row["label"] = label
        if rc == 124:
            row["error"] = "time cap"
        elif not row.get("ok"):
            row.setdefault("error", f"exit {rc}: {last_error(log)}")
        return self.record(row)


def last_error(log):
    lines = [l.strip() for l in open(log, errors="replace") if l.strip()]
    for l in reversed(lines):
        if re.search(r"Error|error|refus|out of memory|E[0-9]{4}", l):
            return l[:240]
    return lines[-1][:240] if lines else "no output"


def fmt(v, spec, scale=1.0, none="n/a"):
    return none if v is None else spec % (v * scale)


def gpt2_section(r, out):
    a = r.a
    batches = [2] if a.cpu_smoke else a.batches
    spec = os.path.join(HERE, "gpt2_bf16.yaml")
    smoke_sets = ["device.kind=CPU", "model.n_embd=64", "model.n_layer=2", "model.n_head=4",
                  "model.vocab_size=256", "model.block_size=64", "data.seq_len=32",
                  "fsdp.mixed_precision.param_dtype=FP32",
                  "fsdp.mixed_precision.buffer_dtype=FP32"] if a.cpu_smoke else []
    seq = 32 if a.cpu_smoke else 1024
    rows = []
    for b in batches:
        for side in a.sides:
            if r.left() < 20:
                rows.append({"label": f"gpt2_{side}_b{b}", "side": side, "batch": b,
                             "ok": False, "error": "not run (time budget spent)"})
                continue
            if side == "ours":
                row = r.ours(f"gpt2_ours_b{b}", spec,
                             smoke_sets + [f"train.micro_batch_size={b}",
                                           f"train.global_batch_size={b}", "train.log_every=1"],
                             a.gpt2_steps, a.run_timeout_s)
            else:
                row = r.theirs(f"gpt2_{side}_b{b}", ["gpt2", "--side", side, "--batch", str(b),
                                                     "--steps", str(a.gpt2_steps)],
                               a.run_timeout_s)
            row.update(side=side, batch=b)
            rows.append(row)
    print(f"\nGPT-2 small (124M), one GPU, bf16 compute, fp32 master weights, AdamW (fused), "
          f"sequence {seq}, one micro-batch a step;\nmedian step after {a.warmup} warm-up steps of "
          f"{a.gpt2_steps}; MFU = models/gpt.cc FLOPs / {a.peak_flops:.4g} FLOP/s; peak = CUDA "
          f"max allocated; ratio = step time / torch fsdp2's at the same batch", file=out)
    print("%-6s %-16s %9s %11s %7s %9s %6s  %s" % ("batch", "side", "step ms", "tokens/s", "MFU",
                                                  "peak GiB", "ratio", "note"), file=out)
    for b in batches:
        ref = next((x.get("step_s") for x in rows if x["batch"] == b and x["side"] == "fsdp2"
                    and x.get("ok")), None)
        for x in (x for x in rows if x["batch"] == b):
            ok = x.get("ok")
            print("%-6d %-16s %9s %11s %7s %9s %6s  %s" % (
                b, x["side"], fmt(x.get("step_s") if ok else None, "%.1f", 1e3),
                fmt(x.get("tokens_per_s") if ok else None, "%.0f"),
                fmt(x.get("mfu") if ok else None, "%.1f%%", 100),
                fmt(x.get("peak_gib"), "%.2f"),
                fmt(x["step_s"] / ref if ok and ref else None, "%.2f"),
                "" if ok else "FAILED: " + x.get("error", "?")), file=out)


def llama_section(r, out):
    a = r.a
    names = ["tiny"] if a.cpu_smoke else a.llama_sizes
    series = [("ours", False), ("ours", True), ("fsdp2", False), ("fsdp2", True)]
    spec = os.path.join(HERE, "llama_bf16.yaml")
    results = []
    for i, (side, offload) in enumerate(series):
        # Each series gets an equal share of what is left (unused time passes on).
        stop_at = time.monotonic() + (r.left() / (len(series) - i))
        largest, failure = None, None
        for name in names:
            c, l, h, f = (64, 2, 4, 160) if a.cpu_smoke else LLAMA_SIZES[name]
            p = llama_params(c, l, f)
            need = p * (16 if offload else 4)
            avail = mem_available_bytes()
            if avail and need > 0.8 * avail:
                failure = {"size": name, "params": p, "error": f"not tried: needs ~{need / 2**30:.0f} GiB "
                           f"of host memory, {avail / 2**30:.0f} GiB available"}
                break
            cap = min(a.llama_attempt_s, stop_at - time.monotonic())
            if cap < 15:
                failure = {"size": name, "params": p, "error": "not tried (series time budget spent)"}
                break
            label = f"llama_{side}{'_offload' if offload else ''}_{name}"
            if a.cpu_smoke and side == "ours" and offload:
                failure = {"size": name, "params": p,
                           "error": "not run: a CPU job refuses fsdp.cpu_offload (smoke)"}
                break
            if side == "ours":
                sets = [f"model.n_embd={c}", f"model.n_layer={l}", f"model.n_head={h}",
                        f"model.ffn_hidden={f}", f"model.vocab_size={VOCAB if not a.cpu_smoke else 256}",
                        f"model.block_size={a.llama_seq}", f"data.seq_len={a.llama_seq}",
                        f"train.micro_batch_size={a.llama_batch}",
                        f"train.global_batch_size={a.llama_batch}",
                        f"fsdp.cpu_offload={'true' if offload else 'false'}"]
                if a.cpu_smoke:
                    sets += ["device.kind=CPU", "fsdp.mixed_precision.param_dtype=FP32",
                             "fsdp.mixed_precision.buffer_dtype=FP32"]
                row = r.ours(label, spec, sets, a.llama_steps, cap)
            else:
                row = r.theirs(label, ["llama", "--side", "fsdp2", "--n_embd", str(c),
                                       "--n_layer", str(l), "--n_head", str(h),
                                       "--ffn_hidden", str(f), "--vocab", str(VOCAB),
                                       "--batch", str(a.llama_batch),
                                       "--seq_len", str(a.llama_seq),
                                       "--steps", str(a.llama_steps)]
                               + (["--offload"] if offload else []), cap)
            row.update(size=name, params=p)
            if row.get("ok"):
                largest = row
            else:
                failure = row
                break
        results.append((side, offload, largest, failure))
    print(f"\nLargest Llama-style model (models/llama.cc shape, vocab {VOCAB}) that trains "
          f"{a.llama_steps} steps of {a.llama_batch} x {a.llama_seq} tokens on one GPU, bf16 "
          f"compute, fp32 master weights, AdamW;\nsizes tried in order {' '.join(names)}, each "
          f"capped at {a.llama_attempt_s:.0f} s (the model's build and init included)",
          file=out)
    print("%-16s %-8s %12s %9s %9s   %s" % ("side", "largest", "params", "step s", "peak GiB",
                                           "next size"), file=out)
    for side, offload, largest, failure in results:
        name = side + (" offload" if offload else "")
        nxt = (f"{failure['size']}: {failure.get('error', 'failed')}" if failure
               else "none left to try")
        if largest:
            print("%-16s %-8s %12s %9.2f %9s   %s" % (
                name, largest["size"], f"{largest['params'] / 1e9:.2f}B", largest["step_s"],
                fmt(largest.get("peak_gib"), "%.1f"), nxt), file=out)
        else:
            print("%-16s %-8s %12s %9s %9s   %s" % (name, "none", "", "", "", nxt), file=out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trainer", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--results", required=True)
    ap.add_argument("--sections", default="gpt2,llama")
    ap.add_argument("--budget_s", type=float, default=540)
    ap.add_argument("--peak_flops", type=float, default=989e12)
    ap.add_argument("--batches", default="8,16,32")
    ap.add_argument("--sides", default="ours,fsdp2,fsdp2_compile,compile")
    ap.add_argument("--gpt2_steps", type=int, default=15)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--run_timeout_s", type=float, default=120)
    ap.add_argument("--llama_sizes", default="3.4B,5.1B,6.7B,9.2B,13B,20B")
    ap.add_argument("--llama_steps", type=int, default=4)
    ap.add_argument("--llama_batch", type=int, default=2)
    ap.add_argument("--llama_seq", type=int, default=1024)
    ap.add_argument("--llama_attempt_s", type=float, default=120)
    ap.add_argument("--gpt2_share", type=float, default=0.55,
                    help="with both sections: the gpt2 section's share of the budget")
    ap.add_argument("--header", default="")
    ap.add_argument("--cpu_smoke", action="store_true")
    a = ap.parse_args()
    a.batches = [int(b) for b in a.batches.split(",")]
    a.sides = a.sides.split(",")
    a.llama_sizes = a.llama_sizes.split(",")
    for s in a.llama_sizes:
        if s not in LLAMA_SIZES:
            sys.exit(f"--llama_sizes: {s} is not one of {', '.join(LLAMA_SIZES)}")
    if a.cpu_smoke:
        a.gpt2_steps, a.llama_steps, a.warmup, a.llama_seq = 3, 2, 1, 32
    os.makedirs(a.work, exist_ok=True)
    r = Runner(a)
    t0 = time.monotonic()
    with open(a.results, "w") as out:
        print("bench/gpu/throughput.sh" + (" --cpu_smoke (tiny models on the CPU: the figures "
                                            "mean nothing)" if a.cpu_smoke else ""), file=out)
        print(a.header.strip(), file=out)
        sections = a.sections.split(",")
        if "gpt2" in sections:
            if "llama" in sections:  # Keep the rest of the budget for the llama section.
                r.deadline = time.monotonic() + a.budget_s * a.gpt2_share
            gpt2_section(r, out)
            out.flush()
            r.deadline = t0 + a.budget_s
        if "llama" in sections:
            llama_section(r, out)
        print(f"\nwall time {time.monotonic() - t0:.0f} s of a {a.budget_s:.0f} s budget; "
              f"every run's JSON in runs.jsonl, its log beside it", file=out)
    print(open(a.results).read())


if __name__ == "__main__":
    main()
