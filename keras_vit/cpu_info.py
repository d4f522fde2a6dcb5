"""Which CPU this process runs on, from Linux's /proc/cpuinfo and its cache sizes from sysfs (the
standard library only).

The trainers' `--mixed_precision=auto` reads its instruction sets (trainers/precision.py); the
demo and the benchmarks name it beside their timings. The model name alone does not tell CPUs
apart: two kinds of "AMD EPYC" with the same model name and flags, family 25 and family 26,
measured a 2x different matmul peak (docs/guides/benchmarks.md, "The machines"), so a record
keeps the family, the model and the instruction sets that decide the fast paths. Elsewhere than
Linux the file is missing and the record has only what `platform` says. One core's L2 size
decides where keras_vit/row_parts.py splits an encoder block's rows.
"""

import functools
import os
import platform

CPUINFO = "/proc/cpuinfo"
# The instruction sets that decide a CPU's fast paths (oneDNN's bfloat16 kernels, --mixed_precision
# auto), as /proc/cpuinfo names them, and how a record's description names them.
FEATURES = {"avx512f": "AVX-512", "avx512_bf16": "AVX-512 BF16", "amx_bf16": "AMX"}
# The flags of the instructions that compute products in bfloat16: with either, oneDNN's bfloat16
# kernels are fast and OpenVINO computes in bfloat16 by default.
BFLOAT16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})
_FIELDS = ("model name", "cpu family", "model", "flags")
# Linux's description of the first core's caches, one folder per cache (index0, index1, ...).
_CACHE_FILE = "/sys/devices/system/cpu/cpu0/cache/index{}/{}"


def first_processor(path=CPUINFO):
    """{field: value} of the fields above for the first processor listed ({} where unreadable):
    every core of one machine is the same kind of CPU."""
    found = {}
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key in _FIELDS and key not in found:
                    found[key] = value.strip()
                if not line.strip() and found:
                    break  # the end of the first processor's block
    except OSError:  # not Linux
        pass
    return found


@functools.cache
def flags():
    """This machine's instruction-set flags, as /proc/cpuinfo names them (none where unreadable:
    then no fast path is claimed)."""
    return frozenset(first_processor().get("flags", "").split())


def has_avx512():
    """Whether this CPU has AVX-512 (its foundation, avx512f): oneDNN's bfloat16 kernels need it,
    and without it XLA ran inference faster (keras_vit/xla_inference.py)."""
    return "avx512f" in flags()


def has_bfloat16():
    """Whether this CPU has bfloat16 product instructions (BFLOAT16_FLAGS)."""
    return bool(flags() & BFLOAT16_FLAGS)


def record(path=CPUINFO):
    """{"cpu": model name, "cores" (those this process may see), and where the file has them
    "family", "model" (numbers) and "features" ({flag of FEATURES: present or not})}: what
    `describe` names."""
    found = first_processor(path)
    about = {
        "cpu": found.get("model name") or platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
    }
    if found.get("cpu family", "").isdigit() and found.get("model", "").isdigit():
        about["family"], about["model"] = int(found["cpu family"]), int(found["model"])
    if "flags" in found:
        present = set(found["flags"].split())
        about["features"] = {flag: flag in present for flag in FEATURES}
    return about


def describe(about, *extra):
    """A record in words, `extra` phrases last: "AMD EPYC (family 25, model 17;
    AVX-512, AVX-512 BF16, no AMX; 2 cores)"; the model name and cores only for a record
    without the rest (one written before they were recorded)."""
    details = []
    if "family" in about:
        details.append(f"family {about['family']}, model {about['model']}")
    if "features" in about:
        # In FEATURES' order: a record read back from JSON may have its keys sorted.
        has = about["features"]
        if has.get("avx512f"):
            words = [name if has.get(flag) else f"no {name}" for flag, name in FEATURES.items()]
        else:  # then neither of the others: one word is enough
            words = ["no AVX-512"]
        details.append(", ".join(words))
    details.append(", ".join([f"{about['cores']} cores", *extra]))
    return f"{about['cpu']} ({'; '.join(details)})"


@functools.cache
def l2_bytes():
    """One core's L2 cache in bytes, from Linux's sysfs; None where it cannot be read (then
    keras_vit/row_parts.py keeps the rows whole)."""
    for index in range(8):
        try:
            with open(_CACHE_FILE.format(index, "level")) as f:
                level = f.read().strip()
            with open(_CACHE_FILE.format(index, "size")) as f:
                size = f.read().strip()
        except OSError:
            return None
        if level == "2":
            units = {"K": 1024, "M": 1024**2}
            return int(size[:-1]) * units[size[-1]] if size[-1] in units else int(size)
    return None
