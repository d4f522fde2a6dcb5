"""--base_lr=sweep: the paper's learning-rate choice on minival, then a retrain on train + minival.

The sweeps run `python -m trainers.finetune` with a tiny ViT on fake TFDS data (subprocesses,
~20 s each); the argument checks and the choice rule run in-process.
"""

import json
import os
import signal
import time

import pytest
from fixtures import TINY_DIGITS_FLAGS
from trainer_cli import TINY_MODEL, make_fake_tfds, plugin_tags, read_results, run_cli, scalar_tags, start_cli

from configs import finetune as finetune_config
from trainers import errors, finetune, sweep
from trainers import flags as trainer_flags

# 1e30 diverges at once; of the other two, 0.1 has the better minival accuracy on this data, so the
# choice is not simply the first rate.
RATES = [0.001, 0.1, 1e30]
SWEEP = TINY_MODEL + [
    "--dataset=oxford_iiit_pet",
    "--base_lr=sweep",
    "--sweep_lrs=" + ",".join(map(repr, RATES)),
    "--batch_size=16",
    "--total_steps=20",
    "--warmup_steps=2",
    "--steps_per_loop=10",
    "--eval_every=0",
    "--checkpoint_every=10",
    "--seed=1",
]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tfds")
    make_fake_tfds(path, "oxford_iiit_pet", per_class=6, test_per_class=2)
    return str(path)


@pytest.fixture(scope="module")
def swept(data_dir, tmp_path_factory):
    """One uninterrupted sweep: (workdir, its output)."""
    workdir = str(tmp_path_factory.mktemp("sweep") / "run")
    proc = run_cli("finetune", SWEEP + [f"--data_dir={data_dir}", f"--workdir={workdir}"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    return workdir, proc.stdout


def _json(*parts):
    with open(os.path.join(*parts)) as f:
        return json.load(f)


@pytest.mark.slow
def test_sweep_picks_the_best_minival_rate_and_retrains_on_train_plus_minival(swept):
    workdir, stdout = swept
    summary = read_results(workdir)
    assert summary["sweep_lrs"] == RATES
    assert summary["workdirs"] == {
        **{repr(r): os.path.join(workdir, f"lr_{r!r}") for r in RATES},
        "final": os.path.join(workdir, "final"),
    }
    # Each rate's accuracy is what its own run measured on minival; the diverged rate has none.
    measured = {}
    for rate in RATES[:2]:
        sub = summary["workdirs"][repr(rate)]
        assert _json(sub, "config.json")["base_lr"] == rate
        assert _json(sub, "config.json")["train_split"] == "train[:90%]"
        measured[rate] = _json(sub, "results.json")["eval"]["minival"]["accuracy"]
        assert summary["minival_accuracy"][repr(rate)] == measured[rate]
    assert summary["minival_accuracy"]["1e+30"] is None and "diverged" in stdout
    assert not os.path.exists(os.path.join(workdir, "lr_1e+30", "results.json"))
    best = max(measured.values())
    assert summary["chosen_lr"] == min(r for r, acc in measured.items() if acc == best)
    # The retrain: the chosen rate on train + minival, reported on test only.
    final = _json(workdir, "final", "config.json")
    assert final["base_lr"] == summary["chosen_lr"]
    assert final["train_split"] == summary["final_train_split"] == "train[:90%]+train[90%:]"
    final_results = _json(workdir, "final", "results.json")
    assert set(final_results["eval"]) == {"test"} and final_results["steps"] == 20
    assert summary["test_split"] == "test"
    assert summary["test_accuracy"] == final_results["eval"]["test"]["accuracy"]
    assert f"chose base_lr {summary['chosen_lr']!r}" in stdout
    # TensorBoard: one run per rate (hyperparameter and minival accuracy), and the choice.
    chosen_dir = os.path.join(workdir, "sweep", f"lr_{summary['chosen_lr']!r}")
    assert scalar_tags(chosen_dir)["sweep/minival_accuracy"] == [(0, pytest.approx(best))]
    assert plugin_tags(chosen_dir, "hparams")
    top = scalar_tags(os.path.join(workdir, "sweep"))
    assert top["sweep/chosen_lr"] == [(0, pytest.approx(summary["chosen_lr"]))]
    assert top["sweep/test_accuracy"] == [(0, pytest.approx(summary["test_accuracy"]))]


@pytest.mark.slow
def test_rerun_of_a_finished_sweep_reuses_every_run_and_returns_the_summary(swept, data_dir):
    workdir = swept[0]
    before = read_results(workdir)
    events = sorted(os.listdir(os.path.join(workdir, "sweep")))
    config = trainer_flags.parse_flags(
        ["finetune", *SWEEP, f"--data_dir={data_dir}", f"--workdir={workdir}"], finetune.get_config
    )
    summary = finetune.run(config)  # in-process: only the diverging rate runs again (a few steps)
    assert summary == read_results(workdir) == before
    assert sorted(os.listdir(os.path.join(workdir, "sweep"))) == events  # no second copy of the logs


@pytest.mark.slow
def test_killed_sweep_resumes_without_redoing_finished_runs(swept, data_dir, tmp_path):
    workdir = str(tmp_path / "run")
    args = SWEEP + [f"--data_dir={data_dir}", f"--workdir={workdir}"]
    first = os.path.join(workdir, f"lr_{RATES[0]!r}")
    proc = start_cli("finetune", args, log_path=str(tmp_path / "killed.log"))
    deadline = time.time() + 240
    while (
        not os.path.exists(os.path.join(first, "results.json"))
        and time.time() < deadline
        and proc.poll() is None
    ):
        time.sleep(0.05)
    proc.kill()  # SIGKILL: no handler runs
    proc.wait()
    assert os.path.exists(os.path.join(first, "results.json")), open(tmp_path / "killed.log").read()[-2000:]
    assert not os.path.exists(os.path.join(workdir, "results.json"))
    stamps = {name: os.path.getmtime(os.path.join(first, name)) for name in ("results.json", "model.npz")}
    resumed = run_cli("finetune", args)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"reusing the finished run in {first}" in resumed.stdout
    assert stamps == {name: os.path.getmtime(os.path.join(first, name)) for name in stamps}
    summary, reference = read_results(workdir), read_results(swept[0])
    for key in ("sweep_lrs", "minival_accuracy", "chosen_lr", "final_train_split", "test_accuracy"):
        assert summary[key] == reference[key], key
    assert summary["final_eval"]["test"]["loss"] == pytest.approx(reference["final_eval"]["test"]["loss"])


@pytest.mark.slow
def test_sigterm_stops_the_sweep_at_a_checkpoint_without_a_summary(data_dir, tmp_path):
    workdir = str(tmp_path / "run")
    args = SWEEP + [
        f"--data_dir={data_dir}",
        f"--workdir={workdir}",
        "--total_steps=100000",
        "--checkpoint_every=0",
        "--steps_per_loop=2",
    ]
    log = tmp_path / "sigterm.log"
    proc = start_cli("finetune", args, log_path=str(log))
    deadline = time.time() + 240
    while "img/s" not in log.read_text() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0, log.read_text()[-2000:]
    assert f"sweep: stopped in {os.path.join(workdir, 'lr_0.001')}" in log.read_text()
    assert os.listdir(os.path.join(workdir, "lr_0.001", "checkpoints"))
    assert sorted(os.listdir(workdir)) == ["lr_0.001"]  # no other run begun, no summary


@pytest.mark.slow
def test_the_default_grid_on_digits_with_a_minival_split(tmp_path):
    """The four rates of the paper (no --sweep_lrs) and the split flags the digits preset needs."""
    workdir = str(tmp_path / "run")
    proc = run_cli(
        "finetune",
        [
            "--dataset=digits",
            "--base_lr=sweep",
            "--train_split=train[:80%]",
            "--eval_splits=minival=train[80%:],test=test",
            "--total_steps=4",
            "--warmup_steps=1",
            "--steps_per_loop=4",
            "--batch_size=16",
            *TINY_DIGITS_FLAGS,
            f"--workdir={workdir}",
        ],
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = read_results(workdir)
    assert summary["sweep_lrs"] == [0.001, 0.003, 0.01, 0.03]
    assert sorted(os.listdir(workdir)) == [
        "final",
        "lr_0.001",
        "lr_0.003",
        "lr_0.01",
        "lr_0.03",
        "results.json",
        "sweep",
    ]
    assert summary["final_train_split"] == "train[:80%]+train[80%:]"
    assert set(summary["minival_accuracy"]) == {"0.001", "0.003", "0.01", "0.03"}


def _fails_with_one_line(capsys, main, args, expect):
    code = main(args)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert expect in err[0], err[0]


@pytest.mark.parametrize(
    "args, expect",
    [
        (["--base_lr=fast"], "flag --base_lr=fast: must be a number or 'sweep'"),
        (["--base_lr=sweep"], "--eval_splits=minival=train[80%:],test=test"),  # digits: no minival
        (["--base_lr=sweep", "--eval_splits=minival=train[80%:]"], "add one"),  # nothing left to report
        (["--base_lr=sweep", "--eval_splits=minival=train[80%:],test=test", "--sweep_lrs=0.1,x"], "'x'"),
        (["--base_lr=sweep", "--eval_splits=minival=train[80%:],test=test", "--sweep_lrs=0.1,0.1"], "twice"),
        (["--base_lr=sweep", "--eval_splits=minival=train[80%:],test=test", "--sweep_lrs=0,0.1"], "positive"),
    ],
)
def test_bad_sweep_arguments_are_one_line_and_write_nothing(capsys, tmp_path, args, expect):
    workdir = tmp_path / "run"
    argv = ["finetune", "--dataset=digits", f"--workdir={workdir}", *args]
    _fails_with_one_line(capsys, finetune.main, argv, expect)
    assert not workdir.exists()


def test_pretrain_and_fewshot_refuse_a_sweep(capsys, tmp_path):
    from trainers import fewshot, pretrain

    _fails_with_one_line(
        capsys,
        pretrain.main,
        ["pretrain", "--dataset=digits", f"--workdir={tmp_path}", "--base_lr=sweep"],
        "fine-tuning option",
    )
    _fails_with_one_line(
        capsys,
        fewshot.main,
        ["fewshot", "--dataset=digits", f"--workdir={tmp_path}", "--base_lr=sweep"],
        "base_lr",
    )


def test_a_folder_begun_with_other_settings_is_not_reused(capsys, tmp_path):
    args = [
        "finetune",
        "--dataset=digits",
        f"--workdir={tmp_path / 'run'}",
        "--base_lr=sweep",
        "--eval_splits=minival=train[80%:],test=test",
        "--sweep_lrs=0.001",
        "--total_steps=100",
    ]
    sub = tmp_path / "run" / "lr_0.001"
    begun = sweep.with_changes(
        trainer_flags.parse_flags(args, finetune.get_config), base_lr=0.001, workdir=str(sub), total_steps=99
    )
    sub.mkdir(parents=True)
    (sub / "config.json").write_text(trainer_flags.config_to_json(begun))
    (sub / "results.json").write_text("{}")
    # Another --cpu_devices is fine (where it runs, not what it computes); another --total_steps is not.
    _fails_with_one_line(capsys, finetune.main, [*args, "--cpu_devices=2"], "--total_steps=99")


def test_another_commands_files_are_neither_replaced_nor_reused(capsys, tmp_path):
    """The sweep's summary results.json went over a training run's own in a run's workdir, and a
    rate's sub-folder holding a results.json no run wrote (no config.json) was "reused": its
    numbers entered the choice. Both refused in one line before anything runs."""
    args = [
        "finetune",
        "--dataset=digits",
        "--base_lr=sweep",
        "--eval_splits=minival=train[80%:],test=test",
        "--sweep_lrs=0.001",
    ]
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(trainer_flags.config_to_json(finetune.get_config("digits")))
    (run / "results.json").write_text('{"steps": 500}')
    _fails_with_one_line(
        capsys, finetune.main, [*args, f"--workdir={run}"], f"{run} holds a run (its config.json)"
    )
    assert (run / "results.json").read_text() == '{"steps": 500}'

    sub = tmp_path / "sweep" / "lr_0.001"
    sub.mkdir(parents=True)
    (sub / "results.json").write_text('{"eval": {"minival": {"accuracy": 1.0}}}')
    expect = f"{sub} holds results.json but no config.json"
    _fails_with_one_line(capsys, finetune.main, [*args, f"--workdir={tmp_path / 'sweep'}"], expect)
    assert sorted(os.listdir(sub)) == ["results.json"]


def test_choice_is_the_best_minival_accuracy_and_ties_go_to_the_smaller_rate():
    assert sweep.choose_rate({0.001: 0.5, 0.003: 0.7, 0.01: 0.6}) == 0.003
    assert sweep.choose_rate({0.03: 0.7, 0.01: 0.7, 0.001: 0.2}) == 0.01
    assert sweep.choose_rate({0.001: 0.1, 0.003: None}) == 0.001  # None: diverged
    with pytest.raises(errors.TrainingError, match="diverged"):
        sweep.choose_rate({0.01: None})


def test_base_lr_is_a_number_or_sweep_in_flags_and_in_python():
    config = trainer_flags.parse_flags(["finetune", "--base_lr=0.003"], finetune.get_config)
    assert config.base_lr == 0.003 and isinstance(config.base_lr, float)
    assert trainer_flags.parse_flags(["finetune", "--base_lr=sweep"], finetune.get_config).base_lr == "sweep"
    config = finetune_config.get_config("cifar10")
    config.base_lr = "sweep"  # a notebook may set either
    config.base_lr = 0.03
    assert sweep.parse_sweep_lrs(config.sweep_lrs) == [0.001, 0.003, 0.01, 0.03]
    with pytest.raises(errors.UsageError, match="number or 'sweep'"):
        trainer_flags.parse_base_lr("fast")


def test_a_sub_runs_config_stays_locked_so_a_misspelt_field_is_still_an_error():
    # Each sub-run (and every plain fine-tune: trainers/finetune.py) gets a changed copy of the
    # parsed config; an unlocked copy would take a misspelt field as a new one.
    parsed = trainer_flags.parse_flags(
        ["finetune", "--dataset=digits", "--base_lr=sweep"], finetune.get_config
    )
    sub = sweep.with_changes(parsed, base_lr=0.003, workdir="/tmp/unused/lr_0.003")
    assert (sub.base_lr, sub.workdir, parsed.base_lr) == (0.003, "/tmp/unused/lr_0.003", "sweep")
    with pytest.raises(AttributeError, match="locked"):
        sub.bse_lr = 0.01


@pytest.mark.parametrize("strategy, chief", [("multi_worker", False), ("multi_worker", True), ("cpu", True)])
def test_without_tf_config_the_summary_is_written_by_the_engines_chief(monkeypatch, strategy, chief):
    """The sweep read TF_CONFIG alone to choose the process that writes its summary: on the jax
    engine, whose cluster JAX finds without TF_CONFIG (TPU pods, SLURM), no process wrote it. It
    now asks the engine of the cluster its runs joined; a run on one process always writes it."""
    from trainers import engines

    class Engine:
        def is_chief(self, strategy):
            return strategy == "cluster" and chief

    monkeypatch.delenv("TF_CONFIG", raising=False)
    monkeypatch.setattr(engines, "strategy_of", lambda config: "cluster")
    monkeypatch.setattr(engines, "of", lambda strategy: Engine())
    config = finetune_config.get_config("digits")
    config.strategy = strategy
    assert sweep._is_chief(config) is chief


@pytest.mark.parametrize(
    "cluster, task, chief",
    [
        ({"worker": ["h:1", "h:2"]}, ("worker", 0), True),
        ({"worker": ["h:1", "h:2"]}, ("worker", 1), False),
        ({"chief": ["h:0"], "worker": ["h:1"]}, ("chief", 0), True),
        ({"chief": ["h:0"], "worker": ["h:1"]}, ("worker", 0), False),
    ],
)
def test_with_tf_config_process_0_writes_the_summary_without_forming_the_cluster(
    monkeypatch, cluster, task, chief
):
    """A finished sweep's rerun trains nothing: asking the engine would form the cluster, and a
    rerun of one process alone (to read the summary again) would wait for the others."""
    from trainers import engines

    monkeypatch.setattr(engines, "strategy_of", lambda config: pytest.fail("formed the cluster"))
    monkeypatch.setenv(
        "TF_CONFIG", json.dumps({"cluster": cluster, "task": dict(zip(("type", "index"), task))})
    )
    config = finetune_config.get_config("digits")
    config.strategy = "multi_worker"
    assert sweep._is_chief(config) is chief
