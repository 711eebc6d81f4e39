"""Issue 35, safe YAML and files: inputs crafted to exhaust memory or time, or that are not text at all, are refused
with the file (and line) named before anything is built from them — never a traceback, a hang or a MemoryError."""
import gzip
import os
from pathlib import Path

import pytest

from rlsim.cli import main
from rlsim.errors import ScenarioError, TraceFormatError
from rlsim.traces import records
from rlsim.yamlsource import MAX_YAML_DEPTH, parse_yaml, read_text_file


def _refused(capsys, path: Path, words: str) -> None:
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and words in err and "Traceback" not in err


def test_a_billion_laughs_file_is_refused_by_what_it_expands_to(tmp_path, capsys):
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 9)]
    path = tmp_path / "laughs.yaml"
    path.write_text("\n".join(lines) + "\n")  # ~430 bytes, 9^9 values expanded
    _refused(capsys, path, "expands to more than")


def test_an_anchor_that_contains_itself_is_refused(tmp_path, capsys):
    path = tmp_path / "self.yaml"
    path.write_text("a: &a\n  - *a\n")
    _refused(capsys, path, "contains an alias of itself")


@pytest.mark.parametrize("text", ["x: " + "[" * 2000 + "]" * 2000,
                                  "x:\n" + "".join("  " * i + f"k{i}:\n" for i in range(1, 100)) + "  " * 100 + "1\n"])
def test_nesting_past_any_scenario_is_refused(tmp_path, capsys, text):
    path = tmp_path / "deep.yaml"
    path.write_text(text)
    _refused(capsys, path, "nested")


def test_a_nested_document_within_the_bound_is_read():
    text = "x:\n" + "".join("  " * i + f"k{i}:\n" for i in range(1, MAX_YAML_DEPTH - 1)) + "  " * MAX_YAML_DEPTH + "1\n"
    assert parse_yaml(text, "ok.yaml").data["x"]["k1"]


def test_binary_devices_and_huge_files_are_refused(tmp_path, capsys):
    binary = tmp_path / "scenario.yaml"
    binary.write_bytes(b"name: x\n\xff\xfe\x00\x01")
    _refused(capsys, binary, "not UTF-8 text")
    _refused(capsys, Path(os.devnull), "not a regular file")
    big = tmp_path / "big.yaml"
    big.write_bytes(b"#" * 2048)
    with pytest.raises(ScenarioError, match="larger than"):
        read_text_file(big, "a YAML file", max_bytes=1024)


def test_an_unreadable_file_names_itself(tmp_path, monkeypatch):
    path = tmp_path / "secret.yaml"
    path.write_text("name: x\n")

    def denied(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "open", denied)
    with pytest.raises(ScenarioError, match="permission denied") as err:
        read_text_file(path, "a YAML file")
    assert err.value.file == str(path)


def test_trace_files_that_are_not_json_lines_are_refused(tmp_path):
    binary = tmp_path / "packed_lengths_step_0.jsonl"
    binary.write_bytes(bytes(range(256)) * 8)
    truncated = tmp_path / "packed_lengths_step_1.jsonl.gz"
    truncated.write_bytes(gzip.compress(b'{"a": 1}\n' * 100)[:20])
    for path in (binary, truncated, Path(os.devnull)):
        with pytest.raises(TraceFormatError, match=str(path)):
            list(records(path))


@pytest.mark.parametrize(("record", "says"), [
    ('{"input": -5, "output": [10, 20]}', "'input' must be a prompt length"),
    ('{"input": 0, "output": [10]}', "'input' must be a prompt length"),
    ('{"input": 100, "output": [10, 0]}', "'output' must be a non-empty list"),
    ('{"input": 100, "output": [10, 100000000000]}', "'output' must be a non-empty list"),
    ('{"input": 100, "output": [true]}', "'output' must be a non-empty list"),
])
def test_a_packed_trace_with_impossible_lengths_is_refused_at_its_line(tmp_path, record, says):
    """A negative prompt or a zero-length response used to pass the reader and crash the run mid-way."""
    from rlsim.traces import read_packed

    trace = tmp_path / "packed_lengths_step_0.jsonl"
    trace.write_text('{"input": 100, "output": [10, 20]}\n' + record + "\n")
    with pytest.raises(TraceFormatError, match=f"{trace}:2: {says}"):
        read_packed(trace)


@pytest.mark.parametrize(("change", "says"), [
    ({"prompt_len": -1}, "'prompt_len' must be"), ({"turns": [{"turn": 0, "generation_prompt_len": 10,
                                                              "completion_tokens": 0}]}, "'completion_tokens' must be"),
    ({"tool_calls": [{"turn": 0, "latency_s": float("nan"), "append_len": 3}]}, "'latency_s' must be a finite"),
    ({"tool_calls": ["x"]}, "lists of objects"), ({"step": "one"}, "'step' missing or not a int"),
])
def test_a_multiturn_trace_with_impossible_values_is_refused_at_its_line(tmp_path, change, says):
    import json

    from rlsim.traces import read_multiturn

    good = {"step": 0, "prompt_group_id": 0, "sample_id": 0, "prompt_len": 50,
            "turns": [{"turn": 0, "generation_prompt_len": 50, "completion_tokens": 20}],
            "tool_calls": [{"turn": 0, "latency_s": 0.5, "append_len": 3}]}
    trace = tmp_path / "multiturn_workload_step_0.jsonl"
    trace.write_text(json.dumps(good) + "\n" + json.dumps({**good, **change}) + "\n")
    with pytest.raises(TraceFormatError, match=f"{trace}:2: .*{says}"):
        read_multiturn(trace)
