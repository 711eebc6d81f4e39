"""Hardware profiles: every shipped file loads, every number has a source, lookups and user overrides behave."""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from rlsim.errors import ScenarioError, UnknownName
from rlsim.hardware import GPUProfile, HardwareCatalog, Interconnect, shipped_profiles_dir

REQUIRED_GPUS = ["a100-80gb-sxm", "h100-sxm", "h800-sxm", "h20", "h200-sxm", "b200", "gb200", "mi300x", "mi325x", "l40s"]
REQUIRED_INTERCONNECTS = [
    "nvlink3", "nvlink4", "nvlink5", "nvlink-h800", "xgmi", "ib-hdr", "ib-ndr", "roce-400", "pcie4", "pcie5", "nvlink-c2c",
]  # fmt: skip

SHIPPED = shipped_profiles_dir()
SHIPPED_FILES = sorted(SHIPPED.glob("*.yaml")) + sorted((SHIPPED / "interconnects").glob("*.yaml"))


@pytest.fixture(scope="module")
def catalog() -> HardwareCatalog:
    return HardwareCatalog.load()


# A small, valid GPU profile a user might drop into their own directory.
USER_GPU = """\
kind: gpu
name: {name}
display_name: Test accelerator
aliases: [{alias}]
vendor: acme
peak_tflops:
  bf16: {{value: 100, source: "test datasheet"}}
memory_gib: {{value: 64, source: "test datasheet"}}
hbm_tbps: {{value: 2.0, source: "test datasheet"}}
scale_up:
  interconnect: {scale_up}
  domain_gpus: {{value: 8, source: "test datasheet"}}
node:
  gpus_per_node: {{value: 8, source: "test datasheet"}}
  nics_per_node: {{value: 8, source: "test datasheet"}}
  scale_out: ib-ndr
  host_link: pcie5
tdp_w: {{value: 500, source: "test datasheet"}}
"""


def write_gpu(folder: Path, name: str, *, alias: str = "acme-x", scale_up: str = "nvlink4", text: str | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.yaml"
    path.write_text(text if text is not None else USER_GPU.format(name=name, alias=alias, scale_up=scale_up))
    return path


# ------------------------------------------------------------------------------------------------ shipped profiles


def test_every_required_profile_ships(catalog: HardwareCatalog) -> None:
    assert set(REQUIRED_GPUS) <= set(catalog.gpu_names())
    assert set(REQUIRED_INTERCONNECTS) <= set(catalog.interconnect_names())


@pytest.mark.parametrize("path", SHIPPED_FILES, ids=lambda p: p.name)
def test_every_shipped_file_is_a_loaded_profile(catalog: HardwareCatalog, path: Path) -> None:
    kind = yaml.safe_load(path.read_text())["kind"]
    profile = catalog.gpu(path.stem) if kind == "gpu" else catalog.interconnect(path.stem)
    assert isinstance(profile, GPUProfile if kind == "gpu" else Interconnect)
    assert profile.name == path.stem


def _unsourced_numbers(node: object, where: str = "") -> list[str]:
    """Paths of numeric leaves not written as {value: <number>, source: <non-empty text>}."""
    if isinstance(node, dict):
        if "value" in node and _is_number(node["value"]):
            source = node.get("source")
            ok = isinstance(source, str) and source.strip() != ""
            return [] if ok else [f"{where}.value"]
        return [bad for key, child in node.items() for bad in _unsourced_numbers(child, f"{where}.{key}")]
    if isinstance(node, list):
        return [bad for i, child in enumerate(node) for bad in _unsourced_numbers(child, f"{where}[{i}]")]
    return [where or "<top>"] if _is_number(node) else []


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@pytest.mark.parametrize("path", SHIPPED_FILES, ids=lambda p: p.name)
def test_every_number_in_a_shipped_profile_has_a_source(path: Path) -> None:
    assert _unsourced_numbers(yaml.safe_load(path.read_text())) == []


def test_the_source_check_catches_a_bare_number_and_an_empty_source() -> None:
    data = {"memory_gib": 80, "hbm_tbps": {"value": 3.35, "source": " "}, "ok": {"value": 1, "source": "x"}}
    assert _unsourced_numbers(data) == [".memory_gib", ".hbm_tbps.value"]


def test_spot_values_match_the_reference(catalog: HardwareCatalog) -> None:
    h100 = catalog.gpu("h100-sxm")
    assert h100.peak_flops("bf16") == 989e12
    assert h100.peak_flops("FP8") == 1979e12
    h200 = catalog.gpu("h200-sxm")
    assert h200.memory_gib.value == 141 and h200.memory_bytes == 141 * 2**30
    assert h200.hbm_bytes_per_s == pytest.approx(4.8e12)
    gb200 = catalog.gpu("gb200")
    assert gb200.scale_up is not None and gb200.scale_up.domain_gpus.value == 72
    assert gb200.node.gpus_per_node.value == 4
    assert catalog.links(gb200).host.name == "nvlink-c2c"
    assert catalog.gpu("mi300x").memory_gib.value == 192
    assert catalog.gpu("a100-80gb-sxm").measured.small_allreduce_latency_us.value == 44


def test_interconnect_units_convert_to_si(catalog: HardwareCatalog) -> None:
    assert catalog.interconnect("ib-ndr").bytes_per_s == 50e9  # 400 Gb/s wire rate
    assert catalog.interconnect("nvlink4").bytes_per_s == 450e9
    assert catalog.interconnect("nvlink-h800").bytes_per_s == 200e9
    xgmi = catalog.interconnect("xgmi")
    assert (xgmi.bytes_per_s, xgmi.peer_bytes_per_s) == (448e9, 64e9)
    assert catalog.interconnect("nvlink5").peer_bytes_per_s == 900e9
    assert math.isclose(catalog.interconnect("nvlink4").latency_s, 1.9e-6)
    assert catalog.interconnect("nvlink4").reduces_in_network
    assert not catalog.interconnect("ib-ndr").reduces_in_network


def test_every_gpu_links_resolve_with_the_right_scope(catalog: HardwareCatalog) -> None:
    for name in catalog.gpu_names():
        links = catalog.links(name)
        assert links.host.scope == "host"
        assert links.scale_up is None or links.scale_up.scope == "scale_up"
        assert links.scale_out is None or links.scale_out.scope == "scale_out"


def test_a_dtype_the_gpu_lacks_is_a_clear_error(catalog: HardwareCatalog) -> None:
    a100 = catalog.gpu("a100")
    with pytest.raises(UnknownName) as lacking:
        a100.peak_flops("fp8")
    assert lacking.value.known == ["bf16", "fp16"] and lacking.value.suggestion is None
    with pytest.raises(UnknownName) as typo:
        a100.peak_flops("bf61")
    assert typo.value.suggestion == "bf16"


# ------------------------------------------------------------------------------------------------------- lookup


@pytest.mark.parametrize(
    ("written", "name"),
    [("h100", "h100-sxm"), ("H100-SXM5", "h100-sxm"), ("h100-sxm-80gb", "h100-sxm"), ("  B200 ", "b200"),
     ("GB200-NVL72", "gb200"), ("MI300X", "mi300x")],
)  # fmt: skip
def test_gpu_lookup_is_case_insensitive_and_takes_aliases(catalog: HardwareCatalog, written: str, name: str) -> None:
    assert catalog.gpu(written).name == name


def test_interconnect_lookup_takes_aliases(catalog: HardwareCatalog) -> None:
    assert catalog.interconnect("NDR400").name == "ib-ndr"
    assert catalog.interconnect("Infinity-Fabric").name == "xgmi"


@pytest.mark.parametrize(
    ("kind", "written", "suggestion"),
    [("gpu", "h100-sxn", "h100-sxm"), ("gpu", "mi300", "mi300x"), ("interconnect", "nvlnk4", "nvlink4")],
)
def test_unknown_names_suggest_the_closest(catalog: HardwareCatalog, kind: str, written: str, suggestion: str) -> None:
    lookup = catalog.gpu if kind == "gpu" else catalog.interconnect
    with pytest.raises(UnknownName) as err:
        lookup(written)
    assert err.value.suggestion == suggestion
    assert err.value.name == written
    assert suggestion in err.value.known


def test_a_name_nothing_resembles_has_no_suggestion(catalog: HardwareCatalog) -> None:
    with pytest.raises(UnknownName) as err:
        catalog.gpu("tpu-v5p")
    assert err.value.suggestion is None


# ---------------------------------------------------------------------------------------------- user directories


def test_a_user_directory_adds_a_gpu(tmp_path: Path) -> None:
    write_gpu(tmp_path, "acme-x1", alias="ACME")
    catalog = HardwareCatalog.load([tmp_path])
    assert catalog.gpu("acme").name == "acme-x1"
    assert catalog.gpu("acme-x1").peak_flops("bf16") == 100e12
    assert "h100-sxm" in catalog.gpu_names()


def test_a_user_file_overrides_the_shipped_profile_of_that_name(tmp_path: Path) -> None:
    write_gpu(tmp_path, "h100-sxm", alias="my-h100")
    catalog = HardwareCatalog.load([tmp_path])
    assert catalog.gpu("h100-sxm").peak_flops("bf16") == 100e12
    assert catalog.gpu("my-h100").name == "h100-sxm"
    with pytest.raises(UnknownName):  # the shipped profile's aliases went with it
        catalog.gpu("h100-sxm5")
    assert HardwareCatalog.load().gpu("h100-sxm").peak_flops("bf16") == 989e12  # nothing cached between catalogs


def test_later_directories_win(tmp_path: Path) -> None:
    write_gpu(tmp_path / "a", "acme-x1")
    write_gpu(tmp_path / "b", "acme-x1", scale_up="nvlink5")
    catalog = HardwareCatalog.load([tmp_path / "a", tmp_path / "b"])
    assert catalog.links("acme-x1").scale_up.name == "nvlink5"


def test_a_user_interconnect_can_be_used_by_a_user_gpu(tmp_path: Path) -> None:
    (tmp_path / "interconnects").mkdir()
    (tmp_path / "interconnects" / "fastlink.yaml").write_text(
        "kind: interconnect\nname: fastlink\ndisplay_name: Fast link\nscope: scale_up\n"
        'bandwidth_gbyte_per_s: {value: 1000, source: "test"}\nlatency_us: {value: 1, source: "test"}\n'
    )
    write_gpu(tmp_path, "acme-x1", scale_up="FastLink")
    catalog = HardwareCatalog.load([tmp_path])
    assert catalog.gpu("acme-x1").scale_up.interconnect == "fastlink"  # aliases and case are normalised
    assert catalog.links("acme-x1").scale_up.bytes_per_s == 1e12


# ------------------------------------------------------------------------------------------------ malformed files


def load_error(tmp_path: Path) -> ScenarioError:
    with pytest.raises(ScenarioError) as err:
        HardwareCatalog.load([tmp_path])
    return err.value


def test_unknown_key_names_file_line_and_suggestion(tmp_path: Path) -> None:
    text = USER_GPU.format(name="acme-x1", alias="a", scale_up="nvlink4").replace("tdp_w:", "tdp_watts:")
    path = write_gpu(tmp_path, "acme-x1", text=text)
    err = load_error(tmp_path)
    unknown = next(p for p in err.problems if p.path == "tdp_watts")
    assert (unknown.file, unknown.line, unknown.suggestion) == (str(path), 18, "tdp_w")


def test_missing_source_is_an_error(tmp_path: Path) -> None:
    text = USER_GPU.format(name="acme-x1", alias="a", scale_up="nvlink4").replace(
        'memory_gib: {value: 64, source: "test datasheet"}', "memory_gib: {value: 64}"
    )
    path = write_gpu(tmp_path, "acme-x1", text=text)
    err = load_error(tmp_path)
    assert (err.file, err.line, err.path) == (str(path), 8, "memory_gib.source")


def test_a_bare_number_asks_for_its_source(tmp_path: Path) -> None:
    text = USER_GPU.format(name="acme-x1", alias="a", scale_up="nvlink4").replace(
        'hbm_tbps: {value: 2.0, source: "test datasheet"}', "hbm_tbps: 2.0"
    )
    write_gpu(tmp_path, "acme-x1", text=text)
    err = load_error(tmp_path)
    assert (err.line, err.path) == (9, "hbm_tbps")
    assert "source" in str(err)


@pytest.mark.parametrize(
    ("old", "new", "line", "field"),
    [
        ('{value: 8, source: "test datasheet"}\nnode', '{value: 8.5, source: "test datasheet"}\nnode', 12,
         "scale_up.domain_gpus.value"),
        ("{value: 100,", '{value: "fast",', 7, "peak_tflops.bf16.value"),
        ("{value: 500,", "{value: true,", 18, "tdp_w.value"),
        ("{value: 64,", "{value: -64,", 8, "memory_gib.value"),
    ],
)  # fmt: skip
def test_wrong_types_are_errors(tmp_path: Path, old: str, new: str, line: int, field: str) -> None:
    text = USER_GPU.format(name="acme-x1", alias="a", scale_up="nvlink4").replace(old, new, 1)
    path = write_gpu(tmp_path, "acme-x1", text=text)
    err = load_error(tmp_path)
    assert (err.file, err.line, err.path) == (str(path), line, field)


def test_a_dangling_interconnect_name_is_an_error(tmp_path: Path) -> None:
    path = write_gpu(tmp_path, "acme-x1", scale_up="nvlink44")
    err = load_error(tmp_path)
    assert (err.file, err.line, err.path) == (str(path), 11, "scale_up.interconnect")
    assert err.suggestion == "nvlink4"
    assert "nvlink5" in (err.valid or "") and "ib-ndr" not in (err.valid or "")


def test_an_interconnect_of_the_wrong_scope_is_an_error(tmp_path: Path) -> None:
    write_gpu(tmp_path, "acme-x1", scale_up="pcie5")
    err = load_error(tmp_path)
    assert (err.line, err.path) == (11, "scale_up.interconnect")
    assert "host" in str(err)


def test_a_name_that_differs_from_its_file_is_an_error(tmp_path: Path) -> None:
    write_gpu(tmp_path, "acme-x1", text=USER_GPU.format(name="h100-sxm", alias="a", scale_up="nvlink4"))
    err = load_error(tmp_path)
    assert (err.line, err.path) == (2, "name")


def test_an_alias_taken_by_another_profile_is_an_error(tmp_path: Path) -> None:
    write_gpu(tmp_path, "acme-x1", alias="H100")
    err = load_error(tmp_path)
    assert (err.line, err.path) == (4, "aliases[0]")
    assert "h100-sxm" in str(err)


def test_a_file_without_a_known_kind_is_an_error(tmp_path: Path) -> None:
    text = USER_GPU.format(name="acme-x1", alias="a", scale_up="nvlink4").replace("kind: gpu", "kind: gpus")
    write_gpu(tmp_path, "acme-x1", text=text)
    err = load_error(tmp_path)
    assert (err.line, err.path, err.suggestion) == (1, "kind", "gpu")


def test_an_interconnect_needs_exactly_one_bandwidth(tmp_path: Path) -> None:
    (tmp_path / "interconnects").mkdir()
    (tmp_path / "interconnects" / "twolink.yaml").write_text(
        "kind: interconnect\nname: twolink\ndisplay_name: Two\nscope: scale_out\n"
        'bandwidth_gbyte_per_s: {value: 50, source: "t"}\nbandwidth_gbit_per_s: {value: 400, source: "t"}\n'
        'latency_us: {value: 1, source: "t"}\n'
    )
    err = load_error(tmp_path)
    assert "exactly one" in str(err) and err.file.endswith("twolink.yaml")


def test_a_missing_directory_is_an_error(tmp_path: Path) -> None:
    err = load_error(tmp_path / "nope")
    assert err.file == str(tmp_path / "nope")


def test_a_yaml_syntax_error_points_at_its_line(tmp_path: Path) -> None:
    write_gpu(tmp_path, "acme-x1", text="kind: gpu\nname: [acme-x1\n")
    err = load_error(tmp_path)
    assert err.file.endswith("acme-x1.yaml") and err.line is not None
