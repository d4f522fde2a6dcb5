"""trainers.cli, flags, validation and model_builder: flags over presets, and the CLI error contract.

Every bad input is one line on stderr, exit code 2, and leaves an existing workdir untouched.
The in-process cases call `finetune.main(argv)`; one subprocess checks the real command line.
"""

import errno
import os

import ml_collections
import pytest
from absl import flags as absl_flags
from trainer_cli import TINY_MODEL, run_cli

from configs import finetune as finetune_config
from configs import pretrain as pretrain_config
from keras_vit import fileio
from trainers import cli, errors, finetune, plan_pieces, preemption, training
from trainers import flags as trainer_flags


@pytest.fixture(scope="module")
def cifar_dir(cifar10_data_dir):
    return cifar10_data_dir  # tests/fixtures.py's, shared: the commands below fail before reading it


@pytest.fixture
def workdir(tmp_path):
    """An existing run directory whose files must survive every failed command."""
    path = tmp_path / "run"
    path.mkdir()
    (path / "config.json").write_text("old config\n")
    (path / "results.json").write_text("old results\n")
    return path


def _snapshot(path):
    return {
        p: open(os.path.join(dirpath, p), "rb").read() for dirpath, _, files in os.walk(path) for p in files
    }


def _fails_cleanly(capsys, workdir, args, expect):
    before = _snapshot(workdir)
    code = finetune.main(["finetune", f"--workdir={workdir}", *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2, err
    assert len(err) == 1 and err[0].startswith("finetune: error: "), err
    assert expect in err[0], err[0]
    assert _snapshot(workdir) == before


def test_unknown_dataset(capsys, workdir, tmp_path):
    _fails_cleanly(
        capsys, workdir, ["--dataset=no_such_dataset_xyz", f"--data_dir={tmp_path}"], "no_such_dataset_xyz"
    )


def test_dataset_not_prepared(capsys, workdir, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    _fails_cleanly(capsys, workdir, ["--dataset=cifar10", f"--data_dir={empty}", *TINY_MODEL], "cifar10")


@pytest.mark.parametrize(
    "under, expect",
    [("", "exists and is not a directory"), ("run", "'{file}' is a file, not a folder")],
)
def test_a_workdir_that_can_never_be_a_folder(capsys, tmp_path, cifar_dir, under, expect):
    """The workdir is a file, or a file stands where a folder above it would go: before, the
    second was a NotADirectoryError traceback at the run's first write, after the model was built."""
    notes = tmp_path / "notes.txt"
    notes.write_text("mine\n")
    args = ["--dataset=cifar10", f"--data_dir={cifar_dir}", *TINY_MODEL]
    code = finetune.main(["finetune", f"--workdir={notes / under if under else notes}", *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith("finetune: error: --workdir") and expect.format(file=notes) in err[0], err[0]
    assert notes.read_text() == "mine\n"


def test_a_workdir_the_disk_will_not_create_is_one_line_naming_it(capsys, tmp_path, cifar_dir, monkeypatch):
    """Found at the run's first write: it said "the checkpoints already written are intact" and
    "the folder vanished" of a run that had written nothing."""

    def refuse(path):
        raise PermissionError(errno.EACCES, "Permission denied", str(path))

    monkeypatch.setattr(fileio, "makedirs", refuse)
    args = ["--dataset=cifar10", f"--data_dir={cifar_dir}", *TINY_MODEL, "--total_steps=1"]
    args.append("--warmup_steps=0")
    code = finetune.main(["finetune", f"--workdir={tmp_path / 'run'}", *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 1, err
    assert err[0] == (
        f"finetune: error: cannot create the workdir {tmp_path}/run: permission denied; give --workdir "
        "a folder this process can create and write to."
    )


@pytest.mark.parametrize("split, message", [("trian", "bad split 'trian'"), ("train[:0]", "has no examples")])
def test_a_bad_training_split_writes_nothing(capsys, tmp_path, cifar_dir, split, message):
    """It was found when the training pipeline was built, after config.json and TensorBoard's
    files were written: the corrected command was then refused as a run with other settings."""
    workdir = tmp_path / "run"
    args = ["--dataset=cifar10", f"--data_dir={cifar_dir}", *TINY_MODEL, f"--train_split={split}"]
    code = finetune.main(["finetune", f"--workdir={workdir}", *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and message in err[0], err
    assert not workdir.exists()


def test_unknown_model(capsys, workdir, cifar_dir):
    _fails_cleanly(
        capsys,
        workdir,
        ["--dataset=cifar10", f"--data_dir={cifar_dir}", "--model=ViT-X_99"],
        "known models: ViT-Ti_16",
    )


def test_missing_weights_file(capsys, workdir, cifar_dir, tmp_path):
    args = ["--dataset=cifar10", f"--data_dir={cifar_dir}", *TINY_MODEL, f"--weights={tmp_path}/none.npz"]
    _fails_cleanly(capsys, workdir, args, "no such file")


def test_batch_not_divisible_by_replicas(capsys, workdir, cifar_dir):
    args = ["--dataset=cifar10", f"--data_dir={cifar_dir}", *TINY_MODEL, "--cpu_devices=2", "--batch_size=15"]
    _fails_cleanly(capsys, workdir, args, "not divisible by 2 replicas")


@pytest.mark.parametrize(
    "flag",
    [
        "--total_steps=-5",
        "--batch_size=0",
        "--warmup_steps=-1",
        "--accum_steps=0",
        "--accum_steps=two",
        "--device_memory_gb=-1",
        "--seed=-1",  # NumPy's seeding raised a traceback
        "--seed=4294967296",
    ],
)
def test_bad_numbers(capsys, workdir, cifar_dir, flag):
    _fails_cleanly(
        capsys, workdir, ["--dataset=cifar10", f"--data_dir={cifar_dir}", flag], flag.split("=")[0]
    )


def test_no_tpu(capsys, workdir, cifar_dir):
    _fails_cleanly(capsys, workdir, ["--dataset=cifar10", f"--data_dir={cifar_dir}", "--strategy=tpu"], "TPU")


@pytest.mark.parametrize(
    "args, expect",
    [
        (["--decay_type=step"], "decay_type"),
        (["--no_such_flag=1"], "no_such_flag"),
        (["--eval_splits=test"], "name=split"),
        (["--batch_size=lots"], "batch_size"),
    ],
)
def test_bad_flags(capsys, workdir, cifar_dir, args, expect):
    _fails_cleanly(capsys, workdir, ["--dataset=cifar10", f"--data_dir={cifar_dir}", *args], expect)


@pytest.mark.parametrize(
    "raised, code, line",
    [
        (preemption.Stopped, 0, ("out", preemption.stopped_line())),
        (KeyboardInterrupt, 130, ("err", "demo: interrupted")),
    ],
)
def test_a_command_with_its_own_flags_ends_on_signals_as_the_trainers_do(capsys, raised, code, line):
    """The demo runs trainings with flags of its own: a SIGTERM between its stages was Python's
    default (killed, status 143) and Ctrl-C a KeyboardInterrupt traceback."""
    values = absl_flags.FlagValues()
    absl_flags.DEFINE_integer("steps", 1, "steps", flag_values=values)

    def body(values):
        raise raised()

    assert cli.main_with_own_flags("demo", values, "usage: demo", body, ["demo", "--steps=2"]) == code
    said = capsys.readouterr()
    stream, expected = line
    assert getattr(said, stream).strip().splitlines() == [expected]


def test_command_line_error_has_no_traceback(tmp_path):
    proc = run_cli(
        "finetune", ["--dataset=no_such_dataset_xyz", f"--workdir={tmp_path}/run", f"--data_dir={tmp_path}"]
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("finetune: error:")]
    assert len(errors) == 1, proc.stderr
    assert not os.path.exists(tmp_path / "run")


def test_flags_override_the_dataset_preset():
    config = trainer_flags.parse_flags(
        [
            "finetune",
            "--dataset=cifar10",
            "--total_steps=7",
            "--nopre_logits",
            "--base_lr=0.5",
            "--eval_splits=val=test[:10]",
        ],
        finetune.get_config,
    )
    assert config.total_steps == 7 and config.warmup_steps == 500  # the cifar10 preset's warm-up
    assert config.base_lr == 0.5 and config.pre_logits is False
    assert trainer_flags.parse_eval_splits(config.eval_splits) == {"val": "test[:10]"}
    assert config.train_split == "train[:98%]"


def test_presets_follow_the_paper():
    pets = finetune_config.get_config("oxford_iiit_pet")
    assert (pets.optimizer, pets.batch_size, pets.grad_norm_clip, pets.weight_decay) == ("sgd", 512, 1.0, 0.0)
    assert (pets.image_size, pets.base_lr, pets.decay_type) == (384, 0.01, "cosine")
    assert (pets.total_steps, pets.warmup_steps, pets.train_split) == (500, 100, "train[:90%]")
    assert trainer_flags.parse_eval_splits(pets.eval_splits) == {"minival": "train[90%:]", "test": "test"}
    assert (
        finetune_config.get_config("cifar100").total_steps,
        finetune_config.get_config("cifar100").warmup_steps,
    ) == (10_000, 500)
    assert finetune_config.get_config("imagenet2012").total_steps == 20_000
    pre = pretrain_config.get_config("imagenet2012")
    assert (pre.optimizer, pre.batch_size, pre.weight_decay, pre.warmup_steps) == ("adam", 4096, 0.3, 10_000)
    assert (pre.decay_type, pre.dropout_rate, pre.pre_logits, pre.base_lr) == ("cosine", 0.1, True, 3e-3)


def test_model_settings_apply_overrides_and_pre_logits():
    config = pretrain_config.get_config("digits")
    kwargs = plan_pieces.model_settings(config).create_kwargs(num_classes=10)
    assert kwargs["hidden_size"] == 64 and kwargs["representation_size"] == 64 and kwargs["num_classes"] == 10
    assert kwargs["include_preprocessing"] is False and kwargs["classifier_activation"] is None
    config.pre_logits = False
    assert plan_pieces.model_settings(config).kwargs["representation_size"] is None
    config.update(pre_logits=True, objective="masked_patch")  # it trains no pre-logits layer
    assert plan_pieces.model_settings(config).kwargs["representation_size"] is None


def test_misspelt_flag_is_one_line_naming_the_closest_field(capsys, workdir, cifar_dir):
    _fails_cleanly(
        capsys,
        workdir,
        ["--dataset=cifar10", f"--data_dir={cifar_dir}", "--totl_steps=5"],
        "Did you mean: total_steps",
    )


def test_config_is_locked_after_the_flags():
    config = trainer_flags.parse_flags(
        ["finetune", "--dataset=cifar10", "--total_steps=7"], finetune.get_config
    )
    config.total_steps = 9  # existing fields stay writable (notebooks)
    with pytest.raises(AttributeError, match="total_steps"):
        config.totl_steps = 5


def test_misspelt_field_of_a_python_config_is_one_line(tmp_path):
    """A notebook that builds its own (unlocked) config gets the closest field's name, before any work."""
    fields = finetune_config.get_config("digits").to_dict()
    fields.update(workdir=str(tmp_path / "run"), totl_steps=5)
    with pytest.raises(
        errors.UsageError, match="unknown config field 'totl_steps'; did you mean 'total_steps'"
    ):
        training.run(ml_collections.ConfigDict(fields))
    assert not (tmp_path / "run").exists()


def test_first_checks_come_in_the_order_a_user_fixes_things(capsys, tmp_path):
    """What to train on, then the model, then the schedule, then where to write: each error names
    the flag to change, and fixing it shows the next one."""
    argv = ["finetune", "--dataset=digitz", "--model=ViT-X_99", "--total_steps=10"]
    fixes = [
        ("unknown dataset 'digitz': give --dataset ", "--dataset=digits"),
        ("unknown --model 'ViT-X_99'", "--model=ViT-Ti_16"),
        # the digits preset's 50 warm-up steps
        ("--warmup_steps (50) exceeds --total_steps (10): lower --warmup_steps", "--warmup_steps=2"),
        ("--workdir is required", f"--workdir={tmp_path / 'run'}"),
    ]
    for expect, fix in fixes:
        assert finetune.main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"finetune: error: {expect}"), err
        flag = fix.split("=")[0]
        argv = [a for a in argv if not a.startswith(flag + "=")] + [fix]
    assert not (tmp_path / "run").exists()


def test_help_groups_the_flags_by_topic_with_examples_and_what_a_preset_is(capsys):
    with pytest.raises(SystemExit):
        finetune.main(["finetune", "--help"])
    out = capsys.readouterr().out
    intro, _, flag_list = out.partition("\nData:\n")
    examples = [
        line.strip() for line in intro.splitlines() if line.startswith("  python -m trainers.finetune")
    ]
    assert len(examples) == 2 and "Examples:" in intro
    assert "A preset is" in " ".join(intro.split())
    # The topics in the order a user settles them, each flag once, under its topic.
    titles = ["Data", "Model", "Optimization", "Loop and checkpoints", "Evaluation", "Hardware", "Output"]
    sections = {}
    title = "Data"
    for line in flag_list.splitlines():
        if line.endswith(":") and not line.startswith(" "):
            title = line[:-1]
        elif line.startswith("  --"):
            sections.setdefault(title, []).append(line.split()[0].split("=")[0].replace("[no]", ""))
    assert list(sections) == titles
    flags_listed = [name for names in sections.values() for name in names]
    assert sorted(flags_listed) == sorted(f"--{name}" for name in finetune.get_config())
    assert sections["Data"][0] == "--dataset" and sections["Model"][0] == "--model"
    for title, name in [
        ("Optimization", "--warmup_steps"),
        ("Loop and checkpoints", "--checkpoint_every"),
        ("Evaluation", "--eval_every"),
        ("Hardware", "--engine"),
        ("Output", "--workdir"),
    ]:
        assert name in sections[title], (title, name)
    assert "  --loss=<softmax|sigmoid>" in out.splitlines()


def test_help_shows_each_flags_preset_default(capsys):
    with pytest.raises(SystemExit) as stop:
        finetune.main(["finetune", "--help"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: python -m trainers.finetune ")
    out = " ".join(out.split())  # absl wraps the help text
    assert "(preset default: 384)" in out and "(preset default: 'imagenet21k')" in out
