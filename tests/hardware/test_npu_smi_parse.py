"""npu-smi parsers against recorded output, variants derived from it, and random input."""
import dataclasses
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mindwatch.hardware.npu_smi_parse import (
    NpuChip,
    NpuMapping,
    NpuProcess,
    parse_common,
    parse_info,
    parse_mapping,
    parse_processes,
    parse_usages,
    to_device_samples,
)
from mindwatch.observation import DeviceSample

B1 = "info-23.0.rc3.3-910B1.txt"
TWO = "info-25.3.rc1-ascend910-two-chips-per-npu.excerpt.txt"
MAP = "info-m-910B3.txt"
USAGES = "info-t-usages.txt"
ALL = (B1, TWO, MAP, USAGES)

B1_CHIPS = [
    NpuChip(npu_id=0, chip_id=0, name="910B1", health="OK", power_w=271.1, temp_c=41.0,
            aicore_percent=55.0, memory_used_mb=0.0, memory_total_mb=0.0,
            hbm_used_mb=65099.0, hbm_total_mb=65536.0, hugepages_used=0.0,
            hugepages_total=0.0, bus_id="0000:C1:00.0"),
    NpuChip(npu_id=1, chip_id=0, name="910B1", health="OK", power_w=275.0, temp_c=42.0,
            aicore_percent=66.0, memory_used_mb=0.0, memory_total_mb=0.0,
            hbm_used_mb=65098.0, hbm_total_mb=65536.0, hugepages_used=0.0,
            hugepages_total=0.0, bus_id="0000:01:00.0"),
]
TWO_CHIPS = [
    NpuChip(npu_id=0, chip_id=0, phy_id=0, name="Ascend910", health="OK", power_w=163.6,
            temp_c=30.0, aicore_percent=0.0, memory_used_mb=0.0, memory_total_mb=0.0,
            hbm_used_mb=3180.0, hbm_total_mb=65536.0, hugepages_used=0.0,
            hugepages_total=0.0, bus_id="0000:9D:00.0"),
    NpuChip(npu_id=0, chip_id=1, phy_id=1, name="Ascend910", health="OK", power_w=None,
            temp_c=30.0, aicore_percent=0.0, memory_used_mb=0.0, memory_total_mb=0.0,
            hbm_used_mb=2896.0, hbm_total_mb=65536.0, hugepages_used=0.0,
            hugepages_total=0.0, bus_id="0000:9F:00.0"),
]
EXPECTED_INFO = {B1: B1_CHIPS, TWO: TWO_CHIPS}
EXPECTED_MAP = [NpuMapping(3, 0, 0, "Ascend 910B3"), NpuMapping(4, 0, 1, "Ascend 910B3")]
EXPECTED_USAGES = {"npu_id": 0, "chip_count": 1, "chips": {0: {
    "DDR Capacity(MB)": 15171.0, "DDR Usage Rate(%)": 3.0, "HBM Capacity(MB)": 32768.0,
    "HBM Usage Rate(%)": 0.0, "Aicore Usage Rate(%)": 0.0, "Aicpu Usage Rate(%)": 0.0,
    "Ctrlcpu Usage Rate(%)": 9.0, "DDR Bandwidth Usage Rate(%)": 0.0,
    "HBM Bandwidth Usage Rate(%)": 0.0}}}

# HAND-MADE, not recorded: the shape of `npu-smi info -t common -i 0` on a 910 as the
# tool's documentation shows it (Chip ID opens the block; an MCU block follows).
COMMON_HANDMADE = """\
        NPU ID                         : 0
        Chip Count                     : 1

        Chip ID                        : 0
        Memory Usage Rate(%)           : 6
        HBM Usage Rate(%)              : 0
        Aicore Usage Rate(%)           : 12
        Aicore Freq(MHZ)               : 1000
        Temperature(C)                 : 46
        NPU Real-time Power(W)         : 69.2
        Aicpu Usage Rate(%)            : NA

        Chip Name                      : mcu
        Temperature(C)                 : 40
"""
# HAND-MADE, not recorded: a 310P-style table (no HBM column, "Chip Device", power NA).
# Its rows are as wide as npu-smi prints them (106 characters): the parser reads the column
# layout, so the text cannot be rewrapped; hence the E501 exemption on this string alone.
P310_HANDMADE = """\
+--------------------------------------------------------------------------------------------------------+
| npu-smi 23.0.0                                   Version: 23.0.0                                       |
+-------------------------------+-----------------+------------------------------------------------------+
| NPU     Name                  | Health          | Power(W)     Temp(C)           Hugepages-Usage(page) |
| Chip    Device                | Bus-Id          | AICore(%)    Memory-Usage(MB)                        |
+===============================+=================+======================================================+
| 8       310P3                 | OK              | NA           43                0     / 0             |
| 0       2                     | 0000:01:00.0    | 7            1782 / 21527                            |
+===============================+=================+======================================================+
"""  # noqa: E501


@pytest.fixture(scope="module")
def texts(npu_smi_fixtures):
    return {name: (npu_smi_fixtures / name).read_text() for name in ALL}


def test_every_fixture_file_is_covered(npu_smi_fixtures):
    assert {p.name for p in npu_smi_fixtures.glob("*.txt")} == set(ALL)


@pytest.mark.parametrize("name", ALL)
def test_each_fixture_exact(texts, name):
    text = texts[name]
    assert parse_info(text) == EXPECTED_INFO.get(name, [])
    assert parse_mapping(text) == (EXPECTED_MAP if name == MAP else [])
    empty = {"npu_id": None, "chip_count": None, "chips": {}}
    assert parse_usages(text) == (EXPECTED_USAGES if name == USAGES else empty)


def test_device_samples_from_fixtures(texts):
    assert to_device_samples(parse_info(texts[B1])) == [
        DeviceSample("npu", 0, 55.0, 65099.0, 65536.0, 41.0, 271.1),
        DeviceSample("npu", 1, 66.0, 65098.0, 65536.0, 42.0, 275.0)]
    assert to_device_samples(parse_info(texts[TWO])) == [
        DeviceSample("npu", 0, 0.0, 3180.0, 65536.0, 30.0, 163.6),
        DeviceSample("npu", 1, 0.0, 2896.0, 65536.0, 30.0, None)]
    # the recorded mapping is another machine's (cards 3 and 4): positions stay
    assert [s.index for s in to_device_samples(parse_info(texts[B1]),
                                               parse_mapping(texts[MAP]))] == [0, 1]
    chips = parse_info(texts[B1])
    assert [s.index for s in to_device_samples(chips, {(0, 0): 5, (1, 0): 4})] == [5, 4]
    chips[0].npu_id, chips[1].npu_id = 3, 4
    assert [s.index for s in to_device_samples(chips, parse_mapping(texts[MAP]))] == [0, 1]
    # an HBM "0 / 0" beside a real Memory-Usage: the memory is the DDR one
    odd = NpuChip(memory_used_mb=1.0, memory_total_mb=8.0, hbm_used_mb=0.0, hbm_total_mb=0.0)
    assert to_device_samples([odd]) == [DeviceSample("npu", 0, mem_used_mb=1.0, mem_total_mb=8.0)]


def test_common_handmade():
    assert parse_common(COMMON_HANDMADE) == {"npu_id": 0, "chip_count": 1, "chips": {0: {
        "Memory Usage Rate(%)": 6.0, "HBM Usage Rate(%)": 0.0, "Aicore Usage Rate(%)": 12.0,
        "Aicore Freq(MHZ)": 1000.0, "Temperature(C)": 46.0, "NPU Real-time Power(W)": 69.2,
        "Aicpu Usage Rate(%)": None}}}


def test_310p_handmade_without_hbm():
    [chip] = parse_info(P310_HANDMADE)
    assert chip == NpuChip(npu_id=8, chip_id=0, device_id=2, name="310P3", health="OK",
                           temp_c=43.0, aicore_percent=7.0, memory_used_mb=1782.0,
                           memory_total_mb=21527.0, hugepages_used=0.0, hugepages_total=0.0,
                           bus_id="0000:01:00.0")
    assert to_device_samples([chip]) == [DeviceSample("npu", 0, 7.0, 1782.0, 21527.0, 43.0)]


# (text to replace in the first chip's rows, its replacement, fields that become None)
CELLS = [
    ("| 0     910B1", "| {m}     910B1", {"npu_id"}),
    ("910B1               | OK", "{m}               | OK", {"name"}),
    ("| OK            | 271.1", "| {m}            | 271.1", {"health"}),
    ("271.1", "{m}", {"power_w"}),
    ("271.1       41", "271.1       {m}", {"temp_c"}),
    ("41                0    / 0", "41                {m}", {"hugepages_used", "hugepages_total"}),
    ("| 0                         | 0000:C1", "| {m}                         | 0000:C1",
     {"chip_id"}),
    ("0000:C1:00.0", "{m}", {"bus_id"}),
    ("| 55 ", "| {m} ", {"aicore_percent"}),
    ("55          0    / 0", "55          {m}", {"memory_used_mb", "memory_total_mb"}),
    ("65099/ 65536", "{m}", {"hbm_used_mb", "hbm_total_mb"}),
    ("65099/ 65536", "{m}/ 65536", {"hbm_used_mb"}),
    ("65099/ 65536", "65099/ {m}", {"hbm_total_mb"}),
]


@pytest.mark.parametrize("marker", ["-", "NA", "N/A"])
@pytest.mark.parametrize("old,new,gone", CELLS)
def test_missing_marker_in_any_cell(texts, marker, old, new, gone):
    assert old in texts[B1]
    chips = parse_info(texts[B1].replace(old, new.format(m=marker), 1))
    assert chips == [dataclasses.replace(B1_CHIPS[0], **dict.fromkeys(gone)), B1_CHIPS[1]]


@pytest.mark.parametrize("marker", ["-", "NA", "N/A"])
def test_every_cell_missing(texts, marker):
    lines = texts[B1].splitlines()
    for i in (6, 7, 9, 10):  # the chip rows
        lines[i] = re.sub(r"[^\s|/]+(\s*/\s*[^\s|/]+)?", marker, lines[i])
    assert parse_info("\n".join(lines)) == [NpuChip(), NpuChip()]


def test_without_hbm_column(texts):
    text = texts[B1].replace("HBM-Usage(MB)", " " * 13)
    text = text.replace("65099/ 65536", " " * 12).replace("65098/ 65536", " " * 12)
    no_hbm = dict(hbm_used_mb=None, hbm_total_mb=None)
    assert parse_info(text) == [dataclasses.replace(c, **no_hbm) for c in B1_CHIPS]
    # the Memory-Usage "0 / 0" of a 910 is no reading: null, not 0 MB of 0 MB
    assert [(s.mem_used_mb, s.mem_total_mb) for s in to_device_samples(parse_info(text))] \
        == [(None, None), (None, None)]


def test_blank_cell_and_spaced_name_fall_back_to_header_alignment(texts):
    text = texts[B1].replace("271.1       41", "271.1         ", 1)
    assert parse_info(text) == [dataclasses.replace(B1_CHIPS[0], temp_c=None), B1_CHIPS[1]]
    text = texts[B1].replace("910B1              ", "Ascend 910B1       ", 1)
    assert parse_info(text)[0] == dataclasses.replace(B1_CHIPS[0], name="Ascend 910B1")


@pytest.mark.parametrize("name", [B1, TWO])
@pytest.mark.parametrize("how", ["aligned wider", "misaligned wider", "single spaces"])
def test_other_column_widths(texts, name, how):
    lines = texts[name].splitlines()
    if how == "aligned wider":
        lines = [ln[0] + ln[1:].replace("|", "       |") for ln in lines]
    elif how == "misaligned wider":
        lines = [re.sub(r"  +", lambda m: m.group() * 2, ln) for ln in lines]
    else:
        lines = [re.sub(r" +", " ", ln) for ln in lines]
    assert parse_info("\n".join(lines)) == EXPECTED_INFO[name]


def test_process_table_after_device_table(texts):
    lines = texts[B1].splitlines(keepends=True)
    start = next(i for i, ln in enumerate(lines) if "Process id" in ln) - 1
    processes = "".join(lines[start:])
    extra = "| No running processes found in NPU 2" + " " * 59 + "|\n"
    assert parse_info(texts[TWO] + processes + extra) == TWO_CHIPS
    assert parse_info(texts[B1] + texts[TWO]) == B1_CHIPS + TWO_CHIPS


def _prefixes(text):
    lines = text.splitlines(keepends=True)
    yield from ("".join(lines[:k]) for k in range(len(lines) + 1))
    yield from (text[:k] for k in range(len(text) + 1))


def _no_wrong_value(got, full):
    """Every field of got either equals the full parse's or is None (never a cut number)."""
    return all(v is None or v == getattr(full, f.name)
               for f in dataclasses.fields(got) for v in [getattr(got, f.name)])


@pytest.mark.parametrize("name", [B1, TWO])
def test_truncated_info_never_yields_wrong_values(texts, name):
    full = EXPECTED_INFO[name]
    for prefix in _prefixes(texts[name]):
        chips = parse_info(prefix)
        assert len(chips) <= len(full)
        # strict=False: a truncated table may yield fewer chips; those it yields are checked.
        assert all(_no_wrong_value(c, f) for c, f in zip(chips, full, strict=False)), \
            repr(prefix[-80:])
    assert parse_info(texts[name]) == full


def test_truncated_mapping_and_usages(texts):
    for prefix in _prefixes(texts[MAP]):
        rows = parse_mapping(prefix)
        if rows:  # only the last row may be cut, and then only inside its name
            *whole, last = rows
            assert whole == EXPECTED_MAP[:len(whole)]
            assert last[:3] == EXPECTED_MAP[len(whole)][:3]
            assert EXPECTED_MAP[len(whole)].name.startswith(last.name)
    for prefix in _prefixes(texts[USAGES]):
        assert parse_usages(prefix)["chips"] in ({}, EXPECTED_USAGES["chips"])


@pytest.mark.parametrize("junk", ["", "\n\n", "garbage", "| | |", "+--+\n|x|\n", None, b"x"])
def test_empty_and_junk(junk):
    assert parse_info(junk) == [] and parse_mapping(junk) == []
    assert parse_usages(junk)["chips"] == {} and parse_common(junk)["chips"] == {}
    assert to_device_samples(parse_info(junk), parse_mapping(junk)) == []


def _all_parsers(text):
    chips = parse_info(text)
    assert all(isinstance(c, NpuChip) for c in chips)
    samples = to_device_samples(chips, parse_mapping(text))
    assert all(isinstance(s, DeviceSample) and s.type == "npu" for s in samples)
    for result in (parse_usages(text), parse_common(text)):
        assert set(result) == {"npu_id", "chip_count", "chips"}


TABLE_ALPHABET = "|+-=/: \n\t0123456789.NA/ChipNPUNameHealthPowerTempHBMMemoryBus-Id()%"
PROPERTY = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@PROPERTY
@given(st.text() | st.text(alphabet=TABLE_ALPHABET, max_size=400))
def test_arbitrary_text_never_raises(text):
    _all_parsers(text)


@PROPERTY
@given(st.sampled_from(ALL), st.data())
def test_mutated_fixtures_never_raise(npu_smi_fixtures, name, data):
    text = (npu_smi_fixtures / name).read_text()
    for _ in range(data.draw(st.integers(1, 6))):
        a = data.draw(st.integers(0, len(text)))
        b = data.draw(st.integers(a, min(len(text), a + 40)))
        insert = data.draw(st.sampled_from(["", "-", "NA", "N/A", "|", "/", "\n", " " * 9])
                           | st.text(max_size=8))
        text = text[:a] + insert + text[b:]
        if data.draw(st.booleans()):  # shuffle whole lines too: rows out of order
            lines = text.splitlines()
            lines.insert(data.draw(st.integers(0, len(lines))),
                         data.draw(st.sampled_from(lines or [""])))
            text = "\n".join(lines)
    _all_parsers(text)


def test_the_process_table_and_the_other_processes_on_this_processs_chip(npu_smi_fixtures):
    text = (npu_smi_fixtures / "info-23.0.rc3.3-910B1.txt").read_text()
    assert parse_processes(text) == [NpuProcess(0, 0, 576489, "python", 60703.0),
                                     NpuProcess(1, 0, 576491, "python", 60704.0)]
    chips = parse_info(text)
    # this process is 576491, on NPU 1: nothing else there; NPU 0 is another rank's
    mine = to_device_samples(chips, None, parse_processes(text), {576491})
    assert [s.others for s in mine] == [None, []]
    # a process of someone else's on this process's chip
    shared = to_device_samples(chips, None, parse_processes(text), {999, 576489})
    assert shared[0].others == []
    intruder = [*parse_processes(text), NpuProcess(0, 0, 4242, "infer", 3000.0)]
    assert to_device_samples(chips, None, intruder, {576489})[0].others == [
        {"pid": 4242, "name": "infer", "mem_used_mb": 3000.0}]
    for name in ("info-25.3.rc1-ascend910-two-chips-per-npu.excerpt.txt", "info-t-usages.txt",
                 "info-m-910B3.txt"):
        assert parse_processes((npu_smi_fixtures / name).read_text()) == []
    assert parse_processes("| 0 0 | 12 | python |") == []        # no table header: no table
    assert parse_processes(None) == []
