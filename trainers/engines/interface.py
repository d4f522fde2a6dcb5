"""What an engine provides (`Engine`), and what its Trainer and feature step provide, member by member.

Shared code (the plan, the controller, the checkpoints, the evaluators, the banner, the memory
estimate, the precision choice, preemption) reads only these members; the engines (tf.py, jax.py
beside this file) implement them, each in its own way. `typing.Protocol`s: an engine need not
subclass them, and `tests/test_engines.py` checks that every registered engine has every member.
"""

from typing import Protocol


class Trainer(Protocol):
    """The compiled train and evaluate steps of one run, with the state its checkpoints hold."""

    model: object  # the Keras model being trained (evaluators, pictures and exports read it)
    optimizer: object  # the Keras optimizer (its slots are in the checkpoints)
    step: object  # optimizer steps taken: a host-side tf.Variable (int64), checkpointed
    last_loss: object  # the last loop's mean loss: a tf.Variable, checkpointed (results.json)
    accum_steps: int  # micro-batches per step (gradients summed)
    jit_compile: bool  # whether XLA compiles the step (the banner says so)
    metric_name: str  # the evaluation's top-1 metric: "accuracy", "prec@1" or the objective's

    @property
    def micro_batch_size(self) -> int:
        """The global batch of one accumulation step: what is in memory at once (evaluation's batch)."""

    def train(self, iterator, num_steps) -> dict:
        """Runs `num_steps` steps on the distributed batches of `iterator`; {"loss", "grad_norm"
        (means), "finite" (bool), "metrics" ({tag: value}: the objective's train metrics)}."""

    def evaluate(self, dataset) -> dict:
        """One pass over a distributed (images, labels, weights) dataset, padding of weight 0:
        {"loss", metric_name, "examples"}."""

    def checkpoint_objects(self) -> dict:
        """{name: trackable}: what tf.train.Checkpoint saves and restores (trainers/run_checkpoints.py)."""

    def before_save(self) -> None:
        """Brings the checkpoint objects up to date just before a save."""

    def after_restore(self) -> None:
        """Takes the state back from the checkpoint objects just after a restore."""


class FeatureStep(Protocol):
    """A frozen model's representation, compiled: trainers/features.py calls it per batch."""

    def refresh(self) -> None:
        """Takes the model's weights as they are now (training moves them), once per pass."""

    def __call__(self, batch) -> tuple:
        """(features float32 (b, d), labels, weights) of a distributed batch, whole on every host."""


class Engine(Protocol):
    """Everything that differs between engines."""

    name: str  # --engine's value
    packages: tuple  # the packages whose versions say what ran (the demo's machine record)
    fixed_fields: tuple  # the fields it decides itself, which a run must leave at their default
    cpu_threads_scope: str  # what --cpu_threads sets under it, as the banner says it

    # -- its configuration ----------------------------------------------------------------------
    def check(self, config) -> None:
        """UsageError where the engine cannot run in this process (any command's config)."""

    def check_training(self, config) -> None:
        """UsageError for a training config's flags it does not take (--mixed_precision,
        --jit_compile), before anything starts."""

    # -- the distribution and its facts ---------------------------------------------------------
    def create_strategy(self, strategy, *, tpu, cpu_devices, cpu_threads):
        """The distribution for --strategy, --tpu, --cpu_devices and --cpu_threads: an object with
        `num_replicas_in_sync`, `scope()`, `distribute_datasets_from_function(input_fn)` and
        `extended.worker_devices`, as a tf.distribute strategy has them."""

    def describe(self, strategy) -> str:
        """One line for the banner: the kind, the replicas and processes, the devices."""

    def is_chief(self, strategy) -> bool:
        """Whether this process writes logs, results and the real checkpoints."""

    def task_id(self, strategy) -> int:
        """This process's index (names a non-chief process's temporary checkpoint folder)."""

    def processes(self, strategy):
        """trainers.distribute.Processes of a run of several processes (their index, count, the
        chief's host, their names and a `share(value)` that gives every process the chief's
        value), for the heartbeat that notices a lost one (trainers/peer_watch.py); None for one."""

    def stop_coordinator(self, strategy):
        """What agrees on a SIGTERM's stop across processes (trainers/preemption.py): None for one
        process, else an object with `run` (the Preemption, set by it) and `saved_checkpoint()`."""

    def gpu_memory_limit(self, strategy):
        """Bytes the smallest local GPU may allocate, or None where it is not known."""

    def gpu_compute_capabilities(self, strategy) -> list:
        """[(major, minor), ...] of the GPUs the step runs on ([] without GPUs)."""

    def use_jit(self, setting, strategy, *, precision, hidden_size, num_patches) -> tuple:
        """(whether XLA compiles the step, the banner's reason for it) for --jit_compile's `setting`
        ("auto", "true", "false"), given the run's resolved --mixed_precision and its encoder's width
        and patch count (trainers/precision.py resolve_step decides both)."""

    def kernels(self) -> str:
        """Whether the step's CPU kernels are the demo's pinned ones, in words (trainers/reproducible.py)."""

    # -- the steps ------------------------------------------------------------------------------
    def trainer(
        self,
        *,
        strategy,
        model,
        optimizer,
        global_batch_size,
        accum_steps,
        grad_norm_clip,
        jit_compile,
        loss,
        objective,
    ) -> Trainer:
        """The Trainer of `model` (built inside strategy.scope()) for these settings."""

    def objective(self, name, target, model, strategy):
        """The objective --objective names (masked patch prediction with --masked_target's
        `target`) for `model`, or None for classification; ValueError for one it cannot train."""

    def feature_step(self, represent, strategy) -> FeatureStep:
        """The compiled forward pass of `represent` (a model's representation) for feature extraction."""
