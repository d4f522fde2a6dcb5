"""TensorFlow trainers for keras_vit: tf.data input, tf.distribute strategies, the training
loop, fine-tuning, pre-training and few-shot evaluation (`python -m trainers.<name>`)."""
