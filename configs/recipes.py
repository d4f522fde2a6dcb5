"""The paper's upstream recipes, its Table 3: the rows --recipe names (configs/pretrain.py applies them).

A module of its own so that the flag's allowed values (trainers/fields.py) and the preset that
applies a row (configs/pretrain.py) read the one table.
"""

# Table 3 of the paper, one entry per upstream dataset. `images` is the training set the epochs
# count (ImageNet-1k train; ImageNet-21k fall 2011 release; JFT-300M's 303M images).
RECIPES = {
    "imagenet2012": dict(
        images=1_281_167, epochs=300, base_lr=3e-3, decay_type="cosine", weight_decay=0.3, dropout_rate=0.1
    ),
    "imagenet21k": dict(
        images=14_197_122,
        epochs=90,
        base_lr=1e-3,
        decay_type="linear",
        weight_decay=0.03,
        dropout_rate=0.1,
        loss="sigmoid",
    ),
    "jft": dict(
        images=303_000_000,
        epochs=7,
        base_lr=8e-4,
        decay_type="linear",
        weight_decay=0.1,
        dropout_rate=0.0,
        loss="sigmoid",
    ),
}
# JFT-300M rows that differ from the ViT-B one: (learning rate, epochs).
JFT_BY_MODEL = {"ViT-L_32": (6e-4, 7), "ViT-L_16": (4e-4, 7), "ViT-H_14": (3e-4, 14)}
