"""The GPU benchmark (benchmarks/accelerator.py) run as a command on this CPU at a tiny size, its
flags, the trainer's row where TensorFlow is missing, and the GPU targets' verdicts."""

import os

import pytest
from benchmark_runs import FRAMEWORK_VARIABLE, read_json, run_benchmark, table_rows, timm_installed

# This process loaded TensorFlow first (conftest.py): the benchmarks must leave PyTorch out.
os.environ[FRAMEWORK_VARIABLE] = "tf"

from benchmarks import accelerator, flops, harness, jax_trainer, report  # noqa: E402

ROOT = harness.ROOT


# --- the GPU benchmark ------------------------------------------------------------------------


@pytest.mark.slow
def test_accelerator_runs_the_keras_contestants_on_jax(tmp_path):
    """As a command, on this CPU: keras_vit and keras-hub on Keras' JAX backend (and timm where
    installed), inference and a training step, in one JSON."""
    with_timm = timm_installed()
    argv = ["--cases=ViT-Ti_16:32", "--batch_sizes=2", "--dtypes=bfloat16", "--train_cases=ViT-Ti_16:32:4"]
    argv += [f"--peers=keras-hub{',timm' if with_timm else ''}", "--timm_modes=eager", "--steps_per_call=2"]
    run_benchmark(
        "accelerator",
        [*argv, f"--out={tmp_path}/a.json"],
        timeout=600,
        KERAS_BACKEND="jax",
        JAX_PLATFORMS="cpu",
    )
    data = read_json(tmp_path / "a.json")
    names = ["keras_vit JAX+XLA", "keras-hub JAX+XLA"] + (["timm eager"] if with_timm else [])
    assert [part["title"] for part in data["tables"]] == ["Inference", "Training step"]
    # Training also times the trainer itself (trainers.finetune --engine=jax) beside the bare step.
    trainer = "keras_vit Trainer JAX+XLA (trainers.finetune --engine=jax)"
    for part, expected in zip(data["tables"], [names, [names[0], trainer, *names[1:]]]):
        assert [r["contestant"] for r in part["rows"]] == expected
        for r in part["rows"]:
            assert r["images_per_s"] > 0 and r["fraction_of_peak"] > 0, r
            assert r["mfu"] is None  # no datasheet peak for a CPU
    assert {"jax float32", "jax bfloat16"} <= set(data["matmul_peak_flops"])
    # Training FLOPs are 3 forwards of the training shape (37 classes), per image.
    row = table_rows(data, 1)[0]
    per_image = flops.train_step(32, **flops.shape("ViT-Ti_16", num_layers=1), num_classes=37)
    assert row["gflops_per_s"] == pytest.approx(per_image * row["images_per_s"] / 1e9)


def test_accelerator_flags_and_datasheet():
    assert accelerator.parse_train_cases("ViT-B_16:224:128,ViT-L_16:384:8") == [
        ("ViT-B_16", 224, 128),
        ("ViT-L_16", 384, 8),
    ]
    assert accelerator.parse_train_cases("none") == []
    with pytest.raises(
        SystemExit, match="--train_cases entry 'ViT-B_16:224': write VARIANT:IMAGE_SIZE:BATCH"
    ):
        accelerator.parse_train_cases("ViT-B_16:224")
    with pytest.raises(SystemExit, match="unknown or hybrid variant 'R50\\+ViT-B_16'"):
        accelerator.main(["--cases=R50+ViT-B_16:224", "--peers=none"])
    assert accelerator.datasheet_peak("NVIDIA H100 80GB HBM3")["bfloat16"] == pytest.approx(989.4e12)
    assert accelerator.datasheet_peak("Intel(R) Xeon(R)") == {}


def test_without_tensorflow_the_trainer_row_is_a_note(monkeypatch):
    """A GPU machine with JAX only: the bare step is measured, the trainer (which tf.data feeds)
    is left out, and the note says why."""
    find_spec = jax_trainer.importlib.util.find_spec
    absent = lambda name: None if name == "tensorflow" else find_spec(name)  # noqa: E731
    monkeypatch.setattr(jax_trainer.importlib.util, "find_spec", absent)
    assert "needs TensorFlow and JAX (tensorflow missing here" in jax_trainer.missing()
    kinds = ["keras_vit", "keras-hub"]
    assert accelerator.training_kinds(kinds) == kinds
    monkeypatch.undo()
    assert accelerator.training_kinds(kinds) == ["keras_vit", "keras_vit-trainer", "keras-hub"]


def test_gpu_targets_judge_each_table_at_its_worst_case():
    def table_rows(case_ratios):
        found = []
        for case, ours, peer in case_ratios:
            found += [
                {"case": case, "contestant": "keras_vit JAX+XLA", "ours": True, "images_per_s": ours},
                {"case": case, "contestant": "timm torch.compile", "ours": False, "images_per_s": peer},
            ]
        return found

    data = {
        "machine": {"accelerator": "NVIDIA H100 80GB HBM3", "cpu": "x", "cores": 16, "python": "3.12"},
        "tables": [
            {"title": "Inference", "rows": table_rows([("a", 300, 100), ("b", 90, 100)])},
            {"title": "Training step", "rows": table_rows([("c", 101, 100)])},
        ],
    }
    trainer = {"case": "c", "contestant": "keras_vit Trainer JAX+XLA", "ours": False, "images_per_s": 50}
    data["tables"][1]["rows"].append(trainer)  # the trainer's own step: not a peer to beat
    inference_line, train_line = report._gpu_lines("GPU, bfloat16", data)
    assert "on NVIDIA H100 80GB HBM3" in inference_line
    assert "**not met** (keras_vit / peer at worst: timm torch.compile 0.90x)" in inference_line
    assert "**met** (keras_vit / peer at worst: timm torch.compile 1.01x)" in train_line
