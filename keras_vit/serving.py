"""The TensorFlow functions an exported model serves: encoded images in, top classes out.

`serving_default` takes a batch of encoded images (a 1-D string tensor of JPEG, PNG, GIF or
BMP bytes, each of any size), decodes each to RGB and resizes it as the trainers' evaluation
does (`tf.image.resize(method="bilinear")` to the model's size, whatever the aspect ratio),
and returns the top-k class indices, names and probabilities: the same pixels and results as
`keras_vit.predict` (keras_vit.images).
`serving_pixels` takes float32 pixels in [0, 255] at the model's size and also returns every
probability. TensorFlow is imported only here, when a SavedModel or LiteRT file is made.

The functions are traced as written, without AutoGraph, which would parse and rewrite every
function the model calls: none branches on a tensor (the decoder's choice is a `tf.cond`).
"""

from keras_vit import images

INSTALL_HINT = 'pip install "keras-vision-transformer[export]"'


def tensorflow():
    """The tensorflow module, or ImportError saying how to install the export extra."""
    try:
        import tensorflow as tf
    except ImportError:
        raise ImportError(f"exporting needs TensorFlow: {INSTALL_HINT}") from None
    return tf


def pixel_spec(model):
    tf = tensorflow()
    height, width = images.target_size(model)
    return tf.TensorSpec([None, height, width, 3], tf.float32, name="pixels")


def save_serving_model(model, path, class_names, top_k=5):
    """Writes a SavedModel of `model` with the byte and the pixel signatures to `path`."""
    tf = tensorflow()
    height, width = images.target_size(model)
    names = tf.constant(list(class_names))
    k = min(int(top_k), model.num_classes)

    def top(probabilities):
        scores, classes = tf.math.top_k(probabilities, k=k)  # ties: the lower index first
        return {"classes": classes, "names": tf.gather(names, classes), "scores": scores}

    def decode(encoded):
        # JPEG with the accurate integer IDCT, as Pillow (and so keras_vit.predict) decodes it;
        # TensorFlow's default fast IDCT is off by up to a few levels per pixel.
        image = tf.cond(
            tf.io.is_jpeg(encoded),
            lambda: tf.io.decode_jpeg(encoded, channels=3, dct_method="INTEGER_ACCURATE"),
            lambda: tf.io.decode_image(encoded, channels=3, expand_animations=False),
        )
        image.set_shape([None, None, 3])
        return tf.image.resize(tf.cast(image, tf.float32), [height, width], method="bilinear")

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="images")], autograph=False)
    def serve_images(encoded):
        pixels = tf.map_fn(decode, encoded, fn_output_signature=tf.TensorSpec([height, width, 3], tf.float32))
        return top(model(pixels, training=False))

    @tf.function(input_signature=[pixel_spec(model)], autograph=False)
    def serve_pixels(pixels):
        probabilities = model(pixels, training=False)
        return {**top(probabilities), "probabilities": probabilities}

    _save(model, path, {"serving_default": serve_images, "serving_pixels": serve_pixels})


def save_pixel_model(model, path):
    """Writes a SavedModel whose one signature maps pixels to probabilities (for LiteRT)."""
    tf = tensorflow()

    @tf.function(input_signature=[pixel_spec(model)], autograph=False)
    def serve(pixels):
        return {"probabilities": model(pixels, training=False)}

    _save(model, path, {"serving_default": serve})


def _save(model, path, signatures):
    # A plain tf.Module that holds the model's variables once. (Keras' ExportArchive, as of
    # Keras 3.15, writes every variable twice, doubling the size of the SavedModel.)
    tf = tensorflow()
    module = tf.Module()
    module.model_variables = [variable.value for variable in model.variables]
    for name, function in signatures.items():
        setattr(module, name, function)
    concrete = {name: function.get_concrete_function() for name, function in signatures.items()}
    tf.saved_model.save(module, path, signatures=concrete)
