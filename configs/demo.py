"""The demo's stages (python -m trainers.demo): presets of the three trainers, run in order.

Each stage is a trainer's own dataset preset (configs/pretrain.py, fewshot.py, finetune.py) and
the fields the demo gives it, exactly as that trainer's command line would give them as flags:
`get_config(stage, workdir, ...)` equals `python -m trainers.<trainer>` with `stage_flags(...)`
(tests/test_demo.py checks it). Upstream, a small ViT is pre-trained on the digits 0-4 with the
labels and by masked patch prediction; downstream, on the digits 5-9, its features are probed
and it is fine-tuned, against a random-init ViT, the raw pixels and the same ViT from scratch.

A stage's step budget comes from the demo's settings: FULL (`make demo`) or SMALL (--small).
"""

import posixpath

from configs import DIGITS_ARCHITECTURE
from configs import fewshot as fewshot_config
from configs import finetune as finetune_config
from configs import pretrain as pretrain_config
from configs.fields import DEFAULTS

UPSTREAM, DOWNSTREAM = "digits:0-4", "digits:5-9"
SHOTS = (1, 5, 10)
FEW_PER_CLASS = 10
# The digits presets' model (configs/__init__.py).
ARCHITECTURE = DIGITS_ARCHITECTURE
# Step budgets (batch 64), chosen to fit `make demo` into minutes on 2 CPU cores (the README
# has the measured time).
# few_runs: how many times each 10-per-class fine-tune runs, with seeds 0, 1, ... (REPEATED).
FULL = dict(pretrain_steps=1500, finetune_steps=800, few_finetune_steps=200, seeds=5, few_runs=5)
# --small, the smoke test: every stage runs, with a few steps each.
SMALL = dict(pretrain_steps=40, finetune_steps=20, few_finetune_steps=10, seeds=2, few_runs=2)
# The kernel threads of the stages: two, what TensorFlow starts on the 2-core machine the demo's
# step budgets were measured on (1 thread took about twice as long there).
CPU_THREADS = 2
# What the stages pin so the table is the same on any x86-64 CPU (trainers/reproducible.py):
# float32 whatever the CPU's instruction set (--mixed_precision=auto would pick by it), no XLA,
# and a fixed number of kernel threads. The process pins the CPU kernels themselves.
PINNED = dict(mixed_precision="none", jit_compile="false", cpu_threads=CPU_THREADS)
DEFAULT_ENGINE = DEFAULTS["engine"]

PRESETS = {"pretrain": pretrain_config, "fewshot": fewshot_config, "finetune": finetune_config}
# Stage -> its trainer, in the order the stages run (the later ones load the earlier ones' weights).
STAGES = {
    "pretrain": "pretrain",
    "pretrain_masked_patch": "pretrain",
    "fewshot": "fewshot",
    "fewshot_masked_patch": "fewshot",
    "fewshot_random_init": "fewshot",
    "fewshot_pixels": "fewshot",
    "finetune": "finetune",
    "finetune_10per_class": "finetune",
    "finetune_masked_patch": "finetune",
    "finetune_masked_patch_10per_class": "finetune",
    "scratch": "finetune",
    "scratch_10per_class": "finetune",
}
# The 10-per-class fine-tunes, which decide the demo's headline: with 50 training images, the
# seed (which 10 images per class, their order and augmentation, and from scratch the initial
# weights) moves the test accuracy by several of the 180 test images. Each runs again with
# seeds 1 .. few_runs - 1, as stages "<stage>_seed<n>" after STAGES; the table reports the mean
# and the standard deviation over the runs.
REPEATED = ("finetune_10per_class", "finetune_masked_patch_10per_class", "scratch_10per_class")
# The probes: whose features (a stage's model.npz, or none: random init) and which model.
PROBES = {
    "fewshot": ("pretrain", ARCHITECTURE["model"]),
    "fewshot_masked_patch": ("pretrain_masked_patch", ARCHITECTURE["model"]),
    "fewshot_random_init": (None, ARCHITECTURE["model"]),
    "fewshot_pixels": (None, "pixels"),
}
# The fine-tuning runs: from which stage's weights (None: from scratch), on how many images per
# class (0: all), and which budget of the settings is theirs.
FINETUNES = {
    "finetune": ("pretrain", 0, "finetune_steps"),
    "finetune_10per_class": ("pretrain", FEW_PER_CLASS, "few_finetune_steps"),
    "finetune_masked_patch": ("pretrain_masked_patch", 0, "finetune_steps"),
    "finetune_masked_patch_10per_class": ("pretrain_masked_patch", FEW_PER_CLASS, "few_finetune_steps"),
    "scratch": (None, 0, "finetune_steps"),
    "scratch_10per_class": (None, FEW_PER_CLASS, "few_finetune_steps"),
}


def stages(few_runs):
    """{stage: trainer} in the order they run: STAGES, then every REPEATED stage with seeds 1 ..
    few_runs - 1 (its seed-0 run is the stage itself)."""
    found = dict(STAGES)
    for seed in range(1, few_runs):
        found.update({repeat_name(stage, seed): STAGES[stage] for stage in REPEATED})
    return found


def repeat_name(stage, seed):
    """The name of `stage`'s run with `seed` (the stage itself for seed 0)."""
    return stage if seed == 0 else f"{stage}_seed{seed}"


def repeated_stage(name):
    """(stage, seed) of a stage name: ("scratch_10per_class", 2) for "scratch_10per_class_seed2"."""
    stage, _, seed = name.rpartition("_seed")
    if stage in REPEATED and seed.isdigit():
        return stage, int(seed)
    return name, 0


def stage_flags(
    stage,
    workdir,
    *,
    pretrain_steps,
    finetune_steps,
    few_finetune_steps,
    seeds,
    few_runs=FULL["few_runs"],
    pinned=None,
    engine=DEFAULT_ENGINE,
):
    """The fields `stage` gives its trainer's preset for --dataset (among them), as flags would.
    `pinned`: PINNED's fields (default PINNED; the few-shot trainer takes only cpu_threads, it runs
    in float32), less those the engine decides itself (trainers/demo.py pinned_for). `engine`:
    what runs the stage (--engine). `few_runs` decides which stages exist (stages()), not their
    fields."""
    pinned = dict(PINNED if pinned is None else pinned, engine=engine)
    budget = dict(finetune_steps=finetune_steps, few_finetune_steps=few_finetune_steps)
    own = dict(ARCHITECTURE, workdir=_join(workdir, stage))
    trainer = STAGES[repeated_stage(stage)[0]]
    if trainer == "pretrain":
        flags = dict(
            own,
            dataset=UPSTREAM,
            pre_logits=True,
            total_steps=pretrain_steps,
            warmup_steps=max(1, pretrain_steps // 10),
            base_lr=2e-3,
            weight_decay=0.1,
            batch_size=64,
            steps_per_loop=_loop(pretrain_steps),
            eval_every=_every(pretrain_steps),
            checkpoint_every=_every(pretrain_steps),
            fewshot_datasets=DOWNSTREAM,
            fewshot_every=_every(pretrain_steps),
            fewshot_shots=",".join(map(str, SHOTS)),
            fewshot_seeds=seeds,
            **pinned,
        )
        if stage == "pretrain_masked_patch":
            # The same run without labels: masked patch prediction (it trains no pre-logits layer).
            flags.update(objective="masked_patch", masked_target="mean_color", pre_logits=False)
        return flags
    if trainer == "fewshot":
        source, model = PROBES[stage]
        flags = dict(
            own,
            dataset=DOWNSTREAM,
            weights=_weights(workdir, source),
            pre_logits=source is None,
            shots=",".join(map(str, SHOTS)),
            seeds=seeds,
            cpu_threads=pinned["cpu_threads"],
            engine=engine,
        )
        if model == "pixels":
            flags.update(model="pixels", image_size=8)  # the scans' own 8x8 pixels, no resampling
        return flags
    base, seed = repeated_stage(stage)
    source, per_class, steps_name = FINETUNES[base]
    steps = budget[steps_name]
    return dict(
        own,
        **({"seed": seed} if seed else {}),
        dataset=DOWNSTREAM,
        weights=_weights(workdir, source),
        examples_per_class=per_class,
        total_steps=steps,
        warmup_steps=max(1, steps // 10),
        batch_size=64 if not per_class else 50,
        base_lr=0.03,
        steps_per_loop=_loop(steps),
        eval_every=_every(steps),
        checkpoint_every=_every(steps),
        **pinned,
    )


def get_config(stage="pretrain", workdir="runs/demo", **settings):
    """`stage`'s config: its trainer's preset for the stage's dataset, with the stage's flags.
    `settings`: the step budget (default FULL), `pinned` and `engine` as stage_flags takes them."""
    flags = stage_flags(stage, workdir, **{**FULL, **settings})
    config = PRESETS[STAGES[repeated_stage(stage)[0]]].get_config(flags["dataset"])
    config.update(flags)
    return config


def _weights(workdir, stage):
    return "none" if stage is None else _join(workdir, stage, "model.npz")


def _every(steps):
    """Evaluation and checkpoint spacing: a quarter of the run, but at least 4 steps apart, so a
    --small run (a few steps per stage) evaluates once or twice, not at every other step."""
    return max(steps // 4, min(steps, 4))


def _loop(steps):
    return max(1, min(50, steps // 4))


def _join(*parts):
    # "/" on every filesystem the workdir may be on (local, gs://): keras_vit.fileio.join without
    # importing the library (and Keras) into a preset.
    return posixpath.join(*parts)
