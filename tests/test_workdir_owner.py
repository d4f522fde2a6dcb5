"""trainers/workdir_owner.py: whose files a workdir holds, on local and non-local paths.

The commands' own refusals are tested where the commands are (test_rerun, test_fewshot); these
cases cover what they do not: a remote folder (`ram://`, read as `gs://` is) and config.json
files that are no command's."""

import json
import uuid

import pytest

from configs import fewshot as fewshot_config
from configs import finetune as finetune_config
from keras_vit import fileio
from trainers import workdir_owner
from trainers.errors import UsageError
from trainers.flags import config_to_json


@pytest.fixture
def remote():
    folder = f"ram://workdir_owner_{uuid.uuid4().hex}"
    fileio.makedirs(folder)
    return folder


def _write(folder, name, text):
    fileio.write_atomic(fileio.join(folder, name), text)


def test_only_a_training_runs_config_counts_as_one():
    assert workdir_owner.is_training_config(json.loads(config_to_json(finetune_config.get_config("digits"))))
    assert not workdir_owner.is_training_config(
        json.loads(config_to_json(fewshot_config.get_config("digits")))
    )
    assert not workdir_owner.is_training_config(["total_steps"])


def test_outputs_without_a_config_are_refused_on_a_remote_folder(remote):
    workdir_owner.check_unowned_outputs(remote)  # an empty folder is free
    _write(remote, "class_names.json", "[]\n")
    with pytest.raises(
        UsageError, match="holds class_names.json but no config.json, so no trainer's run wrote it"
    ):
        workdir_owner.check_unowned_outputs(remote)
    workdir_owner.check_unowned_outputs(remote, names=("results.json",))  # the probes write no class names
    _write(remote, "config.json", config_to_json(finetune_config.get_config("digits")))
    workdir_owner.check_unowned_outputs(remote)  # a run's own files


@pytest.mark.parametrize("text", ["{not json", '{"model": "ViT-B_16"}\n', "[1, 2]\n"])
def test_the_probes_refuse_a_config_json_that_is_no_commands(remote, text):
    _write(remote, "config.json", text)
    with pytest.raises(UsageError, match="is not a few-shot command's config.json"):
        workdir_owner.check_probes_workdir(remote)


def test_the_probes_take_their_own_earlier_workdir(remote):
    _write(remote, "config.json", config_to_json(fewshot_config.get_config("digits")))
    _write(remote, "results.json", "{}\n")
    workdir_owner.check_probes_workdir(remote)
