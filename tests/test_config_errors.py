"""Malformed scenarios: each gives a ScenarioError naming file, line and field path, and the CLI exits 2 with no traceback."""
from __future__ import annotations

from pathlib import Path

import pytest

from rlsim.api import simulate
from rlsim.cli import main
from rlsim.config import load_scenario
from rlsim.errors import ScenarioError
from tests.scenario_text import VALID
from tests.sim_scenarios import bound


def edit(old: str, new: str) -> str:
    assert VALID.count(old) == 1, f"fixture text {old!r} must occur exactly once"
    return VALID.replace(old, new)


# (id, scenario text, expected field path, text on the line the error must point at, words the message must contain)
CASES = [
    ("unknown top-level key", VALID + "colour: blue\n", "colour", "colour: blue", ["unknown field"]),
    ("typo of a key", edit("  samples_per_prompt: 8", "  samples_per_promt: 8"), "algorithm.samples_per_promt",
     "samples_per_promt", ["samples_per_prompt"]),
    ("typo of a nested key", edit("    tp: 2\n  training", "    tpp: 2\n  training"), "placement.rollout.tpp",
     "tpp: 2", ["tp"]),
    ("wrong type: string for int", edit("      nodes: 2", "      nodes: two"), "cluster.pools[0].nodes",
     "nodes: two", ["integer"]),
    ("wrong type: bool for int", edit("  prompts_per_step: 32", "  prompts_per_step: true"),
     "algorithm.prompts_per_step", "prompts_per_step: true", ["integer"]),
    ("wrong type: float for int", edit("    gpus: 8\n    tp: 2", "    gpus: 8.5\n    tp: 2"),
     "placement.rollout.gpus", "gpus: 8.5", ["integer"]),
    ("negative count", edit("      nodes: 2", "      nodes: -1"), "cluster.pools[0].nodes", "nodes: -1", ["greater than 0"]),
    ("nodes that do not tile the scale-up domain", edit("      nodes: 2", "      nodes: 2\n      gpus_per_node: 6"),
     "cluster.pools[0].gpus_per_node", "gpus_per_node: 6", ["scale-up domains of 8", "divisor or a multiple"]),
    ("zero count", edit("  samples_per_prompt: 8", "  samples_per_prompt: 0"), "algorithm.samples_per_prompt",
     "samples_per_prompt: 0", ["greater than 0"]),
    ("negative seed", edit("seed: 3", "seed: -3"), "seed", "seed: -3", ["greater than or equal"]),
    ("fraction above one", edit("    tp: 2\n  training", "    tp: 2\n    gpu_memory_utilization: 1.5\n  training"),
     "placement.rollout.gpu_memory_utilization", "gpu_memory_utilization: 1.5", ["less than or equal"]),
    ("tp*pp*dp != gpus", edit("    tp: 1\n    zero_stage", "    tp: 1\n    dp: 3\n    zero_stage"),
     "placement.training.dp", "dp: 3", ["does not equal"]),
    ("training gpus not a multiple of tp*pp*cp", edit("    tp: 1\n    zero_stage", "    tp: 1\n    pp: 3\n    zero_stage"),
     "placement.training", "training:", ["multiple"]),
    # Qwen2.5-7B: 28 attention heads, 4 KV heads; tp 7 divides the first but not the second.
    ("training tp does not divide KV heads", edit("    gpus: 8\n    tp: 1", "    gpus: 7\n    tp: 7"),
     "placement.training.tp", "tp: 7", ["KV heads"]),
    ("rollout tp does not divide heads", edit("    gpus: 8\n    tp: 2", "    gpus: 9\n    tp: 3"),
     "placement.rollout.tp", "tp: 3", ["attention heads"]),
    ("unknown gpu with suggestion", edit("gpu: h100-sxm", "gpu: h100-sxn"), "cluster.pools[0].gpu", "gpu: h100-sxn",
     ["unknown GPU", "h100-sxm"]),
    ("unknown model with suggestion", edit("model: Qwen2.5-7B", "model: Qwen2.5-7C"), "model", "model: Qwen2.5-7C",
     ["unknown model", "Qwen2.5-7B"]),
    ("unknown algorithm name", edit("  name: grpo", "  name: grpoo"), "algorithm.name", "name: grpoo", ["grpo"]),
    ("unknown length model kind", edit("{kind: lognormal, median_tokens: 1000", "{kind: lognormale, median_tokens: 1000"),
     "workload.response_tokens", "  response_tokens:", ["lognormal"]),
    ("bad length-model parameter", edit("median_tokens: 1000, sigma: 0.8", "median_tokens: 1000, sigma: -0.8"),
     "workload.response_tokens.sigma", "  response_tokens:", ["greater than 0"]),
    ("bad parameter of a drift point's length model",
     edit("{kind: lognormal, median_tokens: 1000, sigma: 0.8}",
          "{kind: drift, points: [{step: 0, model: {kind: gamma, mean_tokens: 900}}]}"),
     "workload.response_tokens.points[0].model.shape", "  response_tokens:", ["missing"]),
    ("yaml syntax error", edit("  mini_batches: 2", "  mini_batches: [2"), "", "mini_batches: [2", ["YAML syntax"]),
    ("empty file", "", "", None, ["empty"]),
    ("list where a mapping belongs", edit("run:\n  steps: 2", "run:\n  - steps: 2"), "run", "run:", ["mapping"]),
    ("scalar where a mapping belongs", edit("    - name: main\n      gpu: h100-sxm\n      nodes: 2", "    - h100-sxm"),
     "cluster.pools[0]", "- h100-sxm", ["mapping"]),
    ("top level is a list", "- name: x\n", "", "- name: x", ["mapping"]),
    ("missing required section", edit("run:\n  steps: 2\n", "").replace("workload:\n", "workloads:\n"),
     "workload", None, ["missing"]),
    ("duplicate key", edit("seed: 3", "seed: 3\nseed: 4"), "seed", "seed: 4", ["duplicate"]),
    ("pools lack GPUs for the placement", edit("      nodes: 2", "      nodes: 1"), "cluster.pools[0].nodes",
     "nodes: 1", ["needs 16"]),
    ("placement names a missing pool", edit("    gpus: 8\n    tp: 1", "    gpus: 8\n    pool: spare\n    tp: 1"),
     "placement.training.pool", "pool: spare", ["no pool"]),
    ("mini-batches do not divide the batch", edit("  mini_batches: 2", "  mini_batches: 5"), "algorithm.mini_batches",
     "mini_batches: 5", ["equal mini-batches"]),
    ("expert parallelism on a dense model", edit("    gpus: 8\n    tp: 2", "    gpus: 8\n    tp: 2\n    ep: 2"),
     "placement.rollout.ep", "ep: 2", ["mixture-of-experts"]),
    ("async on colocated GPUs", edit("  mode: disaggregated", "  mode: colocated").replace("    gpus: 8\n    tp: 1", "    tp: 1"),
     "schedule.mode", "mode: one_step_off", ["colocated", "disaggregated"]),
    ("control character in the text", "name: x\x1f\n", "", "name: x", ["not allowed"]),
    ("staleness without async", edit("  mode: one_step_off", "  mode: one_step_off\n  max_staleness: 2"),
     "schedule.max_staleness", "max_staleness: 2", ["async"]),
    ("warm-up leaves no step", edit("  steps: 2", "  steps: 2\n  warmup_steps: 2"), "run.warmup_steps",
     "warmup_steps: 2", ["no measured step"]),
    ("unknown interconnect", edit("      nodes: 2", "      nodes: 2\n      inter_node: infiniband-ndrr"),
     "cluster.pools[0].inter_node", "inter_node: infiniband-ndrr", ["unknown"]),
    ("GRPO with one sample per prompt", edit("  samples_per_prompt: 8", "  samples_per_prompt: 1"),
     "algorithm.samples_per_prompt", "samples_per_prompt: 1", ["at least 2"]),
    ("offloading while generating on GPUs that do not generate",
     edit("    tp: 1\n    zero_stage", "    tp: 1\n    offload_while_generating: true\n    zero_stage"),
     "placement.training.offload_while_generating", "offload_while_generating: true", ["colocated"]),
    ("offloading the optimizer while generating on GPUs that do not generate",
     edit("    tp: 1\n    zero_stage", "    tp: 1\n    offload_while_generating: {optimizer: true}\n    zero_stage"),
     "placement.training.offload_while_generating", "offload_while_generating: {optimizer: true}", ["colocated"]),
    ("host memory for offloads on GPUs that offload nothing",
     edit("    tp: 1\n    zero_stage", "    tp: 1\n    offload_host_memory: {optimizer: pageable}\n    zero_stage"),
     "placement.training.offload_host_memory.optimizer", "offload_host_memory: {optimizer: pageable}",
     ["offloaded", "colocated"]),
    ("weights offloaded per call that never go to the host",
     edit("    tp: 1\n    zero_stage", "    tp: 1\n    offload_weights_per_call: true\n    zero_stage"),
     "placement.training.offload_weights_per_call", "offload_weights_per_call: true",
     ["offload_while_generating", "colocated"]),
    ("host memory that is neither pinned nor pageable",
     edit("    tp: 1\n    zero_stage", "    tp: 1\n    offload_host_memory: {optimizer: paged}\n    zero_stage"),
     "placement.training.offload_host_memory.optimizer", "offload_host_memory: {optimizer: paged}", ["pinned", "pageable"]),
    ("a log-prob kernel rlsim does not know",
     edit("    tp: 1\n    zero_stage", "    tp: 1\n    logprob_kernel: liger\n    zero_stage"),
     "placement.training.logprob_kernel", "logprob_kernel: liger", ["fused", "fp32_vocab_parallel", "fp32_unfused"]),
    ("a group cap both per engine and over the whole rollout",
     edit("  mode: one_step_off", "  mode: one_step_off\n  max_concurrent_groups_per_engine: 16\n  max_concurrent_groups: 512"),
     "schedule.max_concurrent_groups", "max_concurrent_groups: 512", ["per engine", "one of the two"]),
    ("an admission rule rlsim does not know",
     edit("    tp: 2\n  training", "    tp: 2\n    admission: oracle\n  training"), "placement.rollout.admission",
     "admission: oracle", ["current_kv", "past_future"]),
    ("past-future admission on static batches",
     edit("    tp: 2\n  training", "    tp: 2\n    engine: hf\n    admission: past_future\n  training"),
     "placement.rollout.admission", "admission: past_future", ["static batches", "current_kv"]),
    ("missing trace file", edit("{kind: lognormal, median_tokens: 1000, sigma: 0.8}", "{kind: trace, path: nowhere.jsonl}"),
     "workload.response_tokens.path", "  response_tokens:", ["no such"]),
]


@pytest.fixture
def write(tmp_path: Path):
    def _write(text: str) -> Path:
        path = tmp_path / "scenario.yaml"
        path.write_text(text, encoding="utf-8")
        return path
    return _write


def test_there_are_at_least_25_cases():
    assert len(CASES) >= 25


def test_valid_base_loads(write):
    scenario = load_scenario(write(VALID))
    assert scenario.placement.training.dp == 8


@pytest.mark.parametrize(("text", "path", "marker", "words"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_malformed_scenario_names_file_line_and_field(write, text, path, marker, words):
    file = write(text)
    with pytest.raises(ScenarioError) as caught:
        load_scenario(file)
    err = caught.value
    problem = next((p for p in err.problems if p.path == path), err.first)
    assert problem.file == str(file)
    assert problem.path == path, err.render()
    expected_line = 1 if marker is None else next(i for i, line in enumerate(text.splitlines(), 1) if marker in line)
    if marker is not None:
        assert problem.line == expected_line, err.render()
    else:
        assert problem.line is not None
    rendered = problem.render()
    for word in words:
        assert word in rendered, rendered


@pytest.mark.parametrize(("text", "path"), [c[1:3] for c in CASES], ids=[c[0] for c in CASES])
def test_cli_exits_2_without_traceback(write, capsys, text, path):
    file = write(text)
    assert main(["check", str(file)]) == 2
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    assert str(file) in captured.err
    first_line = captured.err.splitlines()[0]
    assert first_line.startswith(f"error: {file}:")
    if path:
        assert path in captured.err


def test_an_engine_spans_whole_scale_up_domains_or_fits_in_one():
    # R1-Distill-Qwen-1.5B: 12 heads, 2 KV heads, so tp 12 passes the head checks and meets the domain check alone.
    with pytest.raises(ScenarioError, match="span whole ones") as error:
        bound(model="R1-Distill-Qwen-1.5B", gpus=24, nodes=3, tp=12)
    assert "placement.rollout.tp" in str(error.value) and "a multiple of 8" in str(error.value)
    # TP16 over two 8-GPU nodes, as NeMo-RL runs vLLM for Qwen3-235B: two engines, each on 16 GPUs.
    result = simulate(bound(model="Llama-3.1-8B", gpus=32, nodes=4, tp=16, prompts=8, samples=8, steps=1).scenario)
    decoding = {(s.first_gpu, s.gpu_count) for s in result.log.spans if s.label == "decode"}
    assert decoding == {(0, 16), (16, 16)}
