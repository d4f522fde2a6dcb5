"""The paper's analysis figures drawn with matplotlib (the `plots` extra), as Figure objects.

Each takes the numbers `keras_vit.visualize.analysis` computes and returns a
`matplotlib.figure.Figure` built without pyplot, so drawing needs no display and leaves no
global state behind (a trainer can draw from any thread). `png_bytes(figure)` renders one.
"""

import io

import numpy as np

DPI = 100


def _figure(width, height):
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise ImportError(
            "drawing figures needs matplotlib: "
            'pip install "keras-vision-transformer[plots]" (or pip install matplotlib)'
        ) from None
    # Whole pixels (the renderer truncates, so a hair over): the PNG is exactly this size.
    size = [(round(inches * DPI) + 1e-3) / DPI for inches in (width, height)]
    return Figure(figsize=size, dpi=DPI, layout="constrained")


def png_bytes(figure):
    """The figure as PNG bytes, at its own size (figsize x dpi)."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI)
    return buffer.getvalue()


def _as_pixels(image):
    """An image in [0, 255] or [-1, 1] (float) or uint8, as floats in [0, 1] for imshow."""
    image = np.asarray(image, np.float64)
    if image.min() < 0:  # a trainer's [-1, 1] input
        image = (image + 1.0) * 127.5
    image = np.clip(image / 255.0, 0.0, 1.0)
    return image[..., 0] if image.shape[-1] == 1 else image


def plot_attention_rollout(images, rollout, stride, titles=None, columns=4):
    """Each image beside it with its rollout map overlaid (the paper's Figure 6).

    Args:
        images: (B, H, W, C) pixels in [0, 255] (or [-1, 1]), as the model saw them.
        rollout: (B, h, w) from `attention_rollout`.
        stride: (height, width) pixels per token (`token_stride(model)`); the map covers the
            h * stride x w * stride pixels the patches cover, upsampled bilinearly.
        titles: optional text above each image (e.g. true and predicted labels).
    """
    images, rollout = np.asarray(images), np.asarray(rollout)
    count = len(images)
    columns = max(1, min(columns, count))
    rows = -(-count // columns)
    figure = _figure(2.6 * columns, 2.9 * rows)
    stride_h, stride_w = (stride, stride) if np.isscalar(stride) else stride
    for index in range(count):
        axes = figure.add_subplot(rows, columns, index + 1)
        pixels = _as_pixels(images[index])
        axes.imshow(pixels, cmap="gray" if pixels.ndim == 2 else None)
        grid_h, grid_w = rollout[index].shape
        scaled = rollout[index] / max(float(rollout[index].max()), 1e-12)
        axes.imshow(
            scaled,
            cmap="inferno",
            alpha=0.55,
            interpolation="bilinear",
            # imshow centres pixel i on i, so pixel edges (and the patches' edges) are at i - 0.5.
            extent=(-0.5, grid_w * stride_w - 0.5, grid_h * stride_h - 0.5, -0.5),
        )
        axes.set_xlim(-0.5, pixels.shape[1] - 0.5)
        axes.set_ylim(pixels.shape[0] - 0.5, -0.5)
        axes.set_axis_off()
        if titles is not None:
            axes.set_title(titles[index], fontsize=8)
    figure.suptitle("Attention rollout (class token to each patch, all layers)", fontsize=10)
    return figure


def plot_mean_attention_distance(distance, image_size=None):
    """Mean attention distance of every head against depth (Figure 7, right)."""
    distance = np.asarray(distance)
    layers, heads = distance.shape
    figure = _figure(4.8, 3.6)
    axes = figure.add_subplot()
    depth = np.repeat(np.arange(1, layers + 1), heads)
    colours = np.tile(np.arange(heads), layers)
    axes.scatter(depth, distance.ravel(), c=colours, cmap="tab20", s=14, vmin=0, vmax=max(heads - 1, 1))
    axes.set_xlabel("Network depth (layer)")
    axes.set_ylabel("Mean attention distance (pixels)")
    axes.set_xticks(np.arange(1, layers + 1, max(1, layers // 12)))
    axes.set_ylim(bottom=0)
    if image_size is not None:
        axes.set_ylim(top=float(np.hypot(*image_size)) / 2)
        axes.set_title(f"{heads} heads per layer, {image_size[0]} x {image_size[1]} images", fontsize=9)
    axes.grid(alpha=0.3)
    return figure


def plot_position_embedding_similarity(similarity):
    """One panel per patch position: its embedding's cosine similarity to every other's
    (Figure 7, centre). `similarity` is (h, w, h, w).

    The panels are tiles of one mosaic image (one gap between tiles), which draws fast even
    for a 27 x 27 grid of 27 x 27 panels.
    """
    similarity = np.asarray(similarity, np.float64)
    height, width = similarity.shape[:2]
    mosaic = np.full((height * (height + 1) - 1, width * (width + 1) - 1), np.nan)
    for row in range(height):
        for col in range(width):
            top, left = row * (height + 1), col * (width + 1)
            mosaic[top : top + height, left : left + width] = similarity[row, col]
    side = 6.0 * np.array([width, height]) / max(height, width)
    figure = _figure(side[0] + 1.4, side[1] + 0.7)
    axes = figure.add_subplot()
    image = axes.imshow(mosaic, cmap="viridis", vmin=-1, vmax=1, interpolation="nearest")
    step_h, step_w = max(1, height // 14), max(1, width // 14)
    axes.set_yticks(np.arange(0, height, step_h) * (height + 1) + (height - 1) / 2)
    axes.set_yticklabels([str(r + 1) for r in range(0, height, step_h)], fontsize=7)
    axes.set_xticks(np.arange(0, width, step_w) * (width + 1) + (width - 1) / 2)
    axes.set_xticklabels([str(c + 1) for c in range(0, width, step_w)], fontsize=7)
    axes.tick_params(length=0)
    for spine in axes.spines.values():
        spine.set_visible(False)
    axes.set_xlabel("Input patch column", fontsize=8)
    axes.set_ylabel("Input patch row", fontsize=8)
    axes.set_title("Position embedding similarity", fontsize=9)
    figure.colorbar(image, ax=axes, shrink=0.6, label="Cosine similarity")
    return figure


def plot_patch_embedding_components(components, explained=None, columns=7):
    """The principal components of the patch-embedding filters as RGB patches (Figure 7, left).

    Each component is scaled to [0, 1] on its own, as the paper shows them; the tiles are one
    mosaic image (fast to draw), labelled with the share of variance each explains.
    """
    components = np.asarray(components, np.float64)
    count, patch_h, patch_w = components.shape[:3]
    if components.shape[-1] == 1:
        components = components.repeat(3, axis=-1)
    components = components[..., :3]
    columns = max(1, min(columns, count))
    rows = -(-count // columns)
    gap = max(1, min(patch_h, patch_w) // 4)
    label = 2 * gap if explained is not None else 0  # room above each tile for its label
    step_h, step_w = patch_h + gap + label, patch_w + gap
    mosaic = np.ones((rows * step_h - gap, columns * step_w - gap, 3))
    figure = _figure(1.0 * columns + 0.2, 1.1 * rows + 0.5)
    axes = figure.add_subplot()
    for index, patch in enumerate(components):
        low, high = patch.min(), patch.max()
        top, left = (index // columns) * step_h + label, (index % columns) * step_w
        mosaic[top : top + patch_h, left : left + patch_w] = (patch - low) / max(high - low, 1e-12)
        if explained is not None:
            centre = left + (patch_w - 1) / 2
            text = f"{100 * explained[index]:.1f}%"
            axes.text(centre, top - 0.5, text, ha="center", va="bottom", fontsize=6)
    axes.imshow(mosaic, interpolation="nearest")
    axes.set_axis_off()
    axes.set_title(f"Patch-embedding filters: first {count} principal components", fontsize=9)
    return figure


def plot_accuracy_by_shots(accuracy, std=None, title="Few-shot linear probes"):
    """Accuracy against shots per class, one line per dataset or model.

    `accuracy`: {name: {shots: accuracy}}; `std`: the same layout of standard deviations.
    """
    figure = _figure(4.8, 3.4)
    axes = figure.add_subplot()
    for name, by_shots in accuracy.items():
        shots = sorted(by_shots)
        values = np.array([by_shots[k] for k in shots])
        axes.plot(shots, values, marker="o", label=name)
        if std and name in std:
            spread = np.array([std[name].get(k, 0.0) for k in shots])
            axes.fill_between(shots, values - spread, values + spread, alpha=0.2)
    axes.set_xscale("log")
    all_shots = sorted({k for by_shots in accuracy.values() for k in by_shots})
    axes.set_xticks(all_shots, [str(k) for k in all_shots])
    axes.minorticks_off()
    axes.set_xlabel("Examples per class (shots)")
    axes.set_ylabel("Accuracy")
    axes.set_ylim(0, 1)
    axes.set_title(title, fontsize=9)
    axes.grid(alpha=0.3)
    axes.legend(fontsize=7)
    return figure
