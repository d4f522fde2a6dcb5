"""keras_vit.vit_graph: how ViT's arguments settle before any layer is built (the layers and
their names: tests/test_models.py, test_functional_graph_has_stable_layer_names)."""

import inspect

import keras
import numpy as np
import pytest
from fixtures import TINY

from keras_vit import models, vit_graph


def _arguments(**overrides):
    """Every ViT argument at its default, with TINY's shape and `overrides` over them."""
    parameters = inspect.signature(models.ViT.__init__).parameters
    defaults = {name: p.default for name, p in parameters.items() if name not in ("self", "kwargs")}
    return {**defaults, **TINY, **overrides}


@pytest.mark.parametrize(
    "overrides, include_top, pooling",
    [
        (dict(), True, "token"),  # a head pools as its classifier, whatever pooling says
        (dict(pooling="gap"), True, "token"),
        (dict(num_classes=0), False, "token"),  # no classes: no head, the pooled token
        (dict(num_classes=0, classifier="gap"), False, "gap"),
        (dict(include_top=False), False, None),  # all tokens
    ],
)
def test_head_and_pooling_settle_as_documented(overrides, include_top, pooling):
    """Catches a head that pools with another token than its classifier's, and a classes=0
    model that keeps a zero-width head."""
    settled = vit_graph.settle(_arguments(**overrides))
    assert (settled.include_top, settled.pooling) == (include_top, pooling)


def test_sizes_and_grids_settle_to_tuples():
    settled = vit_graph.settle(_arguments(image_size=[32, 48], base_image_size=None))
    assert settled.image_size == (32, 48) and settled.grid == settled.stored_grid == (4, 6)
    any_size = vit_graph.settle(_arguments(image_size=None, base_image_size=[16, 64], resnet_layers=None))
    assert any_size.dynamic and any_size.grid == (None, None) and any_size.stored_grid == (2, 8)
    assert any_size.base_image_size == (16, 64)


def test_the_dtype_policy_is_one_object_and_class_names_a_list():
    settled = vit_graph.settle(_arguments(num_classes=2, class_names=("a", "b")), dtype="mixed_bfloat16")
    assert isinstance(settled.policy, keras.DTypePolicy) and settled.policy.compute_dtype == "bfloat16"
    assert settled.class_names == ["a", "b"]
    assert vit_graph.settle(_arguments()).policy is None


@pytest.mark.parametrize(
    "overrides, message",
    [
        # Any text counted as True: include_preprocessing="no" scaled the pixels.
        (dict(include_preprocessing="no"), "include_preprocessing must be True or False, got 'no'."),
        (dict(include_top="false"), "include_top must be True or False, got 'false'."),
        # patch_size=0 had ended in a ZeroDivisionError; a fraction was cut to a whole number.
        (dict(patch_size=0), "patch_size must be a whole number >= 1 or a pair of them, got 0."),
        (
            dict(patch_size=(8, 4.5)),
            "patch_size must be a whole number >= 1 or a pair of them, got (8, 4.5).",
        ),
    ],
)
def test_switches_and_patch_sizes_of_another_type_are_one_line(overrides, message):
    with pytest.raises(ValueError) as refused:
        vit_graph.settle(_arguments(**overrides))
    assert str(refused.value) == message


def test_numpy_switches_and_sizes_settle_as_pythons():
    settled = vit_graph.settle(_arguments(include_top=np.bool_(True), patch_size=np.int64(8)))
    assert settled.include_top is not False and settled.grid == (4, 4)
    assert type(settled.patch_size) is int
