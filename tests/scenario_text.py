"""A small valid scenario as YAML text, shared by the config tests (each test mutates a copy)."""

VALID = """\
name: test-scenario
seed: 3
cluster:
  pools:
    - name: main
      gpu: h100-sxm
      nodes: 2
model: Qwen2.5-7B
algorithm:
  name: grpo
  prompts_per_step: 32
  samples_per_prompt: 8
  mini_batches: 2
  max_prompt_tokens: 1024
  max_response_tokens: 4096
workload:
  prompt_tokens: {kind: lognormal, median_tokens: 200, sigma: 0.5}
  response_tokens: {kind: lognormal, median_tokens: 1000, sigma: 0.8}
  reward: {kind: rule, cpu_seconds_per_sample: 0.01, workers: 16}
placement:
  mode: disaggregated
  rollout:
    gpus: 8
    tp: 2
  training:
    gpus: 8
    tp: 1
    zero_stage: 3
schedule:
  mode: one_step_off
  load_balancer: round_robin
run:
  steps: 2
"""
