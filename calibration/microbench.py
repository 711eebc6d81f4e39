#!/usr/bin/env python3
"""rlsim calibration harness: time the kernels rlsim's cost models price, on this machine, and write one raw JSON file.

Standalone on purpose: it needs PyTorch only (no rlsim), so it can be copied to a GPU node. See calibration/README.md.

    python microbench.py --out h100.json                    # one GPU: GEMM, attention, HBM, host copies, launches
    torchrun --nproc-per-node 8 microbench.py --out node.json   # plus collectives on 2, 4 and 8 GPUs
    python microbench.py --device cpu --quick --out cpu.json    # the same protocol on the CPU (tests, CI)

Protocol (rlsim reference, hardware-and-costs.md §6): warm-up runs, then timed repetitions, each timed alone (CUDA
events on a GPU, perf_counter on the CPU) after flushing the cache by writing a buffer larger than it; the median and
the 10th/90th percentiles are kept. Collectives put a barrier before each repetition and keep, per repetition, the
slowest rank's time. `rlsim calibrate fit` turns the file into a hardware profile.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import socket
import subprocess
import sys
import time
from collections.abc import Callable

import torch

SCHEMA = "rlsim-calibration-raw/1"
SINGLE_DEVICE_KERNELS = ("gemm", "attention_prefill", "attention_decode", "hbm_copy", "host_copy", "launch")
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")
KERNELS = SINGLE_DEVICE_KERNELS + COLLECTIVES
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp8": getattr(torch, "float8_e4m3fn", None)}
DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp8": 1}

# (N, K) of the weight GEMMs of catalog models, from their published config.json (rlsim's reference §5):
# fused QKV projection ((heads + 2·kv_heads)·head_dim × hidden), output projection (hidden × heads·head_dim),
# fused gate+up (2·ffn × hidden) and down projection (hidden × ffn).
CATALOG_GEMMS = {
    "Qwen2.5-1.5B": ((2048, 1536), (1536, 1536), (17920, 1536), (1536, 8960)),
    "Qwen2.5-7B": ((4608, 3584), (3584, 3584), (37888, 3584), (3584, 18944)),
    "Llama-3.1-8B": ((6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336)),
    "Qwen3-32B": ((10240, 5120), (5120, 8192), (51200, 5120), (5120, 25600)),
}
# (query heads, KV heads, head_dim) of the same models.
CATALOG_ATTENTION = {
    "Qwen2.5-1.5B": (12, 2, 128),
    "Qwen2.5-7B": (28, 4, 128),
    "Llama-3.1-8B": (32, 8, 128),
    "Qwen3-32B": (64, 8, 128),
}
KIB, MIB, GIB = 2**10, 2**20, 2**30


@dataclasses.dataclass(frozen=True)
class Sweep:
    """Sizes of one run. `full` follows reference §6; `quick` keeps a few points per kernel so a GPU finishes in
    minutes and a CPU in seconds."""

    warmup: int
    reps: int
    gemm_m: tuple[int, ...]
    gemm_models: tuple[str, ...]
    gemm_squares: tuple[int, ...]
    prefill: tuple[tuple[int, int], ...]  # (batch, sequence)
    attention_models: tuple[str, ...]
    decode: tuple[tuple[int, int], ...]  # (batch, context)
    copy_bytes: tuple[int, ...]
    host_bytes: tuple[int, ...]
    collective_bytes: tuple[int, ...]
    launches: int


def sweep(quick: bool, device: str) -> Sweep:
    if quick and device == "cpu":
        return Sweep(
            warmup=2, reps=7, gemm_m=(1, 16, 64, 256), gemm_models=("Qwen2.5-1.5B",), gemm_squares=(128, 256, 512),
            prefill=((1, 64), (1, 128), (1, 256), (2, 256)), attention_models=("Qwen2.5-1.5B",),
            decode=((1, 256), (4, 512), (8, 1024), (8, 4096)),
            copy_bytes=(256 * KIB, MIB, 4 * MIB, 16 * MIB, 32 * MIB), host_bytes=(),
            collective_bytes=(4 * KIB, 64 * KIB, MIB, 4 * MIB), launches=50,
        )
    if quick:
        return Sweep(
            warmup=5, reps=20, gemm_m=(1, 16, 128, 1024, 8192), gemm_models=("Llama-3.1-8B",),
            gemm_squares=(1024, 4096, 8192), prefill=((1, 512), (1, 2048), (1, 8192)), attention_models=("Llama-3.1-8B",),
            decode=((1, 4096), (32, 4096), (256, 4096), (64, 32768)),
            copy_bytes=(MIB, 16 * MIB, 256 * MIB, GIB), host_bytes=(MIB, 64 * MIB, 512 * MIB),
            collective_bytes=tuple(KIB * 4**i for i in range(0, 11)), launches=200,
        )
    return Sweep(
        warmup=5, reps=25, gemm_m=tuple(2**i for i in range(17)), gemm_models=tuple(CATALOG_GEMMS),
        gemm_squares=(1024, 2048, 4096, 8192, 16384),
        prefill=tuple((max(1, 32768 // s // 4), s) for s in (128, 512, 2048, 8192, 32768)),
        attention_models=tuple(CATALOG_ATTENTION),
        decode=tuple((b, c) for b in (1, 8, 64, 256, 512) for c in (128, 1024, 8192, 32768, 131072)),
        copy_bytes=tuple(MIB * 4**i for i in range(7)) + (8 * GIB,), host_bytes=tuple(64 * KIB * 4**i for i in range(9)),
        collective_bytes=tuple(KIB * 2**i for i in range(24)), launches=1000,
    )


def plan_gemms(s: Sweep, dtypes: list[str]) -> list[tuple[str, int, int, int, str]]:
    """Every (dtype, m, n, k, label) the GEMM sweep times: catalog shapes over m, then squares."""
    shapes = [(m, n, k, f"{model} {n}x{k}") for model in s.gemm_models for n, k in CATALOG_GEMMS[model] for m in s.gemm_m]
    shapes += [(d, d, d, "square") for d in s.gemm_squares]
    # FP8 tensor-core GEMMs need every dimension a multiple of 16.
    return [(dt, m, n, k, label) for dt in dtypes for m, n, k, label in shapes if dt != "fp8" or m % 16 == 0]


# ---------------------------------------------------------------------------------------------------- timing


def percentile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolation percentile (q in 0..100) of an ascending list."""
    pos = (len(sorted_values) - 1) * q / 100
    low = int(pos)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (pos - low)


def summary(times: list[float]) -> dict[str, float | int]:
    ordered = sorted(times)
    return {"median_s": percentile(ordered, 50), "p10_s": percentile(ordered, 10), "p90_s": percentile(ordered, 90),
            "reps": len(times)}


class Timer:
    """Times one callable per repetition: CUDA events on a GPU, perf_counter (after the work is done) on the CPU."""

    def __init__(self, device: torch.device, flush_bytes: int):
        self.device = device
        self.cuda = device.type == "cuda"
        self.flush = torch.empty(flush_bytes // 4, dtype=torch.float32, device=device) if flush_bytes else None

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def times(self, fn: Callable[[], object], warmup: int, reps: int, *, flush: bool = True,
              before: Callable[[], object] | None = None, host_clock: bool = False) -> list[float]:
        """Seconds of each repetition. `host_clock`: time on the host even on a GPU, for work that runs on another
        stream and ends with a synchronisation (host copies), which events on the current stream would not see."""
        events_clock = self.cuda and not host_clock
        for _ in range(warmup):
            fn()
        self.sync()
        out: list[float] = []
        events = []
        for _ in range(reps):
            if flush and self.flush is not None:
                self.flush.zero_()  # evict the operands from L2 (or the CPU's last-level cache)
            if before is not None:
                before()
            if events_clock:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                end.record()
                events.append((start, end))
            else:
                self.sync()
                t0 = time.perf_counter()
                fn()
                self.sync()
                out.append(time.perf_counter() - t0)
        if events_clock:
            torch.cuda.synchronize(self.device)
            out = [s.elapsed_time(e) * 1e-3 for s, e in events]
        return out


# ---------------------------------------------------------------------------------------------------- kernels


def bench_gemm(timer: Timer, s: Sweep, dtypes: list[str], memory_budget: int, log: Callable[[str], None]) -> list[dict]:
    rows = []
    for dtype, m, n, k, label in plan_gemms(s, dtypes):
        if 4 * (m * k + n * k) + 2 * m * n > memory_budget:  # FP32 operands before the cast, BF16 result
            continue
        a = torch.randn(m, k, device=timer.device).to(DTYPES[dtype])
        b = torch.randn(n, k, device=timer.device).to(DTYPES[dtype])
        if dtype == "fp8":
            one = torch.ones((), device=timer.device)

            def fn(a=a, b=b, one=one):
                return torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        else:
            def fn(a=a, b=b):
                return torch.matmul(a, b.t())
        t = summary(timer.times(fn, s.warmup, s.reps))
        nbytes = DTYPE_BYTES[dtype] * (m * k + n * k) + 2 * m * n
        rows.append({"kernel": "gemm", "dtype": dtype, "m": m, "n": n, "k": k, "label": label, "flops": 2.0 * m * n * k,
                     "bytes": nbytes, **t})
        log(f"gemm {dtype} {m}x{n}x{k}: {2 * m * n * k / t['median_s'] / 1e12:.3f} TFLOP/s")
    return rows


def _attention(q, k, v, causal: bool):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)


def bench_prefill(timer: Timer, s: Sweep, dtype: str, log: Callable[[str], None]) -> list[dict]:
    rows = []
    torch_dtype = DTYPES[dtype]
    for model in s.attention_models:
        heads, kv_heads, head_dim = CATALOG_ATTENTION[model]
        for batch, seq in s.prefill:
            q = torch.randn(batch, heads, seq, head_dim, device=timer.device, dtype=torch_dtype)
            k = torch.randn(batch, kv_heads, seq, head_dim, device=timer.device, dtype=torch_dtype)
            v = torch.randn_like(k)
            t = summary(timer.times(lambda q=q, k=k, v=v: _attention(q, k, v, True), s.warmup, s.reps))
            # Causal: QK^T and PV over half the (seq x seq) scores, 2 FLOPs per multiply-add.
            flops = 2.0 * batch * heads * seq * seq * head_dim
            nbytes = DTYPE_BYTES[dtype] * batch * seq * head_dim * (2 * heads + 2 * kv_heads)
            rows.append({"kernel": "attention_prefill", "dtype": dtype, "batch": batch, "seq": seq, "heads": heads,
                         "kv_heads": kv_heads, "head_dim": head_dim, "label": model, "flops": flops, "bytes": nbytes,
                         **t})
            log(f"prefill {model} b{batch} s{seq}: {flops / t['median_s'] / 1e12:.3f} TFLOP/s")
    return rows


def bench_decode(timer: Timer, s: Sweep, dtype: str, memory_budget: int, log: Callable[[str], None]) -> list[dict]:
    rows = []
    torch_dtype = DTYPES[dtype]
    for model in s.attention_models:
        heads, kv_heads, head_dim = CATALOG_ATTENTION[model]
        for batch, context in s.decode:
            kv_bytes = 2 * DTYPE_BYTES[dtype] * batch * kv_heads * context * head_dim
            if kv_bytes > memory_budget:
                continue
            q = torch.randn(batch, heads, 1, head_dim, device=timer.device, dtype=torch_dtype)
            k = torch.randn(batch, kv_heads, context, head_dim, device=timer.device, dtype=torch_dtype)
            v = torch.randn_like(k)
            t = summary(timer.times(lambda q=q, k=k, v=v: _attention(q, k, v, False), s.warmup, s.reps))
            rows.append({"kernel": "attention_decode", "dtype": dtype, "batch": batch, "context": context,
                         "heads": heads, "kv_heads": kv_heads, "head_dim": head_dim, "label": model,
                         "flops": 4.0 * batch * heads * context * head_dim, "bytes": kv_bytes, **t})
            log(f"decode {model} b{batch} ctx{context}: {kv_bytes / t['median_s'] / 1e9:.1f} GB/s")
            del q, k, v
    return rows


def bench_copy(timer: Timer, s: Sweep, memory_budget: int, log: Callable[[str], None]) -> list[dict]:
    rows = []
    for size in s.copy_bytes:
        if 2 * size > memory_budget:
            continue
        src = torch.empty(size, dtype=torch.uint8, device=timer.device).fill_(1)
        dst = torch.empty_like(src)
        t = summary(timer.times(lambda src=src, dst=dst: dst.copy_(src), s.warmup, s.reps))
        rows.append({"kernel": "hbm_copy", "buffer_bytes": size, "bytes": 2 * size, **t})  # read + write
        log(f"copy {size / MIB:.2f} MiB: {2 * size / t['median_s'] / 1e9:.1f} GB/s")
        del src, dst
    return rows


def bench_host(timer: Timer, s: Sweep, memory_budget: int, log: Callable[[str], None]) -> list[dict]:
    rows = []
    stream = torch.cuda.Stream(timer.device)
    for size in s.host_bytes:
        if size > memory_budget:
            continue
        device_buffer = torch.empty(size, dtype=torch.uint8, device=timer.device)
        for memory in ("pinned", "pageable"):
            host = torch.empty(size, dtype=torch.uint8, pin_memory=memory == "pinned").fill_(1)
            for direction in ("h2d", "d2h"):
                dst, src = (device_buffer, host) if direction == "h2d" else (host, device_buffer)

                def fn(dst=dst, src=src):
                    with torch.cuda.stream(stream):
                        dst.copy_(src, non_blocking=True)
                    stream.synchronize()
                t = summary(timer.times(fn, s.warmup, s.reps, flush=False, host_clock=True))
                rows.append({"kernel": "host_copy", "direction": direction, "memory": memory, "bytes": size, **t})
                log(f"{direction} {memory} {size / MIB:.2f} MiB: {size / t['median_s'] / 1e9:.1f} GB/s")
    return rows


def bench_launch(timer: Timer, s: Sweep, log: Callable[[str], None]) -> list[dict]:
    """Back-to-back launches of a one-element kernel: the time of one launch (and of one CUDA-graph node)."""
    x = torch.zeros(1, device=timer.device)

    def eager():
        for _ in range(s.launches):
            x.add_(1)
    modes = [("eager", eager)]
    if timer.cuda:
        graph = torch.cuda.CUDAGraph()
        side = torch.cuda.Stream(timer.device)
        with torch.cuda.stream(side):
            eager()  # warm the allocator before capture
        torch.cuda.current_stream(timer.device).wait_stream(side)
        with torch.cuda.graph(graph):
            eager()
        modes.append(("graph", graph.replay))
    rows = []
    for mode, fn in modes:
        times = [t / s.launches for t in timer.times(fn, s.warmup, s.reps, flush=False)]
        rows.append({"kernel": "launch", "mode": mode, "launches": s.launches, **summary(times)})
        log(f"launch {mode}: {rows[-1]['median_s'] * 1e6:.2f} us")
    return rows


# ---------------------------------------------------------------------------------------------------- collectives


def group_sizes(world: int) -> list[int]:
    """Powers of two from 2 up to the world size, and the world size itself."""
    sizes = [n for n in (2**i for i in range(1, 16)) if n <= world]
    return sizes + ([world] if world not in sizes and world > 1 else [])


def collective_call(op: str, size: int, ranks: int, device: torch.device, rank_in_group: int, group, peer: int):
    """Buffers for one collective moving `size` bytes (nccl-tests "size") and the call that runs it."""
    import torch.distributed as dist

    elements = max(ranks, size // 4 // ranks * ranks)  # float32, divisible by the rank count
    if op == "all_reduce":
        buf = torch.ones(elements, device=device)
        return lambda: dist.all_reduce(buf, group=group)
    if op == "all_gather":
        out = torch.empty(elements, device=device)
        inp = torch.ones(elements // ranks, device=device)
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor  # renamed in newer PyTorch
        return lambda: gather(out, inp, group=group)
    if op == "reduce_scatter":
        inp = torch.ones(elements, device=device)
        out = torch.empty(elements // ranks, device=device)
        scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        return lambda: scatter(out, inp, group=group)
    if op == "all_to_all":
        inp = torch.ones(elements, device=device)
        out = torch.empty(elements, device=device)
        return lambda: dist.all_to_all_single(out, inp, group=group)
    buf = torch.ones(elements, device=device)
    if rank_in_group == 0:
        return lambda: dist.send(buf, dst=peer)
    return lambda: dist.recv(buf, src=peer)


def bench_collectives(timer: Timer, s: Sweep, ops: list[str], log: Callable[[str], None]) -> tuple[list[dict], list[dict]]:
    import torch.distributed as dist

    rank, world = dist.get_rank(), dist.get_world_size()
    local = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    rows, skipped = [], []
    layouts = [(list(range(n)), op) for n in group_sizes(world) for op in ops if op != "send_recv"]
    if "send_recv" in ops:
        layouts.append(([0, 1], "send_recv"))
        if world > local:
            layouts.append(([0, local], "send_recv"))  # the first GPU of the second node
    groups: dict[tuple[int, ...], object] = {}
    for members, op in layouts:
        key = tuple(members)
        if key not in groups:
            groups[key] = dist.new_group(list(members))  # every rank takes part in creating every group
        if rank not in members:
            dist.barrier()
            continue
        group, n = groups[key], len(members)
        nodes = len({m // local for m in members})
        index = members.index(rank)
        peer = members[1 - index] if op == "send_recv" else -1
        unsupported = None
        for size in s.collective_bytes:
            fn = collective_call(op, size, n, timer.device, index, group, peer)
            try:
                times = timer.times(fn, s.warmup, s.reps, flush=False, before=lambda g=group: dist.barrier(group=g))
            except (RuntimeError, NotImplementedError) as err:  # a backend without this collective (gloo)
                unsupported = str(err).splitlines()[0]
                break
            slowest = torch.tensor(times, device=timer.device)
            dist.all_reduce(slowest, op=dist.ReduceOp.MAX, group=group)
            rows.append({"kernel": op, "ranks": n, "nodes": nodes, "bytes": size, **summary(slowest.tolist())})
            if rank == 0:
                log(f"{op} {n} ranks {nodes} node(s) {size} B: {rows[-1]['median_s'] * 1e6:.1f} us")
        if unsupported is not None:
            skipped.append({"kernel": op, "ranks": n, "reason": f"{dist.get_backend()} backend: {unsupported}"})
        dist.barrier()
    return rows, skipped


# ---------------------------------------------------------------------------------------------------- the run


def nvidia_smi(query: str) -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader", "-i", "0"],
                             capture_output=True, text=True, timeout=20, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def describe_device(device: torch.device) -> dict:
    if device.type == "cuda":
        p = torch.cuda.get_device_properties(device)
        return {"type": "cuda", "name": p.name, "total_memory_bytes": p.total_memory, "sm_count": p.multi_processor_count,
                "compute_capability": f"{p.major}.{p.minor}", "l2_cache_bytes": getattr(p, "L2_cache_size", None),
                "clocks_mhz_sm_mem_max": nvidia_smi("clocks.max.sm,clocks.max.memory"),
                "power_limit_w": nvidia_smi("power.limit")}
    return {"type": "cpu", "name": platform.processor() or platform.machine(), "logical_cpus": os.cpu_count(),
            "torch_threads": torch.get_num_threads()}


def versions(device: torch.device) -> dict:
    found = {"python": platform.python_version(), "torch": torch.__version__, "platform": platform.platform()}
    if device.type == "cuda":
        nccl = torch.cuda.nccl.version() if hasattr(torch.cuda, "nccl") else None
        found |= {"cuda": torch.version.cuda, "hip": torch.version.hip, "nccl": ".".join(map(str, nccl)) if nccl else None,
                  "driver": nvidia_smi("driver_version")}
    return found


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Time GEMMs, attention, memory copies, launches and collectives; "
                                     "write one raw JSON file for `rlsim calibrate fit`.")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda" if torch.cuda.is_available() else "cpu",
                        help="where to run (default: cuda when available)")
    parser.add_argument("--quick", action="store_true", help="a few sizes per kernel: minutes on a GPU, seconds on a CPU")
    parser.add_argument("--out", default=None, help="raw JSON file to write (default: calibration-<host>-<device>.json)")
    parser.add_argument("--kernels", default=",".join(KERNELS),
                        help=f"comma-separated subset of: {', '.join(KERNELS)} (default: all that apply)")
    parser.add_argument("--dtypes", default=None,
                        help="GEMM dtypes, comma-separated from bf16, fp16, fp8 (default: bf16,fp16 and fp8 where supported)")
    parser.add_argument("--warmup", type=int, help="override the warm-up runs per point")
    parser.add_argument("--reps", type=int, help="override the timed repetitions per point")
    parser.add_argument("--flush-mib", type=int, help="cache-flush buffer, MiB (default: 256 on a GPU, 64 on a CPU, 16 quick)")
    parser.add_argument("--threads", type=int, default=1,
                        help="--device cpu: intra-op threads (default 1: one core, steadier on a shared machine)")
    parser.add_argument("--quiet", action="store_true", help="print nothing but the output path")
    args = parser.parse_args(argv)
    chosen = [k.strip() for k in args.kernels.split(",") if k.strip()]
    unknown = [k for k in chosen if k not in KERNELS]
    if unknown:
        parser.error(f"unknown kernel(s) {', '.join(unknown)}; valid: {', '.join(KERNELS)}")
    args.kernels = chosen
    if args.dtypes is not None:
        args.dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
        bad = [d for d in args.dtypes if d not in DTYPES]
        if bad:
            parser.error(f"unknown dtype(s) {', '.join(bad)}; valid: {', '.join(DTYPES)}")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: PyTorch sees no GPU here; use --device cpu")
    for name in ("warmup", "reps", "threads"):
        value = getattr(args, name)
        if value is not None and value < (0 if name == "warmup" else 1):
            parser.error(f"--{name} must be at least {0 if name == 'warmup' else 1}")
    if args.device == "cpu" and args.dtypes is None:
        args.dtypes = ["bf16"]  # CPUs without FP16 matrix units emulate it, far from any GPU's behaviour
    return args


def gemm_dtypes(args: argparse.Namespace, device: torch.device) -> tuple[list[str], list[dict]]:
    """The GEMM dtypes to time here, and the ones left out with the reason."""
    wanted = args.dtypes or ["bf16", "fp16", "fp8"]
    fp8_ok = (device.type == "cuda" and DTYPES["fp8"] is not None and hasattr(torch, "_scaled_mm")
              and torch.cuda.get_device_capability(device) >= (8, 9))
    skipped = [] if fp8_ok or "fp8" not in wanted else [
        {"kernel": "gemm", "dtype": "fp8", "reason": "FP8 tensor-core GEMMs need a GPU of compute capability 8.9 or newer"}]
    return [d for d in wanted if d != "fp8" or fp8_ok], skipped


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:
        import torch.distributed as dist

        dist.init_process_group(backend="nccl" if args.device == "cuda" else "gloo")
        rank = dist.get_rank()
    else:
        rank = 0
    if args.device == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
        torch.set_num_threads(args.threads)
    s = sweep(args.quick, args.device)
    if args.warmup is not None or args.reps is not None:
        s = dataclasses.replace(s, warmup=s.warmup if args.warmup is None else args.warmup, reps=args.reps or s.reps)
    flush_mib = args.flush_mib if args.flush_mib is not None else (256 if args.device == "cuda" else 16 if args.quick else 64)
    timer = Timer(device, flush_mib * MIB)

    def log(message: str) -> None:
        if not args.quiet and rank == 0:
            print(message, file=sys.stderr, flush=True)

    memory_budget = (torch.cuda.get_device_properties(device).total_memory // 4 if device.type == "cuda" else 2 * GIB)
    rows: list[dict] = []
    skipped: list[dict] = []
    started = time.perf_counter()
    if rank == 0:
        dtypes, skipped = gemm_dtypes(args, device)
        if "gemm" in args.kernels:
            rows += bench_gemm(timer, s, dtypes, memory_budget, log)
        attention_dtype = "bf16"
        if "attention_prefill" in args.kernels:
            rows += bench_prefill(timer, s, attention_dtype, log)
        if "attention_decode" in args.kernels:
            rows += bench_decode(timer, s, attention_dtype, memory_budget, log)
        if "hbm_copy" in args.kernels:
            rows += bench_copy(timer, s, memory_budget, log)
        if "host_copy" in args.kernels:
            if device.type == "cuda":
                rows += bench_host(timer, s, memory_budget, log)
            else:
                skipped.append({"kernel": "host_copy", "reason": "--device cpu: host and device memory are the same"})
        if "launch" in args.kernels:
            rows += bench_launch(timer, s, log)
    ops = [k for k in args.kernels if k in COLLECTIVES]
    world = {"size": 1, "local_size": 1, "nodes": 1, "backend": None}
    if distributed:
        import torch.distributed as dist

        dist.barrier()
        local = int(os.environ.get("LOCAL_WORLD_SIZE", dist.get_world_size()))
        world = {"size": dist.get_world_size(), "local_size": local, "nodes": -(-dist.get_world_size() // local),
                 "backend": dist.get_backend()}
        if ops:
            collective_rows, collective_skips = bench_collectives(timer, s, ops, log)
            rows += collective_rows if rank == 0 else []
            skipped += collective_skips if rank == 0 else []
    elif ops:
        skipped.append({"kernel": ",".join(ops), "reason": "one process: run under torchrun for collectives"})
    if rank == 0:
        out = args.out or f"calibration-{socket.gethostname()}-{args.device}.json"
        document = {
            "schema": SCHEMA,
            "origin": "measured",
            "created_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "host": socket.gethostname(),
            "mode": "quick" if args.quick else "full",
            "device": describe_device(device),
            "versions": versions(device),
            "world": world,
            "protocol": {"warmup": s.warmup, "reps": s.reps, "flush_bytes": flush_mib * MIB,
                         "statistic": "median, p10, p90 over reps; collectives: slowest rank per rep",
                         "timer": "cuda events" if device.type == "cuda" else "perf_counter"},
            "elapsed_s": round(time.perf_counter() - started, 3),
            "measurements": rows,
            "skipped": skipped,
        }
        with open(out, "w") as f:
            # One measurement per line, so an error in a row names its line.
            f.write(json.dumps({k: v for k, v in document.items() if k != "measurements"}, indent=1)[:-2])
            f.write(',\n "measurements": [\n')
            f.write(",\n".join("  " + json.dumps(r) for r in rows))
            f.write("\n ]\n}\n")
        print(out)
    if distributed:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
