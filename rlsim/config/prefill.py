"""Prefill/decode disaggregation of the rollout (`placement.rollout.prefill`): the prefill engines' pool resolved, and
the checks that name the field at fault when the rest of the scenario cannot run with them."""
from __future__ import annotations

from collections.abc import Callable

from rlsim.config.schema import Placement, Scenario
from rlsim.hardware import HardwareCatalog
from rlsim.models import ModelSpec
from rlsim.yamlsource import PathKey

Fail = Callable[..., None]  # the checker's fail(path, message, *, value=None, valid=None)
PoolName = Callable[[PathKey, str | None, str], str]  # (path, name as written, default) -> a pool that exists
AT: PathKey = ("placement", "rollout", "prefill")


def resolve_prefill(placement: Placement, pool_name: PoolName) -> Placement:
    """The prefill engines' pool: as written, or the (decode) rollout engines' pool."""
    prefill, rollout = placement.rollout.prefill, placement.rollout
    if prefill is None:
        return placement
    assert rollout.pool is not None
    resolved = prefill.model_copy(update={"pool": pool_name(AT + ("pool",), prefill.pool, rollout.pool)})
    return placement.model_copy(update={"rollout": rollout.model_copy(update={"prefill": resolved})})


def prefill_gpus(placement: Placement) -> tuple[str, int] | None:
    """(pool, GPUs) of the prefill engines, GPUs of their own; None without prefill/decode disaggregation."""
    prefill = placement.rollout.prefill
    if prefill is None or prefill.pool is None:
        return None
    return prefill.pool, prefill.gpus


def check_prefill(scenario: Scenario, spec: ModelSpec, hardware: HardwareCatalog, fail: Fail) -> None:
    """What prefill engines need of the rest of the scenario: a placement whose rollout GPUs are their own, engines
    that batch continuously, no drafter, whole engines whose TP splits the model, and no trajectory that keeps its
    decode slot through its tool calls."""
    placement = scenario.placement
    prefill = placement.rollout.prefill
    if prefill is None:
        return
    if placement.mode != "disaggregated":
        # Colocated and hybrid engines sleep (or pause and recompute) while training runs on their GPUs; prefill
        # engines on GPUs of their own would idle through every training phase and need a second weight path beside
        # the colocated reshard, so the P/D split only pays where the engines have GPUs of their own.
        fail(AT, f"prefill engines need rollout GPUs of their own; a {placement.mode} placement shares them with "
             "training, which the engines sleep through", value=placement.mode,
             valid="placement.mode: disaggregated, or leave prefill out")
    if placement.rollout.engine == "hf":
        fail(AT, "Hugging Face generate() prefills and decodes each static batch in one process; it has no KV "
             "connector to ship a prompt's cache elsewhere", value="engine hf", valid="engine vllm or sglang")
    if placement.rollout.scheduling_policy != "fcfs":
        fail(("placement", "rollout", "scheduling_policy"), "with prefill engines a rollout reaches its decode engine's "
             "queue when a prefill engine, first come, first served, is done with it; a priority over both is not "
             "modelled", value=placement.rollout.scheduling_policy, valid="fcfs, or leave placement.rollout.prefill out")
    if placement.rollout.speculative is not None:
        fail(("placement", "rollout", "speculative"), "with prefill engines the drafter's KV cache of every prompt "
             "would have to be prefilled and shipped too, which rlsim does not price",
             value=placement.rollout.speculative.method, valid="null, or leave placement.rollout.prefill out")
    if prefill.gpus % prefill.tp:
        fail(AT + ("gpus",), f"prefill GPUs must be whole engines of tp={prefill.tp}", value=prefill.gpus,
             valid=f"a multiple of {prefill.tp}")
    arch = spec.architecture
    heads, kv_heads = arch.num_attention_heads, arch.num_key_value_heads
    if heads % prefill.tp or (kv_heads % prefill.tp and prefill.tp % kv_heads):
        fail(AT + ("tp",), f"tp must divide the {heads} attention heads, and divide the {kv_heads} KV heads or be a "
             "multiple of them", value=prefill.tp, valid=f"a divisor of {heads} that splits {kv_heads} KV heads")
    pool = scenario.cluster.pool(prefill.pool or "")
    gpu = hardware.gpu(pool.gpu)
    domain = gpu.scale_up.domain_gpus.value if gpu.scale_up else pool.gpus_per_node
    if domain is not None and prefill.tp > domain and prefill.tp % domain:
        fail(AT + ("tp",), f"a prefill engine's tp group must fit in one scale-up domain of {domain} GPUs or span "
             "whole ones", value=prefill.tp, valid=f"≤ {domain}, or a multiple of {domain}")
    workload = scenario.workload
    if workload.tool_wait == "hold" and (workload.multiturn is not None or workload.replay is not None):
        # vLLM's P/D proxy sends every turn to a prefill instance first (a new request each turn), and the decode
        # side fetches only the blocks its prefix cache lacks; nothing keeps a decode slot through a tool call.
        fail(("workload", "tool_wait"), "with prefill engines each turn of a trajectory is a new request prefilled "
             "there, so it cannot hold its decode slot through its tool calls", value="hold",
             valid="release (the context stays in the decode engine's prefix cache; only what was evicted is "
             "fetched again)")
