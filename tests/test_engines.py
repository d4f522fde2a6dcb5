"""The two engines agree: on the same initial weights and the same batches, --engine=jax and
--engine=tf take the same steps to float32 rounding (the loss and gradient norm of every step,
every weight after the run), on 1 and on 2 devices, with micro-batch accumulation, with the
gradient clip binding and idle, with SGD and AdamW. Also every registered engine against the
Engine interface (trainers/engines/interface.py) and the contract of a run (a short run, an
evaluation, features, resume), the engines' refusals and trainers/engine_env.py's choice of
backend.

Each engine runs every case in one child process (tests/engine_runs.py), the two side by side.
"""

import ast
import json
import os

import command_server
import numpy as np
import pytest
import trainer_cli

from trainers import engine_env, engines
from trainers.engines import interface
from trainers.errors import UsageError
from trainers.fields import FIELDS

# The digits preset's model (patch 4, width 64, 4 blocks), not tests/fixtures.py's: the clips below
# were set on its gradient norms. Dropout off: the engines draw their dropout masks from different
# random-number generators, everything else is deterministic.
COMMON = [
    "--dataset=digits",
    "--total_steps=6",
    "--warmup_steps=2",
    "--steps_per_loop=1",
    "--eval_every=0",
    "--checkpoint_every=0",
    "--dropout_rate=0",
    "--batch_size=32",
]
CASES = {
    # Two devices first: TensorFlow splits the CPU into logical devices only before it starts.
    # The gradient norms of these runs are 1.0-1.6: a clip of 0.5 binds at every step.
    "two_devices_accumulated_clipped": ["--cpu_devices=2", "--accum_steps=2", "--grad_norm_clip=0.5"],
    "two_devices_clip_idle": ["--cpu_devices=2", "--accum_steps=1", "--grad_norm_clip=100"],
}
# From --weights=none: each engine builds its own model, from --seed alone (keras_vit.initializers
# draws every initial value from the seed and the weight's path, not from the backend's
# generator). Masked patch prediction adds the [mask] embedding and its head. The fine-tune from
# the seed is also the one-device case of accumulation with a binding clip (its gradient norms
# were 0.96-4.7 without accumulation; the test asserts that the clip binds), so that each engine
# runs one run less.
FROM_SCRATCH = {
    "from_scratch": ["finetune", "--weights=none", "--seed=3", "--accum_steps=2", "--grad_norm_clip=0.5"],
    "from_scratch_masked_patch": ["pretrain", "--objective=masked_patch", "--pre_logits=false", "--seed=3"],
}
# AdamW, without a clip (optax's chain without its clipping transform): the contract's run's
# optimizer, so that the same run compares the engines' AdamW steps.
ADAMW = ["--optimizer=adam", "--weight_decay=0.1", "--base_lr=0.001", "--grad_norm_clip=0"]
# The contract every registered engine keeps on its own (besides the Engine interface's members):
# a short run that evaluates while it trains (step 3) and at its end, few-shot probes on the
# engine's feature step, and a resume from the checkpoint of step 3 that ends as the whole run.
CONTRACT = [
    "--cpu_devices=1",
    "--eval_every=3",
    "--checkpoint_every=3",
    "--keep_checkpoints=5",
    "--fewshot_datasets=digits",
    "--fewshot_shots=1,2",
    *ADAMW,
]
# The runs from start.npz that test_engines_take_the_same_steps compares: {case: workdir's name}.
SAME_STEPS = {**{case: case for case in CASES}, "adamw": "contract"}
CLIPS = {"two_devices_accumulated_clipped": 0.5, "two_devices_clip_idle": 100, "from_scratch": 0.5}
KEY_BIAS_NOISE = 1e-4  # the bound on the key bias, whose gradient is zero (_assert_same_steps)


def _initial_weights(path):
    """A digits-preset model with every weight random (the head too, which a fresh run zeroes,
    so that the first steps move the encoder), saved in the official layout."""
    from configs.finetune import get_config
    from keras_vit import weights
    from trainers import model_builder, plan_pieces

    config = get_config("digits")
    config.weights = "none"
    model = model_builder.build_model(plan_pieces.model_settings(config), 10)
    rng = np.random.default_rng(0)
    head = model.get_layer("head")
    head.set_weights([rng.normal(0, 0.05, w.shape).astype("float32") for w in head.get_weights()])
    weights.save_npz(model, str(path))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """{engine: {case: workdir}} after both engines ran every case."""
    root = tmp_path_factory.mktemp("engines")
    start = root / "start.npz"
    _initial_weights(start)
    workdirs = {
        engine: {
            case: root / engine / case for case in [*CASES, *FROM_SCRATCH, "contract", "contract_resumed"]
        }
        for engine in engine_env.BACKENDS
    }
    children = []
    for engine, backend in engine_env.BACKENDS.items():  # every registered engine
        argvs = [
            [
                "finetune",
                f"--engine={engine}",
                f"--weights={start}",
                f"--workdir={workdirs[engine][case]}",
                *COMMON,
                *extra,
            ]
            for case, extra in CASES.items()
        ]
        argvs += [
            [
                command,
                f"--engine={engine}",
                f"--workdir={workdirs[engine][case]}",
                *COMMON,
                "--cpu_devices=1",
                *extra,
            ]
            for case, (command, *extra) in FROM_SCRATCH.items()
        ]
        contract = [f"--engine={engine}", f"--weights={start}", *_without(COMMON, CONTRACT), *CONTRACT]
        full, resumed = workdirs[engine]["contract"], workdirs[engine]["contract_resumed"]
        argvs += [
            ["finetune", f"--workdir={full}", *contract],
            ["rewind", str(full), str(resumed), "3"],
            ["finetune", f"--workdir={resumed}", *contract],
        ]
        # JAX's two CPU devices, as a command's --cpu_devices=2 sets them (trainers/engine_env.py);
        # TensorFlow splits its CPU itself.
        devices = {"XLA_FLAGS": "--xla_force_host_platform_device_count=2"} if backend == "jax" else {}
        env = trainer_cli.child_env({"KERAS_BACKEND": backend, **devices})
        script, args = os.path.join(trainer_cli.ROOT, "tests", "engine_runs.py"), [json.dumps(argvs)]
        with open(root / f"{engine}.log", "w") as log:
            # Forked from the command server of the engine's commands (tests/command_server.py).
            child = command_server.start_process(script, args, env, log, log)
        children.append((engine, child))
    for engine, child in children:
        status = child.wait(timeout=600)
        assert status == 0, (root / f"{engine}.log").read_text()[-3000:]
    return workdirs


def _without(flags, overrides):
    """`flags` less those `overrides` gives another value."""
    names = {flag.split("=")[0] for flag in overrides}
    return [flag for flag in flags if flag.split("=")[0] not in names]


def _train_scalars(workdir, tag):
    return [value for _, value in sorted(trainer_cli.scalar_tags(workdir / "train")[tag])]


def _assert_same_steps(runs, case, workdir):
    """Both engines' runs of `case` (in `workdir`) took the same steps to float32 rounding: the
    loss and gradient norm of each, every weight after them, the final evaluation."""
    tf_dir, jax_dir = runs["tf"][workdir], runs["jax"][workdir]
    for tag in ("loss", "grad_norm"):
        tf_values, jax_values = _train_scalars(tf_dir, tag), _train_scalars(jax_dir, tag)
        assert len(tf_values) == 6
        np.testing.assert_allclose(jax_values, tf_values, rtol=2e-5, err_msg=tag)
    norms = _train_scalars(tf_dir, "grad_norm")
    if case in CLIPS:  # the case is what its name says: the clip binds at every step, or never
        binding = CLIPS[case] < 1
        assert all((norm > CLIPS[case]) == binding for norm in norms), norms
    tf_weights, jax_weights = trainer_cli.read_weights(tf_dir), trainer_cli.read_weights(jax_dir)
    assert sorted(tf_weights) == sorted(jax_weights)
    for name in tf_weights:
        if "key/bias" in name:
            # Its gradient is zero (it adds q.b to every logit of a query's row, which the softmax
            # ignores), so each engine's value is rounding noise, which AdamW scales up: the two
            # once ended 1.0e-6 apart (-1.8e-7 against -1.2e-6; 2e-7 at most, 2e-11 under SGD, in
            # the next run). Each must stay at the start's zero; a gradient of its own (a softmax
            # over the wrong axis, say) would move it as the query bias moves: 5e-4 to 1.8e-3.
            assert max(np.abs(jax_weights[name]).max(), np.abs(tf_weights[name]).max()) < KEY_BIAS_NOISE, name
            continue
        np.testing.assert_allclose(jax_weights[name], tf_weights[name], rtol=1e-5, atol=1e-6, err_msg=name)
    tf_results, jax_results = trainer_cli.read_results(tf_dir), trainer_cli.read_results(jax_dir)
    assert jax_results["replicas"] == tf_results["replicas"] == (2 if "two" in case else 1)
    np.testing.assert_allclose(
        jax_results["eval"]["test"]["loss"], tf_results["eval"]["test"]["loss"], rtol=1e-5
    )
    assert jax_results["eval"]["test"]["examples"] == tf_results["eval"]["test"]["examples"] == 360
    return tf_weights


@pytest.mark.slow
@pytest.mark.parametrize("case", SAME_STEPS)
def test_engines_take_the_same_steps(runs, case):
    """From the same weights file: with two devices, accumulated and clipped, the clip binding
    or idle; with AdamW (the contract's run, below)."""
    tf_weights = _assert_same_steps(runs, case, SAME_STEPS[case])
    start = trainer_cli.read_weights(runs["tf"][SAME_STEPS[case]].parent.parent / "start.npz")
    for name in tf_weights:
        if name in start and "head" not in name:
            # the run moved the weight: equal results are not just two copies of the start
            assert not np.array_equal(tf_weights[name], start[name]) or "key/bias" in name, name


@pytest.mark.slow
@pytest.mark.parametrize("case", FROM_SCRATCH)
def test_engines_start_from_the_same_model_for_the_same_seed(runs, case):
    """Without a weights file, both engines build their model from --seed; before the initial
    values were drawn backend-independently, the weights after these steps differed by a
    relative 2.0. The fine-tune also holds the one-device case of accumulated steps with a
    binding clip (a case of its own before): a clip or an accumulation that one engine applies
    per device, or before the sum of the micro-batches, shows here as on two devices."""
    _assert_same_steps(runs, case, case)


def _members(protocol):
    """The names a Protocol declares: its annotated attributes, methods and properties."""
    names = set(getattr(protocol, "__annotations__", {}))
    names |= {
        n
        for n, v in vars(protocol).items()
        if not n.startswith("_") and (callable(v) or isinstance(v, property))
    }
    return names | ({"__call__"} if "__call__" in vars(protocol) else set())


def test_every_registered_engine_has_every_member_of_the_interface():
    from trainers import jax_loop, loop

    trainers = {"tf": loop.TensorFlowTrainer, "jax": jax_loop.JaxTrainer}
    assert set(trainers) == set(engines.REGISTRY) == set(engine_env.BACKENDS)
    for name in engines.REGISTRY:
        engine = engines.get(name)
        assert engine.name == name
        assert sorted(m for m in _members(interface.Engine) if not hasattr(engine, m)) == [], name
        # The Trainer's methods and properties (its attributes are set when it is built: the runs above).
        methods = {m for m in _members(interface.Trainer) if m not in interface.Trainer.__annotations__}
        assert sorted(m for m in methods if not hasattr(trainers[name], m)) == [], name
        assert set(engine.fixed_fields) <= set(FIELDS), name
        if engines.REGISTRY[name].always_xla:  # what its registration says without loading it
            xla = engine.use_jit("auto", None, precision="none", hidden_size=8, num_patches=4)[0]
            assert xla and "jit_compile" in engine.fixed_fields, name


def test_backend_follows_the_command_line():
    environ = {}
    assert (
        engine_env.prepare(
            ["finetune", "--engine=jax", "--cpu_devices=4"], ["python", "-m", "trainers.finetune"], environ
        )
        == "jax"
    )
    assert environ == {"KERAS_BACKEND": "jax", "XLA_FLAGS": "--xla_force_host_platform_device_count=4"}
    environ = {"KERAS_BACKEND": "jax"}
    # A command without --engine is the tf engine whatever the shell's KERAS_BACKEND says.
    assert (
        engine_env.prepare(["finetune", "--cpu_devices", "4"], ["python", "-m", "trainers.finetune"], environ)
        == "tf"
    )
    assert environ == {"KERAS_BACKEND": "tensorflow"}
    # `--engine jax` (two words) and a device count set by hand, kept.
    environ = {"XLA_FLAGS": "--xla_force_host_platform_device_count=8"}
    argv = ["pretrain", "--engine", "jax", "--cpu_devices=2"]
    assert engine_env.prepare(argv, ["python", "-m", "trainers.pretrain"], environ) == "jax"
    assert environ["XLA_FLAGS"] == "--xla_force_host_platform_device_count=8"
    # A program importing the trainers as a library keeps KERAS_BACKEND=jax, else TensorFlow.
    assert engine_env.requested_engine([], ["python", "train.py"], {"KERAS_BACKEND": "jax"}) == "jax"
    assert engine_env.requested_engine([], ["python", "train.py"], {"KERAS_BACKEND": "torch"}) == "tf"


def test_engine_refusals():
    import ml_collections

    def config(**values):
        return ml_collections.ConfigDict(
            {"engine": "tf", "mixed_precision": "auto", "jit_compile": "auto", **values}
        )

    engines.check(config(), training=True)  # this process runs TensorFlow's Keras: the tf engine's
    engines.check(config(mixed_precision="float16", jit_compile="false"), training=True)
    jax = engines.get("jax")  # its refusals of training flags, whatever the backend of this process
    with pytest.raises(UsageError, match=r"^--mixed_precision=float16 \(loss scaling\) is for --engine=tf"):
        jax.check_training(config(mixed_precision="float16"))
    with pytest.raises(UsageError, match="^--engine=jax always compiles the step with XLA"):
        jax.check_training(config(jit_compile="false"))
    jax.check_training(config(mixed_precision="bfloat16"))
    with pytest.raises(UsageError, match="--engine=jax runs Keras on its jax backend.*KERAS_BACKEND=jax"):
        engines.check(config(engine="jax"))
    with pytest.raises(UsageError, match="unknown --engine='nope': use one of tf, jax"):
        engines.check(config(engine="nope"))


@pytest.mark.slow
@pytest.mark.parametrize("engine", sorted(engines.REGISTRY))
def test_every_engine_keeps_the_contract_of_a_run(runs, engine):
    full, resumed = runs[engine]["contract"], runs[engine]["contract_resumed"]
    results = trainer_cli.read_results(full)
    # A short run: six steps, evaluated while it trains and at its end.
    assert results["steps"] == 6 and results["eval"]["test"]["examples"] == 360
    evaluated = trainer_cli.scalar_tags(full / "eval")["test/accuracy"]
    assert sorted(step for step, _ in evaluated) == [3, 6]
    # Features: the few-shot probes ran on the engine's feature step, on every shot count.
    for k in (1, 2):
        assert 0.0 <= results[f"fewshot/digits/{k}shot_accuracy"] <= 1.0
    # Resume: the rerun starts from the checkpoint of step 3 and ends as the whole run did.
    log = (full.parent.parent / f"{engine}.log").read_text()
    assert f"Resumed from {resumed}/checkpoints/ckpt-3 at step 3." in log
    again = trainer_cli.read_results(resumed)
    del results["wall_time_s"], again["wall_time_s"]
    assert again == results
    whole, rerun = trainer_cli.read_weights(full), trainer_cli.read_weights(resumed)
    assert sorted(whole) == sorted(rerun)
    for name in whole:
        np.testing.assert_array_equal(rerun[name], whole[name], err_msg=name)


def _engine_tests(path):
    """(line, source) of each comparison in a module of `path` between something named like an
    engine or a strategy and a registered engine's name: a question of which engine runs."""
    import ast

    with open(path, encoding="utf-8") as f:
        source = f.read()
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        names = {s.value for s in sides if isinstance(s, ast.Constant)} & set(engines.REGISTRY)
        text = ast.get_source_segment(source, node)
        if names and ("engine" in text or "strategy" in text):
            found.append((node.lineno, text))
    return found


def test_nothing_outside_the_engines_package_asks_which_engine_runs():
    """What differs between engines is the Engine's (a member such as fixed_fields, kernels());
    code elsewhere that compares the engine's name to "jax" is a seam bypassed. It caught
    configs/demo.py dropping --jit_compile for `engine == "jax"`."""
    root = trainer_cli.ROOT
    asked = {}
    for package in ("trainers", "configs", "keras_vit", "benchmarks"):
        for folder, _, files in os.walk(os.path.join(root, package)):
            if os.path.join("trainers", "engines") in folder:
                continue
            for name in files:
                if name.endswith(".py") and (found := _engine_tests(os.path.join(folder, name))):
                    asked[os.path.relpath(os.path.join(folder, name), root)] = found
    assert asked == {}


def _own_modules(engine):
    """The trainers/ modules only `engine` imports (trainers/engines/NAME.py's own imports that no
    other engine shares), and that module itself."""

    def imported(name):
        tree = ast.parse(open(os.path.join(trainer_cli.ROOT, "trainers", "engines", f"{name}.py")).read())
        return {
            alias.name
            for node in tree.body
            if isinstance(node, ast.ImportFrom) and node.module == "trainers"
            for alias in node.names
        }

    others = set().union(*(imported(other) for other in engines.REGISTRY if other != engine))
    own = [os.path.join("trainers", f"{module}.py") for module in sorted(imported(engine) - others)]
    return [*own, os.path.join("trainers", "engines", f"{engine}.py")]


def test_no_function_is_written_once_per_engine():
    """The math is written once (trainers/numerics.py, trainers/objectives.py): a class or function
    of the same name in two engines' own modules is one algorithm written twice, as
    per_example_loss, top1_hits and masked patch prediction once were (tf.* and jnp.* copies)."""
    defined = {}
    for engine in engines.REGISTRY:
        for path in _own_modules(engine):
            tree = ast.parse(open(os.path.join(trainer_cli.ROOT, path)).read())
            for node in tree.body:
                if isinstance(node, ast.FunctionDef | ast.ClassDef):
                    defined.setdefault(node.name, set()).add(engine)
    assert sorted(name for name, where in defined.items() if len(where) > 1) == []
    assert "trainers/jax_loop.py" in _own_modules("jax") and "trainers/loop.py" in _own_modules("tf")
