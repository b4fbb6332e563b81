"""A run folder's ``run.json``: what the run is, written once its inputs have passed their checks, and what
``--resume`` must find unchanged. Settings that define the model (``IDENTITY_KEYS``) are never changed on resume;
the training setup (the DeepSpeed JSON, the warm-up share) is changed only when the user says so
(``--allow-config-change``), and each such change is recorded in ``run.json`` under ``changes``."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from ds_minimodel.config import ModelConfig, Role, TrainConfig, fields_in, read_json, write_json
from ds_minimodel.errors import InputError
from ds_minimodel.folders import claim, require_output
from ds_minimodel.train import checkpoint

IDENTITY_KEYS = ("variant", "model", "data", "tokenizer_sha256", "seed", "seq_len", "mask_prob", "packing",
                 "global_batch", "source", "init", "init_options", "forget_every")
"""Settings that define a run: resuming with any of these changed would silently train a different model."""
IDENTITY_DEFAULTS = {"init": "overlap", "init_options": {"new_rows": "normal", "freeze_copied": False},
                     "forget_every": 0, "packing": "sentences"}
"""What a run written before a setting existed had, in effect."""
SETUP_KEYS = ("ds_config", "train")
"""The training setup: changed on resume only with --allow-config-change."""
HARMLESS = frozenset(f"train.{name}" for name in fields_in(TrainConfig, Role.LENGTH, Role.HARMLESS))
"""Setup entries that change how long a run goes on (a resumed run is extended so), how it is saved, logged or
computed, not what it learns: the roles declared on ``TrainConfig``'s fields."""


def _as_now(key: str, value: Any) -> Any:
    """A recorded setting as this version writes it: a model config gains the defaults of fields added since."""
    if key == "model" and isinstance(value, dict):
        try:
            return ModelConfig.from_dict(value).to_dict()
        except InputError:
            return value
    return value


def flat(value: Any, prefix: str) -> dict[str, Any]:
    """Nested objects as {"a.b.c": leaf}."""
    if isinstance(value, dict):
        return {k: v for key, item in value.items() for k, v in flat(item, f"{prefix}.{key}").items()}
    return {prefix: value}


def setup_changes(existing: dict[str, Any], description: dict[str, Any]) -> dict[str, list[Any]]:
    """{"ds_config.optimizer.params.lr": [recorded, now], ...} for the setup entries that differ."""
    before = {k: v for key in SETUP_KEYS if key in existing for k, v in flat(existing[key], key).items()}
    after = {k: v for key in SETUP_KEYS if key in description for k, v in flat(description[key], key).items()}
    return {k: [before.get(k), after.get(k)] for k in sorted(before.keys() | after.keys())
            if before.get(k) != after.get(k) and k not in HARMLESS and k.split(".")[0] in existing}


def write_run_description(run_dir: Path, description: dict[str, Any], *, resume: bool,
                          allow_config_change: bool = False) -> None:
    """Refuse to mix two runs in one folder, or to write a run into a folder that holds something else; claim the
    folder as this run's (one live writer: ``folders.claim``); record what this run is. Rank 0 only."""
    path = run_dir / checkpoint.RUN
    require_output(run_dir, own=checkpoint.is_run_folder, what="a training run")
    claim(run_dir, f"{description.get('stage', 'a')} run")
    if not path.exists():
        run_dir.mkdir(parents=True, exist_ok=True)
        write_json(path, description)
        return
    existing = read_json(path)
    if not resume:
        raise InputError(f"{run_dir}: this folder already holds a run ({path}); pass --resume to continue it, "
                         "or choose another --out")
    differing = sorted(k for k in description if k in IDENTITY_KEYS
                       and _as_now(k, existing.get(k, IDENTITY_DEFAULTS.get(k))) != _as_now(k, description[k]))
    if differing:
        raise InputError(
            f"{path}: --resume with settings that differ from the run in this folder: {', '.join(differing)}")
    changes = setup_changes(existing, description)
    if not changes:
        return
    listed = "; ".join(f"{k} {old!r} -> {new!r}" for k, (old, new) in changes.items())
    if not allow_config_change:
        raise InputError(f"{path}: --resume with a training setup that differs from the run's: {listed}. Pass "
                         "--allow-config-change to continue with it (recorded in run.json), or restore the setup")
    record = {**existing, **{k: description[k] for k in SETUP_KEYS if k in description}}
    record["changes"] = [*existing.get("changes", []), {"time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                                                        "changed": changes}]
    write_json(path, record)
