"""calibration/loader_calls.py, which times the host work an engine's `load_weights` call does before loading: its
module trees have the parameter layout rlsim counts for the engines, and it writes the rates weight_sync.py uses."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from rlsim.costs.weight_sync import engine_parameter_count
from rlsim.models.catalog import ModelCatalog

pytest.importorskip("torch", reason="PyTorch is not installed; the script builds torch modules: "
                    "pip install -e '.[calibration-test]'")

SCRIPT = Path(__file__).parents[1] / "calibration" / "loader_calls.py"


def _load_script():
    spec = importlib.util.spec_from_file_location("calibration_loader_calls", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


loader_calls = _load_script()


@pytest.mark.parametrize(("label", "layers", "moe", "qkv_bias", "experts"), loader_calls.TREES)
def test_each_tree_holds_the_parameters_rlsim_counts_for_its_model(label, layers, moe, qkv_bias, experts):
    model_name = label.rsplit("(", 1)[1].rstrip(")")
    spec = ModelCatalog.load().spec(model_name)
    tree = loader_calls.engine_model(layers, moe, qkv_bias)
    assert sum(1 for _ in tree.named_parameters()) == engine_parameter_count(spec)
    assert spec.architecture.num_hidden_layers == layers
    assert (spec.architecture.moe.num_experts if moe else 0) == experts


def test_the_expert_mapping_has_one_entry_per_expert_and_projection():
    mapping = loader_calls.expert_mapping(4)
    assert len(mapping) == 12
    assert ("experts.w2_", "experts.3.down_proj.", 3, "w2") in mapping
    assert sum(1 for prefix, *_ in mapping if prefix == "experts.w13_") == 8


def test_the_script_writes_its_rates(tmp_path):
    out = tmp_path / "loader.json"
    done = subprocess.run([sys.executable, str(SCRIPT), "--reps", "1", "--out", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    assert result["schema"] == "rlsim-loader-calls/1"
    assert [w["parameters"] for w in result["parameter_walk"]] == [199, 435, 849]
    assert result["seconds_per_parameter"] > 0 and result["seconds_per_mapping_entry"] > 0
    assert "us per parameter" in done.stdout


def test_a_bad_repetition_count_is_refused():
    done = subprocess.run([sys.executable, str(SCRIPT), "--reps", "0"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--reps must be at least 1" in done.stderr
