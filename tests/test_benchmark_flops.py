"""benchmarks/flops.py: the FLOP count of a ViT against a hand count and against the model's own
matmul weights, and the paper's compute estimates."""

import pytest

from benchmarks import flops


def test_flop_count_matches_a_hand_count():
    # 32 px, 16 px patches: 4 patches + the class token = 5 tokens; width 8, MLP 16, 3 classes.
    parts = flops.forward(32, patch_size=16, hidden_size=8, num_layers=1, mlp_dim=16, num_classes=3)
    assert parts == {
        "patch_embedding": 2 * 4 * (16 * 16 * 3) * 8,  # 49,152
        "qkv": 2 * 5 * 8 * 24,  # 1,920
        "attention": 2 * 25 * 8 + 2 * 25 * 8,  # Q K^T and weights x V: 800
        "projection": 2 * 5 * 8 * 8,  # 640
        "mlp": 2 * 5 * 8 * 16 * 2,  # 2,560
        "head": 2 * 8 * 3,  # 48
        "total": 55_120,
    }
    assert (
        flops.train_step(32, patch_size=16, hidden_size=8, num_layers=1, mlp_dim=16, num_classes=3) == 165_360
    )
    # Without a class token (gap): 4 tokens.
    assert flops.forward(32, 16, 8, 1, 16, 3, token=False)["attention"] == 2 * 2 * 16 * 8


def test_flop_count_matches_the_models_matmul_weights():
    """Every matmul but attention's multiplies tokens by a kernel: 2 x tokens x kernel size."""
    import keras_vit

    shape = flops.shape("ViT-Ti_16", num_layers=2)
    model = keras_vit.create_model(
        "ViT-Ti_16", image_size=64, num_layers=2, num_classes=5, include_preprocessing=False
    )
    t, patches = flops.tokens(64, 16), (64 // 16) ** 2
    kernels = {w.path: w for w in model.weights if w.path.endswith("kernel")}
    expected = 0
    for path, kernel in kernels.items():
        size = int(kernel.numpy().size)
        expected += 2 * size * (patches if "embedding" in path else 1 if "head" in path else t)
    parts = flops.forward(64, **shape, num_classes=5)
    assert len(kernels) == 2 + 2 * 6  # patch embedding, head; q, k, v, out, mlp 1 and 2 per block
    assert parts["total"] - parts["attention"] == expected


def test_paper_estimate_at_the_implied_efficiency_gives_the_papers_core_days():
    for row in flops.paper_estimates(0.4):
        again = {r["variant"]: r for r in flops.paper_estimates(row["implied_efficiency"])}[row["variant"]]
        assert again["core_days"] == pytest.approx(row["paper_core_days"])
    # Twice the efficiency, half the days.
    assert flops.paper_estimates(0.8)[0]["core_days"] == pytest.approx(
        flops.paper_estimates(0.4)[0]["core_days"] / 2
    )
