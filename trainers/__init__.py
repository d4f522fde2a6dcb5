"""The keras-vit trainers: tf.distribute fine-tuning, pre-training and few-shot probes.

They need TensorFlow and TFDS, which `pip install keras-vit` (the library alone) does not bring.
"""

try:
    import tensorflow  # noqa: F401
except ImportError as error:  # the library was installed without the [train] extra
    raise ImportError('the trainers need TensorFlow and TFDS: pip install "keras-vit[train]"') from error
