"""docs/guides/training.md's blocks: fine-tuning from Python and from the command line (on the
stand-in TFDS data_dir and shortened with two-step flags), accelerators, error samples,
the console sample and the batches that do not fit.
"""

import importlib
import json
import os
import re

import console_scripts
import pytest
import synthetic_checkpoints as synth
from docs_standins import (
    SHORT,
    SHORT_TINY,
    block,
    console_pattern,
    fresh_keras,  # noqa: F401 (autouse: a fresh Keras session for each test)
    replaced,
    run_command,
    run_python,
    trainer_config,
    unrunnable,
)
from readme_blocks import ROOT, split_command
from trainer_cli import TINY_MODEL, read_results, run_child

import keras_vit
from configs import finetune as finetune_config
from trainers import flags, memory
from trainers.data import tfds_prepare
from trainers.errors import TrainerError


@pytest.fixture
def small_presets(monkeypatch):
    """configs.finetune.get_config gives the real preset, shrunk to a two-step run of a tiny ViT."""
    original = finetune_config.get_config

    def small(dataset="oxford_iiit_pet"):
        config = flags.parse_flags(["finetune", f"--dataset={dataset}", *SHORT_TINY], original)
        config.unlock()
        return config

    monkeypatch.setattr(finetune_config, "get_config", small)


@pytest.mark.slow  # 9 s on the 2-core Xeon: a trainer run from Python
def test_finetune_from_python(small_presets, default_tfds, tmp_path):
    workdir = str(tmp_path / "pets")
    ns, _ = run_python(block("finetune-python"), replacements={"/tmp/pets": workdir})
    assert ns["results"] == read_results(workdir)  # "the dict also written to WORKDIR/results.json"
    assert set(ns["results"]["eval"]) == {"minival", "test"} and ns["results"]["steps"] == 2


def test_colab_tpu_block(small_presets, tfds_dir, tmp_path):
    replacements = {"/content/tfds": tfds_dir, "/content/runs/pets": str(tmp_path / "pets")}
    with pytest.raises(TrainerError) as err:  # every field is accepted; then: no TPU here
        run_python(block("colab-tpu"), replacements=replacements)
    assert str(err.value).startswith("no TPU found (--tpu=local")
    assert not os.path.exists(tmp_path / "pets")


@pytest.mark.slow
def test_sweep_command(tfds_dir, tmp_path, capsys):
    (command,) = block("sweep").commands
    workdir = tmp_path / "sweep"
    replacements = {"$DATA": tfds_dir, "/tmp/pets_sweep": str(workdir)}
    code, out, err = run_command(command, capsys, replacements, [*SHORT_TINY, "--sweep_lrs=0.01,0.03"])
    assert code == 0, err
    results = read_results(workdir)
    assert results["chosen_lr"] in (0.01, 0.03) and set(results["minival_accuracy"]) == {"0.01", "0.03"}
    assert os.path.exists(workdir / "final" / "model.npz")


def test_accelerator_commands_refuse_without_one(tfds_dir, tmp_path, capsys):
    import tensorflow as tf

    replacements = {
        "$DATA": tfds_dir,
        "gs://BUCKET": str(tmp_path / "bucket"),
        "/tmp/pets": str(tmp_path / "pets"),
        "/data/imagenet": str(tmp_path / "imagenet"),
    }
    commands = [*block("gpu").commands, *block("tpu").commands, *block("pretrain-tpu").commands]
    assert len(commands) == 3
    for command in commands:
        config = trainer_config(command, replacements)  # every flag parses, with its value
        accelerator = config.strategy
        if accelerator == "gpu" and tf.config.list_physical_devices("GPU"):
            continue
        code, out, err = run_command(command, capsys, replacements)
        expected = (
            "no TPU found (--tpu=local"
            if accelerator == "tpu"
            else "--strategy=gpu but TensorFlow sees no GPU"
        )
        assert code == 2 and expected in err and len(err.strip().splitlines()) == 1, command + err
    assert not os.path.exists(tmp_path / "pets") and not os.path.exists(tmp_path / "bucket")


def test_finetune_from_own_npz(default_tfds, tmp_path, capsys):
    """--weights=FILE alone: the architecture comes from the file (a pre-training run's export)."""
    mine = dict(patch_size=8, hidden_size=32, num_layers=1, num_heads=2, mlp_dim=64)
    bucket = tmp_path / "bucket" / "runs" / "vit_b16"
    os.makedirs(bucket)
    synth.save(bucket / "model.npz", synth.vit_jax_params(5, image_size=32, representation_size=32, **mine))
    (command,) = block("finetune-own-npz").commands
    workdir = tmp_path / "pets_from_mine"
    replacements = {"gs://BUCKET": str(tmp_path / "bucket"), "/tmp/pets_from_mine": str(workdir)}
    code, out, err = run_command(command, capsys, replacements, [*SHORT, "--image_size=32"])
    assert code == 0, err
    config = json.loads((workdir / "config.json").read_text())
    assert {k: config[k] for k in mine} == mine
    assert read_results(workdir)["steps"] == 2


@pytest.mark.slow  # 14 s: the block's pre-training run
def test_masked_patch_command(tmp_path, capsys):
    (command,) = block("masked-patch").commands
    workdir = tmp_path / "digits_mpp"
    code, out, err = run_command(command, capsys, {"/tmp/digits_mpp": str(workdir)}, SHORT_TINY)
    assert code == 0, err
    config = json.loads((workdir / "config.json").read_text())
    assert (config["objective"], config["masked_target"]) == ("masked_patch", "mean_color")
    assert 0 <= read_results(workdir)["eval"]["test"]["masked_patch_accuracy"] <= 1
    assert "masked_patch_accuracy" in out


def test_tensorboard_command(tmp_path):
    import tensorflow as tf

    (command,) = unrunnable("tensorboard", "a server that runs until stopped").commands
    _, argv = split_command(command)
    with tf.summary.create_file_writer(str(tmp_path / "train")).as_default():
        tf.summary.scalar("loss", 0.5, step=1)
    logdir = argv[1].replace("WORKDIR", str(tmp_path))
    code, out, err = console_scripts.run(argv[0], [logdir, "--inspect"])  # [train] installs it
    assert code == 0 and "loss" in out, out + err


def test_trainer_error_samples(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(tfds_prepare, "_network_available", lambda: False)  # as on a machine offline
    unknown, warmup, not_divisible, not_prepared = block("trainer-errors").text.strip().splitlines()
    empty = tmp_path / "data"
    os.makedirs(empty)
    for args, sample in (
        (["--dataset=digitz", "--total_steps=10"], unknown),
        (["--dataset=oxford_iiit_pet", f"--data_dir={empty}", "--total_steps=10"], warmup),
        (["--dataset=digits", "--strategy=cpu", "--cpu_devices=2", "--batch_size=15"], not_divisible),
        (["--dataset=cifar10", f"--data_dir={empty}"], not_prepared),
    ):
        code, _, err = run_command(
            f"python -m trainers.finetune --workdir={tmp_path / 'run'}", capsys, extra=args
        )
        assert code == 2 and err.strip().replace(str(empty), "/data") == sample
    assert os.listdir(empty) == [] and not os.path.exists(tmp_path / "run")  # nothing written

    sample = block("not-prepared").text.strip()
    with pytest.raises(TrainerError) as err:
        importlib.import_module("trainers.data").get_spec("cifar100", data_dir=str(empty))
    assert str(err.value).replace(str(empty), "/data/tfds") == sample


@pytest.mark.slow  # 15 s: the block's training run
def test_config_described_run(tmp_path, capsys):
    (command,) = block("config-described").commands
    config = trainer_config(command)
    assert set(json.loads(config.evals)) == {"test", "top5"} and config.pp_train.endswith("|mixup(0.2)")
    workdir = tmp_path / "reg_demo"
    code, _, err = run_command(command, capsys, {"/tmp/reg_demo": str(workdir)}, SHORT)
    assert code == 0, err
    results = read_results(workdir)
    assert results["eval"]["test"]["examples"] == 360 and 0 <= results["top5/top5_accuracy"] <= 1


@pytest.mark.slow  # 6-7 s on the 2-core Xeon
def test_augreg_block(tmp_path, capsys):
    (command,) = block("augreg").commands
    config = trainer_config(command)
    assert (config.augreg, config.randaug, config.mixup, config.stochastic_depth) == (
        "medium2",
        "2,10",
        "level",
        0.1,
    )
    workdir = tmp_path / "digits_augreg"
    code, _, err = run_command(command, capsys, {"/tmp/digits_augreg": str(workdir)}, SHORT_TINY)
    assert code == 0, err
    assert read_results(workdir)["steps"] == 2


@pytest.mark.slow
def test_engine_commands(tmp_path):
    """The jax engine's commands, shortened, in child processes (Keras' backend is per process)."""
    commands = block("jax-engine").commands
    assert len(commands) == 2
    for command, replicas in zip(commands, (1, 2)):
        workdir = tmp_path / f"jax{replicas}"
        stand_ins = {"/tmp/digits_jax2": str(workdir), "/tmp/digits_jax": str(workdir)}
        _, argv = split_command(replaced(command, stand_ins, strict=False))
        assert argv[:3] == ["python", "-m", "trainers.finetune"], argv
        proc = run_child("finetune", [*argv[3:], *SHORT], timeout=600)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert "hardware: jax engine, JAX data parallel: " in proc.stdout
        assert read_results(workdir)["replicas"] == replicas


@pytest.mark.slow
def test_console_sample(tmp_path, capsys):
    """The sample is what the command named just above it prints, line for line, numbers aside."""
    console = block("console")
    (command,) = re.findall(r"`(python -m trainers\.\w+ [^`]*)`\s+printed", console.before)
    workdir = re.search(r"--workdir=(\S+)", command).group(1)
    code, out, err = run_command(command.replace(workdir, str(tmp_path / "run")), capsys)
    assert code == 0, err
    printed = [line for line in out.replace(str(tmp_path / "run"), workdir).splitlines() if line.strip()]
    sample = console.text.strip().splitlines()
    assert len(printed) == len(sample), "\n".join(printed)
    # What --mixed_precision=auto picked says why in words that depend on this machine's CPU.
    reason = re.compile(r"\(auto: [^)]*\)")
    for line, expected in zip(printed, sample):
        line, expected = reason.sub("(auto: REASON)", line), reason.sub("(auto: REASON)", expected)
        assert re.fullmatch(console_pattern(expected), line), (expected, line)


# --- Batches that do not fit -------------------------------------------------------------------
# The training guide's run is ViT-Ti/16 at 384 px on 23 GB (nine minutes here); the test runs the same
# command on a one-block model at 32 px, with the available RAM set so that auto must make the
# same choice (16 micro-batches of 32), and compares the printed lines with the sample's.

TINY_SHAPE = TINY_MODEL[2:]  # its shape flags, without --model and --weights


@pytest.mark.slow
def test_accum_auto_card_command(tfds_dir, tmp_path, capsys, monkeypatch):
    (command,) = block("accum-auto").commands
    sample = block("accum-auto-output").text.strip().splitlines()
    config = trainer_config(command + " " + " ".join(TINY_SHAPE), {"/tmp/fakepets": tfds_dir})
    model = keras_vit.create_model(
        config.model, num_classes=37, **{a[2:].split("=")[0]: int(a.split("=")[1]) for a in TINY_SHAPE}
    )
    need = memory.estimate(model, image_size=32)
    pipeline = memory.input_pipeline_bytes(512, 32)
    # Between what micro-batches of 32 and of 64 need: auto must choose 32, as in the guide's run.
    budget = (need.total(32) + need.total(64)) / 2 + pipeline
    monkeypatch.setattr(memory, "_available_ram", lambda: int(budget / memory.USABLE_FRACTION))
    replacements = {"/tmp/fakepets": tfds_dir, "/tmp/card": str(tmp_path / "card")}
    code, out, err = run_command(command, capsys, replacements, TINY_SHAPE)
    assert code == 0, err
    printed = [line for line in out.splitlines() if line.startswith(("batch:", "step 1/", "step 2/"))]
    assert len(printed) == len(sample), out
    # What --mixed_precision=auto picked says why in words that depend on this machine's CPU.
    reason = re.compile(r"\(auto: [^)]*\)")
    for line, expected in zip(printed, sample):
        line, expected = reason.sub("(auto: REASON)", line), reason.sub("(auto: REASON)", expected)
        assert re.fullmatch(console_pattern(expected), line), (expected, line)
    assert "= 16 micro-batches of 32 (gradients summed); accum_steps auto: 16" in printed[0]
    assert read_results(tmp_path / "card")["steps"] == 2


def test_accum_nothing_fits_sample(tfds_dir, tmp_path, capsys):
    nothing_fits = block("nothing-fits")
    sample = nothing_fits.text.strip()
    # The prose: the card's command (ViT-B/16 at 384 px) with --weights=none, --device_memory_gb=2
    # and float32 (so the sample is the same on a CPU where auto would pick bfloat16).
    assert "--device_memory_gb=2" in nothing_fits.before and "--mixed_precision=none" in nothing_fits.before
    code, _, err = run_command(
        f"python -m trainers.finetune --dataset=oxford_iiit_pet --data_dir={tfds_dir} --weights=none "
        f"--mixed_precision=none --device_memory_gb=2 --workdir={tmp_path / 'run'}",
        capsys,
    )
    assert code == 2 and err.strip() == sample
    assert not os.path.exists(tmp_path / "run")


def test_memory_benchmark_table():
    """The table's estimates are what trainers.memory estimates today, for the models it names."""
    rows = block("memory-table").text.strip().splitlines()[1:]
    assert len(rows) >= 4
    for row in rows:
        case, parameters, measured, estimated, ratio = row.split()
        variant, size, batch = case.split(":")
        model = keras_vit.create_model(
            variant,
            image_size=int(size),
            num_classes=37,
            include_preprocessing=False,
            classifier_activation=None,
        )
        assert model.count_params() == int(parameters.replace(",", "")), case
        assert float(estimated) == round(
            memory.estimate(model, image_size=int(size)).total(int(batch)) / 1e9, 2
        ), case
        assert float(estimated) >= float(measured), case  # an upper bound, as the guide says
        assert float(ratio) == pytest.approx(float(estimated) / float(measured), abs=0.011), case


def test_the_story_of_a_run_is_training_py_as_written():
    # Each line of the page's outline (its code, without the comments) is a line of _run, in order.
    source = open(os.path.join(ROOT, "trainers", "training.py"), encoding="utf-8").read()
    body = [line.strip() for line in source.split("def _run(", 1)[1].splitlines()]
    at = 0
    for line in block("training-story").text.strip().splitlines()[1:]:
        code = line.split("  #", 1)[0].strip()
        if code in ("", "..."):
            continue
        assert code in body[at:], f"not in trainers/training.py's _run (in order): {code}"
        at = body.index(code, at) + 1
