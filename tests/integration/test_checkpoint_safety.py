"""No file of a checkpoint folder can run code when the package reads it (issue 18).

A code-running pickle is planted in each pickled file of a real training checkpoint in turn (the weights, DeepSpeed's
model states, its ZeRO optimizer shard, the RNG state), with the file's size and sha256 in meta.json fixed up to
match, as someone who can write the folder would. ``--resume`` (the path every training stage and a re-run of the
pipeline take) and loading the folder as a model must refuse it with one line naming the file, and the marker the
payload would create never appears."""
from __future__ import annotations

import json
import pickle
import shutil
import sys
from pathlib import Path

import pytest
import torch

from ds_minimodel.config import file_sha256
from ds_minimodel.errors import InputError
from ds_minimodel.model.loading import load
from ds_minimodel.train import checkpoint
from tests.integration.conftest import run_cmd

PICKLED = ("model.pt", "rng_rank_00000.pt", "mp_rank_00_model_states.pt",
           "bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt")


class _RunsCode:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def _pretrain(data: Path, out: Path, *extra: str, check: bool = True):
    return run_cmd([sys.executable, "run_pretrain.py", "--variant", "base", "--preset", "tiny", "--data", str(data),
                    "--ds-config", "ds_configs/cpu_bf16_zero2.json", "--seq-len", "64", "--steps", "2",
                    "--save-every", "2", "--out", str(out), *extra], check=check)


def _plant(ckpt: Path, name: str, marker: Path, *, zip_format: bool) -> None:
    """Replace ``name`` by a payload and vouch for it in meta.json: a valid checksum, a hostile file."""
    path = ckpt / name
    if zip_format:
        torch.save({"x": _RunsCode(marker)}, path)
    else:
        path.write_bytes(pickle.dumps({"x": _RunsCode(marker)}))
    meta_path = ckpt / checkpoint.META
    meta = json.loads(meta_path.read_text())
    meta["files"][name] = {"bytes": path.stat().st_size, "sha256": file_sha256(path)}
    meta_path.write_text(json.dumps(meta))


def test_a_planted_pickle_in_any_checkpoint_file_is_refused_without_running(en_data, tmp_path):
    run = tmp_path / "run"
    _pretrain(en_data, run)
    ckpt = checkpoint.latest_checkpoint(run)
    assert {p.name for p in ckpt.iterdir()} >= set(PICKLED)
    pristine = tmp_path / "pristine"
    shutil.copytree(ckpt, pristine)
    marker = tmp_path / "code_ran"
    # Resuming reads DeepSpeed's files and the RNG state: each hostile in turn (one also as a raw pickle stream).
    for name, zip_format in [(n, True) for n in PICKLED[1:]] + [("mp_rank_00_model_states.pt", False)]:
        shutil.rmtree(ckpt)
        shutil.copytree(pristine, ckpt)
        _plant(ckpt, name, marker, zip_format=zip_format)
        before = sorted(p.name for p in (run / "checkpoints").iterdir())
        proc = _pretrain(en_data, run, "--resume", check=False)
        assert proc.returncode == 2, (name, proc.stdout[-2000:], proc.stderr[-3000:])
        assert f"{name}: refused: not loadable without running code" in proc.stderr, proc.stderr[-2000:]
        assert "Traceback" not in proc.stderr
        assert not marker.exists(), name
        assert sorted(p.name for p in (run / "checkpoints").iterdir()) == before  # nothing new written
    # Every later stage (Steps 1b-4, surgery, export) loads the model from the weights file.
    for zip_format in (True, False):
        shutil.rmtree(ckpt)
        shutil.copytree(pristine, ckpt)
        _plant(ckpt, "model.pt", marker, zip_format=zip_format)
        with pytest.raises(InputError, match="model.pt"):
            load(ckpt)
        assert not marker.exists()
