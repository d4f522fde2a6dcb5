"""The controller: the host loop around one small distributed step (trainers/loop.py), and the
whole run around it.

`run` trains, saves the final checkpoint, runs every evaluation once more at the last step and
ends the run: results.json is the run's `record`, its steps and last training loss, and each
evaluation's own section (trainers/evaluators/__init__.py: `results`), and `export` writes it
with the model (trainers/actions.py: Export). `evaluate_only` is the same end without training:
trainers.fewshot probes a frozen model through it.

`train` calls `Trainer.train` for as many steps as there are until the next step at which an
action is due (trainers/actions.py: log, checkpoint, evaluate), runs the due actions, and stops
early and cleanly when a preemption asks (trainers/preemption.py). `run` also stops at the
end's safe points: before the first loop call (one process), after the final checkpoint and
after the final evaluations; the export, once begun, is written to the end. The boundaries are a pure
function of the step, so a resumed run splits its remaining steps into the same loop calls as an
uninterrupted one, which is what makes resume exact.
"""

import time

from trainers import preemption
from trainers.console import Console
from trainers.errors import TrainingError

FIRST_CALL_STEPS = 1


class Controller:
    """`evaluations`: actions.Evaluate-like callables, run when due during training (with `every`)
    and all of them at the end, each with `results(tags)` (its section of results.json) and
    `final_lines(section)`. `record`: what results.json says of the run before its evaluations
    (dataset, model, ...). `export(results)`: writes the end's files (actions.Export). `actions`:
    the rest of what runs between loop calls (checkpoints). `started`: the run's start
    (time.time(); results.json's wall_time_s counts from it)."""

    def __init__(
        self,
        *,
        strategy,
        export,
        record=(),
        evaluations=(),
        trainer=None,
        total_steps=0,
        steps_per_loop=0,
        log=None,
        actions=(),
        checkpoints=None,
        console=None,
        started=None,
    ):
        self.trainer, self.strategy = trainer, strategy
        self.total_steps, self.steps_per_loop = total_steps, steps_per_loop
        self.log = log  # called after every loop call, the last one included
        self.evaluations = list(evaluations)
        self.actions = [*actions, *self.evaluations]
        self.checkpoints = checkpoints
        self.record, self.export = dict(record), export
        self.console = console or Console()
        self.started = time.time() if started is None else started

    def run(self, iterator, step):
        """Trains from `step` to the end, then evaluates and finishes: the run's results, or
        {"preempted": True, "steps": step} when a SIGTERM or Ctrl-C stopped it (at a loop
        boundary or at the end's safe points, its checkpoint saved; or before training began)."""
        # Watched from here to the results (trainers/preemption.py): every process passes the
        # same safe points, so several processes agree on where to stop.
        with preemption.Preemption(self.strategy, self.checkpoints.save_if_new) as preempted:
            if preempted.stops_before_training():
                return self._stopped_before_training(preempted, step)
            step, stopped = self.train(iterator, step, preempted)
            if stopped:
                return {"preempted": True, "steps": step}
            self.checkpoints.save_if_new()
            if preempted.saved_checkpoint():  # after the final checkpoint
                return self._stopped(preempted, step, _FINISH)
            tags = self._evaluate_each(step)
            if preempted.saved_checkpoint():  # after the final evaluations, before the export
                return self._stopped(preempted, step, _FINISH)
            results = self._finish(step, tags)
            if preempted.signalled:  # during the export: written to the end, then said
                _say(preempted, " as the run ended: it finished and wrote its results first.")
            return results

    def _stopped(self, preempted, step, then):
        """The end of a run stopped by a signal, whose checkpoint of `step` is saved."""
        _say(preempted, f": saved a checkpoint at step {step}; rerun the same command to {then}.")
        return {"preempted": True, "steps": step}

    def _stopped_before_training(self, preempted, step):
        if step:
            kept = (
                f"nothing new to save (the run resumed from step {step}); rerun the same command to resume."
            )
        else:
            kept = "nothing to save yet; rerun the same command to start."
        _say(preempted, f" before training began: {kept}")
        return {"preempted": True, "steps": step}

    def evaluate_only(self, step=0):
        """Every evaluation once at `step`, then the end of the run: its results (exported)."""
        return self._finish(step, self._evaluate_each(step))

    def _evaluate_each(self, step):
        """Runs every evaluation at `step`; the tags of each, in order."""
        return [evaluation(step) for evaluation in self.evaluations]

    def _finish(self, step, tags):
        """results.json's dict (returned): the record, the training's end and every evaluation's
        section; the evaluations' final lines; then the export."""
        results = dict(self.record)
        if self.trainer is not None:
            results["steps"] = step
            results["train_loss"] = float(self.trainer.last_loss.numpy())
        sections = [evaluation.results(t) for evaluation, t in zip(self.evaluations, tags)]
        for section in sections:
            for key, value in section.items():
                if isinstance(value, dict) and isinstance(results.get(key), dict):
                    results[key] = {**results[key], **value}
                else:
                    results[key] = value
        results["wall_time_s"] = round(time.time() - self.started, 2)
        for evaluation, section in zip(self.evaluations, sections):
            for line in evaluation.final_lines(section):
                self.console.print(line)
        self.export(results)
        return results

    def next_boundary(self, step):
        """The next step at which the host must act."""
        # A fresh run's first call is one step: it traces and compiles the step, so the first
        # progress line comes as soon as that is done, and its time is kept out of the ETA.
        ends = [self.total_steps, FIRST_CALL_STEPS] if step < FIRST_CALL_STEPS else [self.total_steps]
        for every in (self.steps_per_loop, *(action.every for action in self.actions)):
            if every:
                ends.append((step // every + 1) * every)
        return min(ends)

    def train(self, iterator, step, preempted=None):
        """Trains from `step` to the end; returns the step reached and whether a preemption stopped it.
        `preempted`: the run's Preemption (one of its own when None)."""
        if preempted is None:
            with preemption.Preemption(self.strategy, self.checkpoints.save_if_new) as preempted:
                return self.train(iterator, step, preempted)
        total = self.total_steps
        # SIGTERM or Ctrl-C: every worker saves the same step at a loop boundary and the run returns
        # (Ctrl-C: raises KeyboardInterrupt after the save, so the command ends as interrupted).
        while step < total:
            end = self.next_boundary(step)
            tick = time.perf_counter()
            out = self.trainer.train(iterator, end - step)
            seconds = time.perf_counter() - tick
            if not out["finite"]:
                raise TrainingError(
                    f"the training loss became {out['loss']} (gradient norm {out['grad_norm']}) "
                    f"between steps {step} and {end}; stopped without saving. "
                    f"Last good checkpoint: {self.checkpoints.latest or 'none'}. "
                    "Lower --base_lr or set --grad_norm_clip."
                )
            self.log(step, end, out, seconds)
            step = end
            for action in self.actions:
                if action.every and step % action.every == 0 and step < total:
                    action(step, out, seconds)
            if step < total and preempted.saved_checkpoint():
                self._stopped(preempted, step, "resume")
                return step, True
        return step, False


# What the rerun of a run stopped after its last loop call does.
_FINISH = "finish the run (its final evaluation and export)"


def _say(preempted, what):
    """A stopped run's last line: why it stopped (preempted.cause()), then `what`; Ctrl-C then
    ends the command as interrupted."""
    print(f"{preempted.cause()}{what}", flush=True)
    if preempted.interrupted:
        raise KeyboardInterrupt
