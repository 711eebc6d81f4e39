"""Fitting (`rlsim calibrate fit`), the cost models' use of calibrated curves, the shipped calibrations built from
published measurements, and bad input."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml

from rlsim.api import load_scenario, simulate, with_
from rlsim.calibrate.fit import Prior, Sample, fit_curve, fit_raw
from rlsim.calibrate.raw import RawFile, load_raw
from rlsim.cli import main
from rlsim.config.bound import bind
from rlsim.costs.collectives import bus_factor, collective_time
from rlsim.costs.compute import GEMM_FILL_S, MEMORY_HALF_BYTES, GPURates
from rlsim.costs.rollout import EngineCosts
from rlsim.errors import ScenarioError
from rlsim.hardware import HardwareCatalog
from rlsim.models import ModelCatalog
from rlsim.topology import ClusterTopology

ROOT = Path(__file__).parents[1]
PUBLISHED = sorted((ROOT / "calibration" / "published").glob("*.yaml"))
QUICKSTART = ROOT / "scenarios" / "quickstart.yaml"


def gpu_group(gpu: str, count: int, profile_dir: Path | None = None):
    """The communicator over the first `count` GPUs of a one-node pool of `gpu`."""
    changes = {"cluster.pools[0].gpu": gpu, **({"cluster.profile_dirs": [str(profile_dir)]} if profile_dir else {})}
    topology = ClusterTopology.build(bind(with_(load_scenario(QUICKSTART), changes)))
    return topology.group(topology.allocate("main", count))


# ------------------------------------------------------------------------------------------- recovering parameters


def _noisy(rng: np.random.Generator, seconds: np.ndarray, noise: float) -> np.ndarray:
    return seconds * rng.lognormal(0.0, noise, size=seconds.shape)


@pytest.mark.parametrize("seed", range(5))
def test_an_affine_curve_is_recovered_within_2_percent_from_noisy_points(seed):
    rng = np.random.default_rng(seed)
    fixed, rate = 7e-6, 450e9
    sizes = np.geomspace(1e3, 8e9, 24)
    seconds = _noisy(rng, fixed + sizes / rate, 0.01)
    fit = fit_curve("synthetic", [Sample(x, t, "p", "synthetic") for x, t in zip(sizes, seconds, strict=True)], Prior())
    assert fit.fixed_s == pytest.approx(fixed, rel=0.02)
    assert fit.rate == pytest.approx(rate, rel=0.02)
    assert fit.held_out_mape < 0.02
    # Leave-one-out error is an honest estimate: never below the error on the points the fit saw.
    assert fit.held_out_mape >= fit.in_sample_mape


def _synthetic_raw(rng: np.random.Generator, rates: GPURates, truth: dict[str, float], noise: float) -> RawFile:
    """A raw file whose times come from the cost models' own forms with known parameters, plus noise."""
    rows = []
    shapes = [(m, n, k) for m in (16, 64, 256, 1024, 4096, 16384) for n, k in ((4096, 4096), (14336, 4096), (4096, 14336))]
    shapes += [(d, d, d) for d in (1024, 1280, 1536, 2048, 2560, 3072, 4096, 6144, 8192)]
    for m, n, k in shapes:
        padded = GPURates(rates.name, rates.peak_flops, 1.0, 1.0, 1.0, rates.sm_count).gemm_compute_seconds(m, n, k)
        memory = 2 * (m * k + n * k + m * n) / truth["hbm_bytes_per_s"]
        t = truth["gemm_fill_s"] + max(padded / truth["gemm_flops"], memory)
        rows.append({"kernel": "gemm", "dtype": "bf16", "m": m, "n": n, "k": k, "median_s": t,
                     "label": "memory-bound" if memory > padded / truth["gemm_flops"] else "compute-bound"})
    for size in np.geomspace(2**16, 2**33, 18):
        rows.append({"kernel": "hbm_copy", "bytes": float(size),
                     "median_s": (size + truth["hbm_half_bytes"]) / truth["hbm_bytes_per_s"]})
    for size in np.geomspace(2**10, 2**33, 20):
        t = truth["alpha_s"] + size * bus_factor("all_reduce", 8) / truth["busbw"]
        rows.append({"kernel": "all_reduce", "ranks": 8, "nodes": 1, "bytes": float(size), "median_s": t})
    for row in rows:
        row["median_s"] = float(_noisy(rng, np.array(row["median_s"]), noise))
    return RawFile.model_validate({"schema": "rlsim-calibration-raw/1", "origin": "measured", "mode": "full",
                                   "device": {"type": "synthetic"}, "measurements": rows})


@pytest.mark.parametrize("seed", range(3))
def test_fit_raw_recovers_the_parameters_of_every_curve_within_2_percent(seed):
    rates = GPURates.from_profile(HardwareCatalog.load().gpu("h100-sxm"))
    truth = {"gemm_fill_s": GEMM_FILL_S, "gemm_flops": 700e12, "hbm_half_bytes": 5e6, "hbm_bytes_per_s": 2.8e12,
             "alpha_s": 30e-6, "busbw": 420e9}
    raw = _synthetic_raw(np.random.default_rng(seed), rates, truth, 0.01)
    fits = fit_raw(raw, "synthetic.json", rates)
    memory_bound = sum(r.label == "memory-bound" for r in raw.measurements)
    assert memory_bound >= 3 and fits.gemm["bf16"].excluded == memory_bound  # the memory curve prices those
    assert fits.gemm["bf16"].fixed_s == GEMM_FILL_S  # the cost model's one fill, held (see rlsim.costs.compute)
    assert fits.gemm["bf16"].rate == pytest.approx(truth["gemm_flops"], rel=0.02)
    assert fits.hbm.rate == pytest.approx(truth["hbm_bytes_per_s"], rel=0.02)
    assert fits.hbm.fixed_s * fits.hbm.rate == pytest.approx(truth["hbm_half_bytes"], rel=0.02)
    reduce = fits.collectives[("all_reduce", 8, 1)]
    assert reduce.fixed_s == pytest.approx(truth["alpha_s"], rel=0.02)
    assert reduce.rate == pytest.approx(truth["busbw"], rel=0.02)
    for fit in fits.all():
        assert fit.held_out_mape is not None and fit.held_out_mape < 0.03


def test_noise_free_points_fit_exactly_and_a_single_size_falls_back_to_the_prior():
    exact = fit_curve("exact", [Sample(x, 2e-6 + x / 1e9, "p", "s") for x in (1e3, 1e5, 1e7)], Prior())
    assert exact.held_out_mape == pytest.approx(0.0, abs=1e-9)
    single = fit_curve("one size", [Sample(1e8, 0.05, "p", "s"), Sample(1e8, 0.051, "p", "s")],
                       Prior(half_size=MEMORY_HALF_BYTES))
    assert single.fixed_from_prior and single.fixed_s * single.rate == pytest.approx(MEMORY_HALF_BYTES)
    with pytest.raises(ScenarioError, match="do not grow with size"):
        fit_curve("flat", [Sample(x, 1e-3 / x, "p", "s") for x in (1.0, 10.0, 100.0)], Prior())


def test_memory_bound_gemms_are_left_to_the_memory_curve():
    raw = load_raw(ROOT / "calibration" / "published" / "h100-sxm.yaml")
    fits = fit_raw(raw, "h100", GPURates.from_profile(HardwareCatalog.load().gpu("h100-sxm")))
    # 802816x192x768 in FP8 moves ~0.9 GB for 0.24 TFLOP: its bytes take longer than its work at the fitted rate.
    assert fits.gemm["fp8"].excluded == 1
    assert all("802816" not in s.label for s in fits.gemm["fp8"].samples)


# ------------------------------------------------------------------------------------------- cost models


def test_calibrated_rates_replace_the_spec_defaults():
    catalog = HardwareCatalog.load()
    gpu = catalog.gpu("h100-sxm-published")
    cal = gpu.calibration
    fp8 = GPURates.from_profile(gpu, "fp8")
    assert fp8.gemm_flops == pytest.approx(cal.gemm_curve("fp8").tflops.value * 1e12)
    assert cal.gemm_curve("fp8").fixed_us.value * 1e-6 == pytest.approx(GEMM_FILL_S)  # held at the model's fill
    assert fp8.hbm_bytes_per_s == pytest.approx(cal.hbm.gbyte_per_s.value * 1e9)
    bf16 = GPURates.from_profile(gpu, "bf16")  # no BF16 curve: the measured BF16 rate
    assert bf16.gemm_flops == GPURates.from_profile(catalog.gpu("h100-sxm"), "bf16").gemm_flops
    assert bf16.memory_half_bytes == pytest.approx(cal.hbm.fixed_us.value * 1e-6 * cal.hbm.gbyte_per_s.value * 1e9)
    plain = GPURates.from_profile(catalog.gpu("h100-sxm"), "bf16")
    assert (plain.memory_half_bytes, plain.fused_attention_flops) == (MEMORY_HALF_BYTES, None)


def test_fast_and_exact_rollout_agree_with_a_calibrated_profile():
    scenario = with_(load_scenario(QUICKSTART), {"run.steps": 1, "run.warmup_steps": 0, "algorithm.prompts_per_step": 8,
                                                 "cluster.pools[0].gpu": "h100-sxm-published"})
    fast, exact = simulate(scenario), simulate(scenario, mode="exact")
    assert fast.log.steps[-1].stages["gen"] == pytest.approx(exact.log.steps[-1].stages["gen"], rel=1e-9)


def test_collectives_use_the_curve_measured_for_that_group_only():
    group = gpu_group("h100-sxm-published", 8)
    curve = group.scale_up.calibration.curve("all_reduce", 8, 1)
    factor = bus_factor("all_reduce", 8)
    # At a measured size: the measurement (nccl-tests' 1G row, busbw 466.35 GB/s).
    cost = collective_time("all_reduce", 2**30, group)
    assert cost.algorithm == "calibrated" and cost.bus_bandwidth == pytest.approx(466.35e9, rel=1e-4)
    # Between two measured sizes: log-log interpolation, so between their times.
    between = collective_time("all_reduce", 3 * 2**20, group).seconds
    assert collective_time("all_reduce", 2**21, group).seconds < between < collective_time("all_reduce", 2**22, group).seconds
    # Beyond the largest: the largest point scaled by the α–β fit, continuous at the edge.
    edge = collective_time("all_reduce", 8 * 2**30, group).seconds
    beyond = collective_time("all_reduce", 16 * 2**30, group).seconds
    alpha, busbw = curve.fixed_us.value * 1e-6, curve.busbw_gbyte_per_s.value * 1e9
    alpha_beta = [alpha + size * factor / busbw for size in (8 * 2**30, 16 * 2**30)]
    assert beyond == pytest.approx(edge * alpha_beta[1] / alpha_beta[0])
    # Not measured: four GPUs, another op, or a protocol forced by the caller -> the spec model.
    assert collective_time("all_reduce", 2**30, gpu_group("h100-sxm-published", 4)).algorithm != "calibrated"
    assert collective_time("all_gather", 2**30, group).algorithm != "calibrated"
    assert collective_time("all_reduce", 2**30, group, protocols=("simple",)).algorithm != "calibrated"


def test_calibrated_profiles_simulate_in_the_expected_direction():
    """The published STREAM copy/mul/add/triad rates of ND H100 v5 (2.90-2.97 TB/s) sit below the plain profile's
    midpoint of copy..dot (3.04 TB/s, dot being a read-only kernel), and A100's likewise (1.61-1.70 vs 1.68): rollout
    decode, bound by reading weights and KV cache, must take longer with the calibrated profile; MI300X's copy
    kernels (4.10-4.28) sit above its midpoint (4.07), so there it must be shorter."""
    base = with_(load_scenario(QUICKSTART), {"run.steps": 2, "run.warmup_steps": 1})

    def generation(gpu: str) -> float:
        return simulate(with_(base, {"cluster.pools[0].gpu": gpu})).log.steps[-1].stages["gen"]

    assert generation("h100-sxm-published") > 1.005 * generation("h100-sxm")
    assert generation("mi300x-published") < 0.995 * generation("mi300x")
    hardware = HardwareCatalog.load()
    fp8_plain = GPURates.from_profile(hardware.gpu("h100-sxm"), "fp8")
    fp8_calibrated = GPURates.from_profile(hardware.gpu("h100-sxm-published"), "fp8")
    # Large FP8 GEMMs reach 70% of peak, 80% in BF16: the calibrated curve fits Azure's FP8 GEMMs, and the plain
    # profile measures its largest one (it no longer carries BF16's fraction over to FP8).
    assert fp8_calibrated.gemm_seconds(16384, 16384, 16384) == pytest.approx(
        fp8_plain.gemm_seconds(16384, 16384, 16384), rel=0.05)
    assert fp8_plain.gemm_flops / fp8_plain.peak_flops == pytest.approx(0.70, abs=0.01)
    assert GPURates.from_profile(hardware.gpu("h100-sxm")).gemm_flops / fp8_plain.peak_flops * 2 == pytest.approx(
        0.80, abs=0.01)


# ------------------------------------------------------------------------------------------- shipped calibrations


@pytest.mark.parametrize("published", PUBLISHED, ids=lambda p: p.stem)
def test_shipped_calibrations_are_reproduced_from_their_published_data(published, tmp_path, capsys, monkeypatch):
    shipped = ROOT / "hardware_profiles" / f"{published.stem}-published.yaml"
    out = tmp_path / shipped.name
    monkeypatch.chdir(ROOT)  # the shipped files name their published data relative to the repository
    assert main(["calibrate", "fit", f"calibration/published/{published.name}", "--base", published.stem,
                 "--out", str(out)]) == 0
    capsys.readouterr()
    assert out.read_text() == shipped.read_text()
    links = sorted((tmp_path / "interconnects").glob("*.yaml"))
    assert links
    for link in links:
        assert link.read_text() == (ROOT / "hardware_profiles" / "interconnects" / link.name).read_text()


@pytest.mark.parametrize("published", PUBLISHED, ids=lambda p: p.stem)
def test_shipped_calibrations_say_they_come_from_published_data_and_cite_every_point(published):
    catalog = HardwareCatalog.load()
    gpu = catalog.gpu(f"{published.stem}-published")
    assert gpu.calibration.origin == "published"
    assert gpu.calibration.note.startswith("Derived from published measurements, not measured here")
    assert "published" in gpu.display_name
    link = catalog.links(gpu).scale_up
    assert link.calibration.origin == "published"
    curves = [c for c in (*gpu.calibration.gemm, gpu.calibration.hbm, *link.calibration.collectives) if c is not None]
    for curve in curves:
        assert curve.points and all("Azure/AI-benchmarking-guide" in p.source for p in curve.points)
    text = (ROOT / "hardware_profiles" / f"{published.stem}-published.yaml").read_text()
    assert text.startswith("# Derived from published measurements, not measured here")


def test_published_data_cover_the_required_gpus():
    assert {p.stem for p in PUBLISHED} >= {"h100-sxm", "h200-sxm", "a100-80gb-sxm", "mi300x"}


# ------------------------------------------------------------------------------------------- show and bad input


def test_show_prints_every_curve_with_its_held_out_error_and_writes_a_figure(tmp_path, capsys):
    out = tmp_path / "h100.html"
    assert main(["calibrate", "show", "h100-sxm-published", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "not measured here" in text
    for curve in ("gemm fp8", "hbm", "all_reduce 8 ranks 1 node(s)"):
        line = next(line for line in text.splitlines() if line.startswith(curve))
        assert line.rstrip().endswith(("%", "n/a", "%)"))
    assert "(table 3.2%)" in text  # collectives: the held-out error of interpolating between measured sizes
    html = out.read_text()
    assert "measured" in html and "fitted" in html and len(html) > 100_000  # self-contained plotly page
    assert main(["calibrate", "show", "h100-sxm"]) == 2  # nothing calibrated to show
    assert "has no calibration" in capsys.readouterr().err


def _write(path: Path, document: dict) -> Path:
    path.write_text(json.dumps(document, indent=1))
    return path


RAW = {"schema": "rlsim-calibration-raw/1", "origin": "measured", "mode": "quick", "device": {"type": "cpu"},
       "measurements": [{"kernel": "hbm_copy", "bytes": 2e6, "median_s": 1e-4}]}


@pytest.mark.parametrize("row, field, words", [
    ({"kernel": "gemm", "dtype": "bf16", "m": -4, "n": 8, "k": 8, "median_s": 1e-5}, "measurements.1.gemm.m", "greater than 0"),
    ({"kernel": "gemm", "dtype": "bf17", "m": 4, "n": 8, "k": 8, "median_s": 1e-5}, "measurements.1.gemm.dtype", "bf16"),
    ({"kernel": "matmul", "median_s": 1e-5}, "measurements.1", "kernel"),
    ({"kernel": "all_reduce", "ranks": 8, "nodes": 1, "bytes": 1024}, "measurements.1.all_reduce", "median_s"),
])
def test_a_bad_row_names_file_line_and_field(tmp_path, capsys, row, field, words):
    document = {**RAW, "measurements": [*RAW["measurements"], row]}
    lines = json.dumps(document, indent=1)
    raw = tmp_path / "bad.json"
    raw.write_text(lines)
    with pytest.raises(ScenarioError) as error:
        load_raw(raw)
    problem = error.value.first
    assert problem.file == str(raw) and problem.line is not None and problem.path.startswith(field.split(".")[0])
    assert words in error.value.render()
    assert main(["calibrate", "fit", str(raw), "--base", "h100-sxm", "--out", str(tmp_path / "x.yaml")]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and str(raw) in err


def test_published_rows_must_cite_and_outputs_must_be_profile_names(tmp_path, capsys):
    published = {**RAW, "origin": "published", "mode": "published", "note": "a paper"}
    raw = _write(tmp_path / "pub.json", published)
    assert main(["calibrate", "fit", str(raw), "--base", "h100-sxm", "--out", str(tmp_path / "p.yaml")]) == 2
    assert "must cite its `source`" in capsys.readouterr().err
    good = _write(tmp_path / "good.json", RAW)
    assert main(["calibrate", "fit", str(good), "--base", "h100-sxm", "--out", str(tmp_path / "bad name.yaml")]) == 2
    assert "profile name" in capsys.readouterr().err
    assert main(["calibrate", "fit", str(good), "--base", "h100-sxmm", "--out", str(tmp_path / "p.yaml")]) == 2
    assert "h100-sxm" in capsys.readouterr().err  # did-you-mean
    assert main(["calibrate", "fit", str(tmp_path / "missing.json"), "--base", "h100-sxm",
                 "--out", str(tmp_path / "p.yaml")]) == 2
    assert "no such raw measurement file" in capsys.readouterr().err


def test_written_profile_is_plain_yaml_with_a_source_on_every_number(tmp_path, capsys):
    from tests.test_hardware import _unsourced_numbers

    assert main(["calibrate", "fit", str(ROOT / "calibration" / "published" / "a100-80gb-sxm.yaml"),
                 "--base", "a100-80gb-sxm", "--out", str(tmp_path / "a100-lab.yaml")]) == 0
    capsys.readouterr()
    for path in [tmp_path / "a100-lab.yaml", *(tmp_path / "interconnects").glob("*.yaml")]:
        assert _unsourced_numbers(yaml.safe_load(path.read_text())) == []


def test_a_calibrated_decode_attention_rate_prices_kv_reads_in_both_rollout_modes():
    gpu = HardwareCatalog.load().gpu("h100-sxm")
    plain = GPURates.from_profile(gpu)
    slow_kv = replace(plain, decode_attention_bytes_per_s=plain.hbm_bytes_per_s / 2, decode_attention_half_bytes=0.0)
    spec = ModelCatalog.load().spec("Qwen2.5-7B")
    before, after = EngineCosts(spec, plain), EngineCosts(spec, slow_kv)
    batch, context = 128, 128 * 4000
    # KV reads dominate a long-context decode step: halving their rate makes it markedly slower...
    assert after.decode_iteration_seconds(batch, context) > 1.3 * before.decode_iteration_seconds(batch, context)
    # ...and the closed form still equals the sum of single iterations.
    loop = sum(after.decode_iteration_seconds(batch, context + i * batch) for i in range(50))
    assert after.decode_k_iterations_seconds(batch, context, 50) == pytest.approx(loop, rel=1e-9)
