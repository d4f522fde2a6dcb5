"""What the controller does between loop calls (log, checkpoint, evaluate) and at the end (export).

`LogTraining` runs after every loop call. Each other action has `every` (steps between its runs;
0 = none during training) and is called as `action(step, out, seconds)` after a loop call that
ended at a multiple of `every`, before the end of training (the final step has its own,
unconditional, end-of-run work in trainers/controller.py: every evaluation once more, then
`Export`).
The controller also stops its loop calls at every action's steps, so a resumed run splits its
steps into the same calls as an uninterrupted one.
"""

import gc
import json

import tensorflow as tf

from keras_vit import fileio, run_dir
from keras_vit import weights as weights_lib
from trainers import results as results_lib
from trainers.console import Console, duration


class Summaries:
    """The run's TensorBoard writers: WORKDIR/train and WORKDIR/eval (no-ops on non-chief workers)."""

    def __init__(self, workdir, chief):
        if chief:
            self.train = tf.summary.create_file_writer(fileio.join(workdir, "train"))
            self.eval = tf.summary.create_file_writer(fileio.join(workdir, "eval"))
        else:
            self.train = self.eval = tf.summary.create_noop_writer()

    def flush(self):
        self.train.flush()
        self.eval.flush()


class LogTraining:
    """Train scalars every loop call (loss, learning rate, gradient norm, throughput, an objective's
    metrics) and a console line.

    The first loop call of a process traces and compiles the step (a fresh run's first call is one
    step, trainers/controller.py): its line shows that time apart, and the speed and the ETA come
    from the later calls only, so compilation does not inflate them.
    """

    def __init__(self, summaries, schedule, *, total_steps, batch_size, replicas, console):
        self.summaries, self.schedule, self.console = summaries, schedule, console
        self.total_steps, self.batch_size, self.replicas = total_steps, batch_size, replicas
        self.compiled = False
        self.steady_steps, self.steady_seconds = 0, 0.0

    def __call__(self, start, step, out, seconds):
        lr = float(self.schedule(step - 1))  # the rate of the last update taken
        first_call, self.compiled = not self.compiled, True
        line = f"step {step}/{self.total_steps}  loss {out['loss']:.4f}  lr {lr:.3g}  "
        line += f"grad_norm {out['grad_norm']:.3f}"
        metrics = out.get("metrics", {})  # an objective's own, e.g. masked_patch_accuracy
        line += "".join(f"  {name} {value:.4f}" for name, value in metrics.items())
        with self.summaries.train.as_default(step=step):
            tf.summary.scalar("loss", out["loss"])
            for name, value in metrics.items():
                tf.summary.scalar(name, value)
            tf.summary.scalar("learning_rate", lr)
            tf.summary.scalar("grad_norm", out["grad_norm"])
            if not first_call:
                images_per_s = (step - start) * self.batch_size / max(seconds, 1e-9)
                per_core = images_per_s / self.replicas
                tf.summary.scalar("images_per_second", images_per_s)
                tf.summary.scalar("images_per_second_per_core", per_core)
        if first_call:
            line += f"  first call {seconds:.1f} s (tracing and compiling the step)"
        else:
            self.steady_steps += step - start
            self.steady_seconds += seconds
            eta = (self.total_steps - step) * self.steady_seconds / self.steady_steps
            # Per replica only where there are several: a CPU's one replica spans all its cores,
            # so a "per core" figure there would be the whole machine's.
            if self.replicas > 1:
                line += f"  {images_per_s:.1f} img/s ({per_core:.1f}/replica)"
            else:
                line += f"  {images_per_s:.1f} img/s"
            line += f"  ETA {duration(eta)}"
        self.console.print(line)


class SaveCheckpoint:
    def __init__(self, checkpoints, every):
        self.checkpoints, self.every = checkpoints, every

    def __call__(self, step, out, seconds):
        self.checkpoints.save()


class Evaluate:
    """Runs an evaluator, writes its tags to WORKDIR/eval and prints them; returns the tags. At the
    end of a run, the evaluator's `results` and `final_lines` (trainers/evaluators/__init__.py)."""

    def __init__(self, evaluator, model, summaries, strategy, console=None, quiet=False, tag_of=None):
        """quiet: no console line (for a command that prints a summary of its own).
        tag_of: the TensorBoard tag of an evaluator's tag (default: the same), for a command whose
        documented tags differ from the evaluator's own."""
        self.evaluator, self.model, self.summaries, self.strategy = evaluator, model, summaries, strategy
        self.console = console or Console()
        self.every = evaluator.every
        self.quiet = quiet
        self.tag_of = tag_of or (lambda tag: tag)

    def __call__(self, step, out=None, seconds=None):
        with self.strategy.scope():  # so the evaluator shares the trainer's devices
            tags = {k: float(v) for k, v in self.evaluator.run(self.model).items()}
        # Each pass leaves its dataset iterators in reference cycles that only the cyclic collector
        # frees, and the loop allocates too few Python objects to trigger it: without this, memory
        # climbs by megabytes per evaluation (tests/test_soak.py).
        gc.collect()
        with self.summaries.eval.as_default(step=step):
            for tag, value in tags.items():
                if not tag.endswith("/examples"):
                    tf.summary.scalar(self.tag_of(tag), value)
        if not self.quiet:
            self.console.print(f"step {step}  {describe(self.evaluator.name, tags)}")
        return tags

    def results(self, tags):
        return self.evaluator.results(tags)

    def final_lines(self, section):
        return self.evaluator.final_lines(section)


class Export:
    """The end of a run, on the chief: WORKDIR/model.npz (official layout; none for model=None),
    WORKDIR/results.json and WORKDIR/class_names.json (what keras_vit.run_dir reads to classify
    and export); WORKDIR/config.json where `config_json` is given (a command that writes it only
    at its end); then the TensorBoard `summaries` flushed, on every process."""

    def __init__(self, model, workdir, chief, class_names=(), *, config_json=None, summaries=None):
        self.model, self.workdir, self.chief = model, workdir, chief
        self.class_names = list(class_names)
        self.config_json, self.summaries = config_json, summaries

    def __call__(self, results):
        if self.chief:
            self._write(results)
        if self.summaries is not None:
            self.summaries.flush()

    def _write(self, results):
        if self.config_json is not None:
            fileio.makedirs(self.workdir)
            fileio.write_atomic(fileio.join(self.workdir, run_dir.CONFIG_FILE), self.config_json + "\n")
        if self.model is not None:
            weights_lib.save_npz(self.model, fileio.join(self.workdir, run_dir.MODEL_FILE))
        if self.class_names:
            fileio.write_atomic(
                fileio.join(self.workdir, run_dir.CLASS_NAMES_FILE),
                json.dumps(self.class_names, indent=1) + "\n",
            )
        results_lib.write(self.workdir, results)


def describe(name, tags):
    """The console text of an evaluation: the classification tags grouped by split
    ('test: accuracy 0.9000 loss 0.3000'), any other evaluator's as 'NAME: TAG VALUE ...'."""
    shown = {tag: value for tag, value in tags.items() if not tag.endswith("/examples")}
    if name != "eval":
        return f"{name}: " + "  ".join(f"{tag} {value:.4f}" for tag, value in shown.items())
    groups = {}
    for tag, value in shown.items():
        split, _, key = tag.rpartition("/")
        groups.setdefault(split, []).append(f"{key} {value:.4f}")
    return "  ".join(f"{split}: {' '.join(items)}" for split, items in groups.items())
