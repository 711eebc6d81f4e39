#!/usr/bin/env python3
"""Host cost of one `load_weights` call into an inference engine's model, timed on this machine's CPU.

vLLM's and SGLang's model classes start every `load_weights` call the same way (vLLM and SGLang
models/qwen2.py, qwen3_moe.py, ...): they rebuild `params_dict = dict(self.named_parameters())` over the whole
model, and an MoE model also rebuilds its expert mapping (`FusedMoE.make_expert_params_mapping`, one entry per
expert and checkpoint projection). A trainer that pushes weights tensor by tensor and loads each one on its own
(verl's per-tensor vLLM sync, verl/experimental/fully_async_policy/base_detach_sync.py) pays both once per tensor.

This script times the two on module trees with the layout of the engines' models (fused qkv_proj and gate_up_proj,
routed experts stacked in w13/w2, parameterless rotary, attention and activation modules) and prints the two rates
rlsim/costs/weight_sync.py uses: seconds per parameter tensor walked, and per expert-mapping entry built. It needs
PyTorch only (tensors on the meta device: nothing is allocated). Run it on the CPU of the nodes that run the engines.

    python calibration/loader_calls.py [--reps N] [--out FILE]
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable

import torch
from torch import nn

# (label, layers, MoE?, qkv bias?, experts): the shapes of the weight-sync measurements rlsim validates against.
TREES = [
    ("28 dense layers with qkv bias (Qwen2.5-7B)", 28, False, True, 0),
    ("48 MoE layers, 128 experts (Qwen3-30B-A3B)", 48, True, False, 128),
    ("94 MoE layers, 128 experts (Qwen3-235B-A22B)", 94, True, False, 128),
]
MAPPING_EXPERTS = [128, 256]
CALLS_PER_REP = 100


class _Params(nn.Module):
    """A module owning the named parameter tensors (meta device: shape-less, nothing allocated)."""

    def __init__(self, *names: str):
        super().__init__()
        for name in names:
            self.register_parameter(name, nn.Parameter(torch.empty(0, device="meta"), requires_grad=False))


def _layer(moe: bool, qkv_bias: bool) -> nn.Module:
    layer = nn.Module()
    layer.input_layernorm = _Params("weight")
    layer.post_attention_layernorm = _Params("weight")
    attention = nn.Module()
    attention.qkv_proj = _Params("weight", "bias") if qkv_bias else _Params("weight")
    attention.o_proj = _Params("weight")
    if moe:  # Qwen3 normalises queries and keys per head
        attention.q_norm = _Params("weight")
        attention.k_norm = _Params("weight")
    attention.rotary_emb = nn.Module()
    attention.attn = nn.Module()
    layer.self_attn = attention
    mlp = nn.Module()
    if moe:
        mlp.gate = _Params("weight")
        mlp.experts = _Params("w13_weight", "w2_weight")
    else:
        mlp.gate_up_proj = _Params("weight")
        mlp.down_proj = _Params("weight")
        mlp.act_fn = nn.Module()
    layer.mlp = mlp
    return layer


def engine_model(layers: int, moe: bool, qkv_bias: bool) -> nn.Module:
    model = nn.Module()
    model.model = nn.Module()
    model.model.embed_tokens = _Params("weight")
    model.model.layers = nn.ModuleList(_layer(moe, qkv_bias) for _ in range(layers))
    model.model.norm = _Params("weight")
    model.lm_head = _Params("weight")
    model.logits_processor = nn.Module()
    return model


def expert_mapping(experts: int) -> list[tuple[str, str, int, str]]:
    """The mapping's shape: per expert and checkpoint projection, (fused parameter prefix, checkpoint name, expert,
    shard), built from formatted strings as the engines build it."""
    projections = [("w1", "gate_proj"), ("w2", "down_proj"), ("w3", "up_proj")]
    return [("experts.w13_" if name != "down_proj" else "experts.w2_", f"experts.{expert}.{name}.", expert, shard)
            for expert in range(experts) for shard, name in projections]


def seconds_per_call(call: Callable[[], object], reps: int) -> float:
    """Median over `reps` repetitions of the mean time of CALLS_PER_REP back-to-back calls."""
    for _ in range(CALLS_PER_REP):  # warm-up
        call()
    times = []
    for _ in range(reps):
        began = time.perf_counter()
        for _ in range(CALLS_PER_REP):
            call()
        times.append((time.perf_counter() - began) / CALLS_PER_REP)
    return statistics.median(times)


def measure(reps: int) -> dict:
    walks = []
    for label, layers, moe, qkv_bias, _ in TREES:
        model = engine_model(layers, moe, qkv_bias)
        parameters = sum(1 for _ in model.named_parameters())
        modules = sum(1 for _ in model.modules())
        seconds = seconds_per_call(lambda m=model: dict(m.named_parameters()), reps)
        walks.append({"tree": label, "parameters": parameters, "modules": modules, "seconds": seconds,
                      "seconds_per_parameter": seconds / parameters})
    mappings = []
    for experts in MAPPING_EXPERTS:
        seconds = seconds_per_call(lambda e=experts: expert_mapping(e), reps)
        mappings.append({"experts": experts, "entries": 3 * experts, "seconds": seconds,
                         "seconds_per_entry": seconds / (3 * experts)})
    return {
        "schema": "rlsim-loader-calls/1",
        "host": platform.node(), "processor": platform.processor() or platform.machine(),
        "python": sys.version.split()[0], "torch": torch.__version__,
        "protocol": {"calls_per_rep": CALLS_PER_REP, "reps": reps, "statistic": "median of rep means"},
        "parameter_walk": walks,
        "expert_mapping": mappings,
        "seconds_per_parameter": statistics.mean(w["seconds_per_parameter"] for w in walks),
        "seconds_per_mapping_entry": statistics.mean(m["seconds_per_entry"] for m in mappings),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=15, help="timed repetitions per point (default 15)")
    parser.add_argument("--out", help="also write the results as JSON to this file")
    args = parser.parse_args(argv)
    if args.reps < 1:
        parser.error("--reps must be at least 1")
    result = measure(args.reps)
    for w in result["parameter_walk"]:
        print(f"dict(named_parameters()) over {w['tree']}: {w['parameters']} parameters, {w['modules']} modules, "
              f"{w['seconds'] * 1e6:.0f} us = {w['seconds_per_parameter'] * 1e6:.2f} us per parameter")
    for m in result["expert_mapping"]:
        print(f"expert mapping of {m['experts']} experts: {m['entries']} entries, {m['seconds'] * 1e6:.0f} us = "
              f"{m['seconds_per_entry'] * 1e6:.3f} us per entry")
    print(f"mean: {result['seconds_per_parameter'] * 1e6:.2f} us per parameter, "
          f"{result['seconds_per_mapping_entry'] * 1e6:.3f} us per mapping entry")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
