"""The wheel's build hook (hatch_build.py): a standard build compiles the engine with mypyc or, when it cannot, says why
and builds pure Python; an editable build, and RLSIM_PURE_PYTHON=1, compile nothing. The source tree never holds a
compiled module, which would shadow the source being edited. The compile itself is tested in
test_compiled_wheel.py (slow, opt-in)."""
from __future__ import annotations

import importlib.util
import json
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import pytest

from rlsim.cli import main
from rlsim.compiled_engine import COMPILED_MODULES, engine_build

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = str(ROOT / "scenarios" / "quickstart.yaml")


def load_hook_module():
    pytest.importorskip("hatchling", reason="hatchling (the build backend, in the test extra) runs the hook")
    spec = importlib.util.spec_from_file_location("rlsim_hatch_build", ROOT / "hatch_build.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Messages:
    """Stands in for hatchling's Application: keeps what the hook displays."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def display_warning(self, message: str = "") -> None:
        self.lines.append(message)

    display_info = display_warning


def make_hook(module, compile_result):
    """The hook with the compile replaced by `compile_result` (extension paths to return, or an exception to raise),
    recording the calls it gets."""
    calls: list[Path] = []

    class Hook(module.EngineBuildHook):
        def compile(self, root: Path, scratch: Path) -> list[Path]:
            calls.append(scratch)
            if isinstance(compile_result, Exception):
                raise compile_result
            (scratch / "lib" / "rlsim").mkdir(parents=True)
            built = [scratch / "lib" / name for name in compile_result]
            for path in built:
                path.write_bytes(b"")
            return built

    messages = Messages()
    hook = Hook(str(ROOT), {}, None, None, "", "wheel", app=messages)
    return hook, calls, messages


def fresh_build_data() -> dict:
    return {"force_include": {}, "artifacts": [], "pure_python": True, "infer_tag": False}


def test_the_source_tree_holds_no_compiled_module():
    compiled = [path for suffix in (*EXTENSION_SUFFIXES, ".pyd") for path in (ROOT / "rlsim").rglob(f"*{suffix}")]
    assert compiled == []
    assert engine_build() == "interpreted"


def test_every_compiled_module_exists():
    assert [module for module in COMPILED_MODULES if not (ROOT / module).is_file()] == []


def test_an_editable_build_compiles_nothing(monkeypatch):
    monkeypatch.delenv("RLSIM_PURE_PYTHON", raising=False)
    hook, calls, messages = make_hook(load_hook_module(), ["rlsim/x.so"])
    build_data = fresh_build_data()
    hook.initialize("editable", build_data)
    assert calls == [] and build_data == fresh_build_data() and messages.lines == []


def test_a_standard_build_adds_the_compiled_modules_and_tags_the_wheel(monkeypatch):
    monkeypatch.delenv("RLSIM_PURE_PYTHON", raising=False)
    hook, calls, _ = make_hook(load_hook_module(), ["rlsim_engine__mypyc.so", "rlsim/engine.so"])
    build_data = fresh_build_data()
    hook.initialize("standard", build_data)
    assert len(calls) == 1
    assert sorted(build_data["force_include"].values()) == ["rlsim/engine.so", "rlsim_engine__mypyc.so"]
    assert all(Path(source).is_file() for source in build_data["force_include"])
    assert build_data["pure_python"] is False and build_data["infer_tag"] is True
    hook.finalize("standard", build_data, "")
    assert not calls[0].exists()  # the scratch folder is gone once the wheel is written


def test_a_failed_compile_builds_pure_python_and_says_why_in_one_line(monkeypatch):
    monkeypatch.delenv("RLSIM_PURE_PYTHON", raising=False)
    module = load_hook_module()
    hook, calls, messages = make_hook(module, module.NotCompiled("no C compiler (cc) on PATH"))
    build_data = fresh_build_data()
    hook.initialize("standard", build_data)
    assert len(calls) == 1 and build_data == fresh_build_data()
    assert len(messages.lines) == 1 and "pure-Python" in messages.lines[0] and "no C compiler" in messages.lines[0]
    assert not calls[0].exists()


def test_the_variable_asks_for_pure_python_and_no_compile_requirements(monkeypatch):
    monkeypatch.setenv("RLSIM_PURE_PYTHON", "1")
    module = load_hook_module()
    hook, calls, messages = make_hook(module, ["rlsim/x.so"])
    build_data = fresh_build_data()
    hook.initialize("standard", build_data)
    assert calls == [] and build_data == fresh_build_data() and "RLSIM_PURE_PYTHON" in messages.lines[0]
    assert hook.dependencies() == []
    monkeypatch.setenv("RLSIM_PURE_PYTHON", "0")
    assert any(requirement.startswith("mypy") for requirement in hook.dependencies())


def test_a_failed_compile_is_told_by_its_error_line():
    module = load_hook_module()
    output = ("gcc -O3 -Werror -c build/__native.c\n"
              "rlsim/sim/rollout.py:12: error: Incompatible return value type  [return-value]\nmore output\n")
    assert module.last_error(output, 1) == "rlsim/sim/rollout.py:12: error: Incompatible return value type  [return-value]"
    assert module.last_error("", 2) == "exit status 2"
    long = "error: command failed: " + "x" * 400 + " exit status 1"
    assert len(module.last_error(long, 1)) < 310 and module.last_error(long, 1).endswith("exit status 1")


def test_missing_tools_are_named_before_compiling(monkeypatch, tmp_path):
    module = load_hook_module()
    monkeypatch.setattr(module.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(module.NotCompiled, match="mypy"):
        module.compile_modules(ROOT, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_timing_json_says_how_the_engine_ran(tmp_path):
    assert main(["run", QUICKSTART, "--steps", "1", "--out", str(tmp_path / "run")]) == 0
    timing = json.loads((tmp_path / "run" / "timing.json").read_text())
    assert timing["engine"] == engine_build()
