"""The trainers' model: built from a --weights file alone, which is read once."""

import numpy as np
from fixtures import tiny_vit

from keras_vit import weights as weights_lib
from trainers import finetune, model_builder, plan_pieces
from trainers import flags as trainer_flags


def test_weights_file_without_model_is_read_once(tmp_path, monkeypatch):
    source = tiny_vit(image_size=16, num_classes=10)  # each dimension differs from the digits config
    path = str(tmp_path / "small.npz")
    weights_lib.save_npz(source, path)
    reads = []
    read_params = weights_lib.read_params
    monkeypatch.setattr(weights_lib, "read_params", lambda p, *a: reads.append(p) or read_params(p, *a))
    # No --model: the file tells the shape (one read), and the same contents are loaded.
    config, params = trainer_flags.parse_command(
        ["finetune", "--dataset=digits", f"--weights={path}", "--image_size=16"], finetune.get_config
    )
    model = model_builder.build_model(plan_pieces.model_settings(config), num_classes=10, params=params)
    assert reads == [path]
    assert (model.hidden_size, model.num_layers, model.patch_size) == (32, 1, 8)
    np.testing.assert_array_equal(
        model.get_layer("embedding").kernel.numpy(), source.get_layer("embedding").kernel.numpy()
    )
