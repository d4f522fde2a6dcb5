"""timm and transformers ViT checkpoints, both ways, against timm and transformers themselves.

Random timm and transformers models (small widths, two variants each, at 224 and 160 px, a GAP
model, a model trained on ImageNet mean/std inputs, a ViTModel with its pooler) are made and
saved by their own libraries (tests/hf_reference.py, in a subprocess: torch is imported before
TensorFlow there). keras_vit must give their logits to 1e-5, and its exports must give keras_vit's
logits back in timm and transformers.
"""

import json
import os
import shutil
import subprocess
import sys

import command_server
import numpy as np
import pytest
import trainer_cli
from PIL import Image
from trainer_cli import run_cli, run_main

import keras_vit
from keras_vit import convert, hf_export, hub, npz_layout, run_dir
from keras_vit import predict as predict_lib
from keras_vit import weights as weights_lib
from keras_vit.errors import CheckpointError

TESTS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TESTS)
TOLERANCE = 1e-5
# The shape arguments of each test model (tests/hf_reference.py), over a ViT-Ti_16 base.
SHAPES = {
    "ti": dict(patch_size=16, hidden_size=48, num_layers=2, num_heads=3, mlp_dim=192),
    "s": dict(patch_size=32, hidden_size=64, num_layers=2, num_heads=4, mlp_dim=256),
    "a": dict(patch_size=16, hidden_size=48, num_layers=2, num_heads=3, mlp_dim=96),
    "b": dict(patch_size=32, hidden_size=64, num_layers=2, num_heads=4, mlp_dim=128),
}
TIMM = {
    "timm_ti224": ("ti", 224),
    "timm_ti160": ("ti", 160),
    "timm_s224": ("s", 224),
    "timm_s160": ("s", 160),
    "timm_gap": ("ti", 224),
    "timm_gap_nofc": ("ti", 224),
    "timm_imagenet_norm": ("ti", 224),
}
TRANSFORMERS = {"hf_a224": ("a", 224), "hf_a160": ("a", 160), "hf_b224": ("b", 224), "hf_b160": ("b", 160)}
# What each model is exported to: a transformers model has LayerNorm epsilon 1e-12, which timm's
# ViT cannot take; a GAP model has no class token for transformers.
EXPORTS = {
    "native": ("timm", "transformers"),
    "timm_ti224": ("timm", "transformers"),
    "timm_s160": ("timm",),
    "timm_gap": ("timm",),
    "hf_a224": ("transformers",),
    "hf_b160": ("transformers",),
}
MEASURED = {}  # the largest difference per test model, printed for the checkpoints guide's table


@pytest.fixture(scope="module", autouse=True)
def _report_differences():
    yield
    for name, difference in sorted(MEASURED.items()):
        print(f"max |logit difference| {name}: {difference:.2e}")


def _torch_side(*args):
    proc = subprocess.run(
        [sys.executable, os.path.join(TESTS, "hf_reference.py"), *map(str, args)],
        capture_output=True,
        text=True,
        env=trainer_cli.child_env(),
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """(folder of the saved models, their reference inputs and logits)."""
    out = tmp_path_factory.mktemp("hf_models")
    _torch_side("make", out)
    return out, dict(np.load(out / "reference.npz"))


def _load(folder, name, shape, **kwargs):
    kwargs.setdefault("classifier_activation", None)
    return keras_vit.create_model("ViT-Ti_16", weights=str(folder / name), **SHAPES[shape], **kwargs)


def _max_difference(a, b):
    return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))


@pytest.mark.parametrize("name", sorted(TIMM))
def test_timm_checkpoints_give_timm_logits(made, name):
    folder, refs = made
    shape, size = TIMM[name]
    model = _load(folder, name, shape)
    assert model.image_size == (size, size)  # the checkpoint's own resolution
    assert not model.gelu_approximate and model.layer_norm_epsilon == 1e-6  # timm's exact GELU
    if name.startswith("timm_gap"):
        assert model.classifier == "gap" and model.fc_norm == (name == "timm_gap")
    logits = model.predict(refs[f"input_{size}"], verbose=0)
    MEASURED[name] = _max_difference(logits, refs[name])
    assert MEASURED[name] < TOLERANCE
    assert np.abs(refs[name]).max() > 0.1  # logits that say something


@pytest.mark.parametrize("name", sorted(TRANSFORMERS))
def test_transformers_checkpoints_give_transformers_logits(made, name):
    folder, refs = made
    shape, size = TRANSFORMERS[name]
    model = _load(folder, name, shape)
    assert model.image_size == (size, size)
    assert model.layer_norm_epsilon == 1e-12  # config.json's, not keras_vit's 1e-6
    assert model.class_names == ["cat", "dog", "bird", "fish"]  # id2label
    logits = model.predict(refs[f"input_{size}"], verbose=0)
    MEASURED[name] = _max_difference(logits, refs[name])
    assert MEASURED[name] < TOLERANCE


def test_transformers_pooler_is_the_pre_logits_layer(made):
    folder, refs = made
    model = _load(folder, "hf_pooler", "a", include_top=False, pooling="token")
    assert model.representation_size == 48
    MEASURED["hf_pooler"] = _max_difference(model.predict(refs["input_224"], verbose=0), refs["hf_pooler"])
    assert MEASURED["hf_pooler"] < TOLERANCE


def test_timm_class_names_come_with_the_weights(made):
    folder, _ = made
    model = _load(folder, "timm_ti224", "ti", classifier_activation="softmax")
    assert model.class_names == ["zebra", "tabby", "robin", "tractor", "pizza"]
    image = np.full((224, 224, 3), 128, np.uint8)
    names = [name for _, name, _ in predict_lib.classify(model, [image], top=5)[0]]
    assert sorted(names) == sorted(model.class_names)


def test_another_resolution_resizes_as_for_npz_files(made, tmp_path):
    # The Hub checkpoint at 288 px: the same position-embedding resize (and numerics) as the
    # same weights in an .npz, which keras_vit.weights' own tests check against vit_jax.
    folder, refs = made
    npz = tmp_path / "timm_ti224.npz"
    weights_lib.save_npz(weights_lib.read_params(str(folder / "timm_ti224")), npz)
    assert npz_layout.architecture(weights_lib.read_params(str(npz)))["gelu_approximate"] is False
    pixels = np.random.RandomState(3).uniform(0, 255, (2, 288, 288, 3)).astype(np.float32)
    from_hub = _load(folder, "timm_ti224", "ti", image_size=288)
    from_npz = keras_vit.create_model(
        "ViT-Ti_16", weights=str(npz), image_size=288, classifier_activation=None, **SHAPES["ti"]
    )
    assert from_hub.grid_size == (18, 18) and not from_npz.gelu_approximate
    np.testing.assert_array_equal(from_hub.predict(pixels, verbose=0), from_npz.predict(pixels, verbose=0))


def test_a_single_safetensors_file_loads_like_its_folder(made, tmp_path):
    folder, refs = made
    copy = tmp_path / "vit.safetensors"
    shutil.copy(folder / "hf_a224" / "model.safetensors", copy)
    shutil.copy(folder / "hf_a224" / "config.json", tmp_path / "config.json")
    model = keras_vit.create_model("ViT-Ti_16", weights=str(copy), classifier_activation=None, **SHAPES["a"])
    assert _max_difference(model.predict(refs["input_224"], verbose=0), refs["hf_a224"]) < TOLERANCE


def _export_all(made, tmp_path):
    """keras_vit models exported to both formats; (spec for hf_reference.py, keras_vit logits)."""
    folder, refs = made
    spec, ours = [], {}
    # A keras_vit model of its own (tanh GELU, epsilon 1e-6, random head): what our trainers make.
    native = keras_vit.ViT(
        image_size=160, num_classes=3, classifier_activation=None, **SHAPES["a"], name="native"
    )
    rng = np.random.RandomState(0)
    for variable in native.weights:
        centre = 1.0 if variable.path.endswith("gamma") else 0.0  # LayerNorm scales around 1
        variable.assign((centre + rng.normal(0, 0.1, variable.shape)).astype(np.float32))
    models = {"native": (native, 160)}
    for name in EXPORTS:
        if name != "native":
            shape, size = {**TIMM, **TRANSFORMERS}[name]
            models[name] = (_load(folder, name, shape), size)
    for name, (model, size) in models.items():
        pixels = refs[f"input_{size}"]
        np.save(tmp_path / f"input_{size}.npy", pixels)
        for to in EXPORTS[name]:
            out = tmp_path / f"{name}_to_{to}"
            hf_export.save_pretrained(model, out, to=to)
            spec.append(
                dict(
                    name=f"{name}_to_{to}", format=to, dir=str(out), input=str(tmp_path / f"input_{size}.npy")
                )
            )
            ours[f"{name}_to_{to}"] = model.predict(pixels, verbose=0)
    return spec, ours


@pytest.fixture(scope="module")
def exported(made, tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("hf_exports")
    spec, ours = _export_all(made, tmp_path)
    with open(tmp_path / "spec.json", "w") as f:
        json.dump(spec, f)
    _torch_side("logits", tmp_path / "spec.json", tmp_path / "theirs.npz")
    return ours, dict(np.load(tmp_path / "theirs.npz"))


@pytest.mark.parametrize(
    "name",
    [
        "native_to_timm",
        "native_to_transformers",
        "timm_ti224_to_timm",
        "timm_ti224_to_transformers",
        "timm_s160_to_timm",
        "timm_gap_to_timm",
        "hf_a224_to_transformers",
        "hf_b160_to_transformers",
    ],
)
def test_exports_give_the_same_logits_in_timm_and_transformers(exported, name):
    ours, theirs = exported
    MEASURED[name] = _max_difference(ours[name], theirs[name])
    assert MEASURED[name] < TOLERANCE
    assert np.abs(ours[name]).max() > 0.1  # logits that say something
    if name == "native_to_timm":
        assert str(theirs[name + "_act"]) == "GELUTanh"  # keras_vit's own models: the tanh GELU
    if name == "hf_a224_to_transformers":
        assert list(theirs[name + "_labels"]) == ["cat", "dog", "bird", "fish"]
        assert float(theirs[name + "_eps"]) == 1e-12


def test_timm_hybrids_are_refused(made):
    folder, _ = made
    with pytest.raises(
        CheckpointError, match=r"patch_embed\.backbone.*timm's hybrid format .* not supported"
    ):
        keras_vit.create_model("R+ViT-Ti_16", weights=str(folder / "timm_hybrid"))


@pytest.mark.parametrize("where", ["pickle", "pickle/pytorch_model.bin"])
def test_pickle_files_are_refused_unopened(made, where):
    folder, _ = made
    with pytest.raises(CheckpointError) as raised:
        keras_vit.create_model("ViT-Ti_16", weights=str(folder / where))
    message = str(raised.value)
    assert "\n" not in message and "pytorch_model.bin" in message
    assert "never loaded (unpickling can execute code" in message and "safetensors" in message


@pytest.mark.parametrize(
    "name, expected",
    [
        (
            "timm_ti224",
            "tensor 'patch_embed.proj.weight' is (16, 16, 3, 48) as keras_vit's 'embedding/kernel'",
        ),
        ("hf_b224", "tensor 'vit.embeddings.patch_embeddings.projection.weight' is (32, 32, 3, 64)"),
    ],
)
def test_a_shape_mismatch_names_the_tensor(made, name, expected):
    folder, _ = made
    with pytest.raises(CheckpointError) as raised:
        keras_vit.create_model("ViT-Ti_16", weights=str(folder / name))  # full width 192
    assert expected in str(raised.value) and "(16, 16, 3, 192) in the model" in str(raised.value)
    assert "\n" not in str(raised.value)


def test_mismatched_block_tensor_is_named(made):
    folder, _ = made
    model = keras_vit.ViT(
        image_size=224, num_classes=5, gelu_approximate=False, **{**SHAPES["ti"], "mlp_dim": 96}
    )
    with pytest.raises(CheckpointError) as raised:
        weights_lib.load_weights(model, str(folder / "timm_ti224"))
    # The README's example.
    assert (
        "tensor 'blocks.0.mlp.fc1.weight' is (48, 192) as keras_vit's "
        "'Transformer/encoderblock_0/MlpBlock_3/Dense_0/kernel' but (48, 96) in the model"
    ) in str(raised.value)
    assert not np.any(model.get_layer("head").weights[0].numpy())  # nothing was assigned


def test_export_refuses_what_the_formats_cannot_hold():
    gap = keras_vit.ViT(
        image_size=32, patch_size=8, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32, classifier="gap"
    )
    with pytest.raises(
        CheckpointError, match="classifier='gap'; transformers' ViT classifies from the class token"
    ):
        hf_export.save_pretrained(gap, "unused", to="transformers")
    pre_logits = keras_vit.ViT(
        image_size=32,
        patch_size=8,
        hidden_size=16,
        num_layers=1,
        num_heads=2,
        mlp_dim=32,
        representation_size=16,
    )
    with pytest.raises(CheckpointError, match="pre-logits layer before the head"):
        hf_export.save_pretrained(pre_logits, "unused", to="timm")


def _put_in_hub_cache(hf_home, repo, folder):
    """The files of `folder` as huggingface_hub's cache holds a downloaded snapshot of `repo`."""
    commit = "0" * 40
    root = hf_home / "hub" / f"models--{repo.replace('/', '--')}"
    snapshot = root / "snapshots" / commit
    snapshot.mkdir(parents=True)
    for name in os.listdir(folder):
        shutil.copy(folder / name, snapshot / name)
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text(commit)


@pytest.mark.slow
def test_predict_from_a_hub_name_offline_with_a_warm_cache(made, tmp_path):
    folder, _ = made
    repo = "timm/vit_tiny_patch16_224.augreg_in21k_ft_in1k"
    _put_in_hub_cache(tmp_path / "hf", repo, folder / "timm_vit_ti16")
    image = tmp_path / "cat.png"
    Image.fromarray(np.full((64, 64, 3), 90, np.uint8)).save(image)
    env = trainer_cli.child_env({"HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"})
    env.pop("HF_HUB_CACHE", None)
    # A child, forked: Hugging Face's library reads its variables as it is first imported, which
    # this process did long ago and the server did not.
    args = [str(image), "--model=ViT-Ti_16", "--json"]
    proc = command_server.run_process("keras_vit.predict", [*args, f"--weights=hf-hub:{repo}"], env, 300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    predictions = json.loads(proc.stdout)[0]["predictions"]
    assert sorted(p["name"] for p in predictions) == ["robin", "tabby", "tractor"]  # label_names
    # Not in the cache: one line saying so, status 2.
    other = "--weights=hf-hub:timm/vit_tiny_patch16_384.augreg_in21k_ft_in1k"
    missing = command_server.run_process("keras_vit.predict", [*args, other], env, 300)
    assert missing.returncode == 2
    assert missing.stderr.strip().splitlines()[-1].startswith("error: hf-hub:timm/vit_tiny_patch16_384")
    assert "HF_HUB_OFFLINE is set" in missing.stderr


@pytest.mark.slow
def test_finetune_from_a_timm_file_then_convert_the_run_to_timm(made, cifar10_data_dir, tmp_path):
    folder, _ = made
    workdir = tmp_path / "run"
    proc = run_cli(
        "finetune",
        [
            "--dataset=cifar10",
            f"--data_dir={cifar10_data_dir}",
            # No --model or shape flags: the file says what it is.
            f"--weights={folder / 'timm_trainer' / 'model.safetensors'}",
            "--image_size=32",
            "--batch_size=16",
            "--total_steps=10",
            "--warmup_steps=2",
            "--steps_per_loop=5",
            "--eval_every=10",
            "--checkpoint_every=10",
            "--seed=1",
            f"--workdir={workdir}",
        ],
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = run_dir.load_run(workdir)
    assert (run.model.hidden_size, run.model.num_layers, run.model.mlp_dim) == (32, 1, 64)
    assert not run.model.gelu_approximate  # the timm file's exact GELU, kept through model.npz
    out = tmp_path / "as_timm"
    converted = run_main("keras_vit.convert", [str(workdir), str(out), "--to=timm"])
    assert converted.returncode == 0, converted.stderr[-3000:]
    assert converted.stdout.startswith(f"wrote {out}: timm checkpoint")
    with open(out / "config.json") as f:
        assert json.load(f)["label_names"] == run.class_names
    pixels = np.random.RandomState(5).uniform(0, 255, (2, 32, 32, 3)).astype(np.float32)
    np.save(tmp_path / "input.npy", pixels)
    spec = [dict(name="run", format="timm", dir=str(out), input=str(tmp_path / "input.npy"))]
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    _torch_side("logits", tmp_path / "spec.json", tmp_path / "theirs.npz")
    theirs = np.load(tmp_path / "theirs.npz")["run"]
    probabilities = np.exp(theirs - theirs.max(-1, keepdims=True))
    probabilities /= probabilities.sum(-1, keepdims=True)
    np.testing.assert_allclose(run.model.predict(pixels, verbose=0), probabilities, atol=1e-6)


@pytest.mark.parametrize(
    "args, expected",
    [
        (["{folder}/timm_gap", "{tmp}/out", "--to=transformers"], "classifier='gap'; transformers' ViT"),
        (
            ["{folder}/timm_ti224", "{tmp}/out.npz", "--push_to_hub=me/vit"],
            "--push_to_hub and --labels go with --to",
        ),
        (["{tmp}/missing", "{tmp}/out", "--to=timm"], "no such file or folder"),
    ],
)
def test_convert_to_hub_format_errors_are_one_line(made, tmp_path, capsys, args, expected):
    folder, _ = made
    code = convert.main([arg.format(folder=folder, tmp=tmp_path) for arg in args])
    error = capsys.readouterr().err
    assert code == 2 and expected in error and error.count("\n") == 1


def test_hub_names():
    assert hub.repo_of("hf-hub:timm/vit_base_patch16_224.augreg2_in21k_ft_in1k") == (
        "timm/vit_base_patch16_224.augreg2_in21k_ft_in1k",
        None,
    )
    assert hub.repo_of("hf://google/vit-base-patch16-224@main") == ("google/vit-base-patch16-224", "main")
    with pytest.raises(CheckpointError, match="not a Hub model name"):
        hub.repo_of("hf-hub:vit_base_patch16_224")
    for names in keras_vit.checkpoints.HUB_NAMES.values():
        for name in names:
            repo, _ = hub.repo_of(name)
            assert repo.startswith(("timm/vit_", "google/vit-"))


def test_the_checkpoints_guide_lists_every_recommended_hub_name():
    with open(os.path.join(ROOT, "docs", "guides", "checkpoints.md"), encoding="utf-8") as f:
        readme = f.read()
    for variant, names in keras_vit.checkpoints.HUB_NAMES.items():
        row = next(line for line in readme.splitlines() if line.startswith(f"| {variant} | `hf"))
        assert row == f"| {variant} | " + ", ".join(f"`{name}`" for name in names) + " |"
