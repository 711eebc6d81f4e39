"""The wheel's build hook: compile the simulator's engine to C with mypyc, so that `pip install .` runs it about twice
as fast (docs/simulation.md, "What a step costs the simulator, and where"), with the same results byte for byte.

A standard wheel build compiles rlsim/compiled_engine.py's COMPILED_MODULES in a temporary folder (never in the source
tree) and adds the extension modules beside their .py sources; the wheel is then tagged for this Python and platform.
An editable build compiles nothing: an extension module beside a source file is what Python imports, so a compiled
module there would run instead of the source being edited. When mypy (which brings mypyc) or a C compiler is missing,
or the compile fails, the hook says so in one line and the wheel is pure Python; RLSIM_PURE_PYTHON=1 asks for that.
"""
from __future__ import annotations

import importlib.util
import os
import re
import runpy
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

PURE_PYTHON_VARIABLE = "RLSIM_PURE_PYTHON"
# What the compile needs in the build environment: mypyc comes with mypy (2.x compiles librt's vec operations to
# native code, which the engine's sample columns use; 2.4 is the version the wheel is built and tested with), and mypyc
# drives the C compiler through setuptools' build_ext.
COMPILE_REQUIREMENTS = ["mypy>=2.4", "setuptools>=61"]

# Run in a process of its own with the build environment's Python: mypyc type-checks the modules with the project's
# mypy settings (pyproject.toml), writes C into the scratch folder and has build_ext compile it there.
COMPILE = """
import sys
from setuptools import setup
from mypyc.build import mypycify
config, group, c_files, build_lib, build_temp, *modules = sys.argv[1:]
extensions = mypycify(["--config-file", config, *modules], opt_level="3", group_name=group, target_dir=c_files)
setup(name="rlsim-engine", py_modules=[], ext_modules=extensions,
      script_args=["build_ext", "--build-lib", build_lib, "--build-temp", build_temp])
"""


class NotCompiled(Exception):
    """Why the engine could not be compiled; the wheel is then pure Python."""


def pure_python_requested() -> bool:
    return os.environ.get(PURE_PYTHON_VARIABLE, "").strip().lower() not in ("", "0", "false", "no")


def compiled_module_list(root: Path) -> tuple[list[str], str]:
    """COMPILED_MODULES and GROUP_NAME from rlsim/compiled_engine.py, which the installed package reads too."""
    names = runpy.run_path(str(root / "rlsim" / "compiled_engine.py"))
    return list(names["COMPILED_MODULES"]), names["GROUP_NAME"]


def missing_tools() -> str | None:
    """What the compile would lack, said before trying it; None when mypyc and a C compiler are there."""
    if importlib.util.find_spec("mypyc") is None:
        return "mypy (which brings mypyc) is not installed in the build environment"
    # setuptools' build_ext takes $CC over the compiler Python was built with.
    compiler = shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")[0]
    if shutil.which(compiler) is None:
        return f"no C compiler ({compiler}) on PATH"
    return None


def compile_modules(root: Path, scratch: Path) -> list[Path]:
    """Compile the engine modules of the source tree at `root` inside `scratch`; the extension modules built, under
    scratch/lib laid out as in site-packages. Raises NotCompiled saying why not."""
    reason = missing_tools()
    if reason:
        raise NotCompiled(reason)
    modules, group = compiled_module_list(root)
    source = scratch / "src"
    shutil.copytree(root / "rlsim", source / "rlsim", ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.pyd"))
    lib = scratch / "lib"
    command = [sys.executable, "-c", COMPILE, str(root / "pyproject.toml"), group, str(scratch / "c"), str(lib),
               str(scratch / "temp"), *(str(source / module) for module in modules)]
    built = subprocess.run(command, cwd=scratch, capture_output=True, text=True)
    if built.returncode:
        raise NotCompiled(f"the compile failed: {last_error(built.stderr + built.stdout, built.returncode)}")
    extensions = sorted(path for path in lib.rglob("*") if path.is_file())
    if not extensions:
        raise NotCompiled("the compile produced no extension module")
    return extensions


def last_error(output: str, status: int) -> str:
    """The line of a failed compile's output that says what failed (mypy's or the compiler's last error), cut short."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if re.search(r"(^|: )error:", line, re.IGNORECASE)]
    line = (errors or lines or [f"exit status {status}"])[-1]
    return line if len(line) <= 300 else f"{line[:150]} ... {line[-145:]}"


class EngineBuildHook(BuildHookInterface):
    """Compiles the engine into a standard wheel; leaves editable builds and RLSIM_PURE_PYTHON=1 builds alone."""

    scratch: Path | None = None

    def dependencies(self) -> list[str]:
        # hatchling asks for these before an editable build too (it cannot say which build is coming), so only the
        # variable spares a build from installing them.
        return [] if pure_python_requested() else list(COMPILE_REQUIREMENTS)

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if version == "editable":
            return
        if pure_python_requested():
            self.app.display_warning(f"rlsim: building a pure-Python wheel, as {PURE_PYTHON_VARIABLE} asks")
            return
        self.scratch = Path(tempfile.mkdtemp(prefix="rlsim-engine-build-"))
        try:
            extensions = self.compile(Path(self.root), self.scratch)
        except (NotCompiled, OSError) as why:  # OSError: the scratch folder or the compiler's process
            self.app.display_warning(f"rlsim: building a pure-Python wheel, the engine is not compiled: {why}")
            self.remove_scratch()
            return
        lib = self.scratch / "lib"
        for path in extensions:
            build_data["force_include"][str(path)] = path.relative_to(lib).as_posix()
        build_data["pure_python"] = False
        build_data["infer_tag"] = True
        self.app.display_info(f"rlsim: compiled {len(extensions)} engine extension modules with mypyc")

    def compile(self, root: Path, scratch: Path) -> list[Path]:
        return compile_modules(root, scratch)

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        self.remove_scratch()

    def remove_scratch(self) -> None:
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)
            self.scratch = None
