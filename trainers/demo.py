"""The paper's story in miniature, on real data, on a CPU: `make demo`.

    python -m trainers.demo --workdir=runs/demo

Upstream, a small ViT is pre-trained on the UCI handwritten digits 0-4 (scikit-learn's 8x8
scans, upsampled) twice: supervised (the labels), and self-supervised by masked patch prediction
(no labels; the paper's section 4.6). Downstream, on the digits 5-9 neither has seen:
  * 1-, 5- and 10-shot linear probes of each one's frozen representation, against the same
    probes of a randomly initialised ViT's features and of the raw pixels;
  * fine-tuning from each one's weights, with all training images and with 10 per class,
    against the same ViT trained from scratch with the same budget.
The masked-patch target is the mean colour of each 4x4 patch in 3 bits per channel: the digits
are grey (R = G = B), so of the 512 colour classes only the 8 grey levels occur.
Every stage is a run of the trainers users run (trainers.pretrain, trainers.finetune,
trainers.fewshot, through their run(config)), its config a preset of configs/demo.py (the
trainer's own preset with the stage's flags), each in its own WORKDIR/<stage> with its
TensorBoard logs. The table is printed and WORKDIR/results.json gets every number.
Re-running the same command resumes (finished stages are not redone).
Every stage pins what makes float32 CPU runs round differently on different machines (PINNED,
and trainers/reproducible.py for the CPU kernels), so the table is the same on any x86-64 CPU
with AVX2 and the same library versions. --small is a smoke test: it checks that every stage
runs, and its table says so. --engine=jax runs every stage on the jax engine (trainers/engines/):
the same stages and table, its step XLA's CPU code, which the pins do not reach (the README's
table is the tf engine's).
"""

import datetime
import importlib.metadata
import json
import os
import platform
import time

import numpy as np
from absl import flags

from configs import demo as demo_config
from configs.demo import (
    ARCHITECTURE,
    DEFAULT_ENGINE,
    FEW_PER_CLASS,
    FULL,
    PINNED,
    REPEATED,
    SHOTS,
    SMALL,
)
from keras_vit import commands, cpu_info, fileio
from trainers import cli, console, disk_space, engines, fewshot, finetune, pretrain, workdir_owner
from trainers import results as results_lib
from trainers.engines import ENGINES
from trainers.errors import UsageError
from trainers.fields import FIELDS
from trainers.validation import check_workdir_path

UPSTREAM_CLASSES, DOWNSTREAM_CLASSES = range(0, 5), range(5, 10)


def stage_configs(
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
    """{stage name: (trainer module name, config)} in the order they run: the stages' presets
    (configs/demo.py) for these settings. `pinned`: PINNED's fields (default PINNED); `engine`:
    what runs every stage (--engine), which leaves out of `pinned` what it decides itself."""
    settings = dict(
        pretrain_steps=pretrain_steps,
        finetune_steps=finetune_steps,
        few_finetune_steps=few_finetune_steps,
        seeds=seeds,
        pinned=pinned_for(engine, pinned),
        engine=engine,
    )
    return {
        name: (trainer, demo_config.get_config(name, workdir, **settings))
        for name, trainer in demo_config.stages(few_runs).items()
    }


def pinned_for(engine, pinned=None):
    """The pinned fields (default PINNED) that `engine` takes: a field the engine decides itself
    (Engine.fixed_fields: the jax engine always compiles its step with XLA) stays at its default."""
    fixed = engines.get(engine).fixed_fields if engine in ENGINES else ()
    return {
        name: value for name, value in (PINNED if pinned is None else pinned).items() if name not in fixed
    }


TRAINERS = {"pretrain": pretrain, "finetune": finetune, "fewshot": fewshot}
# A stage's time in training steps, for the overall ETA, fitted to the measured full and --small
# runs: a training stage took about STAGE_COST_STEPS steps' time besides its steps (start-up,
# compiling, evaluations, the checkpoint), and a set of probes (a probe stage, or one of the
# pre-training's few-shot evaluations) about PROBE_COST_STEPS.
STAGE_COST_STEPS = 80
PROBE_COST_STEPS = 25


def run_stage(trainer, config):
    return TRAINERS[trainer].run(config)


def _cost(trainer, config):
    """A stage's expected share of the demo's time, in training steps."""
    if trainer == "fewshot":
        return PROBE_COST_STEPS
    probes = config.total_steps // config.fewshot_every if config.fewshot_datasets else 0
    return STAGE_COST_STEPS + config.total_steps + probes * PROBE_COST_STEPS


def collect(stage_results):
    """The demo's numbers: stage/metric -> number, and the size and chance level of each task.
    A REPEATED stage's test_accuracy is the mean over its runs (seeds 0 ...), with the standard
    deviation as `_std` and every run's own as `_runs`."""
    results = {}
    for name, result in stage_results.items():
        if name.startswith("fewshot"):
            for k in SHOTS:
                results[f"{name}/{k}shot_accuracy"] = result[f"{k}shot_accuracy"]
                results[f"{name}/{k}shot_accuracy_std"] = result[f"{k}shot_accuracy_std"]
        elif name == "pretrain_masked_patch":
            results[f"{name}/test_masked_patch_accuracy"] = result["eval"]["test"]["masked_patch_accuracy"]
        else:
            results[f"{name}/test_accuracy"] = result["eval"]["test"]["accuracy"]
    for stage in REPEATED:
        runs = [results.pop(f"{name}/test_accuracy") for name in _runs_of(stage, stage_results)]
        results[f"{stage}/test_accuracy"] = float(np.mean(runs))
        results[f"{stage}/test_accuracy_std"] = float(np.std(runs))
        results[f"{stage}/test_accuracy_runs"] = runs
    results["upstream/test_images"] = stage_results["pretrain"]["eval"]["test"]["examples"]
    # The probes score the same split (digits 5-9's test split) as the fine-tuning runs.
    results["downstream/test_images"] = stage_results["scratch"]["eval"]["test"]["examples"]
    return results


def _runs_of(stage, stage_results):
    """The names of `stage`'s runs among the stages that ran, seed 0 first."""
    names = [stage]
    while demo_config.repeat_name(stage, len(names)) in stage_results:
        names.append(demo_config.repeat_name(stage, len(names)))
    return names


def table(results, settings, seconds):
    """The printed summary: one row per method, one column per amount of downstream data."""

    def cell(key):
        if key not in results:
            return f"{'':>13}"
        std = results.get(key.replace("accuracy", "accuracy_std"))
        return f"{results[key]:>7.3f} ± {std:.3f}" if std is not None else f"{results[key]:>13.3f}"

    head = (
        f"{'test accuracy on digits 5-9':<44}"
        + "".join(f"{f'{k}-shot':>13}" for k in SHOTS)
        + f"{f'{FEW_PER_CLASS}/class':>13}{'all images':>13}"
    )
    rows = [
        ("linear probe, pre-trained ViT features", "fewshot", None),
        ("linear probe, masked-patch pre-trained ViT", "fewshot_masked_patch", None),
        ("linear probe, random-init ViT features", "fewshot_random_init", None),
        ("linear probe, raw pixels", "fewshot_pixels", None),
        ("fine-tune the pre-trained ViT", None, "finetune"),
        ("fine-tune the masked-patch pre-trained ViT", None, "finetune_masked_patch"),
        ("same ViT from scratch, same budget", None, "scratch"),
    ]
    upstream = results["pretrain/test_accuracy"]
    masked = results["pretrain_masked_patch/test_masked_patch_accuracy"]
    chance = 1 / len(UPSTREAM_CLASSES)
    lines = []
    if settings.get("small"):
        lines += [
            "SMOKE TEST (--small): a few steps per stage; the numbers check the pipeline, not the method",
            "",
        ]
    lines += [
        f"upstream: digits 0-4, {results['upstream/test_images']} test images, "
        f"{len(UPSTREAM_CLASSES)} classes (chance {chance:.3f})",
        f"  ViT pre-trained with the labels: test accuracy {upstream:.3f}",
        f"  the same ViT pre-trained by masked patch prediction (no labels): test masked-patch accuracy "
        f"{masked:.3f}",
        f"downstream: digits 5-9, {results['downstream/test_images']} test images, "
        f"{len(DOWNSTREAM_CLASSES)} classes (chance {1 / len(DOWNSTREAM_CLASSES):.3f}); "
        f"one test image is {1 / results['downstream/test_images']:.3f}",
        "",
        head,
        "-" * len(head),
    ]
    for label, probe, train in rows:
        cells = [cell(f"{probe}/{k}shot_accuracy") if probe else " " * 13 for k in SHOTS]
        cells += (
            [cell(f"{train}_{FEW_PER_CLASS}per_class/test_accuracy"), cell(f"{train}/test_accuracy")]
            if train
            else [" " * 13] * 2
        )
        lines.append((f"{label:<44}" + "".join(cells)).rstrip())
    few_runs = settings.get("few_runs", 1)  # a results.json of a version without the repeats: 1
    lines += [
        "",
        f"probes: mean ± std over {settings['seeds']} draws of the k examples per class; "
        f"fine-tuning: {settings['finetune_steps']} steps (all images, one run), "
        f"{settings['few_finetune_steps']} steps ({FEW_PER_CLASS}/class"
        + (f", mean ± std over {few_runs} runs with seeds 0-{few_runs - 1}" if few_runs > 1 else "")
        + f"); pre-training: {settings['pretrain_steps']} steps; total {seconds / 60:.1f} min",
    ]
    return "\n".join(lines)


# The README's words for the fine-tuning rows (stages of configs/demo.py FINETUNES).
_FINETUNED = {
    "finetune_masked_patch": "the masked-patch pre-trained ViT",
    "finetune": "the ViT pre-trained with labels",
    "scratch": "the same ViT from scratch",
}


def _ahead(results, key, other):
    """Whether `key`'s mean is above `other`'s by more than the sum of their standard deviations
    (their mean ± std intervals do not overlap): the only differences the headline claims."""
    spread = results.get(f"{key}_std", 0.0) + results.get(f"{other}_std", 0.0)
    return results[key] - results[other] > spread


def _listing(items):
    items = [str(item) for item in items]
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _test_images(count):
    return f"{count} test image{'s' if count != 1 else ''}"


def _all_images_verdict(every, images):
    """Which fine-tune with all images is ahead, and by how many test images; models that got
    the same number of test images right are level, not one ahead of the others."""
    hits = {stage: round(accuracy * images) for stage, accuracy in every.items()}
    top = max(hits.values())
    leaders = [stage for stage in every if hits[stage] == top]
    others = [stage for stage in every if hits[stage] != top]
    accuracy = every[leaders[0]]
    if not others:
        return f"all three reach the same test accuracy, {accuracy:.3f}"
    behind = ", ".join(f"{every[stage]:.3f} ({_FINETUNED[stage]})" for stage in others)
    margin = _test_images(top - max(hits[stage] for stage in others))
    if len(leaders) == 1:
        return f"{_FINETUNED[leaders[0]]} is ahead, {accuracy:.3f} against {behind}: {margin}"
    level = _listing(_FINETUNED[stage] for stage in leaders)
    return f"{level} are level at {accuracy:.3f}, ahead of {behind} by {margin}"


def headline(results):
    """The README's summary of a full run's table, from its results.json: the 10-per-class
    fine-tunes as mean ± std over their runs, and which differences exceed that spread; where
    the ViT from scratch and the raw-pixel probe win. Every figure and every verdict is computed
    here from the numbers, so a new run cannot leave a claim behind."""
    runs = results["settings"].get("few_runs", 1)
    few = {stage: f"{stage}_{FEW_PER_CLASS}per_class/test_accuracy" for stage in _FINETUNED}

    def few_cell(stage):
        key = few[stage]
        spread = f" ± {results[f'{key}_std']:.3f}" if runs > 1 else ""
        return f"{results[key]:.3f}{spread}"

    scratch = few["scratch"]
    verdicts = []
    for stage in ("finetune_masked_patch", "finetune"):
        if runs < 2:
            verdicts = ["one run each, so no spread was measured and no difference is claimed"]
            break
        if _ahead(results, few[stage], scratch):
            verdicts.append(f"{_FINETUNED[stage]} is ahead of from scratch by more than that spread")
        elif _ahead(results, scratch, few[stage]):
            verdicts.append(f"from scratch is ahead of {_FINETUNED[stage]} by more than that spread")
        else:
            verdicts.append(f"{_FINETUNED[stage]} and from scratch are within that spread of each other")
    images = results["downstream/test_images"]
    every = {stage: results[f"{stage}/test_accuracy"] for stage in _FINETUNED}
    all_images = _all_images_verdict(every, images)
    vit_probes = ("fewshot", "fewshot_masked_patch", "fewshot_random_init")
    pixels = {k: results[f"fewshot_pixels/{k}shot_accuracy"] for k in SHOTS}
    best_vit = {k: max(results[f"{probe}/{k}shot_accuracy"] for probe in vit_probes) for k in SHOTS}
    pixels_win = [k for k in SHOTS if pixels[k] > best_vit[k]]
    top = SHOTS[-1]
    if pixels_win:
        probes = (
            f"the linear probe of the raw pixels is ahead of every ViT probe at {_listing(pixels_win)} "
            f"examples per class ({pixels[top]:.3f} against at best {best_vit[top]:.3f} at {top})"
        )
    else:
        probes = "at every number of examples per class a ViT probe is at least as good as the raw pixels'"
    mean = " (mean ± std)" if runs > 1 else ""
    return (
        f"- **The demo.** `make demo` tells the paper's story in miniature on the UCI digits, in "
        f"{results['wall_time_s'] / 60:.0f} minutes on {_where(results['machine'])}: ViTs pre-trained "
        f"on digits 0-4, "
        f"then fine-tuned and probed on digits 5-9 ({images} test images; one image is "
        f"{1 / images:.3f}). With {FEW_PER_CLASS} images per class, "
        + (f"over {runs} runs with seeds 0-{runs - 1}" if runs > 1 else "in one run")
        + ", fine-tuning "
        f"{_FINETUNED['finetune_masked_patch']} reaches test accuracy "
        f"{few_cell('finetune_masked_patch')}, {_FINETUNED['finetune']} {few_cell('finetune')} and "
        f"the same ViT from scratch {few_cell('scratch')}{mean}: {'; '.join(verdicts)}. "
        f"With all images (one run each) {all_images}; and {probes}. "
        f"[The whole table](docs/guides/demo.md#measured)."
    )


def command(settings, engine=DEFAULT_ENGINE):
    """The command line that runs the demo with `settings` (a results.json's) on `engine`."""
    argv = ["python -m trainers.demo --workdir=runs/demo"]
    if engine != DEFAULT_ENGINE:
        argv.append(f"--engine={engine}")
    preset = SMALL if settings.get("small") else FULL
    if settings.get("small"):
        argv.append("--small")
    # A results.json of a version without the repeated runs ran each 10-per-class fine-tune once.
    settings = {"few_runs": 1, **settings}
    argv += [f"--{name}={settings[name]}" for name in preset if settings[name] != preset[name]]
    return " ".join(argv)


def markdown(results):
    """The README's demo region from a results.json the demo wrote (benchmarks/report.py --write)."""
    machine = results["machine"]
    versions = ", ".join(f"{name} {version}" for name, version in sorted(machine["versions"].items()))
    return "\n".join(
        [
            "```bash",
            command(results["settings"], results.get("engine", DEFAULT_ENGINE)),
            "```",
            "",
            f"Measured {machine['date']} on {_where(machine)}, Python "
            f"{machine['python']}, {versions}; CPU kernels {results['cpu_kernels']}.",
            "",
            "```",
            table(results, results["settings"], results["wall_time_s"]),
            "```",
        ]
    )


def _load_average():
    """The system's load average over the last 15 minutes (None where the system has none)."""
    try:
        return os.getloadavg()[2]
    except (AttributeError, OSError):
        return None


def _where(machine):
    """The machine a run's timings come from, in words: "AMD EPYC (family 25, model 17; AVX-512,
    AVX-512 BF16, no AMX; 2 cores, load average 7.9)"."""
    load = [f"load average {machine['load_average']}"] if "load_average" in machine else []
    return cpu_info.describe(machine, *load)


def _machine(engine=DEFAULT_ENGINE):
    """Where the run computed: the README says it beside the table."""
    return {
        **cpu_info.record(),
        "python": platform.python_version(),
        "versions": {name: importlib.metadata.version(name) for name in engines.get(engine).packages},
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
    }


def run(workdir, *, small=False, pinned=None, engine=DEFAULT_ENGINE, **overrides):
    """Runs every stage (resuming finished ones), writes WORKDIR/results.json, returns it (None
    where a SIGTERM stopped a stage: its rerun, the same command, goes on from there).
    `pinned`: the stages' pinned fields (default PINNED); `engine`: what runs the stages, which
    must be the one this process started Keras for (trainers/engines/)."""
    settings = dict(SMALL if small else FULL)
    settings.update({k: v for k, v in overrides.items() if v is not None})
    for name, value in settings.items():
        if int(value) <= 0:
            raise UsageError(f"--{name} must be positive, got {value}.")
    if engine not in ENGINES:
        raise UsageError(f"unknown --engine={engine!r}: use one of {', '.join(ENGINES)}")
    _check_workdir(workdir, settings, engine)
    stages = stage_configs(workdir, **settings, pinned=pinned, engine=engine)
    kernels = engines.get(engine).kernels()
    label = "smoke test (--small): a few steps per stage" if small else "full run"
    print(f"demo, {label}: {len(stages)} stages, {engine} engine; CPU kernels {kernels}", flush=True)
    costs = {name: _cost(trainer, config) for name, (trainer, config) in stages.items()}
    start, done = time.time(), 0
    stage_results, loads = {}, []
    for k, (name, (trainer, config)) in enumerate(stages.items(), 1):
        count = f"[{k}/{len(stages)}]"
        print(
            f"\n=== {count} {name}: python -m trainers.{trainer} (workdir {config.workdir}) ===", flush=True
        )
        tick = time.time()
        stage_results[name] = run_stage(trainer, config)
        if (stage_results[name] or {}).get("preempted"):
            # SIGTERM or Ctrl-C: the stage saved what its rerun needs and said so; the next
            # stages would go on as if it had finished (and one that reads its model would fail).
            print(f"=== {count} {name} stopped; the demo stops with it ===", flush=True)
            return None
        loads.append(_load_average())
        done += costs[name]
        elapsed = time.time() - start
        left = elapsed / done * (sum(costs.values()) - done)
        eta = f"about {console.duration(left)} left" if k < len(stages) else "all stages done"
        print(
            f"=== {count} {name} done in {time.time() - tick:.0f} s; "
            f"{console.duration(elapsed)} so far, {eta} ===",
            flush=True,
        )
    results = collect(stage_results)
    seconds = time.time() - start
    results["wall_time_s"] = round(seconds, 1)
    results["settings"] = dict(settings, small=bool(small))
    results["cpu_kernels"] = kernels
    results["engine"] = engine
    results["machine"] = _machine(engine)
    if None not in loads:  # the timings' context: the machine may be shared with other jobs
        results["machine"]["load_average"] = round(float(np.mean(loads)), 1)
    results_lib.write(workdir, results)
    print("\n" + table(results, results["settings"], seconds))
    print(
        f"\nresults: {fileio.join(workdir, 'results.json')}\nTensorBoard: tensorboard --logdir {workdir}",
        flush=True,
    )
    return results


def _check_workdir(workdir, settings, engine=DEFAULT_ENGINE):
    """A workdir holds one demo configuration (and engine); resuming with other settings would
    mix runs.

    A workdir of an earlier version of the demo (fewer stages) resumes: the stages it has are
    checked by their own trainers against their config.json, where a field added since counts at
    its default (trainers/validation.py), and the stages it lacks run."""
    path = fileio.join(workdir, "demo_settings.json")
    wanted = json.loads(json.dumps(dict(settings, architecture=ARCHITECTURE, engine=engine)))
    check_workdir_path(workdir)
    workdir_owner.check_summary_workdir(workdir)
    if fileio.exists(path):
        with fileio.open(path) as f:
            found = json.load(f)
        found.setdefault("engine", DEFAULT_ENGINE)  # written before the demo had --engine
        # Written before the repeated 10-per-class runs: its stages are the seed-0 runs, and the
        # repeats are stages it lacks.
        found.setdefault("few_runs", wanted["few_runs"])
        # Only what this version records is compared: one version also wrote its list of stages.
        if {name: found.get(name) for name in wanted} != wanted:
            raise UsageError(
                f"{workdir} holds a demo run with other settings ({path}); "
                "remove it or choose another --workdir."
            )
        return
    disk_space.create_workdir(workdir)
    fileio.write_atomic(path, json.dumps(wanted, indent=2, sort_keys=True) + "\n")


def _flags():
    values = flags.FlagValues()
    flags.DEFINE_string(
        "workdir", "runs/demo", "where every stage's run, the logs and results.json go", flag_values=values
    )
    flags.DEFINE_bool(
        "small",
        False,
        "a smoke test: a few steps per stage, to check that every stage runs",
        flag_values=values,
    )
    flags.DEFINE_enum(
        "engine",
        DEFAULT_ENGINE,
        list(ENGINES),
        "what runs every stage: " + FIELDS["engine"].help,
        flag_values=values,
    )
    budget = {
        "pretrain_steps": "upstream steps",
        "finetune_steps": "downstream steps with all images",
        "few_finetune_steps": f"downstream steps with {FEW_PER_CLASS} images per class",
        "seeds": "draws of the k-shot examples per probe",
        "few_runs": f"runs (seeds 0, 1, ...) of each {FEW_PER_CLASS}-per-class fine-tune",
    }
    for name, text in budget.items():
        flags.DEFINE_integer(
            name, None, f"{text} (default {FULL[name]}; --small {SMALL[name]})", flag_values=values
        )
    return values


def main(argv=None):
    def body(values):
        run(
            values.workdir,
            small=values.small,
            pretrain_steps=values.pretrain_steps,
            finetune_steps=values.finetune_steps,
            few_finetune_steps=values.few_finetune_steps,
            seeds=values.seeds,
            few_runs=values.few_runs,
            engine=values.engine,
        )

    usage = "usage: python -m trainers.demo [--workdir=DIR] [--small] [flags]"
    return cli.main_with_own_flags("demo", _flags(), usage, body, argv)


if __name__ == "__main__":
    commands.exit_with(main)
