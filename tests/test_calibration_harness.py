"""The standalone harness (calibration/microbench.py) on the CPU: its arguments, kernel list and shapes, the JSON it
writes, the torchrun collective path on the gloo backend, and the loop raw JSON -> `rlsim calibrate fit` -> profile
-> `rlsim run`."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlsim.calibrate.fit import fit_raw
from rlsim.calibrate.raw import SCHEMA, CollectiveRow, GemmRow, load_raw
from rlsim.cli import main
from rlsim.costs.collectives import collective_time
from rlsim.costs.compute import GPURates
from rlsim.hardware import HardwareCatalog
from rlsim.models.catalog import ModelCatalog
from tests.test_calibration_fit import gpu_group

torch = pytest.importorskip("torch",
                            reason="PyTorch is not installed; the harness needs it: pip install -e '.[calibration-test]'")

ROOT = Path(__file__).parents[1]
HARNESS = ROOT / "calibration" / "microbench.py"
HARNESS_ENV = os.environ | {"OMP_NUM_THREADS": "1"}  # one thread per process on the 2-core CI machine


def _load_harness():
    spec = importlib.util.spec_from_file_location("calibration_microbench", HARNESS)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


bench = _load_harness()


def test_the_harness_imports_nothing_from_rlsim():
    source = HARNESS.read_text()
    assert "import rlsim" not in source and "from rlsim" not in source


def test_arguments_defaults_and_errors(capsys):
    args = bench.parse_args(["--device", "cpu", "--quick"])
    assert args.kernels == list(bench.KERNELS) and args.dtypes == ["bf16"] and args.threads == 1
    assert bench.parse_args(["--device", "cpu", "--kernels", "gemm,all_reduce"]).kernels == ["gemm", "all_reduce"]
    for bad in (["--kernels", "gemm,matmul"], ["--dtypes", "fp7"], ["--reps", "0"], ["--device", "tpu"]):
        with pytest.raises(SystemExit) as exit_:
            bench.parse_args(["--device", "cpu", *bad] if "--device" not in bad else bad)
        assert exit_.value.code == 2
    assert "matmul" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without a GPU")
def test_asking_for_a_gpu_without_one_is_a_clear_error(capsys):
    with pytest.raises(SystemExit) as exit_:
        bench.parse_args(["--device", "cuda"])
    assert exit_.value.code == 2 and "use --device cpu" in capsys.readouterr().err


def test_fp8_is_skipped_with_its_reason_where_there_are_no_fp8_tensor_cores():
    args = bench.parse_args(["--device", "cpu", "--dtypes", "bf16,fp8"])
    dtypes, skipped = bench.gemm_dtypes(args, torch.device("cpu"))
    assert dtypes == ["bf16"] and skipped[0]["dtype"] == "fp8" and "8.9" in skipped[0]["reason"]


def test_the_kernel_list_covers_the_protocol():
    assert set(bench.KERNELS) == {"gemm", "attention_prefill", "attention_decode", "hbm_copy", "host_copy", "launch",
                                  "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"}


def test_full_sweep_shapes_follow_the_reference():
    full = bench.sweep(quick=False, device="cuda")
    assert full.gemm_m[0] == 1 and full.gemm_m[-1] == 65536  # M from 1 to 64K in log steps
    assert full.gemm_squares == (1024, 2048, 4096, 8192, 16384)
    assert full.warmup >= 5 and full.reps >= 20
    assert min(c for _, c in full.decode) == 128 and max(c for _, c in full.decode) == 131072
    assert min(s for _, s in full.prefill) == 128 and max(s for _, s in full.prefill) == 32768
    assert full.copy_bytes[0] == 2**20 and full.copy_bytes[-1] == 8 * 2**30
    assert full.collective_bytes[0] == 1024 and full.collective_bytes[-1] == 8 * 2**30
    gemms = bench.plan_gemms(full, ["bf16", "fp8"])
    assert all(m % 16 == 0 for dtype, m, *_ in gemms if dtype == "fp8")
    assert len([g for g in gemms if g[0] == "bf16"]) == 17 * 16 + 5


@pytest.mark.parametrize("model", sorted(bench.CATALOG_GEMMS))
def test_embedded_shapes_match_the_model_catalog(model):
    arch = ModelCatalog.load().entry(model).architecture
    head_dim = arch.head_dim or arch.hidden_size // arch.num_attention_heads
    qkv = (arch.num_attention_heads + 2 * arch.num_key_value_heads) * head_dim
    expected = ((qkv, arch.hidden_size), (arch.hidden_size, arch.num_attention_heads * head_dim),
                (2 * arch.intermediate_size, arch.hidden_size), (arch.hidden_size, arch.intermediate_size))
    assert bench.CATALOG_GEMMS[model] == expected
    assert bench.CATALOG_ATTENTION[model] == (arch.num_attention_heads, arch.num_key_value_heads, head_dim)


def test_group_sizes_are_powers_of_two_and_the_world():
    assert bench.group_sizes(8) == [2, 4, 8]
    assert bench.group_sizes(12) == [2, 4, 8, 12]
    assert bench.group_sizes(1) == []


def test_percentiles():
    values = [float(v) for v in range(1, 12)]
    assert bench.percentile(values, 50) == 6.0
    assert bench.percentile(values, 10) == 2.0
    assert bench.summary([3.0, 1.0, 2.0])["median_s"] == 2.0


@pytest.fixture(scope="module")
def cpu_raw(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("raw") / "cpu.json"
    done = subprocess.run([sys.executable, str(HARNESS), "--device", "cpu", "--quick", "--quiet", "--out", str(out)],
                          capture_output=True, text=True, timeout=300, env=HARNESS_ENV, cwd=out.parent)
    assert done.returncode == 0, done.stderr
    return out


def test_cpu_quick_run_writes_the_raw_schema(cpu_raw):
    document = json.loads(cpu_raw.read_text())
    assert document["schema"] == SCHEMA and document["origin"] == "measured" and document["mode"] == "quick"
    assert document["device"]["type"] == "cpu" and document["versions"]["torch"] == torch.__version__
    assert document["protocol"]["reps"] >= 5
    kinds = {row["kernel"] for row in document["measurements"]}
    assert kinds == {"gemm", "attention_prefill", "attention_decode", "hbm_copy", "launch"}
    skipped = {s["kernel"] for s in document["skipped"]}
    assert "host_copy" in skipped  # no separate device memory on the CPU: said, not silently dropped
    for row in document["measurements"]:
        assert 0 < row["p10_s"] <= row["median_s"] <= row["p90_s"]
    raw = load_raw(cpu_raw)  # rlsim's schema accepts the harness's file
    assert sum(isinstance(r, GemmRow) for r in raw.measurements) == len(bench.plan_gemms(bench.sweep(True, "cpu"), ["bf16"]))
    # One measurement per line, so an error in a row points at its line.
    lines = cpu_raw.read_text().splitlines()
    assert sum(line.strip().startswith('{"kernel"') for line in lines) == len(document["measurements"])


def test_fit_turns_cpu_measurements_into_a_profile_that_drives_rlsim_run(cpu_raw, tmp_path, capsys):
    profile = tmp_path / "profiles" / "cpu-lab.yaml"
    assert main(["calibrate", "fit", str(cpu_raw), "--base", "h100-sxm", "--out", str(profile)]) == 0
    out = capsys.readouterr().out
    for curve in ("gemm bf16", "attention prefill", "hbm copy", "decode attention"):
        line = next(line for line in out.splitlines() if line.startswith(curve))
        assert line.rstrip().endswith("%")  # held-out and in-sample MAPE reported for every fit
    fits = fit_raw(load_raw(cpu_raw), str(cpu_raw), GPURates.from_profile(HardwareCatalog.load().gpu("h100-sxm")))
    for fit in fits.all():  # honest: error on points each fit did not see, never better than on those it did
        assert fit.held_out_mape is not None and fit.held_out_mape >= 0.9 * fit.in_sample_mape
    gpu = HardwareCatalog.load([profile.parent]).gpu("cpu-lab")
    assert gpu.calibration.origin == "measured" and gpu.calibration.gemm[0].dtype == "bf16"
    # A CPU is far slower than the H100 it was fitted over: the profile carries the CPU's rates, not the spec sheet's.
    assert gpu.measured.gemm_bf16_tflops.value < 5 and gpu.measured.hbm_stream_tbps.value < 1
    run_dir = tmp_path / "run"
    code = main(["run", str(ROOT / "scenarios" / "quickstart.yaml"), "--steps", "1", "--out", str(run_dir),
                 "--set", f"cluster.profile_dirs=[{profile.parent}]", "--set", "cluster.pools[0].gpu=cpu-lab", "--json"])
    assert code == 0
    metrics = json.loads(capsys.readouterr().out)
    assert metrics["pools"]["main"]["gpu"] == "cpu-lab"
    assert (run_dir / "metrics.json").is_file()
    assert main(["run", str(ROOT / "scenarios" / "quickstart.yaml"), "--steps", "1", "--out", str(tmp_path / "plain"),
                 "--json"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert metrics["step_time_s"]["mean"] > 10 * plain["step_time_s"]["mean"]


def test_torchrun_collectives_on_gloo_become_link_curves(tmp_path, capsys):
    out = tmp_path / "node.json"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
               str(HARNESS), "--device", "cpu", "--quick", "--quiet", "--reps", "5", "--warmup", "1",
               "--kernels", ",".join(bench.COLLECTIVES), "--out", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=HARNESS_ENV, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    raw = load_raw(out)
    assert raw.world["size"] == 2 and raw.world["backend"] == "gloo"
    rows = [r for r in raw.measurements if isinstance(r, CollectiveRow)]
    assert {r.kernel for r in rows} == set(bench.COLLECTIVES)
    assert all(r.ranks == 2 and r.nodes == 1 for r in rows)
    assert len(rows) == len(bench.COLLECTIVES) * len(bench.sweep(True, "cpu").collective_bytes)

    profile = tmp_path / "profiles" / "gloo-pair.yaml"
    assert main(["calibrate", "fit", str(out), "--base", "h100-sxm", "--out", str(profile)]) == 0
    printed = capsys.readouterr().out
    # On a busy 2-core machine a curve whose times do not grow with size is named and left out, never written.
    unfitted = printed.count("not fitted (left out of the profile)")
    link = HardwareCatalog.load([profile.parent]).links("gloo-pair").scale_up
    assert link.name == "gloo-pair-nvlink4" and len(link.calibration.collectives) == len(bench.COLLECTIVES) - unfitted
    curve = link.calibration.collectives[0]
    assert f"{curve.op} 2 ranks 1 node(s)" in printed
    cost = collective_time(curve.op, 2**20, gpu_group("gloo-pair", 2, profile.parent))
    assert cost.algorithm == "calibrated"
    measured = [r.median_s for r in rows if r.kernel == curve.op and r.bytes == 2**20][0]
    assert 0.2 < cost.seconds / measured < 5  # the α–β curve lands near the measured point (gloo on a busy CPU)
