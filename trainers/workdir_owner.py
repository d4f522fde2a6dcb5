"""Which command's files a workdir holds, so that no command writes over another's.

A training run (trainers.finetune, trainers.pretrain) writes config.json first and, at its end,
results.json, model.npz and class_names.json; the few-shot command writes config.json and
results.json at its end only; the demo and the sweep leave a results.json of their own beside
their runs' folders. A command given a workdir that holds another command's files would replace
them at its end (a run's results, the config.json its resume is checked against), so it stops
first with one line. Which command wrote a config.json its contents say
(keras_vit/run_files.py's `written_by`).
"""

from keras_vit import fileio, run_files
from keras_vit.run_files import CLASS_NAMES_FILE, CONFIG_FILE, MODEL_FILE
from trainers import results as results_lib
from trainers.errors import UsageError

# What a training run's end writes beside config.json (trainers/actions.py's Export).
TRAINING_OUTPUTS = (results_lib.FILE_NAME, MODEL_FILE, CLASS_NAMES_FILE)


def is_training_config(recorded):
    """Whether a config.json's contents were written by a training run."""
    return run_files.written_by(recorded) == "training"


def check_unowned_outputs(workdir, names=TRAINING_OUTPUTS):
    """Raises UsageError where `workdir` has no config.json but holds files of `names`: no run of
    the trainers made them (a run writes config.json before anything else), and the command's
    end would replace them."""
    if fileio.exists(fileio.join(workdir, CONFIG_FILE)):
        return
    found = [name for name in names if fileio.exists(fileio.join(workdir, name))]
    if found:
        raise UsageError(
            f"{workdir} holds {' and '.join(found)} but no {CONFIG_FILE}, so no trainer's run wrote "
            f"{'it' if len(found) == 1 else 'them'}, and this command would write over "
            f"{'it' if len(found) == 1 else 'them'} at its end: choose another --workdir "
            "(a new or empty folder)."
        )


def check_probes_workdir(workdir):
    """Raises UsageError where the few-shot command would write over another command's files:
    a training run's config.json and results.json, or a results.json without a config.json (the
    demo's, the sweep's). Earlier probes' files are replaced: the probes resume nothing."""
    check_unowned_outputs(workdir, names=(results_lib.FILE_NAME,))
    path = fileio.join(workdir, CONFIG_FILE)
    if not fileio.exists(path):
        return
    kind = run_files.folder_written_by(workdir)
    if kind == "training":
        raise UsageError(
            f"{workdir} holds a training run, whose config.json and results.json the probes would "
            f"replace: choose another --workdir (--weights={workdir} probes that run's model)."
        )
    if kind != "probes":
        raise UsageError(
            f"{path} is not a few-shot command's config.json, and the probes would replace it: "
            "choose another --workdir."
        )


def check_summary_workdir(workdir):
    """Raises UsageError where a command that leaves a summary results.json beside its runs'
    folders (the sweep, the demo) would replace a run's or the probes' results.json: neither
    writes a config.json into its own folder, so one there is another command's."""
    if fileio.exists(fileio.join(workdir, CONFIG_FILE)):
        raise UsageError(
            f"{workdir} holds a run (its {CONFIG_FILE}), whose {results_lib.FILE_NAME} this command's "
            "summary would replace: choose another --workdir."
        )
