"""The building blocks of the Vision Transformer, as Keras 3 layers (keras.ops only; on TensorFlow,
two CPU inference paths change the graph, keras_vit/row_parts.py and keras_vit/fused_layer_norm.py,
and four in bfloat16 training, keras_vit/fused_gelu.py, keras_vit/compiled_layer_norm.py,
keras_vit/bias_add.py and keras_vit/patch_matmul.py; on every backend the last block of a model
that reads only the class token computes that row alone, keras_vit/class_token_only.py).

Sub-layer and weight names follow the official Flax parameter names, because they are
part of the weight format: `keras_vit.weights` maps official checkpoint keys onto them.
"""

import functools

import keras
from keras import ops

from keras_vit import (
    bias_add,
    class_token_only,
    flat_tokens,
    fused_attention,
    fused_gelu,
    fused_layer_norm,
    initializers,
    part_attention,
    patch_matmul,
    row_parts,
)

# Both constants decide whether official weights reproduce official outputs.
LAYER_NORM_EPSILON = 1e-6
GELU_APPROXIMATE = True  # Flax's nn.gelu defaults to the tanh approximation.


def _pair(value):
    if isinstance(value, int):
        return (value, value)
    return tuple(int(v) for v in value)


@keras.saving.register_keras_serializable(package="keras_vit")
class PatchEmbedding(keras.layers.Layer):
    """Cuts an image into P x P patches and projects each to `hidden_size` dims.

    A P x P convolution with stride P. Input (B, H, W, C), output (B, H/P * W/P, D),
    patches in row-major order. The kernel starts as Flax's nn.Conv default (LeCun
    truncated normal, fan_in = P * P * C), the bias at zero.
    """

    def __init__(self, patch_size, hidden_size, kernel_initializer=None, bias_initializer="zeros", **kwargs):
        super().__init__(**kwargs)
        self.patch_size = patch_size
        self.hidden_size = hidden_size
        self.kernel_initializer = keras.initializers.get(kernel_initializer or initializers.LecunNormal())
        self.bias_initializer = keras.initializers.get(bias_initializer)

    def build(self, input_shape):
        patch = _pair(self.patch_size)
        self.kernel = self.add_weight(
            name="kernel",
            shape=(*patch, input_shape[-1], self.hidden_size),
            initializer=initializers.for_weight(self.kernel_initializer, num_input_axes=3),
        )
        self.bias = self.add_weight(
            name="bias", shape=(self.hidden_size,), initializer=initializers.for_weight(self.bias_initializer)
        )

    def call(self, images, training=None):
        # A bfloat16 training step on a CPU computes it as one matrix product (keras_vit.patch_matmul).
        x = patch_matmul.embed(images, self.kernel, self.bias, training)
        shape = ops.shape(x)
        return ops.reshape(x, (shape[0], shape[1] * shape[2], self.hidden_size))

    def compute_output_shape(self, input_shape):
        patch = _pair(self.patch_size)
        height, width = input_shape[1], input_shape[2]
        if height is None or width is None:
            return (input_shape[0], None, self.hidden_size)
        return (input_shape[0], (height // patch[0]) * (width // patch[1]), self.hidden_size)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "patch_size": self.patch_size,
                "hidden_size": self.hidden_size,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
            }
        )
        return config


@keras.saving.register_keras_serializable(package="keras_vit")
class ClassToken(keras.layers.Layer):
    """Prepends a learned class token to a sequence: (B, N, D) -> (B, N+1, D)."""

    def __init__(self, initializer="zeros", **kwargs):
        super().__init__(**kwargs)
        self.initializer = keras.initializers.get(initializer)

    def build(self, input_shape):
        self.token = self.add_weight(
            name="token", shape=(1, 1, input_shape[-1]), initializer=initializers.for_weight(self.initializer)
        )

    def call(self, tokens):
        batch = ops.shape(tokens)[0]
        cls = ops.cast(ops.broadcast_to(self.token, (batch, 1, ops.shape(tokens)[-1])), tokens.dtype)
        return ops.concatenate([cls, tokens], axis=1)

    def compute_output_shape(self, input_shape):
        length = None if input_shape[1] is None else input_shape[1] + 1
        return (input_shape[0], length, input_shape[2])

    def get_config(self):
        config = super().get_config()
        config.update({"initializer": keras.initializers.serialize(self.initializer)})
        return config


def _linear_resize_axis(values, new_size, axis):
    """Corner-aligned linear interpolation along `axis`, as scipy.ndimage.zoom(order=1).

    scipy's zoom (grid_mode=False) maps output index i to input coordinate
    i * (n_in - 1) / (n_out - 1), so the first and last samples stay where they are.
    `new_size` is an int, or a scalar tensor where the size is only known when the graph
    runs (a TensorFlow graph traced with unknown image sizes).
    """
    old_size = values.shape[axis]
    if isinstance(new_size, int) and old_size == new_size:
        return values
    # max(n_out - 1, 1) makes a single output sample sit at the first input sample, and a
    # single input sample (old_size 1) gives a zero step: both as scipy does.
    step = (old_size - 1) / ops.maximum(ops.cast(new_size, "float32") - 1.0, 1.0)
    positions = ops.arange(new_size, dtype="float32") * step
    lower = ops.clip(ops.cast(ops.floor(positions), "int32"), 0, old_size - 1)
    upper = ops.minimum(lower + 1, old_size - 1)
    frac = positions - ops.cast(lower, "float32")
    shape = [1] * len(values.shape)
    shape[axis] = -1
    frac = ops.cast(ops.reshape(frac, shape), values.dtype)
    below = ops.take(values, lower, axis=axis)
    above = ops.take(values, upper, axis=axis)
    return below * (1.0 - frac) + above * frac


def resize_position_embedding(pos_embedding, old_grid, new_grid, num_prefix_tokens=1):
    """Resizes (1, prefix + h*w, D) position embeddings from grid `old_grid` to `new_grid`.

    The prefix rows (the class token's) are kept as they are; the patch grid is resized
    in 2D with scipy.ndimage.zoom(order=1) semantics, as the official fine-tuning code does.
    `new_grid` may hold scalar tensors (sizes known only when a TensorFlow graph runs).
    """
    old_grid, new_grid = _pair(old_grid), _grid_pair(new_grid)
    pos_embedding = ops.convert_to_tensor(pos_embedding)
    if "float" not in str(pos_embedding.dtype):
        pos_embedding = ops.cast(pos_embedding, "float32")
    prefix = pos_embedding[:, :num_prefix_tokens]
    grid = pos_embedding[:, num_prefix_tokens:]
    if grid.shape[1] != old_grid[0] * old_grid[1]:
        raise ValueError(
            f"Position embeddings have {grid.shape[1]} patch rows, not {old_grid[0]} x {old_grid[1]}."
        )
    dim = grid.shape[-1]
    grid = ops.reshape(grid, (old_grid[0], old_grid[1], dim))
    grid = _linear_resize_axis(grid, new_grid[0], axis=0)
    grid = _linear_resize_axis(grid, new_grid[1], axis=1)
    grid = ops.reshape(grid, (1, -1, dim))
    return ops.concatenate([prefix, grid], axis=1)


def _grid_pair(value):
    """(h, w) of ints, or of scalar tensors where a size is only known at run time."""
    if isinstance(value, int):
        return (value, value)
    return tuple(v if ops.is_tensor(v) else int(v) for v in value)


@keras.saving.register_keras_serializable(package="keras_vit")
class PositionEmbedding(keras.layers.Layer):
    """Adds learned 1D position embeddings to (B, prefix + h*w, D) tokens.

    `grid_size` is the (h, w) patch grid the embeddings are stored for; `resize(new_grid)`
    returns them resized to another grid (for fine-tuning at another resolution).

    With `patch_size` set, the layer also takes the tensor the patches were cut from
    (`patch_input`, (B, H, W, C): the image, or a hybrid's ResNet map) and adds embeddings
    for that call's grid, floor(H / P) x floor(W / P), as the VALID patch convolution cuts
    it: the stored grid as it is when they agree, else resized exactly as `resize` does
    (scipy.ndimage.zoom(order=1) semantics, class-token row kept). One model then takes
    images of any size. The sizes are read statically where the shapes are known (eager
    calls, jax.jit, XLA), so a matching grid costs nothing and a different one a few small
    gathers; in a TensorFlow graph traced with unknown sizes the resize runs on the
    run-time grid.
    """

    def __init__(self, grid_size, num_prefix_tokens=1, initializer=None, patch_size=None, **kwargs):
        super().__init__(**kwargs)
        self.grid_size = _pair(grid_size)
        self.num_prefix_tokens = num_prefix_tokens
        self.patch_size = None if patch_size is None else _pair(patch_size)
        # The official initialiser: a plain (untruncated) normal with stddev 0.02.
        self.initializer = keras.initializers.get(initializer or keras.initializers.RandomNormal(stddev=0.02))

    @property
    def _length(self):
        return self.num_prefix_tokens + self.grid_size[0] * self.grid_size[1]

    def build(self, input_shape):
        if self.patch_size is None and input_shape[1] is not None and input_shape[1] != self._length:
            raise ValueError(
                f"PositionEmbedding for a {self.grid_size} grid expects {self._length} tokens, "
                f"got {input_shape[1]}."
            )
        self.pos_embedding = self.add_weight(
            name="pos_embedding",
            shape=(1, self._length, input_shape[-1]),
            initializer=initializers.for_weight(self.initializer),
        )

    def call_grid(self, patch_input_shape):
        """The (h, w) patch grid for a (B, H, W, C) patch input shape (ints or scalar tensors)."""
        if self.patch_size is None:
            raise ValueError(
                "this PositionEmbedding has a fixed grid; build it with patch_size "
                "to take inputs of other sizes."
            )
        height, width = patch_input_shape[1], patch_input_shape[2]
        grid = (height // self.patch_size[0], width // self.patch_size[1])
        if all(isinstance(size, int) for size in grid) and min(grid) < 1:
            raise ValueError(
                f"an input of {height} x {width} is smaller than one "
                f"{self.patch_size[0]} x {self.patch_size[1]} patch."
            )
        return grid

    def call(self, tokens, patch_input=None):
        pos_embedding = self.pos_embedding
        if patch_input is not None:
            grid = self.call_grid(ops.shape(patch_input))
            # Static sizes are Python ints; run-time ones (unknown when a TensorFlow graph is
            # traced) are tensors, and always take the resize, which is exact at equal size.
            if not all(isinstance(size, int) for size in grid) or grid != self.grid_size:
                pos_embedding = resize_position_embedding(
                    pos_embedding, self.grid_size, grid, self.num_prefix_tokens
                )
        elif tokens.shape[1] is not None and tokens.shape[1] != self._length:
            raise ValueError(
                f"PositionEmbedding for a {self.grid_size} grid expects {self._length} tokens, "
                f"got {tokens.shape[1]}; pass the patch input (and build the layer with "
                "patch_size) to take other grids."
            )
        return tokens + ops.cast(pos_embedding, tokens.dtype)

    def compute_output_shape(self, input_shape):
        return input_shape

    def resize(self, new_grid):
        return resize_position_embedding(self.pos_embedding, self.grid_size, new_grid, self.num_prefix_tokens)

    def patch_embeddings(self, grid):
        """(h * w, D) embeddings of the patches of a (h, w) grid (the stored grid: no resize)."""
        table = self.pos_embedding if tuple(grid) == tuple(self.grid_size) else self.resize(grid)
        return table[0, self.num_prefix_tokens :]

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "grid_size": self.grid_size,
                "num_prefix_tokens": self.num_prefix_tokens,
                "initializer": keras.initializers.serialize(self.initializer),
                "patch_size": self.patch_size,
            }
        )
        return config


@keras.saving.register_keras_serializable(package="keras_vit")
class MultiHeadSelfAttention(keras.layers.Layer):
    """Multi-head dot-product self-attention with the official kernel layout.

    query/key/value kernels are (D, heads, D/heads), the output kernel (heads, D/heads, D).
    As in Flax's DenseGeneral, the kernels start Xavier-uniform with the fans of the kernel
    read as a matrix (query/key/value: fan_in = D, fan_out = heads * D/heads; out: the
    reverse), the biases at zero.

    The plain call uses fused attention (`keras_vit.fused_attention`, the backend's kernel); with
    `return_attention_scores=True` it computes the softmax explicitly and also returns the
    attention probabilities (B, heads, N, N).
    """

    def __init__(
        self, num_heads, dropout_rate=0.0, kernel_initializer=None, bias_initializer="zeros", **kwargs
    ):
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.dropout_rate = dropout_rate
        self.kernel_initializer = keras.initializers.get(kernel_initializer or initializers.XavierUniform())
        self.bias_initializer = keras.initializers.get(bias_initializer)

    def build(self, input_shape):
        hidden = input_shape[-1]
        if hidden % self.num_heads:
            raise ValueError(f"hidden size {hidden} is not divisible by {self.num_heads} heads.")
        head_dim = hidden // self.num_heads

        def initialisers(num_input_axes):
            # Each kernel and bias gets its own instance: a shared one gives equal weights.
            return dict(
                kernel_initializer=initializers.for_weight(self.kernel_initializer, num_input_axes),
                bias_initializer=initializers.for_weight(self.bias_initializer),
            )

        for name in ("query", "key", "value"):
            layer = keras.layers.EinsumDense(
                "btd,dhk->bthk",
                output_shape=(None, self.num_heads, head_dim),
                bias_axes="hk",
                name=name,
                dtype=self.dtype_policy,
                **initialisers(1),
            )
            layer.build(input_shape)
            setattr(self, name, layer)
        self.out = keras.layers.EinsumDense(
            "bthk,hkd->btd",
            output_shape=(None, hidden),
            bias_axes="d",
            name="out",
            dtype=self.dtype_policy,
            **initialisers(2),
        )
        self.out.build((input_shape[0], input_shape[1], self.num_heads, head_dim))
        self.dropout = keras.layers.Dropout(self.dropout_rate, dtype=self.dtype_policy)

    @property
    def has_position_bias(self):
        """Whether a subclass adds a bias of its own (`position_bias`), built for every query row."""
        return type(self).position_bias is not MultiHeadSelfAttention.position_bias

    def position_bias(self, query):
        """A bias added to the attention logits before the softmax, or None (the plain ViT).

        `query` is the (B, T, heads, D/heads) query tensor; a subclass (relative position
        embeddings) returns a tensor broadcastable to (B, heads, T, T). Both the fused and
        the explicit attention path honour it.
        """
        del query
        return None

    def call(self, tokens, training=None, return_attention_scores=False, query_rows=None):
        """`query_rows`: only the first rows of (B, T, D) tokens ask, their queries attending to
        the keys and values of every row; (B, query_rows, D) out (keras_vit.class_token_only)."""
        if query_rows is not None and self.has_position_bias:
            raise ValueError("query_rows needs an attention without a position bias: pass query_rows=None.")
        # In inference each projection is one 2-D matmul (keras_vit.flat_tokens): ViT-Ti/16
        # bfloat16 inference on a CPU took 1.1-1.2x less CPU time; training keeps the einsums,
        # where the two measured level on TensorFlow (docs/guides/benchmarks.md, "Making the
        # defaults fast"), except on JAX for a CPU (`flat_tokens.in_training`).
        flat = not training or flat_tokens.in_training()

        def project(layer, x, contracted_axes):
            if not flat:
                return bias_add.call(layer, x, training)
            return flat_tokens.project(layer, x, contracted_axes)

        query = project(self.query, tokens if query_rows is None else tokens[:, :query_rows], 1)
        key = project(self.key, tokens, 1)
        value = project(self.value, tokens, 1)
        bias = self.position_bias(query)
        if return_attention_scores or (training and self.dropout_rate > 0):
            scale = 1.0 / float(query.shape[-1]) ** 0.5
            # Logits and softmax in float32: bfloat16 loses too much precision here.
            logits = ops.cast(ops.einsum("bqhk,bthk->bhqt", query, key), "float32") * scale
            if bias is not None:
                logits = logits + ops.cast(bias, "float32")
            probs = ops.cast(ops.softmax(logits, axis=-1), value.dtype)
            weights = self.dropout(probs, training=training)
            context = ops.einsum("bhqt,bthk->bqhk", weights, value)
        else:
            probs = None
            if bias is not None:
                bias = ops.cast(bias, query.dtype)
            context = fused_attention.dot_product_attention(query, key, value, bias=bias)
        outputs = project(self.out, context, 2)
        if return_attention_scores:
            return outputs, probs
        return outputs

    def call_in_parts(self, parts):
        """Inference on consecutive row slices of the tokens, [(B, T_i, D)]: each part is
        projected on its own, its queries attend to the keys and values of all the rows
        joined, and the outputs come back as the parts came (keras_vit.row_parts)."""

        def project(layer, pieces, contracted_axes):
            return [flat_tokens.project(layer, piece, contracted_axes) for piece in pieces]

        queries = project(self.query, parts, 1)
        key, value = (ops.concatenate(project(layer, parts, 1), axis=1) for layer in (self.key, self.value))
        if not self.has_position_bias and part_attention.applies(queries[0]):
            # Each part's attention on its own core (keras_vit.part_attention): ViT-Ti/16
            # bfloat16 inference at batch 1 ran 1.19x faster than with one joined attention.
            contexts = part_attention.attend(queries, key, value)
        else:  # one attention of all the queries (a subclass's bias is computed from them all)
            query = ops.concatenate(queries, axis=1)
            bias = self.position_bias(query)
            if bias is not None:
                bias = ops.cast(bias, query.dtype)
            context = fused_attention.dot_product_attention(query, key, value, bias=bias)
            contexts = row_parts.cut(context, [part.shape[1] for part in parts])
        return project(self.out, contexts, 2)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "dropout_rate": self.dropout_rate,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
            }
        )
        return config


@keras.saving.register_keras_serializable(package="keras_vit")
class MlpBlock(keras.layers.Layer):
    """Dense(mlp_dim) - GELU (tanh) - Dropout - Dense(D) - Dropout.

    Kernels start Xavier-uniform, biases normal(1e-6), as the official MlpBlock.
    """

    def __init__(
        self,
        mlp_dim,
        dropout_rate=0.0,
        kernel_initializer=None,
        bias_initializer=None,
        gelu_approximate=GELU_APPROXIMATE,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.mlp_dim = mlp_dim
        self.dropout_rate = dropout_rate
        # False: the exact (erf) GELU of timm and transformers checkpoints.
        self.gelu_approximate = gelu_approximate
        self.kernel_initializer = keras.initializers.get(kernel_initializer or initializers.XavierUniform())
        # The official MLP biases start at normal(1e-6), not at zero.
        self.bias_initializer = keras.initializers.get(
            bias_initializer or keras.initializers.RandomNormal(stddev=1e-6)
        )

    def _dense(self, units, name):
        # Each kernel and bias gets its own instance: a shared one gives equal weights.
        return keras.layers.Dense(
            units,
            name=name,
            dtype=self.dtype_policy,
            kernel_initializer=initializers.for_weight(self.kernel_initializer, num_input_axes=1),
            bias_initializer=initializers.for_weight(self.bias_initializer),
        )

    def build(self, input_shape):
        self.dense_0 = self._dense(self.mlp_dim, "Dense_0")
        self.dense_0.build(input_shape)
        self.dense_1 = self._dense(input_shape[-1], "Dense_1")
        self.dense_1.build((*input_shape[:-1], self.mlp_dim))
        self.dropout = keras.layers.Dropout(self.dropout_rate, dtype=self.dtype_policy)

    def call(self, inputs, training=None):
        if training and not flat_tokens.in_training():
            return self._mlp(inputs, training)
        # In inference the tokens go in as one 2-D matrix: there Dense is a single MatMul that
        # TensorFlow's oneDNN kernels fuse with the bias add and GELU, where on (B, T, D) it is
        # a tensordot of separate ops. The same outputs (bit-identical for the ViT forward
        # pass in float32 and bfloat16, otherwise to float rounding); ViT-B/16 bfloat16
        # inference on CPU ran 1.37x faster, while a bfloat16 training step ran 0.93x as fast,
        # so training keeps the 3-D form (docs/guides/benchmarks.md, "Making the defaults fast"),
        # except on JAX for a CPU, where the 2-D form trained faster (`flat_tokens.in_training`).
        shape = ops.shape(inputs)
        x = self._mlp(ops.reshape(inputs, (-1, shape[-1])), training)
        return ops.reshape(x, shape)

    def _mlp(self, x, training):
        x = bias_add.call(self.dense_0, x, training)
        # In a traced bfloat16 training step on the CPU, one compiled kernel each way (fused_gelu.py).
        x = fused_gelu.gelu(x, approximate=self.gelu_approximate, training=training)
        x = self.dropout(x, training=training)
        x = bias_add.call(self.dense_1, x, training)
        return self.dropout(x, training=training)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "mlp_dim": self.mlp_dim,
                "dropout_rate": self.dropout_rate,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
                "gelu_approximate": self.gelu_approximate,
            }
        )
        return config


@keras.saving.register_keras_serializable(package="keras_vit")
class EncoderBlock(keras.layers.Layer):
    """Pre-norm Transformer block: z' = MSA(LN(z)) + z; z = MLP(LN(z')) + z'.

    `stochastic_depth_rate` drops each residual branch per example during training
    (scaled so that the expectation is unchanged). `attention_layer`: None (the plain
    attention), or {"class_name": a registered MultiHeadSelfAttention subclass, "config": its
    extra arguments}, built under the same name (e.g. relative position attention).
    """

    def __init__(
        self,
        num_heads,
        mlp_dim,
        dropout_rate=0.0,
        attention_dropout_rate=0.0,
        stochastic_depth_rate=0.0,
        attention_layer=None,
        layer_norm_epsilon=LAYER_NORM_EPSILON,
        gelu_approximate=GELU_APPROXIMATE,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.attention_layer = attention_layer
        self.layer_norm_epsilon = layer_norm_epsilon
        self.gelu_approximate = gelu_approximate
        self.num_heads = num_heads
        self.mlp_dim = mlp_dim
        self.dropout_rate = dropout_rate
        self.attention_dropout_rate = attention_dropout_rate
        self.stochastic_depth_rate = stochastic_depth_rate
        self.seed_generator = keras.random.SeedGenerator()

    def build(self, input_shape):
        policy = self.dtype_policy
        self.norm1 = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, name="LayerNorm_0", dtype=policy
        )
        self.norm1.build(input_shape)
        attention_class, attention_args = MultiHeadSelfAttention, {}
        if self.attention_layer:
            attention_class = keras.saving.get_registered_object(self.attention_layer["class_name"])
            attention_args = self.attention_layer.get("config", {})
        self.attention = attention_class(
            self.num_heads,
            dropout_rate=self.attention_dropout_rate,
            name="MultiHeadDotProductAttention_1",
            dtype=policy,
            **attention_args,
        )
        self.attention.build(input_shape)
        self.norm2 = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, name="LayerNorm_2", dtype=policy
        )
        self.norm2.build(input_shape)
        self.mlp = MlpBlock(
            self.mlp_dim,
            dropout_rate=self.dropout_rate,
            gelu_approximate=self.gelu_approximate,
            name="MlpBlock_3",
            dtype=policy,
        )
        self.mlp.build(input_shape)
        self.dropout = keras.layers.Dropout(self.dropout_rate, dtype=self.dtype_policy)

    def _drop_path(self, branch, training):
        if not training or self.stochastic_depth_rate <= 0:
            return branch
        keep = 1.0 - self.stochastic_depth_rate
        shape = (ops.shape(branch)[0],) + (1,) * (len(branch.shape) - 1)
        mask = keras.random.uniform(shape, seed=self.seed_generator) < keep
        return branch * ops.cast(mask, branch.dtype) / ops.cast(keep, branch.dtype)

    def call(self, tokens, training=None, return_attention_scores=False, patch_input=None):
        # An attention class with a call of its own (relative position attention: each call's
        # grid) may do more there than `call_in_parts` or `query_rows` know: it keeps the whole
        # rows; so do attention maps, and a position bias, which is built for every query row.
        plain = type(self.attention).call is MultiHeadSelfAttention.call and not return_attention_scores
        rows = None
        if plain and not self.attention.has_position_bias:
            # The model reads only the first rows of this block (keras_vit.class_token_only).
            rows = class_token_only.rows_wanted(self)
        if plain and rows is None and not training:
            parts = row_parts.count(tokens, self.compute_dtype)
            if parts > 1:
                return self._call_in_parts(tokens, parts)
        x = fused_layer_norm.layer_norm(self.norm1, tokens, training)
        # The patch input tells a position-aware attention each call's grid (any-size models).
        extra = {} if patch_input is None else {"patch_input": patch_input}
        if rows is not None:
            # Every row is normalised for the keys and values; the queries, the residual and
            # the MLP are the first rows'.
            extra["query_rows"] = rows
            tokens = tokens[:, :rows]
        if return_attention_scores:
            x, scores = self.attention(x, training=training, return_attention_scores=True, **extra)
        else:
            x = self.attention(x, training=training, **extra)
        x = self.dropout(x, training=training)
        x = tokens + self._drop_path(x, training)
        y = self.mlp(fused_layer_norm.layer_norm(self.norm2, x, training), training=training)
        outputs = x + self._drop_path(y, training)
        if return_attention_scores:
            return outputs, scores
        return outputs

    def _call_in_parts(self, tokens, parts):
        # Inference only, so no dropout and no dropped paths. Each part of the rows runs
        # through the norms, projections and MLP on its own; attention sees all the rows.
        pieces = row_parts.split(tokens, parts)
        norm1, norm2 = (functools.partial(fused_layer_norm.layer_norm, n) for n in (self.norm1, self.norm2))
        attended = self.attention.call_in_parts([norm1(piece) for piece in pieces])
        pieces = [piece + branch for piece, branch in zip(pieces, attended)]
        pieces = [piece + self.mlp(norm2(piece)) for piece in pieces]
        return ops.concatenate(pieces, axis=1)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "mlp_dim": self.mlp_dim,
                "dropout_rate": self.dropout_rate,
                "attention_dropout_rate": self.attention_dropout_rate,
                "stochastic_depth_rate": self.stochastic_depth_rate,
                "attention_layer": self.attention_layer,
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "gelu_approximate": self.gelu_approximate,
            }
        )
        return config


@keras.saving.register_keras_serializable(package="keras_vit")
class TokenPooling(keras.layers.Layer):
    """Pools (B, T, D) tokens to (B, D): the class token, or the mean of the patch tokens.

    `num_prefix_tokens` leading tokens (the class token) are left out of the mean.
    """

    def __init__(self, mode="token", num_prefix_tokens=1, **kwargs):
        super().__init__(**kwargs)
        if mode not in ("token", "gap"):
            raise ValueError(f"mode must be 'token' or 'gap', got {mode!r}.")
        self.mode = mode
        self.num_prefix_tokens = num_prefix_tokens

    def call(self, tokens):
        if self.mode == "token":
            return tokens[:, 0]
        return ops.mean(tokens[:, self.num_prefix_tokens :], axis=1)

    def compute_output_shape(self, input_shape):
        return (input_shape[0], input_shape[-1])

    def get_config(self):
        config = super().get_config()
        config.update({"mode": self.mode, "num_prefix_tokens": self.num_prefix_tokens})
        return config
