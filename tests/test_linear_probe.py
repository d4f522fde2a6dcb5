"""The closed-form ridge probe and the k-shot sampling behind trainers.fewshot."""

import numpy as np
import pytest

from trainers import linear_probe as lp


def direct_ridge(features, labels, num_classes, l2_reg):
    """The same ridge problem solved independently: least squares on the l2-augmented system."""
    mean, std = features.mean(0), features.std(0) + lp.STD_EPSILON
    x = np.concatenate([(features - mean) / std, np.full((len(features), 1), lp.BIAS_FEATURE)], 1)
    y = 2.0 * np.eye(num_classes)[labels] - 1.0
    d = x.shape[1]
    a = np.concatenate([x, np.sqrt(l2_reg) * np.eye(d)])
    b = np.concatenate([y, np.zeros((d, num_classes))])
    w = np.linalg.lstsq(a, b, rcond=None)[0]
    return x, w


def direct_accuracy(train_x, train_y, test_x, test_y, num_classes, l2_reg):
    """Test accuracy of direct_ridge's solution, the test features whitened as the train ones."""
    _, w = direct_ridge(train_x, train_y, num_classes, l2_reg)
    mean, std = train_x.mean(0), train_x.std(0) + lp.STD_EPSILON
    x = np.concatenate([(test_x - mean) / std, np.full((len(test_x), 1), lp.BIAS_FEATURE)], 1)
    return float(np.mean(np.argmax(x @ w, axis=1) == test_y))


@pytest.mark.parametrize("n,d,primal", [(200, 12, True), (9, 60, False)])
@pytest.mark.parametrize("l2_reg", [1e-3, 1.0, 2.0**10])
def test_solver_matches_lstsq_in_both_forms(n, d, primal, l2_reg):
    rng = np.random.default_rng(n + d)
    features = rng.normal(size=(n, d)) * rng.uniform(0.1, 5, size=d) + rng.normal(size=d)
    labels = np.arange(n) % 3
    problem = lp.RidgeProblem(features, labels, 3)
    assert problem.primal is primal
    weights, bias = problem.solve(l2_reg)
    assert weights.shape == (d, 3) and bias.shape == (3,)

    x, w = direct_ridge(features, labels, 3, l2_reg)
    np.testing.assert_allclose(features @ weights + bias, x @ w, rtol=1e-7, atol=1e-7)
    # The normal equations of the form that was not chosen give the same solution.
    normal = np.linalg.solve(x.T @ x + l2_reg * np.eye(x.shape[1]), x.T @ (2.0 * np.eye(3)[labels] - 1))
    np.testing.assert_allclose(w, normal, rtol=1e-6, atol=1e-8)
    # fit_ridge is the one-shot wrapper of the same computation.
    w2, b2 = lp.fit_ridge(features, labels, 3, l2_reg)
    np.testing.assert_allclose(w2, weights)
    np.testing.assert_allclose(b2, bias)


def test_probe_separates_separable_classes_and_generalises():
    rng = np.random.default_rng(0)
    centers = rng.normal(size=(4, 30)) * 3
    train_y, test_y = np.repeat(np.arange(4), 5), np.repeat(np.arange(4), 50)
    train_x = centers[train_y] + rng.normal(size=(20, 30))
    test_x = centers[test_y] + rng.normal(size=(200, 30))
    weights, bias = lp.fit_ridge(train_x, train_y, 4, 1.0)
    got = lp.accuracy(weights, bias, test_x, test_y)
    assert got == direct_accuracy(train_x, train_y, test_x, test_y, 4, 1.0)
    assert got > 0.95


def test_constant_features_do_not_break_whitening():
    features = np.zeros((6, 4))
    features[:, 0] = [0, 0, 0, 1, 1, 1]
    weights, bias = lp.fit_ridge(features, np.array([0, 0, 0, 1, 1, 1]), 2, 1e-3)
    assert np.all(np.isfinite(weights)) and np.all(np.isfinite(bias))
    assert list(lp.predict(weights, bias, features)) == [0, 0, 0, 1, 1, 1]


def test_sampling_is_reproducible_and_exactly_k_per_class():
    labels = np.random.default_rng(1).integers(0, 5, size=300)
    for k in (1, 5, 10):
        idx = lp.sample_k_per_class(labels, k, seed=3)
        assert len(set(idx.tolist())) == len(idx) == 5 * k
        assert np.bincount(labels[idx], minlength=5).tolist() == [k] * 5
        np.testing.assert_array_equal(idx, lp.sample_k_per_class(labels, k, seed=3))
    assert not np.array_equal(lp.sample_k_per_class(labels, 10, 0), lp.sample_k_per_class(labels, 10, 1))
    # For one seed the smaller set is nested in the larger (as big_vision samples).
    one, five = lp.sample_k_per_class(labels, 1, 4), lp.sample_k_per_class(labels, 5, 4)
    assert set(one.tolist()) <= set(five.tolist())


def test_too_many_shots_is_a_one_line_error():
    labels = np.array([0] * 10 + [1] * 3 + [2] * 10)
    with pytest.raises(lp.FewShotError) as err:
        lp.sample_k_per_class(labels, 5, seed=0)
    message = str(err.value)
    assert "\n" not in message and "class 1 has only 3" in message and "--shots" in message
    with pytest.raises(lp.FewShotError, match="class 3 has only 0"):
        lp.sample_k_per_class(labels, 1, seed=0, num_classes=4)


def test_evaluate_probes_reports_mean_std_and_sweeps_l2():
    rng = np.random.default_rng(2)
    centers = rng.normal(size=(3, 8)) * 2
    train_y, test_y = np.repeat(np.arange(3), 40), np.repeat(np.arange(3), 30)
    train_x = centers[train_y] + rng.normal(size=(120, 8))
    test_x = centers[test_y] + rng.normal(size=(90, 8))
    fixed = lp.evaluate_probes(train_x, train_y, test_x, test_y, 3, (1, 5), seeds=3, l2_reg=2.0**10)
    assert set(fixed) == {1, 5}

    def direct(k, seeds, l2):
        """(mean, std) over seeds of direct_ridge's accuracy on the same k-shot samples."""
        accs = []
        for seed in range(seeds):
            chosen = lp.sample_k_per_class(train_y, k, seed, 3)
            accs.append(direct_accuracy(train_x[chosen], train_y[chosen], test_x, test_y, 3, l2))
        return np.mean(accs), np.std(accs)

    for k, (mean, std, l2) in fixed.items():
        assert l2 == 2.0**10
        assert (mean, std) == pytest.approx(direct(k, 3, l2), abs=1e-12)
        assert 1 / 3 < mean
    swept = lp.evaluate_probes(train_x, train_y, test_x, test_y, 3, (5,), seeds=2, l2_reg="sweep")
    assert swept[5][2] in lp.L2_SWEEP
    assert swept[5][:2] == pytest.approx(direct(5, 2, swept[5][2]), abs=1e-12)
    assert swept[5][0] > 0.8
