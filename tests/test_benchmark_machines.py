"""benchmarks/harness.py's record of the CPU a run measured, and benchmarks/report.py's tables of
each kind of CPU: two kinds of "AMD EPYC" with the same model name measured a 2x different matmul
peak, so a table names the family, the model and the instruction sets that decide the fast paths."""

import json

from benchmarks import harness, report

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


def test_the_machine_record_names_the_first_processor_s_family_model_and_instruction_sets(tmp_path):
    # Catches the model name taken for the model ("model" is a prefix of "model name"), the
    # "vmx flags" line read as the flags, and a later processor's block overriding the first.
    path = tmp_path / "cpuinfo"
    path.write_text(CPUINFO, encoding="utf-8")
    m = harness.machine(str(path))
    assert (m["cpu"], m["family"], m["model"]) == ("AMD EPYC", 25, 17)
    assert m["features"] == {"avx512f": True, "avx512_bf16": True, "amx_bf16": False}
    m["cores"] = 2
    # As the tables read it back from a run's JSON, whose keys are sorted (amx_bf16 first): the
    # instruction sets are named in their own order, not the file's.
    harness.write_json(tmp_path / "run.json", {"machine": m})
    m = json.loads((tmp_path / "run.json").read_text(encoding="utf-8"))["machine"]
    assert harness.cpu_kind(m) == "AMD EPYC (family 25, model 17; AVX-512, AVX-512 BF16, no AMX; 2 cores)"


def test_a_cpu_without_avx512_and_an_earlier_run_s_record_are_named_plainly(tmp_path):
    older = {"cpu": "AMD EPYC 7B12", "cores": 2, "family": 23, "model": 49}
    older["features"] = {"avx512f": False, "avx512_bf16": False, "amx_bf16": False}
    assert harness.cpu_kind(older) == "AMD EPYC 7B12 (family 23, model 49; no AVX-512; 2 cores)"
    # Runs from before the family and the flags were recorded: the model name and the cores.
    assert harness.cpu_kind({"cpu": "AMD EPYC", "cores": 2}) == "AMD EPYC (2 cores)"
    path = tmp_path / "cpuinfo"
    path.write_text("processor\t: 0\nmodel name\t: Some CPU\n", encoding="utf-8")
    assert harness.cpu_kind({**harness.machine(str(path)), "cores": 4}) == "Some CPU (4 cores)"


def _inference(ratio, machine):
    rows = [
        {"case": "Ti b1", "contestant": "keras_vit TF", "ours": True, "images_per_s": 10.0 * ratio},
        {"case": "Ti b1", "contestant": "timm eager", "ours": False, "images_per_s": 10.0},
    ]
    return {"tables": [{"rows": rows}], "machine": machine}


def test_each_kind_of_cpu_gets_its_own_verdict_the_latest_run_s_first():
    # Catches the kept tables of another CPU left out of the targets (or judged as this one's):
    # the issue is done only when the default leads on each kind the page lists.
    this = {"cpu": "AMD EPYC", "cores": 2, "family": 25, "model": 17}
    results = {
        "inference_xeon_amx": _inference(0.5, {"cpu": "Xeon", "cores": 2}),
        "inference": _inference(1.2, this),
    }
    lines = [line for line in report.targets(results) if "at least as fast as every peer" in line]
    assert len(lines) == 2
    assert (
        lines[0].startswith("- Inference: ")
        and "**met** (keras_vit / peer at worst: timm eager 1.20x)" in lines[0]
    )
    assert lines[1].startswith(f"- {report.TITLES['inference_xeon_amx']}: ") and "**not met**" in lines[1]
    assert "timm eager 0.50x" in lines[1]
