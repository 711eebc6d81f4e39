"""Write fitted curves as a hardware profile: the base GPU's profile with a `calibration:` block and its measured
figures replaced by the fits, plus a calibrated copy of each link whose collectives were measured.

Files written for `--out DIR/NAME.yaml`: DIR/NAME.yaml (kind: gpu) and, when the raw file has collectives,
DIR/interconnects/NAME-<link>.yaml (kind: interconnect) for the scale-up link (collectives inside one node) and the
NIC (collectives across nodes). A scenario uses them with `cluster.profile_dirs: [DIR]` and `gpu: NAME`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from rlsim.calibrate.fit import Fit, Fits
from rlsim.calibrate.raw import RawFile
from rlsim.errors import Problem, ScenarioError
from rlsim.hardware import GPUProfile, HardwareCatalog, Interconnect

PROFILE_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"


@dataclass(frozen=True)
class WrittenProfile:
    gpu_file: Path
    link_files: tuple[Path, ...]


def _fit_source(fit: Fit, raw_file: str) -> str:
    if fit.fixed_from_prior:
        how = "rate fitted, fixed term held at the cost model's default (a GEMM or attention fill, or fewer than 3 sizes)"
    else:
        how = "least-squares fit of relative error"
    held = "n/a" if fit.held_out_mape is None else f"{100 * fit.held_out_mape:.1f}%"
    left_out = f", {fit.excluded} left out (memory-bound, or faster than the fixed fill)" if fit.excluded else ""
    return f"{how} to the {len(fit.samples)} points below from {raw_file}{left_out}; held-out (leave-one-out) MAPE {held}"


def _curve(fit: Fit, raw_file: str, **rate: float) -> dict[str, Any]:
    """A curve's fields: its rate (one `name=value` keyword), fixed term and held-out error, each sourced, and its
    points (`value` is the median time of a point, `size` what it moved or computed)."""
    source = _fit_source(fit, raw_file)
    ((rate_field, rate_value),) = rate.items()
    curve = {rate_field: _sourced(rate_value, source), "fixed_us": _sourced(fit.fixed_s * 1e6, source)}
    if fit.held_out_mape is not None:
        curve["held_out_mape_pct"] = _sourced(100 * fit.held_out_mape, "leave-one-out: each point predicted by the "
                                              "fit to all the others, mean absolute percentage error")
    curve["points"] = [{"value": _round(s.seconds), "size": _round(s.size), "label": s.label, "source": s.source}
                       for s in fit.samples]
    return curve


def _round(value: float) -> float:
    """Six significant digits: enough for any measurement, and a profile that reads well."""
    return float(f"{value:.6g}")


def _sourced(value: float, source: str) -> dict[str, Any]:
    return {"value": value if isinstance(value, int) else _round(value), "source": source}


def _origin_note(raw: RawFile, raw_file: str) -> str:
    if raw.origin == "published":
        return f"Derived from published measurements, not measured here: {raw.note} ({raw_file})"
    device = raw.device.get("name", "unknown device")
    return (f"Measured with calibration/microbench.py ({raw.mode} sweep) on {device} ({raw.device.get('type')}) "
            f"host {raw.host} at {raw.created_utc}: {raw_file}")


def build_gpu_document(base: GPUProfile, name: str, fits: Fits, raw: RawFile, raw_file: str,
                       links: dict[str, str]) -> dict[str, Any]:
    """The profile as plain data: the base with the calibration block, measured figures from the fits and `links`
    (scale_up / scale_out / host_link -> calibrated interconnect name) swapped in."""
    doc = base.model_dump(mode="json", exclude_none=True)
    doc.pop("calibration", None)
    doc["name"] = name
    doc["display_name"] = f"{base.display_name}, calibrated ({raw.origin}: {raw.device.get('name', 'unknown device')})"
    doc["aliases"] = []
    if "scale_up" in links:
        doc["scale_up"]["interconnect"] = links["scale_up"]
    for field in ("scale_out", "host_link"):
        if field in links:
            doc["node"][field] = links[field]
    measured = doc.setdefault("measured", {})
    where = f"calibration fit of {raw_file}"
    if "bf16" in fits.gemm:
        measured["gemm_bf16_tflops"] = _sourced(fits.gemm["bf16"].rate / 1e12, f"{where} (gemm bf16 curve rate)")
    if fits.hbm is not None:
        measured["hbm_stream_tbps"] = _sourced(fits.hbm.rate / 1e12, f"{where} (hbm curve rate)")
    if ("h2d", "pinned") in fits.host:
        measured["host_to_device_gbyte_per_s"] = _sourced(fits.host[("h2d", "pinned")].rate / 1e9,
                                                          f"{where} (pinned host-to-device curve rate)")
    node_reduce = {ranks: f for (op, ranks, nodes), f in fits.collectives.items() if op == "all_reduce" and nodes == 1}
    if node_reduce:
        widest = node_reduce[max(node_reduce)]
        measured["allreduce_busbw_gbyte_per_s"] = _sourced(widest.rate / 1e9, f"{where} ({widest.name}, busbw)")
        if widest.fixed_s > 0:
            measured["small_allreduce_latency_us"] = _sourced(widest.fixed_s * 1e6, f"{where} ({widest.name}, alpha)")
    calibration: dict[str, Any] = {"origin": raw.origin, "note": _origin_note(raw, raw_file)}
    if fits.gemm:
        calibration["gemm"] = [{"dtype": dtype, **_curve(fit, raw_file, tflops=fit.rate / 1e12)}
                               for dtype, fit in fits.gemm.items()]
    if fits.attention_prefill is not None:
        calibration["attention_prefill"] = {
            "dtype": "bf16", **_curve(fits.attention_prefill, raw_file, tflops=fits.attention_prefill.rate / 1e12)}
    # Host copies and launches are fitted and printed, not stored: no cost model prices with them (docs/calibration.md).
    for field, fit in {"hbm": fits.hbm, "decode_attention": fits.decode_attention}.items():
        if fit is not None:
            calibration[field] = _curve(fit, raw_file, gbyte_per_s=fit.rate / 1e9)
    doc["calibration"] = calibration
    return doc


def build_link_document(base: Interconnect, name: str, fits: dict[tuple[str, int, int], Fit], raw: RawFile,
                        raw_file: str) -> dict[str, Any]:
    group = f"the group its points were measured on ({raw_file})"
    doc = base.model_dump(mode="json", exclude_none=True)
    doc["name"] = name
    doc["display_name"] = f"{base.display_name} ({'published' if raw.origin == 'published' else 'measured'} collectives)"
    doc["aliases"] = []
    doc["calibration"] = {
        "origin": raw.origin,
        "note": _origin_note(raw, raw_file),
        "collectives": [{"op": op, "ranks": _sourced(ranks, group), "nodes": _sourced(nodes, group),
                         **_curve(fit, raw_file, busbw_gbyte_per_s=fit.rate / 1e9), **_table_error(fit)}
                        for (op, ranks, nodes), fit in fits.items()],
    }
    return doc


def _table_error(fit: Fit) -> dict[str, Any]:
    if fit.table_held_out_mape is None:
        return {}
    source = "leave-one-out: each inner point interpolated (log-log) from its two neighbours, mean absolute % error"
    return {"table_held_out_mape_pct": _sourced(100 * fit.table_held_out_mape, source)}


class _Dumper(yaml.SafeDumper):
    """Block style for sections, one line for every mapping of plain values (a point, a sourced number)."""


def _represent_dict(dumper: yaml.SafeDumper, data: dict) -> yaml.Node:
    flat = all(not isinstance(v, (dict, list)) for v in data.values())
    return dumper.represent_mapping("tag:yaml.org,2002:map", data.items(), flow_style=flat)


_Dumper.add_representer(dict, _represent_dict)


def _dump(doc: dict[str, Any], header: str) -> str:
    body = yaml.dump(doc, Dumper=_Dumper, sort_keys=False, width=10**6, allow_unicode=True)
    return "".join(f"# {line}\n" for line in header.splitlines()) + body


def write_profile(out: Path, base_name: str, fits: Fits, raw: RawFile, raw_file: str,
                  catalog: HardwareCatalog) -> WrittenProfile:
    """Write the calibrated GPU profile to `out` (its stem is the profile name) and its calibrated links beside it."""
    name = out.stem
    if out.suffix not in (".yaml", ".yml") or not re.match(PROFILE_NAME, name):
        raise ScenarioError(Problem("the output must be a .yaml file whose name is a profile name", file=str(out),
                                    valid="letters, digits, '.', '_' and '-', e.g. hardware_profiles/h100-lab.yaml"))
    base = catalog.gpu(base_name)
    gpu_links = catalog.links(base)
    intra_link = gpu_links.scale_up or gpu_links.host
    inside = {key: fit for key, fit in fits.collectives.items() if key[2] == 1}
    across = {key: fit for key, fit in fits.collectives.items() if key[2] > 1}
    groups = {"scale_up" if base.scale_up is not None else "host_link": (intra_link, inside),
              "scale_out": (gpu_links.scale_out, across)}
    links: dict[str, str] = {}
    link_files: list[Path] = []
    header = _origin_note(raw, raw_file) + "\nWritten by `rlsim calibrate fit`; see docs/calibration.md."
    for field, (link, link_fits) in groups.items():
        if not link_fits:
            continue
        if link is None:
            raise ScenarioError(Problem(f"the raw file has collectives across nodes but {base.name} has no scale-out "
                                        "network to attach them to", file=raw_file))
        link_name = f"{name}-{link.name}"
        path = out.parent / "interconnects" / f"{link_name}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(_dump(build_link_document(link, link_name, link_fits, raw, raw_file), header))
        links[field] = link_name
        link_files.append(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(_dump(build_gpu_document(base, name, fits, raw, raw_file, links), header))
    return WrittenProfile(out, tuple(link_files))
