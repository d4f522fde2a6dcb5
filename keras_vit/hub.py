"""Checkpoints on the Hugging Face Hub: `hf-hub:timm/NAME` and `hf://google/vit-...` names.

Downloads go through huggingface_hub (the optional `hub` extra), so its cache (HF_HOME,
HF_HUB_CACHE), offline mode (HF_HUB_OFFLINE=1: the cache only) and token (HF_TOKEN, or
`hf auth login`) work as for timm and transformers. Only config.json, the input normalisation
and the safetensors weights are fetched: never a pickle file.

Without a network (and without HF_HUB_OFFLINE=1), huggingface_hub retries each file it does not
have for about 23 s (five backoff retries, not configurable): the endpoint is probed once, with a
short timeout, and after a failed probe only the cache is read, so a checkpoint that is not
cached is one line in seconds and one that is cached still loads.
"""

import json
import os

from keras_vit.errors import CheckpointError, first_line
from keras_vit.hf_layout import CONFIG_FILE, PREPROCESSOR_FILE, SAFETENSORS_FILE, SAFETENSORS_INDEX

PREFIXES = ("hf-hub:", "hf://")
_INSTALL = "pip install 'keras-vision-transformer[hub]'"
# Seconds the probe of the Hub endpoint waits for an answer (any answer, even an error status,
# means the Hub is reachable).
PROBE_TIMEOUT_S = 5


def is_hub_name(weights):
    return isinstance(weights, str) and weights.startswith(PREFIXES)


def repo_of(name):
    """(repo id, revision or None) of a Hub name: 'hf-hub:timm/vit_x@rev' -> ('timm/vit_x', 'rev')."""
    rest = next(name[len(prefix) :] for prefix in PREFIXES if name.startswith(prefix))
    repo, _, revision = rest.partition("@")
    if repo.count("/") != 1 or not all(repo.split("/")):
        raise CheckpointError(
            f"{name}: not a Hub model name; write hf-hub:OWNER/REPO (e.g. "
            "hf-hub:timm/vit_base_patch16_224.augreg2_in21k_ft_in1k or hf://google/vit-base-patch16-224)"
        )
    return repo, revision or None


def _hub():
    try:
        import huggingface_hub
    except ImportError:
        raise CheckpointError(f"Hub names need huggingface_hub: {_INSTALL}") from None
    return huggingface_hub


def unreachable(hub=None):
    """None if the Hub endpoint (HF_ENDPOINT, default huggingface.co) answers within
    PROBE_TIMEOUT_S, else why not, in a few words."""
    hub = hub or _hub()
    from huggingface_hub import constants  # a submodule its lazy package does not expose

    endpoint = constants.ENDPOINT
    try:
        hub.get_session().head(endpoint, timeout=PROBE_TIMEOUT_S)
    except Exception as err:  # whatever the HTTP client raises: no answer
        return f"{endpoint}: {first_line(err, limit=120)}"
    return None


def _offline():
    return os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")


def download(name, cache_dir=None):
    """The local folder (in the Hugging Face cache) holding the checkpoint `name` names."""
    hub = _hub()
    repo, revision = repo_of(name)
    offline = _offline()
    no_answer = None if offline else unreachable(hub)

    def fetch(file_name, required=True):
        try:
            return hub.hf_hub_download(
                repo,
                file_name,
                revision=revision,
                cache_dir=cache_dir,
                local_files_only=offline or no_answer is not None,
            )
        except hub.errors.LocalEntryNotFoundError:
            if not required:
                return None
            if offline:
                why = (
                    "HF_HUB_OFFLINE is set; download it where there is a network "
                    f"(hf download {repo}) and copy the cache, or pass the checkpoint's folder"
                )
            else:
                why = (
                    f"the Hub could not be reached ({no_answer or 'no answer'}); check the network "
                    "or HF_ENDPOINT, set HF_HUB_OFFLINE=1 to use the cache alone, or pass the "
                    "checkpoint's folder"
                )
            raise CheckpointError(f"{name}: {file_name} is not in the Hugging Face cache and {why}") from None
        except hub.errors.EntryNotFoundError:
            if required:
                raise
            return None
        except (hub.errors.RepositoryNotFoundError, hub.errors.RevisionNotFoundError) as err:
            raise CheckpointError(
                f"{name}: no such model on the Hub, or it is private and no token was given "
                f"({first_line(err)}); check the name, or log in with `hf auth login` / set HF_TOKEN"
            ) from None
        except hub.errors.HfHubHTTPError as err:
            raise CheckpointError(f"{name}: could not download {file_name} ({first_line(err)})") from None

    fetch(CONFIG_FILE, required=False)
    fetch(PREPROCESSOR_FILE, required=False)
    try:
        return os.path.dirname(fetch(SAFETENSORS_FILE))
    except hub.errors.EntryNotFoundError:
        pass
    index = fetch(SAFETENSORS_INDEX, required=False)
    if index is None:
        raise CheckpointError(
            f"{name}: the repository has no {SAFETENSORS_FILE}; keras_vit reads safetensors only "
            "(pickle files like pytorch_model.bin can execute code when loaded)"
        )
    with open(index, encoding="utf-8") as f:
        for shard in sorted(set(json.load(f)["weight_map"].values())):
            fetch(shard)
    return os.path.dirname(index)


def push_to_hub(directory, repo_id, token=None, private=False):
    """Uploads a folder written by keras_vit.hf_export to the Hub repository `repo_id`; its URL."""
    hub = _hub()
    api = hub.HfApi(token=token)
    try:
        api.create_repo(repo_id, private=private, exist_ok=True)
        api.upload_folder(
            folder_path=os.fspath(directory),
            repo_id=repo_id,
            commit_message="Upload ViT weights converted by keras_vit",
        )
    except (hub.errors.HfHubHTTPError, OSError, ValueError) as err:
        raise CheckpointError(
            f"could not push {directory} to {repo_id} ({first_line(err)}); log in with `hf auth login` "
            "or set HF_TOKEN, and check that you may write to the repository"
        ) from None
    return f"https://huggingface.co/{repo_id}"
