"""The files a trainer's run leaves in its workdir, by name.

`python -m trainers.finetune --workdir=W` (and trainers.pretrain) ends by writing W/config.json
(the resolved flags), W/model.npz (the weights, official layout) and W/class_names.json.
keras_vit reads them back (keras_vit.run_dir), and takes W itself where a weights file goes
(keras_vit.weights). No imports: every module of the package may use these names.
"""

CONFIG_FILE = "config.json"
MODEL_FILE = "model.npz"
CLASS_NAMES_FILE = "class_names.json"
