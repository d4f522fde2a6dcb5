"""configs.pretrain: each --recipe is its row of the paper's appendix Table 3, chosen by flags."""

import re

import pytest

from configs import pretrain as pretrain_config
from trainers import errors, pretrain
from trainers import flags as trainer_flags

# (recipe, model) -> (base_lr, decay, weight decay, dropout, epochs), typed in from Table 3.
TABLE_3 = {
    ("imagenet2012", "ViT-B_16"): (3e-3, "cosine", 0.3, 0.1, 300),
    ("imagenet2012", "ViT-L_16"): (3e-3, "cosine", 0.3, 0.1, 300),
    ("imagenet21k", "ViT-B_32"): (1e-3, "linear", 0.03, 0.1, 90),
    ("imagenet21k", "ViT-L_16"): (1e-3, "linear", 0.03, 0.1, 90),
    ("jft", "ViT-B_16"): (8e-4, "linear", 0.1, 0.0, 7),
    ("jft", "ViT-L_32"): (6e-4, "linear", 0.1, 0.0, 7),
    ("jft", "ViT-L_16"): (4e-4, "linear", 0.1, 0.0, 7),
    ("jft", "ViT-H_14"): (3e-4, "linear", 0.1, 0.0, 14),
}
IMAGES = {"imagenet2012": 1_281_167, "imagenet21k": 14_197_122, "jft": 303_000_000}


@pytest.mark.parametrize("recipe, model", sorted(TABLE_3))
def test_each_recipe_is_its_table_3_row(recipe, model):
    c = trainer_flags.parse_flags(
        ["pretrain", "--dataset=folder:/data", f"--recipe={recipe}", f"--model={model}"], pretrain.get_config
    )
    lr, decay, wd, dropout, epochs = TABLE_3[recipe, model]
    assert (c.recipe, c.model, c.base_lr, c.decay_type, c.weight_decay, c.dropout_rate) == (
        recipe,
        model,
        lr,
        decay,
        wd,
        dropout,
    )
    # Shared by every row: Adam, batch 4096, 10k warm-up, clip 1, 224 px, pre-logits.
    assert (c.optimizer, c.batch_size, c.warmup_steps, c.grad_norm_clip, c.image_size, c.pre_logits) == (
        "adam",
        4096,
        10_000,
        1.0,
        224,
        True,
    )
    assert c.total_steps == -(-epochs * IMAGES[recipe] // 4096)
    # ImageNet-21k and JFT are multi-label: sigmoid cross-entropy, as big_vision trains them.
    assert c.loss == ("softmax" if recipe == "imagenet2012" else "sigmoid")


def test_recipe_defaults_to_the_datasets_own_and_flags_still_win():
    assert pretrain_config.get_config("imagenet2012").recipe == "imagenet2012"
    assert pretrain_config.get_config("folder:/x").recipe == "imagenet2012"
    c = trainer_flags.parse_flags(
        ["pretrain", "--dataset=folder:/x", "--recipe=jft", "--base_lr=1e-4", "--total_steps=50"],
        pretrain.get_config,
    )
    assert (c.recipe, c.base_lr, c.total_steps, c.weight_decay) == ("jft", 1e-4, 50, 0.1)


def test_unknown_recipe_is_one_usage_line():
    with pytest.raises(errors.UsageError, match="imagenet2012|imagenet21k|jft"):
        trainer_flags.parse_flags(["pretrain", "--recipe=laion"], pretrain.get_config)


def test_docstring_step_counts_are_the_computed_ones():
    """The preset's documented numbers cannot drift from what it runs."""
    doc = pretrain_config.__doc__.replace(",", "")
    for recipe, row in pretrain_config.RECIPES.items():
        steps = pretrain_config.recipe_steps(row["images"], row["epochs"])
        assert re.search(rf"\b{steps} steps", doc), (recipe, steps)
    assert re.search(rf"\b{pretrain_config.recipe_steps(303_000_000, 14)} steps", doc)
