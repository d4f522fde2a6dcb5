"""keras_vit/cpu_info.py: the record of the CPU that the trainers' precision, the demo and the
benchmarks read, and how it is named beside a timing."""

import json
import os

import pytest

from keras_vit import cpu_info

# The start of /proc/cpuinfo on a 2-core machine: one block per processor. Intel's has a
# "vmx flags" line beside "flags", and "model name" beside "model".
CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 17
model name\t: AMD EPYC
flags\t\t: fpu avx2 avx512f avx512bw avx512_bf16 avx512_vnni
vmx flags\t: amx_bf16

processor\t: 1
vendor_id\t: AuthenticAMD
cpu family\t: 26
model\t\t: 2
model name\t: AMD EPYC
flags\t\t: fpu avx2 avx512f avx512_bf16 amx_bf16
"""


def test_the_record_names_the_first_processor_s_family_model_and_instruction_sets(tmp_path):
    # Catches the model name taken for the model ("model" is a prefix of "model name"), the
    # "vmx flags" line read as the flags, and a later processor's block overriding the first.
    path = tmp_path / "cpuinfo"
    path.write_text(CPUINFO, encoding="utf-8")
    about = cpu_info.record(str(path))
    assert (about["cpu"], about["family"], about["model"]) == ("AMD EPYC", 25, 17)
    # A fresh record has all that its description needs (the cores too).
    assert (
        cpu_info.describe(about)
        == f"AMD EPYC (family 25, model 17; AVX-512, AVX-512 BF16, no AMX; {os.cpu_count()} cores)"
    )
    assert about["features"] == {"avx512f": True, "avx512_bf16": True, "amx_bf16": False}
    # As the tables read it back from a run's JSON, whose keys are sorted (amx_bf16 first): the
    # instruction sets are named in their own order, not the file's.
    about = json.loads(json.dumps({**about, "cores": 2}, sort_keys=True))
    named = "AMD EPYC (family 25, model 17; AVX-512, AVX-512 BF16, no AMX; 2 cores"
    assert cpu_info.describe(about) == named + ")"
    assert cpu_info.describe(about, "load average 7.9") == named + ", load average 7.9)"


def test_a_cpu_without_avx512_and_an_earlier_record_are_named_plainly(tmp_path):
    older = {"cpu": "AMD EPYC 7B12", "cores": 2, "family": 23, "model": 49}
    older["features"] = {"avx512f": False, "avx512_bf16": False, "amx_bf16": False}
    assert cpu_info.describe(older) == "AMD EPYC 7B12 (family 23, model 49; no AVX-512; 2 cores)"
    # Records from before the family and the flags were kept (the demo's, the benchmarks'): the
    # model name and the cores, then what the caller adds.
    assert cpu_info.describe({"cpu": "AMD EPYC", "cores": 2}) == "AMD EPYC (2 cores)"
    assert cpu_info.describe({"cpu": "AMD EPYC", "cores": 2}, "load average 19.6") == (
        "AMD EPYC (2 cores, load average 19.6)"
    )
    path = tmp_path / "cpuinfo"
    path.write_text("processor\t: 0\nmodel name\t: Some CPU\n", encoding="utf-8")
    assert cpu_info.record(str(path)) == {"cpu": "Some CPU", "cores": os.cpu_count()}


def test_no_file_is_a_record_without_flags(tmp_path):
    # Not Linux: no claim of any instruction set, and the CPU named as Python's platform names it.
    missing = str(tmp_path / "absent")
    assert cpu_info.first_processor(missing) == {}
    assert set(cpu_info.record(missing)) == {"cpu", "cores"}


def test_this_machine_s_flags_are_the_first_flags_line():
    flags = cpu_info.flags()
    assert isinstance(flags, frozenset)
    try:
        with open(cpu_info.CPUINFO, encoding="utf-8") as f:
            first = next((line for line in f if line.startswith("flags")), None)
    except OSError:
        first = None
    assert flags == (frozenset(first.partition(":")[2].split()) if first else frozenset())


def test_bfloat16_products_need_avx512_bf16_or_amx_not_avx512_alone(monkeypatch):
    # AVX-512 alone (Xeons from Skylake to Ice Lake) computes bfloat16 products no faster than
    # float32: no bfloat16 path may be claimed there.
    for found, expected in (
        ({"avx2", "avx512f", "avx512bw"}, False),
        ({"avx512f", "avx512_bf16"}, True),
        ({"amx_bf16", "amx_tile"}, True),
        (set(), False),
    ):
        monkeypatch.setattr(cpu_info, "flags", lambda found=found: frozenset(found))
        assert cpu_info.has_bfloat16() is expected, found


def test_avx512_is_its_foundation_flag_not_a_look_alike(monkeypatch):
    # avx512f, AVX-512's foundation, is the flag oneDNN's bfloat16 kernels need and XLA's
    # inference rule reads: AVX2 alone (the AVX2 EPYC) is not AVX-512, nor is another AVX-512 flag.
    for found, expected in (({"avx2", "fma"}, False), ({"avx2", "avx512f"}, True), ({"avx512_bf16"}, False)):
        monkeypatch.setattr(cpu_info, "flags", lambda found=found: frozenset(found))
        assert cpu_info.has_avx512() is expected, found


def _cache_dir(tmp_path, entries):
    for index, (level, size) in enumerate(entries):
        (tmp_path / f"index{index}").mkdir()
        (tmp_path / f"index{index}" / "level").write_text(f"{level}\n")
        (tmp_path / f"index{index}" / "size").write_text(f"{size}\n")
    return str(tmp_path / "index{}" / "{}")


@pytest.mark.parametrize("size, expected", [("1024K", 1024**2), ("2M", 2 * 1024**2), ("524288", 524288)])
def test_l2_is_read_from_the_level_2_cache_entry(tmp_path, monkeypatch, size, expected):
    # The L1 entries come first in sysfs: reading the first entry would take L1's 48 KB.
    monkeypatch.setattr(cpu_info, "_CACHE_FILE", _cache_dir(tmp_path, [(1, "48K"), (1, "32K"), (2, size)]))
    cpu_info.l2_bytes.cache_clear()
    try:
        assert cpu_info.l2_bytes() == expected
    finally:
        cpu_info.l2_bytes.cache_clear()


def test_no_cache_information_is_no_l2_size_and_so_whole_rows(tmp_path, monkeypatch):
    monkeypatch.setattr(cpu_info, "_CACHE_FILE", str(tmp_path / "index{}" / "{}"))
    cpu_info.l2_bytes.cache_clear()
    try:
        assert cpu_info.l2_bytes() is None
    finally:
        cpu_info.l2_bytes.cache_clear()
