"""What the benchmarks conclude, on rows made here: benchmarks/report.py's lines of the Targets
list (the matmul limit, the fastest route of each case), the one speed the README quotes, and the
machine and matmul peaks a run prints at its end (benchmarks/harness.py). Rendering the page from
the benchmarks' JSON: tests/test_benchmarks.py (it needs their tiny runs)."""

import os

from benchmark_runs import read_json

from benchmarks import harness, report

ROOT = harness.ROOT


def test_the_readme_headline_speed_is_the_committed_gpu_run():
    """The one number the README quotes is the GPU training table's, as the JSON has it."""
    rows = read_json(os.path.join(harness.OUT_DIR, "accelerator_train_bfloat16.json"))["tables"][0]["rows"]
    speed = {row["contestant"]: row["images_per_s"] for row in rows}
    ours = speed["keras_vit JAX+XLA"]
    quoted = (
        f"ran {ours:.0f} images/s: {ours / speed['timm torch.compile']:.2f}x timm under `torch.compile` "
        f"and {ours / speed['keras-hub JAX+XLA']:.2f}x keras-hub"
    )
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        assert quoted in " ".join(f.read().split())


def test_the_matmul_limit_lines_judge_the_best_case_and_compare_the_kernels():
    def row(case, fraction):
        return {"case": case, "ours": True, "fraction_of_peak": fraction}

    data = {
        "settings": {"matmul_size": 4096},
        "matmul_peak_flops": {"tf bfloat16": 3e11, "torch bfloat16": 1.5e12},
        "tables": [{"rows": [row("a", 0.5), row("b", 0.92), {"case": "b", "ours": False}]}],
    }
    limit, kernel = report._limit_lines(data)
    assert "**met** (best 92%, b; worst 50%)" in limit
    assert "TensorFlow 300 GFLOP/s against PyTorch 1500 GFLOP/s" in kernel and "(0.20x)" in kernel
    data["tables"][0]["rows"][1]["fraction_of_peak"] = 0.85
    assert "**not met** (best 85%" in report._limit_lines(data)[0]


def test_the_fastest_route_line_takes_each_sides_best_row_of_each_case():
    """keras_vit's fastest row of a case against the peers' fastest of the same case: a case
    where keras_vit's default loses but another of its rows wins counts as won, and the verdict
    names the worst case's two rows."""

    def row(case, contestant, images_per_s):
        return {"case": case, "contestant": contestant, "images_per_s": images_per_s}

    rows = [
        row("a", "keras_vit TF", 10.0),
        row("a", "keras_vit OpenVINO", 30.0),
        row("a", "timm eager", 20.0),
        row("a", "timm torch.compile", 25.0),
        row("b", "keras_vit TF", 9.0),
        row("b", "keras_vit OpenVINO", 8.0),
        row("b", "timm torch.compile", 10.0),
    ]
    (line,) = report._fastest_route_line("Inference", rows)
    assert "**not met** (at worst 0.90x, b: keras_vit TF against timm torch.compile)" in line
    assert "keras_vit OpenVINO in 1, keras_vit TF in 1 of the 2 cases" in line
    rows[4]["images_per_s"] = 12.0
    assert (
        "**met** (at worst 1.20x, a: keras_vit OpenVINO against timm torch.compile)"
        in (report._fastest_route_line("Inference", rows)[0])
    )


def test_a_row_with_one_of_keras_vits_paths_switched_off_is_no_route():
    # Such a row measures what the path gains (under XLA it can be the default's own program):
    # its speed must not win a case for keras_vit, nor count among its routes.
    def row(contestant, images_per_s, **fields):
        return {"case": "a", "contestant": contestant, "images_per_s": images_per_s, **fields}

    rows = [
        row("keras_vit TF", 9.0),
        row("keras_vit TF, whole rows", 11.0, switched_off="KERAS_VIT_ROW_PARTS"),
        row("keras-hub TF+XLA", 10.0),
    ]
    (line,) = report._fastest_route_line("Inference", rows)
    assert "**not met** (at worst 0.90x, a: keras_vit TF against keras-hub TF+XLA)" in line
    assert "whole rows" not in line


def test_a_run_prints_its_machine_and_each_frameworks_matmul_peak(tmp_path, capsys):
    # benchmarks.train and .inference end with the CPU they ran on and the peak that each row's
    # "of matmul peak" divides by, per framework and dtype, so the distance to the hardware's
    # limit is on the screen, not only in the JSON.
    row = {"contestant": "keras_vit Trainer TF bfloat16", "gflops_per_s": 190.0, "fraction_of_peak": 0.47}
    columns = (("contestant", "contestant", ""), ("of matmul peak", "fraction_of_peak", ".0%"))
    data = {
        "machine": {"cpu": "AMD EPYC 9R14", "cores": 2},
        "matmul_peak_flops": {
            "tf float32": 2.2e11,
            "tf bfloat16": 4.04e11,
            "torch bfloat16": 4.05e11,
            "seconds": 9,
        },
        "tables": [harness.section("Training step", columns, [row])],
        "notes": [],
    }
    harness.finish(data, str(tmp_path / "train.json"), 0)
    out = capsys.readouterr().out
    assert " 47%" in out
    line = next(x for x in out.splitlines() if x.startswith("matmul peak"))
    assert line == (
        "matmul peak of AMD EPYC 9R14 (2 cores), measured in this run: "
        "tf bfloat16 404 GFLOP/s, tf float32 220 GFLOP/s, torch bfloat16 405 GFLOP/s"
    )
    data["machine"]["accelerator"] = "NVIDIA H100 80GB HBM3"
    assert harness.limit_line(data).startswith("matmul peak of one NVIDIA H100 80GB HBM3, measured")
