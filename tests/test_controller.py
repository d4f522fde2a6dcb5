"""trainers.controller: loop calls split at the actions' steps, actions run when due, divergence stops."""

import os
import signal
import time
import types

import pytest

from trainers import distribute, preemption
from trainers.actions import describe
from trainers.controller import Controller
from trainers.errors import TrainingError


class FakeTrainer:
    """Counts steps like trainers.loop.TensorFlowTrainer; `diverge_at` makes one loop call non-finite."""

    def __init__(self, diverge_at=None):
        self.calls, self.step, self.diverge_at = [], 0, diverge_at

    def train(self, iterator, num_steps):
        self.calls.append(num_steps)
        self.step += num_steps
        finite = self.diverge_at is None or self.step < self.diverge_at
        return {"loss": 1.0 if finite else float("nan"), "grad_norm": 1.0, "finite": finite}

    @property
    def last_loss(self):
        return types.SimpleNamespace(numpy=lambda: 0.5)


class FakeCheckpoints:
    latest = "ckpt-4"

    def __init__(self):
        self.saved = []

    def save(self):
        self.saved.append("preempted")

    def save_if_new(self):
        if "final" not in self.saved:  # as RunCheckpoints: once per step
            self.saved.append("final")


class Evaluation:
    """An evaluation action: records its steps, returns a tag per step."""

    def __init__(self, every, name, log):
        self.every, self.name, self.log = every, name, log

    def __call__(self, step, out=None, seconds=None):
        self.log.append((self.name, step))
        return {f"{self.name}/step": float(step)}

    def results(self, tags):
        return dict(tags)

    def final_lines(self, section):
        return []


class Record:
    def __init__(self, every, log):
        self.every, self.log = every, log

    def __call__(self, step, out, seconds):
        self.log.append((self.every, step))


def _controller(trainer, actions, total=12, steps_per_loop=5, logged=None, evaluations=(), export=None):
    return Controller(
        trainer=trainer,
        strategy=distribute.create_strategy("cpu"),
        total_steps=total,
        steps_per_loop=steps_per_loop,
        log=lambda start, end, out, seconds: logged.append((start, end)),
        actions=actions,
        evaluations=evaluations,
        checkpoints=FakeCheckpoints(),
        record={"dataset": "d"},
        export=export or (lambda results: None),
    )


def test_loop_calls_end_at_every_actions_steps_and_actions_run_before_the_end():
    trainer, ran, logged = FakeTrainer(), [], []
    controller = _controller(trainer, [Record(4, ran), Record(6, ran), Record(0, ran)], logged=logged)
    # A fresh run's first call is one step (it compiles the step: the first progress line comes at once).
    assert [controller.next_boundary(s) for s in (0, 1, 4, 5, 6, 8, 10, 11)] == [1, 4, 5, 6, 8, 10, 12, 12]
    step, preempted = controller.train(iterator=None, step=0)
    assert (step, preempted) == (12, False)
    assert trainer.calls == [1, 3, 1, 1, 2, 2, 2]  # 0-1-4-5-6-8-10-12: the same split after a resume from 8
    assert logged == [(0, 1), (1, 4), (4, 5), (5, 6), (6, 8), (8, 10), (10, 12)]  # every call, the last too
    # Due actions only, never at the final step (its end-of-run work is separate); every=0 never.
    assert ran == [(4, 4), (6, 6), (4, 8)]


def test_a_resumed_run_replays_the_same_calls():
    full, resumed = FakeTrainer(), FakeTrainer()
    _controller(full, [Record(4, [])], logged=[]).train(None, 0)
    resumed.step = 8
    _controller(resumed, [Record(4, [])], logged=[]).train(None, 8)
    assert full.calls[-len(resumed.calls) :] == resumed.calls


def test_a_non_finite_loss_stops_with_one_line_naming_the_last_checkpoint():
    with pytest.raises(TrainingError, match=r"between steps 5 and 8; .* Last good checkpoint: ckpt-4"):
        _controller(FakeTrainer(diverge_at=6), [Record(4, [])], logged=[]).train(None, 0)


def test_console_text_of_evaluations():
    tags = {"test/accuracy": 0.5, "test/loss": 0.25, "test/examples": 10.0, "minival/accuracy": 1.0}
    assert describe("eval", tags) == "test: accuracy 0.5000 loss 0.2500  minival: accuracy 1.0000"
    assert (
        describe("fewshot", {"fewshot/d/1shot_accuracy": 0.125}) == "fewshot: fewshot/d/1shot_accuracy 0.1250"
    )


def test_run_trains_saves_then_evaluates_everything_once_at_the_end_and_exports():
    ran, exported = [], []
    evaluations = [Evaluation(4, "periodic", ran), Evaluation(0, "final_only", ran)]
    controller = _controller(FakeTrainer(), [], logged=[], evaluations=evaluations, export=exported.append)
    results = controller.run(iterator=None, step=0)
    assert exported == [results]  # what the export wrote is what the run returns
    # During training only the evaluation that has an `every`; at the end every one, in order.
    assert ran == [("periodic", 4), ("periodic", 8), ("periodic", 12), ("final_only", 12)]
    assert dict(results).pop("wall_time_s") >= 0
    del results["wall_time_s"]
    assert results == {
        "dataset": "d",
        "steps": 12,
        "train_loss": 0.5,
        "periodic/step": 12.0,
        "final_only/step": 12.0,
    }
    assert controller.checkpoints.saved == ["final"]  # saved before the final evaluation


class Classifier(Evaluation):
    """An evaluation with a section of its own, shared with other classifiers, and final lines."""

    def results(self, tags):
        return {"eval": {self.name: tags[f"{self.name}/step"]}}

    def final_lines(self, section):
        return [f"final {self.name}"]


def test_each_evaluation_writes_its_own_section_and_sections_of_one_name_merge(capsys):
    # An evaluator named like a classifier's split keeps its tags (they used to be left out).
    evaluations = [Classifier(0, "minival", []), Evaluation(0, "test", []), Classifier(0, "test", [])]
    controller = _controller(FakeTrainer(), [], logged=[], evaluations=evaluations)
    results = controller.run(iterator=None, step=0)
    assert results["eval"] == {"minival": 12.0, "test": 12.0} and results["test/step"] == 12.0
    assert capsys.readouterr().out.splitlines()[-2:] == ["final minival", "final test"]


def test_a_preempted_run_neither_evaluates_nor_exports(monkeypatch):
    ran, finished = [], []
    controller = _controller(
        FakeTrainer(),
        [],
        logged=[],
        evaluations=[Evaluation(0, "final_only", ran)],
        export=finished.append,
    )
    monkeypatch.setattr(controller, "train", lambda iterator, step, preempted=None: (5, True))
    assert controller.run(iterator=None, step=0) == {"preempted": True, "steps": 5}
    assert ran == [] and finished == [] and controller.checkpoints.saved == []


def test_evaluate_only_needs_no_trainer():
    ran = []
    controller = Controller(
        strategy=distribute.create_strategy("cpu"),
        evaluations=[Evaluation(0, "probe", ran)],
        record={"dataset": "d"},
        export=lambda results: None,
    )
    results = controller.evaluate_only()
    assert results.pop("wall_time_s") >= 0 and results == {"dataset": "d", "probe/step": 0.0}
    assert ran == [("probe", 0)]


class Signalled(Evaluation):
    """An evaluation during which the process gets SIGTERM (as a scheduler's notice arrives)."""

    def __call__(self, step, out=None, seconds=None):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)  # the handler runs between the main thread's bytecodes
        return super().__call__(step, out, seconds)


def test_sigterm_during_the_final_evaluation_stops_after_it_with_the_final_checkpoint(capsys):
    ran, finished = [], []
    controller = _controller(
        FakeTrainer(),
        [],
        logged=[],
        evaluations=[Signalled(0, "final_only", ran)],
        export=finished.append,
    )
    assert controller.run(iterator=None, step=0) == {"preempted": True, "steps": 12}
    assert ran == [("final_only", 12)] and finished == [] and controller.checkpoints.saved == ["final"]
    assert capsys.readouterr().out.splitlines()[-1] == (
        "preempted (SIGTERM): saved a checkpoint at step 12; rerun the same command to finish the run "
        "(its final evaluation and export)."
    )


def test_sigterm_during_the_export_lets_it_end_and_says_so(capsys):
    def export(results):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)

    controller = _controller(FakeTrainer(), [], logged=[], export=export)
    assert controller.run(iterator=None, step=0)["steps"] == 12
    assert capsys.readouterr().out.splitlines()[-1] == (
        "preempted (SIGTERM) as the run ended: it finished and wrote its results first."
    )


@pytest.mark.parametrize(
    "step, then",
    [
        (0, "nothing to save yet; rerun the same command to start"),
        (8, "nothing new to save (the run resumed from step 8); rerun the same command to resume"),
    ],
)
def test_sigterm_before_training_stops_one_process_before_its_first_loop_call(capsys, step, then):
    trainer = FakeTrainer()
    controller = _controller(trainer, [], logged=[])
    with preemption.watching():  # a run's: the signal is a flag until its first safe point
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)
        assert controller.run(iterator=None, step=step) == {"preempted": True, "steps": step}
    assert trainer.calls == [] and controller.checkpoints.saved == []
    assert capsys.readouterr().out.strip() == f"preempted (SIGTERM) before training began: {then}."
