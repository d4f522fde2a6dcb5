"""keras_vit.masked_patches: the corruption's exact counts, the three targets, the predictor."""

import keras
import numpy as np
import pytest
from fixtures import tiny_vit

from keras_vit import masked_patches as mp


def _noise(seed, shape):
    return np.random.default_rng(seed).uniform(size=shape).astype("float32")


def _scaled(pixels):
    """[0, 255] pixels as the model sees them: [-1, 1]."""
    return np.asarray(pixels, "float32") / 127.5 - 1.0


@pytest.mark.parametrize(
    "num_patches, expected",
    [(16, (8, 6, 1, 1)), (196, (98, 78, 10, 10)), (49, (25, 19, 3, 3)), (4, (2, 2, 0, 0))],
)
def test_every_image_has_exactly_the_documented_counts(num_patches, expected):
    assert mp.corruption_counts(num_patches) == expected
    roles = keras.ops.convert_to_numpy(mp.corruption_plan(_noise(0, (6, num_patches))))
    corrupted, masked, replaced, kept = expected
    for row in roles:
        counts = np.bincount(row, minlength=4)
        assert counts[mp.CLEAN] == num_patches - corrupted
        assert (counts[mp.MASKED], counts[mp.REPLACED], counts[mp.KEPT]) == (masked, replaced, kept)
    # The choice of patches comes from the noise: the rows differ, and another draw differs.
    if num_patches >= 16:
        assert len({tuple(row) for row in roles}) == len(roles)
    other = keras.ops.convert_to_numpy(mp.corruption_plan(_noise(1, (6, num_patches))))
    assert not np.array_equal(roles, other)


@pytest.mark.parametrize("batch", [1, 3])
def test_replacement_comes_from_another_patch_of_the_batch(batch):
    sources = keras.ops.convert_to_numpy(mp.replacement_sources(_noise(2, (batch, 16))))
    own = np.arange(batch * 16).reshape(batch, 16)
    assert sources.shape == (batch, 16)
    assert (sources != own).all() and sources.min() >= 0 and sources.max() < batch * 16
    # Extreme noise still lands on another patch.
    edges = keras.ops.convert_to_numpy(mp.replacement_sources(np.array([[0.0, 0.999999]], "float32")))
    assert edges.tolist() == [[1, 0]]


def test_corruption_masks_replaces_and_keeps_the_embeddings():
    batch, num, dim = 2, 16, 8
    tokens = np.arange(batch * num * dim, dtype="float32").reshape(batch, num, dim)
    layer = mp.PatchCorruption()
    roles = keras.ops.convert_to_numpy(mp.corruption_plan(_noise(3, (batch, num))))
    sources = keras.ops.convert_to_numpy(mp.replacement_sources(_noise(4, (batch, num))))
    out = keras.ops.convert_to_numpy(layer(tokens, roles, sources))
    mask = keras.ops.convert_to_numpy(layer.mask_embedding)
    flat = tokens.reshape(-1, dim)
    for b in range(batch):
        for n in range(num):
            if roles[b, n] == mp.MASKED:
                np.testing.assert_array_equal(out[b, n], mask)
            elif roles[b, n] == mp.REPLACED:
                np.testing.assert_array_equal(out[b, n], flat[sources[b, n]])
                assert not np.array_equal(out[b, n], tokens[b, n])
            else:  # clean, or chosen and kept as it is
                np.testing.assert_array_equal(out[b, n], tokens[b, n])
    assert [w.path for w in layer.weights] == ["patch_corruption/mask_embedding"]


def test_mean_color_target_of_a_hand_made_patch():
    # One 4x4 patch: red 255 everywhere, green 0, blue half 96 and half 160 (mean 128).
    patch = np.zeros((4, 4, 3), "float32")
    patch[..., 0] = 255
    patch[:2, :, 2], patch[2:, :, 2] = 96, 160
    grey = np.full((4, 4, 3), 100.0, "float32")  # level 100 // 32 = 3 in every channel
    images = _scaled(np.concatenate([patch, grey], axis=1)[None])  # 4 x 8: two patches
    classes = keras.ops.convert_to_numpy(mp.targets(images, 4, "mean_color"))
    # 3 bits per channel: 255 -> 7, 0 -> 0, 128 -> 4; red most significant: 7 * 64 + 0 * 8 + 4.
    assert classes.tolist() == [[452, 3 * 64 + 3 * 8 + 3]]
    assert mp.head_size("mean_color", 4, 3) == 512
    # A one-channel image: the 8 levels of its grey value.
    single = keras.ops.convert_to_numpy(mp.targets(_scaled(np.full((1, 4, 4, 1), 255.0)), 4, "mean_color"))
    assert single.tolist() == [[7]] and mp.head_size("mean_color", 4, 1) == 8


def test_downsampled_target_of_a_hand_made_patch():
    # One 8x8 patch of 2x2 cells; cell (i, j) has red 32 * i + 5, green 32 * j + 5, blue 250 on its
    # first pixel row and 10 on its second (mean 130 -> level 4).
    patch = np.zeros((8, 8, 3), "float32")
    for i in range(4):
        for j in range(4):
            cell = patch[2 * i : 2 * i + 2, 2 * j : 2 * j + 2]
            cell[..., 0], cell[..., 1] = 32 * i + 5, 32 * j + 5
            cell[0, :, 2], cell[1, :, 2] = 250, 10
    cells = keras.ops.convert_to_numpy(mp.targets(_scaled(patch[None]), 8, "downsampled"))
    expected = [i * 64 + j * 8 + 4 for i in range(4) for j in range(4)]  # row-major cells
    assert cells.shape == (1, 1, 16) and cells[0, 0].tolist() == expected
    assert mp.head_size("downsampled", 8, 3) == 16 * 512
    with pytest.raises(ValueError, match="not a multiple of 4"):
        mp.targets(_scaled(np.zeros((1, 6, 6, 3))), 6, "downsampled")


def test_l2_target_is_each_patchs_pixels_in_patch_order():
    images = _scaled(np.random.default_rng(5).integers(0, 256, (2, 8, 12, 3)))
    pixels = keras.ops.convert_to_numpy(mp.targets(images, 4, "l2"))
    assert pixels.shape == (2, 6, 48) and mp.head_size("l2", 4, 3) == 48
    # Patch 4 is grid row 1, column 1 (3 patches per row), flattened row, column, channel.
    np.testing.assert_array_equal(pixels[1, 4], images[1, 4:8, 4:8].reshape(-1))


def _vit(**kwargs):
    """tests/fixtures.py's tiny ViT in 16 patches of 4 x 4 (16 px) that takes scaled images."""
    return tiny_vit(image_size=16, patch_size=4, num_classes=3, include_preprocessing=False, **kwargs)


@pytest.mark.parametrize("target, size", [("mean_color", 512), ("l2", 48)])
def test_predictor_reuses_the_vits_layers(target, size):
    vit = _vit()
    predictor = mp.MaskedPatchPredictor(vit, target)
    images = _scaled(np.random.default_rng(6).integers(0, 256, (2, 16, 16, 3)))
    roles = mp.corruption_plan(_noise(7, (2, 16)))
    sources = mp.replacement_sources(_noise(8, (2, 16)))
    keras.ops.convert_to_numpy(predictor(images, roles, sources))  # builds
    kernel = np.random.default_rng(9).normal(size=(vit.hidden_size, size)).astype("float32")
    predictor.head.kernel.assign(kernel)
    before = keras.ops.convert_to_numpy(predictor(images, roles, sources))
    assert before.shape == (2, 16, size)
    # The ViT's own encoder computes the prediction: changing one of its weights changes it.
    norm = vit.get_layer("encoder_norm")
    norm.gamma.assign(norm.gamma * 2.0)
    after = keras.ops.convert_to_numpy(predictor(images, roles, sources))
    assert not np.allclose(before, after)
    names = sorted(w.path for w in predictor.trainable_variables)
    assert names == ["masked_patch_head/bias", "masked_patch_head/kernel", "patch_corruption/mask_embedding"]


def test_predictor_refuses_what_it_cannot_train():
    with pytest.raises(ValueError, match="target must be one of mean_color, downsampled, l2"):
        mp.MaskedPatchPredictor(_vit(), "median")
    with pytest.raises(ValueError, match="include_preprocessing=False"):
        mp.MaskedPatchPredictor(tiny_vit(image_size=16, patch_size=4))
