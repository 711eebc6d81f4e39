"""Small scenarios for simulator tests, written as YAML text so every test goes through the real loader."""
from __future__ import annotations

from rlsim.config import parse_scenario
from rlsim.config.bound import Bound, bind


def scenario_yaml(*, gpus: int = 8, nodes: int = 1, model: str = "Qwen2.5-0.5B", prompts: int = 8, samples: int = 4,
                  mini_batches: int = 1, steps: int = 2,
                  response: str | None = "{kind: lognormal, median_tokens: 200, sigma: 1.0}",
                  prompt: str | None = "{kind: fixed, tokens: 64}", max_response: int = 2048, mode: str = "colocated",
                  rollout_gpus: int | None = None, training_gpus: int | None = None, tp: int = 1,
                  schedule: str = "sync", staleness: float | None = None, partial: str = "off", over_provision: float = 1.0,
                  balancer: str = "round_robin", group_placement: str = "spread", dp_balance: str = "sorted_greedy",
                  dynamic_sampling: bool = False, informative: float = 1.0, seed: int = 0,
                  micro_batch_tokens: int = 8192, max_num_seqs: int = 256,
                  streaming: bool = False, every_updates: int | None = None, fetch: int = 1, workload: str = "",
                  placement: str = "",
                  algorithm: str = "grpo", group_cap: int | None = None, rollout_group_cap: int | None = None,
                  framework: str = "", engine: str = "vllm", prefill: str = "", long_tail: str = "",
                  rollout: str = "", predictor_noise: float = 0.0, agents: str = "") -> str:
    """`prompt` / `response` None leave those models out (replay, joint and multi-turn workloads); `workload` and
    `placement` are extra YAML lines under those sections, `framework` the fields of a framework section, `prefill`
    the fields of placement.rollout.prefill (prefill/decode disaggregation), `long_tail` the remedy's flow mapping,
    `rollout` more fields of placement.rollout (", admission: past_future"), `predictor_noise` the schedule's
    length_predictor_noise, `agents` the YAML of an agents section (a multi-agent run: a second pool of 8 GPUs,
    `second`, is added when it names it)."""
    rollout_gpus = rollout_gpus if rollout_gpus is not None else gpus
    training = f"gpus: {training_gpus}, " if training_gpus is not None else ""
    staleness_line = f"  max_staleness: {staleness}\n" if staleness is not None else ""
    cap_line = f"  max_concurrent_groups_per_engine: {group_cap}\n" if group_cap is not None else ""
    if rollout_group_cap is not None:
        cap_line += f"  max_concurrent_groups: {rollout_group_cap}\n"
    response_line = f"  response_tokens: {response}\n" if response is not None else ""
    prompt_line = f"  prompt_tokens: {prompt}\n" if prompt is not None else ""
    workload_lines = "".join(f"  {line}\n" for line in workload.splitlines() if line.strip())
    placement_lines = "".join(f"  {line}\n" for line in placement.splitlines() if line.strip())
    engine_field = f", engine: {engine}" if engine != "vllm" else ""
    if prefill:
        engine_field += f", prefill: {{{prefill}}}"
    sync_line = f"  weight_sync: {{every_updates: {every_updates}}}\n" if every_updates is not None else ""
    if long_tail:
        sync_line += f"  long_tail: {long_tail}\n"
    if predictor_noise:
        sync_line += f"  length_predictor_noise: {predictor_noise}\n"
    second_pool = ", {name: second, gpu: h100-sxm, nodes: 1, gpus_per_node: 8}" if "pool: second" in agents else ""
    return f"""
name: test
seed: {seed}
cluster: {{pools: [{{gpu: h100-sxm, nodes: {nodes}, gpus_per_node: {gpus // nodes}}}{second_pool}]}}
model: {model}
algorithm: {{name: {algorithm}, prompts_per_step: {prompts}, samples_per_prompt: {samples}, mini_batches: {mini_batches},
            max_prompt_tokens: 1024, max_response_tokens: {max_response}, dynamic_sampling: {str(dynamic_sampling).lower()}}}
workload:
{prompt_line}{response_line}  informative_group_fraction: {informative}
{workload_lines}placement:
  mode: {mode}
  rollout: {{gpus: {rollout_gpus}, tp: {tp}, gpu_memory_utilization: 0.5, max_num_seqs: {max_num_seqs}{engine_field}{rollout}}}
  training: {{{training}micro_batch_tokens: {micro_batch_tokens}}}
{placement_lines}
schedule:
  mode: {schedule}
{staleness_line}{cap_line}  partial_rollout: {{mode: {partial}, over_provision: {over_provision}}}
  load_balancer: {balancer}
  group_placement: {group_placement}
  dp_balance: {dp_balance}
  streaming: {str(streaming).lower()}
  fetch_mini_batches: {fetch}
{sync_line}run: {{steps: {steps}}}
{f"framework: {{{framework}}}" if framework else ""}
{agents}
"""


def bound(**kwargs) -> Bound:
    return bind(parse_scenario(scenario_yaml(**kwargs)))
