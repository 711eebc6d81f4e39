"""`rlsim check SCENARIO`: validate a scenario and print what it describes, with per-GPU memory and a fit verdict."""
from __future__ import annotations

import argparse
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

from rlsim.cli.exitcodes import INFEASIBLE, OK
from rlsim.cli.overrides import add_set_argument, parse_overrides

if TYPE_CHECKING:
    from rlsim.config.bound import Bound
    from rlsim.config.schema import Scenario
    from rlsim.costs.memory import RoleMemory


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("check", help="validate a scenario and summarise it",
                                   description="Validate a scenario file and print the cluster, the model with its "
                                   "derived sizes, the placement, and per-GPU memory of each role with a fit verdict.")
    parser.add_argument("scenario", type=Path, help="scenario YAML file")
    add_set_argument(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from rlsim.config import load_scenario
    from rlsim.config.bound import bind
    from rlsim.pricing.memory import memory_report

    # Recorded, to print among the summary's lines on stdout, the part of the output a user reads.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        scenario = load_scenario(args.scenario, parse_overrides(args.overrides))
    bound = bind(scenario)
    memory = memory_report(scenario, bound.model, {name: hw.gpu for name, hw in bound.pools.items()}, bound.reward_model)
    text = summary(bound, memory, source=str(args.scenario))
    print(text)
    if scenario.agents is not None:
        memory += _agents(scenario, text, source=str(args.scenario))
    if scenario.run.horizon is not None and all(role.fits for role in memory):
        print("\n".join(_long_run(bound)))
    for warning in caught:
        print(f"warning    {warning.message}")
    return OK if all(role.fits for role in memory) else INFEASIBLE


def _agents(scenario: Scenario, printed: str, *, source: str) -> list[RoleMemory]:
    """Each agent of a multi-agent scenario: its calls, then what its own model and placement change in the summary
    above (the first agent's are usually the scenario's), with its memory per GPU. Returns every agent's roles."""
    from rlsim.config.agents import agent_fields, agent_scenario, calls_per_trajectory
    from rlsim.config.bound import bind
    from rlsim.pricing.memory import memory_report

    assert scenario.agents is not None
    calls = calls_per_trajectory(scenario)
    print(f"agents     a trajectory calls {' → '.join(scenario.agents.turn_order)}")
    shown = set(printed.splitlines())
    roles = []
    for i, member in enumerate(scenario.agents.members):
        bound = bind(agent_scenario(scenario, i))
        memory = memory_report(bound.scenario, bound.model, {name: hw.gpu for name, hw in bound.pools.items()},
                               bound.reward_model)
        roles += memory
        own = [agent_fields(line, scenario, i) if "would fit with" in line else line
               for line in summary(bound, memory, source=source).splitlines()
               if line not in shown and not line.startswith("scenario")]
        print(f"agent {member.name}: {calls[member.name]} of {len(scenario.agents.turn_order)} calls, model "
              f"{bound.model.name}" + ("; model, placement and memory as above" if not own else ""))
        if own:
            print("\n".join(f"  {line}" for line in own))
    return roles


def summary(bound: Bound, memory: list[RoleMemory], *, source: str) -> str:
    from rlsim.config.run_length import RunLength, fill_steps, measured_window, short_warmup_warning
    from rlsim.config.schedule_kind import schedule_kind
    from rlsim.costs.memory import GIB
    from rlsim.pricing.layouts import engine_layout, engine_overheads
    from rlsim.pricing.precision import QUANTIZED, engine_precision

    s, spec = bound.scenario, bound.model
    arch = spec.architecture
    lines = [f"scenario   {s.name}  ({source}, seed {s.seed})"]
    for pool in s.cluster.pools:
        hw = bound.pools[pool.name]
        price = f", ${pool.price_usd_per_gpu_hour:.2f}/GPU-h" if pool.price_usd_per_gpu_hour else ""
        nics = f"{pool.nics_per_node} × {hw.inter_node.name} NICs per node" if hw.inter_node else "no scale-out network"
        lines.append(f"cluster    pool {pool.name}: {pool.nodes} node(s) × {pool.gpus_per_node} {hw.gpu.name} = "
                     f"{pool.gpus} GPUs; {hw.intra_node.name} inside a node, {nics}{price}")
    moe = ""
    if arch.moe is not None:
        moe = f", MoE {arch.moe.num_experts} experts top-{arch.moe.num_experts_per_tok}"
    lines.append(f"model      {spec.name}: {spec.total_params / 1e9:.2f} B parameters ({spec.active_params / 1e9:.2f} B "
                 f"active){moe}; {spec.forward_flops_per_token(0) / 1e9:.1f} GFLOP/token forward; KV cache "
                 f"{spec.kv_bytes_per_token / 1024:.1f} KiB/token ({s.placement.rollout.kv_cache_dtype.replace('auto', 'bf16')})")
    a = s.algorithm
    extras = ", ".join(name for name, on in (("reference model", a.ref_model), ("critic", a.critic)) if on) or "no ref, no critic"
    lines.append(f"algorithm  {a.name}: {a.prompts_per_step} prompts × {a.samples_per_prompt} samples = "
                 f"{a.samples_per_step} sequences/step in {a.mini_batches} mini-batch(es); {extras}; "
                 f"prompt ≤ {a.max_prompt_tokens}, response ≤ {a.max_response_tokens} tokens"
                 + (f", prompt + response ≤ {a.model_len}" if a.max_sequence_tokens is not None else ""))
    r, t = s.placement.rollout, s.placement.training
    lines.append(f"placement  {s.placement.mode}: rollout {r.gpus} GPUs on {r.pool} = {r.engines} {r.engine} engines × "
                 f"tp{r.tp}{f' ep{r.ep}' if r.ep > 1 else ''}; training {t.gpus} GPUs on {t.pool} = "
                 f"tp{t.tp} pp{t.pp} cp{t.cp} dp{t.dp}{f' ep{t.ep}' if t.ep > 1 else ''}, {t.backend} "
                 f"ZeRO-{t.zero_stage}, recompute {t.activation_recompute}"
                 + (f", LoRA rank {t.lora_rank} (adapters train and sync)" if t.lora_rank else "")
                 + (", FP8 GEMMs" if t.precision == "fp8" else ""))
    if r.prefill is not None:
        p = r.prefill
        lines.append(f"           prefill/decode disaggregated: prompts prefill on {p.gpus} GPUs on {p.pool} = "
                     f"{p.engines} prefill engines × tp{p.tp} (≤ {p.max_num_batched_tokens} tokens an iteration); "
                     f"the {r.engines} engines above only decode, fetching each KV cache "
                     f"({bound.model.kv_bytes_per_token / 1024:.1f} KiB/token) over the link between them")
    if r.engine == "hf":
        padded = "the longest prompt" if r.pad_prompts == "longest" else f"{a.max_prompt_tokens} prompt tokens"
        lines.append(f"           HF generate(): static batches of up to {r.max_num_seqs} rows, each padded to "
                     f"{padded} + {a.max_response_tokens} new tokens of contiguous KV cache, run eagerly; a batch "
                     "returns when its longest response ends")
    if r.speculative is not None:
        sp = r.speculative
        drafter = f" ({sp.draft_model})" if sp.draft_model else ""
        lines.append(f"           speculative decoding: {sp.method}{drafter}, {sp.num_speculative_tokens} drafted tokens, "
                     f"acceptance {sp.acceptance_rate:g}")
    if s.model.dtype in QUANTIZED:
        precision = engine_precision(bound.gpu(r.pool), s.model.dtype)
        lines.append(f"           rollout weights {s.model.dtype}: {precision.mode} quantized "
                     + ("(the GEMMs on its tensor cores)" if precision.quantized_rates is not None else
                        f"({bound.gpu(r.pool).name} has no {s.model.dtype} tensor cores: dequantized into 16-bit GEMMs)"))
    lines.extend(_role_groups(s))
    sched = s.schedule
    staleness = f" (max staleness {sched.max_staleness:g})" if schedule_kind(sched.mode).takes_max_staleness else ""
    lines.append(f"schedule   {sched.mode}{staleness}; load balancer {sched.load_balancer}; partial rollout "
                 f"{sched.partial_rollout.mode}; weight sync {sched.weight_sync.method}")
    lines.extend(_environment_lines(s))
    length = RunLength(s.run.steps, s.run.warmup_steps)
    warning = short_warmup_warning(length, fill_steps(sched), sched.mode)
    lines.append(f"run        {s.run.steps} step(s), measured over {measured_window(length)}"
                 + (f"\n  warning: {warning}" if warning else ""))
    f = bound.framework(s.placement.rollout.pool)  # as the engines' hosts run it
    overlap = "overlapped with the GPU" if f.overlaps(s.placement.rollout.engine) else "between GPU steps"
    graphs = (f"CUDA graphs up to {f.cuda_graph_max_tokens} tokens"
              if s.placement.rollout.cuda_graphs and s.placement.rollout.engine != "hf" else "no CUDA graphs")
    node = bound.gpu(s.placement.rollout.pool).node
    factors = (node.dispatch_time_factor, node.python_time_factor)
    host = (f" (the host's CPU takes {factors[0]:g}× an x86 host's time to launch ops, {factors[1]:g}× for Python)"
            if factors != (1, 1) else "")
    launch = (f"eager op {f.eager_op_cpu_s * 1e6:.3g} µs"
              if engine_overheads(f, engine_layout(s.placement.rollout)).launches_op_by_op
              else f"kernel launch {f.kernel_launch_s * 1e6:.3g} µs")
    lines.append(f"framework  engine CPU {f.engine_step_cpu_s * 1e3:.2g} ms per step, {overlap}; {launch}, "
                 f"gap {f.kernel_gap_s * 1e6:.2g} µs; {graphs}{host}")
    lines.append("memory per GPU (GiB)")
    for role in memory:
        verdict = "fits" if role.fits else "DOES NOT FIT"
        lines.append(f"  {role.role:<9} on {role.pool}: {role.total_bytes / GIB:.1f} of "
                     f"{role.capacity_bytes / GIB:.1f} GiB  {verdict}")
        lines.append("    " + " | ".join(f"{name} {value / GIB:.2f}" for name, value in role.components.items()))
        for note in role.notes:
            lines.append(f"    {note}")
        if not role.fits and role.hints:
            lines.append("    would fit with: " + "; ".join(role.hints))
    return "\n".join(lines)


def _latency_text(model) -> str:
    """A latency model in a few words: its kind and its median (or value)."""
    if model.kind == "fixed":
        return f"{model.seconds:g} s"
    if model.kind == "lognormal":
        return f"lognormal, median {model.median_s:g} s (σ {model.sigma:g})"
    return model.kind


def _environment_lines(s: Scenario) -> list[str]:
    """The multi-turn horizon's curriculum and the environment pool, as the simulation will run them."""
    lines = []
    multiturn = s.workload.multiturn
    if multiturn is not None and multiturn.max_turns is not None:
        steps = ", ".join(f"≤ {limit.turns} from step {limit.step}" for limit in multiturn.max_turns)
        lines.append(f"turns      at most: {steps} (trajectories past the limit end there, truncated)")
    pool = s.workload.environments
    if pool is None:
        return lines
    if pool.autoscaling is not None:
        scaling = pool.autoscaling
        size = (f"autoscaled {scaling.min_sandboxes}–{scaling.max_sandboxes} sandboxes (a start waits "
                f"{scaling.scale_up_delay_s:g} s for the autoscaler; idle ones above the floor stop after "
                f"{scaling.keep_alive_s:g} s)")
    else:
        size = f"{pool.sandboxes} sandboxes, all running the whole run"
    held = ("a trajectory claims one at its first tool call and holds it to its end; a fresh one then starts"
            if pool.scope == "trajectory" else "each tool-calling turn takes one, then frees it")
    cold = f"; cold start {_latency_text(pool.cold_start)}" if pool.cold_start is not None else ""
    cpu = ""
    if pool.cpu_seconds_per_call:
        cores = f" on {pool.cpu_cores} cores (calls wait for a free one)" if pool.cpu_cores else ""
        cpu = f"; {pool.cpu_seconds_per_call:g} CPU-s per call{cores}"
    price = f"; ${pool.usd_per_sandbox_hour:g} per sandbox-hour" if pool.usd_per_sandbox_hour else ""
    lines.append(f"sandboxes  {size}; {held}; calls queue first come first served when none is free{cold}{cpu}"
                 f"{price}")
    return lines


def _role_groups(s: Scenario) -> list[str]:
    """A line per role placed apart from the default (critic and reference on the actor's GPUs, a reward model on
    GPUs of its own): where it runs and with which layout."""
    lines = []
    for role in ("critic", "reference"):
        placed = getattr(s.placement, role)
        if placed is None:
            continue
        where = (f"on the {placed.share_with}'s {placed.gpus} GPUs, taking turns" if placed.share_with
                 else f"{placed.gpus} GPUs of its own on {placed.pool}")
        lines.append(f"           {role} {where} = tp{placed.tp} pp{placed.pp} cp{placed.cp} dp{placed.dp}, "
                     f"{placed.backend} ZeRO-{placed.zero_stage}")
    reward = s.placement.reward_model
    if reward is not None and reward.share_with is not None:
        lines.append(f"           reward model on the {reward.share_with}'s {reward.gpus} GPUs, taking turns, tp{reward.tp}")
    return lines


def _long_run(bound: Bound) -> list[str]:
    """The long run's costs around the estimated step (a run uses the simulated one)."""
    from rlsim.estimate import estimate_step
    from rlsim.metrics.long_run import LongRunFacts
    from rlsim.report.long_run_text import long_run_lines

    facts = LongRunFacts.from_bound(bound)
    assert facts is not None
    step = estimate_step(bound)
    return long_run_lines(facts, step.step_s, step.tokens_per_step, step.gpus, "the estimate's step")
