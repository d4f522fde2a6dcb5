"""The tf engine (--engine=tf, the default): tf.distribute's strategies, the step a tf.function.

TPUStrategy, MirroredStrategy (local GPUs, or the CPU split into --cpu_devices logical devices)
and MultiWorkerMirroredStrategy (trainers/distribute.py); the Trainer of trainers/loop.py
(`strategy.run` per step in one tf.function per loop call, XLA per --jit_compile); masked patch
prediction of trainers/objectives.py; several workers agree on a SIGTERM's stop through
tf.distribute's PreemptionCheckpointHandler (trainers/preemption.py).
"""

import tensorflow as tf
from tensorflow.python.client import device_lib

from trainers import distribute, loop, objectives, precision, preemption, reproducible
from trainers.engines import common
from trainers.graph_functions import as_written


class TfEngine:
    name = "tf"
    packages = ("tensorflow", "keras")
    fixed_fields = ()
    cpu_threads_scope = ""

    def check(self, config):
        common.check_backend(self.name)

    def check_training(self, config):
        """It trains with every precision and XLA setting."""

    def create_strategy(self, strategy, *, tpu=None, cpu_devices=1, cpu_threads=0):
        return distribute.create_strategy(strategy, tpu=tpu, cpu_devices=cpu_devices, cpu_threads=cpu_threads)

    def describe(self, strategy):
        return distribute.describe(strategy)

    def is_chief(self, strategy):
        return distribute.is_chief(strategy)

    def task_id(self, strategy):
        return distribute.task_id(strategy)

    def processes(self, strategy):
        return distribute.processes(strategy)

    def stop_coordinator(self, strategy):
        return preemption.cluster_handler(strategy) if _worker_count(strategy) > 1 else None

    def gpu_memory_limit(self, strategy):
        """The memory TensorFlow may allocate on the smallest local GPU, in bytes."""
        limits = [d.memory_limit for d in device_lib.list_local_devices() if d.device_type == "GPU"]
        return min(limits) if limits else None

    def gpu_compute_capabilities(self, strategy):
        found = []
        for gpu in tf.config.list_physical_devices("GPU"):
            capability = tf.config.experimental.get_device_details(gpu).get("compute_capability")
            if capability:
                found.append(tuple(capability))
        return found

    def use_jit(self, setting, strategy, *, precision, hidden_size, num_patches):
        """XLA for the per-replica step. "auto": on GPUs; on a CPU for a float32 step of an encoder at
        least ViT-Ti wide (precision.CPU_MIN_HIDDEN_SIZE), where the ViT-Ti/16 training step ran
        1.08x-1.16x faster under XLA at 224 px on each kind of CPU measured (AMD EPYC with and
        without AVX-512, Intel Xeon with AMX), and 1.21x and 1.48x at 128 and 64 px on the EPYC
        without AVX-512 (docs/guides/benchmarks.md); not for bfloat16 on a CPU (XLA's CPU backend
        has no fast bfloat16 matmul), nor for narrower encoders (the digits preset's, say), which
        were not measured. TPUStrategy compiles the whole step with XLA anyway."""
        if setting != "auto":
            return setting == "true", ""
        if isinstance(strategy, tf.distribute.TPUStrategy):
            return False, "auto: TPUStrategy compiles the whole step"
        if distribute.all_gpus(distribute.worker_devices(strategy)):
            return True, "auto: GPU"
        return cpu_jit(precision, hidden_size, num_patches)

    def kernels(self):
        return reproducible.describe()

    def trainer(self, **settings):
        return loop.TensorFlowTrainer(**settings)

    def objective(self, name, target, model, strategy):
        return objectives.make_objective(name, target, model)

    def feature_step(self, represent, strategy):
        return _TfFeatureStep(represent, strategy)


def cpu_jit(chosen_precision, hidden_size, num_patches):
    """(XLA on, the banner's words) for "auto" on a CPU, given the run's resolved --mixed_precision."""
    if chosen_precision != "none":
        return False, f"auto: {precision.compute_dtype(chosen_precision)} on CPU runs faster without XLA"
    if hidden_size < precision.CPU_MIN_HIDDEN_SIZE:
        return False, f"auto: on CPU XLA is measured from width {precision.CPU_MIN_HIDDEN_SIZE}"
    return True, "auto: float32 step on CPU"


def _worker_count(strategy):
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return 1
    jobs = strategy.cluster_resolver.cluster_spec().as_dict()
    return sum(len(jobs.get(job, ())) for job in ("chief", "worker"))


class _TfFeatureStep:
    """The representation per replica in one tf.function, each part gathered to every host (so
    multi-worker and TPU pods agree)."""

    def __init__(self, represent, strategy):
        self.strategy = strategy
        self._forward = lambda images: represent(images, training=False)

        @as_written
        def replica_step(images, labels, weights):
            return tf.cast(self._forward(images), tf.float32), labels, weights

        @tf.function(autograph=False)
        def step(batch):
            out = self.strategy.run(replica_step, args=tuple(batch))
            # gather: the global batch on every host, so multi-worker and TPU pods agree.
            return tuple(self.strategy.gather(t, axis=0) for t in out)

        self._step = step

    def refresh(self):
        """Nothing to copy: the step reads the model's variables themselves."""

    def __call__(self, batch):
        return self._step(batch)


ENGINE = TfEngine()
