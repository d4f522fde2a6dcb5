"""benchmarks/peak.py: the matmul limit each benchmark divides its rows by, measured at a size
that a dtype without fast kernels can finish."""

import time

from benchmarks import harness, peak, report


def _product_taking(seconds_at_256, calls):
    """A stand-in product whose time grows as the cube of its size, as a matmul's work does."""

    def product(size):
        calls.append(size)
        return lambda: time.sleep(seconds_at_256 * (size / 256) ** 3)

    return product


def test_a_fast_product_is_measured_at_the_requested_size():
    calls = []
    assert peak._size_to_measure(_product_taking(1e-6, calls), 4096, max_seconds=1.0) == 4096
    assert calls == [256, 512, 1024, 2048]


def test_a_slow_product_is_measured_at_the_largest_size_within_the_limit():
    """PyTorch's bfloat16 product without bfloat16 instructions (about 1 GFLOP/s, 170 s for one
    4096² product): measured at the full size, one benchmark's peaks took over half an hour."""
    calls = []
    # 0.2 ms at 256, so 12.8 ms at 1024 and 0.1 s at 2048: 2048 is within 0.5 s, 4096 (0.8 s) is not.
    assert peak._size_to_measure(_product_taking(2e-4, calls), 4096, max_seconds=0.5) == 2048
    assert calls == [256, 512, 1024, 2048]
    # A requested size that is no power of two is reached, not passed.
    assert peak._size_to_measure(_product_taking(1e-6, []), 3000, max_seconds=1.0) == 3000
    assert peak._size_to_measure(_product_taking(1e-6, []), 100, max_seconds=1.0) == 100


def test_the_peaks_keep_the_size_of_a_dtype_measured_below_the_requested_one():
    sizes = {"torch bfloat16": 1024}
    before = {"tf float32": 6.0e10, "torch bfloat16": 1.0e9, "seconds": 3.0, "sizes": sizes}
    after = {"tf float32": 6.8e10, "torch bfloat16": 0.9e9, "seconds": 2.0, "sizes": sizes}
    merged = peak.best(before, after)
    assert merged == {
        "tf float32": 6.8e10,
        "torch bfloat16": 1.0e9,
        "seconds": 5.0,
        "sizes": {"torch bfloat16": 1024},
    }
    assert harness.described_peaks(merged) == "tf float32 68 GFLOP/s, torch bfloat16 1 GFLOP/s (1024²)"
    # A JSON written before sizes were recorded reads as before.
    assert harness.described_peaks({"tf float32": 6.8e10, "seconds": 1}) == "tf float32 68 GFLOP/s"


def test_the_kernel_line_names_both_sizes_where_they_differ():
    data = {
        "settings": {"matmul_size": 4096},
        "matmul_peak_flops": {
            "tf float32": 6.8e10,
            "torch float32": 5.0e10,
            "tf bfloat16": 6.0e10,
            "torch bfloat16": 1.0e9,
            "sizes": {"torch bfloat16": 1024},
        },
        "tables": [{"rows": [{"case": "a", "ours": True, "fraction_of_peak": 0.9}]}],
    }
    _, float32, bfloat16 = report._limit_lines(data)
    assert "on the same 4096² matmul (1.36x)" in float32
    assert "PyTorch 1 GFLOP/s on a 4096² and a 1024² matmul (60.00x)" in bfloat16


def test_a_dtype_without_fast_kernels_is_left_out_with_a_note():
    rates = {"tf float32": 6.8e10, "tf bfloat16": 6.1e10, "torch float32": 5.0e10, "torch bfloat16": 1.0e9}
    skipped = peak.without_fast_kernels({**rates, "seconds": 1.0, "sizes": {"torch bfloat16": 1024}})
    assert list(skipped) == [("torch", "bfloat16")]
    assert skipped["torch", "bfloat16"] == (
        "PyTorch's bfloat16 contestants not run: its bfloat16 matmul ran at 1.0 GFLOP/s on this CPU, "
        "2% of its float32 (50 GFLOP/s): no fast bfloat16 kernel here"
    )
    # At a tenth or more of float32 (TensorFlow's oneDNN emulation above), a dtype is timed.
    assert peak.without_fast_kernels({**rates, "torch bfloat16": 5.0e9}) == {}


def test_inference_times_no_contestant_of_a_skipped_framework_and_dtype():
    from types import SimpleNamespace

    from benchmarks import inference

    built = []

    def build_step(kind, shape, image_size, batch, dtype):
        built.append((kind, dtype))
        return lambda: None

    args = SimpleNamespace(repeats=1, min_seconds=0.0)
    rows = inference.measure_cases(
        [("ViT-Ti_16", 32)],
        ["keras_vit", "timm-eager"],
        [1],
        ["float32", "bfloat16"],
        args,
        {"num_layers": 1},
        build_step=build_step,
        skipped={("torch", "bfloat16"): "note"},
    )
    assert built == [("keras_vit", "float32"), ("timm-eager", "float32"), ("keras_vit", "bfloat16")]
    assert [r["case"].split()[-1] for r in rows] == ["float32", "float32", "bfloat16"]
