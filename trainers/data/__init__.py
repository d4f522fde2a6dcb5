"""The trainers' input side: where images come from, and the pipelines that batch them.

    from trainers import data
    spec = data.get_spec("oxford_iiit_pet", data_dir="/data/tfds")     # or "folder:PATH", "digits:0-4"
    train_fn = data.make_input_fn(spec, "train[:90%]", image_size=384, global_batch_size=512, training=True)
    batches = data.distribute(strategy, train_fn)

Modules: `sources` (get_spec) over `tfds_source` (with `tfds_prepare`), `folders` and `digits`;
`spec` (DatasetSpec, Records); `splits` (split syntax, in-memory splits); `subsets` (k examples per
class); `ops` (the registered image and batch ops); `pp` (pp strings: --pp_train, --pp_eval);
`pipeline` (InputFn, make_input_fn, distribute).
"""

# Op modules beyond ops.py: importing one registers its ops (a new op: its file and a line here).
from trainers.data import grayscale, mask_patches  # noqa: F401
from trainers.data.ops import eval_ops, register, registered, train_ops
from trainers.data.pipeline import InputFn, check_split, distribute, make_input_fn, multi_hot
from trainers.data.sources import check_name, get_spec
from trainers.data.spec import NO_LABEL, DatasetSpec, Records, multi_label_refusal
from trainers.data.subsets import examples_per_class_subset
from trainers.errors import DatasetError

__all__ = [
    "NO_LABEL",
    "DatasetError",
    "DatasetSpec",
    "InputFn",
    "Records",
    "check_name",
    "check_split",
    "distribute",
    "eval_ops",
    "examples_per_class_subset",
    "get_spec",
    "make_input_fn",
    "multi_hot",
    "multi_label_refusal",
    "register",
    "registered",
    "train_ops",
]
