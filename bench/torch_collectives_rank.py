"""One rank of bench/collectives.py's torch.distributed side: all-gather and reduce-scatter on the
Gloo process group, fp32, for each size, timed like fsdp/comm_bench_main.cc (one warm-up call,
a barrier, `iters` calls, a barrier; rank 0's clock).

Ops: all_gather_into_tensor (output of the given size) and reduce_scatter_tensor (input of the
given size). If this torch's Gloo group refuses reduce_scatter_tensor, the rank measures what an
FSDP on Gloo would fall back to: all_reduce of the whole input, then its own slice; the impl
column then reads "torch_ar" so the table says which one was measured. Rank 0 prints
"RESULT <op> <impl> <W> <MiB> <ms>" lines.
"""
import argparse
import time

import torch
import torch.distributed as dist


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes_mib", default="1,4,16,64,256")
    ap.add_argument("--iters", type=int, default=5)
    a = ap.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()

    def timed(fn):
        fn()
        dist.barrier()
        start = time.perf_counter()
        for _ in range(a.iters):
            fn()
        dist.barrier()
        return (time.perf_counter() - start) / a.iters * 1e3

    for mib in [int(x) for x in a.sizes_mib.split(",") if x]:
        numel = (mib << 20) // 4 // world * world
        full = torch.ones(numel)
        part = torch.ones(numel // world)
        ms = timed(lambda: dist.all_gather_into_tensor(full, part))
        if rank == 0:
            print(f"RESULT all_gather torch {world} {mib} {ms}", flush=True)
        impl = "torch"
        try:
            dist.reduce_scatter_tensor(part, full)

            def rs():
                dist.reduce_scatter_tensor(part, full)
        except (RuntimeError, NotImplementedError, ValueError):
            impl = "torch_ar"

            def rs():
                work = full.clone()
                dist.all_reduce(work)
                part.copy_(work[rank * part.numel():(rank + 1) * part.numel()])
        ms = timed(rs)
        if rank == 0:
            print(f"RESULT reduce_scatter {impl} {world} {mib} {ms}", flush=True)
        ms = timed(lambda: dist.all_reduce(full))
        if rank == 0:
            print(f"RESULT all_reduce torch {world} {mib} {ms}", flush=True)
        del full, part
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
