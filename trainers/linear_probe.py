"""Closed-form ridge-regression probes on frozen features (the paper's few-shot evaluation).

The paper measures a representation by "solving a regularized least-squares regression problem
that maps the (frozen) representation of a subset of training images to {-1, 1}^K target
vectors". Everything here is NumPy in float64: the problems are small (k examples per class,
a few hundred features) and exactness matters more than speed.

Recipe (as big_vision's few-shot evaluator): whiten the features with the k-shot set's own
mean and standard deviation, append a large constant feature so the bias is practically
unregularized, regress onto 2 * onehot - 1, predict with argmax.
"""

import numpy as np

from trainers.errors import FewShotError

# The bias feature's value. Ridge shrinks each weight by l2 / (feature energy); a constant of
# 100 gives the bias 10^4 times the energy of a whitened feature, so it is nearly free.
BIAS_FEATURE = 100.0
# Added to the standard deviation so constant features (dead units, padding pixels) stay finite.
STD_EPSILON = 1e-5
# The --l2_reg=sweep grid: powers of two around big_vision's fixed 2^10.
L2_SWEEP = tuple(2.0**p for p in range(-4, 17, 2))


def one_hot_targets(labels, num_classes):
    """Targets in {-1, 1}^K: +1 for the example's class, -1 elsewhere."""
    labels = np.asarray(labels)
    if labels.size and (labels.min() < 0 or labels.max() >= num_classes):
        raise FewShotError(f"labels must lie in [0, {num_classes}), got {labels.min()}..{labels.max()}")
    return 2.0 * np.eye(num_classes)[labels] - 1.0


class RidgeProblem:
    """One k-shot regression problem, decomposed once so any number of l2 values are cheap.

    With X (n, d+1) the whitened features plus the bias column and Y (n, K) the targets:
      n >= d+1: W = (X^T X + l2 I)^-1 X^T Y        (a (d+1)-square system)
      n <  d+1: W = X^T (X X^T + l2 I)^-1 Y        (an n-square system; the same W by the
                                                     push-through identity)
    The symmetric matrix of the chosen form is eigendecomposed as Q diag(e) Q^T, so
    (A + l2 I)^-1 = Q diag(1 / (e + l2)) Q^T for every l2 > 0.
    """

    def __init__(self, features, labels, num_classes):
        x = np.asarray(features, dtype=np.float64)
        if x.ndim != 2 or len(x) != len(labels) or len(x) == 0:
            raise FewShotError(
                f"features must be (examples, dims) matching {len(labels)} labels, got shape {x.shape}"
            )
        self.mean = x.mean(axis=0)
        self.std = x.std(axis=0) + STD_EPSILON
        x = self._design(x)
        y = one_hot_targets(labels, num_classes)
        self.primal = x.shape[0] >= x.shape[1]
        if self.primal:
            self.eigenvalues, q = np.linalg.eigh(x.T @ x)
            self._left, self._right = q, q.T @ (x.T @ y)
        else:
            self.eigenvalues, q = np.linalg.eigh(x @ x.T)
            self._left, self._right = x.T @ q, q.T @ y

    def _design(self, features):
        x = (np.asarray(features, dtype=np.float64) - self.mean) / self.std
        return np.concatenate([x, np.full((len(x), 1), BIAS_FEATURE)], axis=1)

    def solve(self, l2_reg):
        """(weights (d, K), bias (K,)) acting on the raw, unwhitened features."""
        if not l2_reg > 0:
            raise FewShotError(f"l2_reg must be positive, got {l2_reg}")
        # Eigenvalues of a Gram matrix are >= 0; clip the tiny negative round-off.
        scale = 1.0 / (np.maximum(self.eigenvalues, 0.0) + l2_reg)
        w = (self._left * scale) @ self._right  # (d+1, K) on the whitened design
        # Fold the whitening and the bias feature into a plain affine map of raw features.
        weights = w[:-1] / self.std[:, None]
        bias = BIAS_FEATURE * w[-1] - (self.mean / self.std) @ w[:-1]
        return weights, bias


def fit_ridge(features, labels, num_classes, l2_reg):
    """Closed-form ridge probe; returns (weights (d, K), bias (K,)) on the raw features."""
    return RidgeProblem(features, labels, num_classes).solve(l2_reg)


def predict(weights, bias, features):
    return np.argmax(np.asarray(features, dtype=np.float64) @ weights + bias, axis=1)


def accuracy(weights, bias, features, labels):
    return float(np.mean(predict(weights, bias, features) == np.asarray(labels)))


def sample_k_per_class(labels, k, seed, num_classes=None):
    """Indices of exactly k examples of every class, the same for the same (labels, k, seed).

    Each class's examples are permuted by a generator seeded with `seed` and the first k kept,
    so for one seed the 1-shot set is inside the 5-shot set (as big_vision samples).
    """
    labels = np.asarray(labels)
    if num_classes is None:
        num_classes = int(labels.max()) + 1 if labels.size else 0
    if k < 1:
        raise FewShotError(f"shots must be at least 1, got {k}")
    per_class = [np.flatnonzero(labels == c) for c in range(num_classes)]
    smallest = min(range(num_classes), key=lambda c: len(per_class[c]))
    if len(per_class[smallest]) < k:
        raise FewShotError(
            f"{k}-shot needs {k} training examples of every class, but class {smallest} has only "
            f"{len(per_class[smallest])}; use --shots no larger than {len(per_class[smallest])}"
        )
    rng = np.random.default_rng(seed)
    return np.concatenate([rng.permutation(idx)[:k] for idx in per_class])


def holdout_split(labels, fraction, seed):
    """(fit_indices, heldout_indices): a stratified `fraction` of every class held out."""
    labels = np.asarray(labels)
    rng = np.random.default_rng([seed, 7919])  # a stream apart from the k-shot sampling
    fit, held = [], []
    for c in np.unique(labels):
        idx = rng.permutation(np.flatnonzero(labels == c))
        n_held = int(round(fraction * len(idx)))
        held.append(idx[:n_held])
        fit.append(idx[n_held:])
    return np.sort(np.concatenate(fit)), np.sort(np.concatenate(held))


def choose_l2(train_features, train_labels, num_classes, shots, seeds, grid=L2_SWEEP, fraction=0.2):
    """The l2 of `grid` with the best mean held-out accuracy for a `shots`-shot probe.

    A stratified `fraction` of the training split is held out; k-shot sets are drawn from the
    rest (one per seed) and every l2 is scored on the held-out part. Ties go to the larger l2.
    """
    fit_idx, held_idx = holdout_split(train_labels, fraction, seed=0)
    if len(held_idx) == 0:
        raise FewShotError("--l2_reg=sweep needs a held-out part of the training split; it is too small")
    fit_labels = np.asarray(train_labels)[fit_idx]
    scores = np.zeros(len(grid))
    for seed in range(seeds):
        chosen = fit_idx[sample_k_per_class(fit_labels, shots, seed, num_classes)]
        problem = RidgeProblem(train_features[chosen], train_labels[chosen], num_classes)
        for i, l2 in enumerate(grid):
            scores[i] += accuracy(*problem.solve(l2), train_features[held_idx], train_labels[held_idx])
    best = max(range(len(grid)), key=lambda i: (scores[i], grid[i]))
    return float(grid[best])


def evaluate_probes(
    train_features, train_labels, test_features, test_labels, num_classes, shots, seeds, l2_reg
):
    """{k: (mean accuracy, std over seeds, l2 used)} for every k in `shots`.

    `l2_reg` is a positive number or "sweep" (chosen per k on a held-out part of train).
    """
    train_labels, test_labels = np.asarray(train_labels), np.asarray(test_labels)
    results = {}
    for k in shots:
        if l2_reg == "sweep":
            l2 = choose_l2(train_features, train_labels, num_classes, k, seeds)
        else:
            l2 = float(l2_reg)
        accs = []
        for seed in range(seeds):
            chosen = sample_k_per_class(train_labels, k, seed, num_classes)
            weights, bias = fit_ridge(train_features[chosen], train_labels[chosen], num_classes, l2)
            accs.append(accuracy(weights, bias, test_features, test_labels))
        results[k] = (float(np.mean(accs)), float(np.std(accs)), l2)
    return results
