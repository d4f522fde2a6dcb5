"""tests/fixtures.py: the trainer flags set the tiny shape's fields, and a fake TFDS data_dir is
prepared once per session."""

import os

import pytest
from fixtures import TINY, TINY_CONFIG, TINY_FLAGS, shared_fake_tfds, tiny_hybrid, tiny_vit

from trainers import finetune
from trainers import flags as trainer_flags


def test_the_flags_set_the_config_fields_of_the_shape():
    config = trainer_flags.parse_flags(["finetune", "--dataset=digits", *TINY_FLAGS], finetune.get_config)
    assert {name: config[name] for name in TINY_CONFIG} == TINY_CONFIG


def test_the_tiny_models_have_the_shape():
    model = tiny_vit(num_layers=2)
    assert (model.hidden_size, model.num_layers, model.grid_size) == (TINY["hidden_size"], 2, (4, 4))
    hybrid = tiny_hybrid()
    assert hybrid.grid_size == (4, 4) and "conv_root" in [layer.name for layer in hybrid.layers]


@pytest.mark.parametrize("fake_tfds_dir", ["cifar10"], indirect=True)
def test_a_fake_tfds_dir_is_made_once_per_session(fake_tfds_dir, cifar10_data_dir, tmp_path_factory):
    assert fake_tfds_dir == cifar10_data_dir == shared_fake_tfds("cifar10", tmp_path_factory)
    assert "cifar10" in os.listdir(fake_tfds_dir)
