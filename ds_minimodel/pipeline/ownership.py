"""Which folders are a pipeline's own, so that a pipeline continues its own output and never writes over
another command's (or a user's) files."""
from __future__ import annotations

from pathlib import Path

from ds_minimodel.folders import require_output
from ds_minimodel.systems import Step

PRETRAIN_RUN, PRETRAIN_FOLDER = ".seed", "pretrain-seed"
"""A further pretraining run (``pretrain_seeds``): its job names end ``.seed<k>`` (``step1-base.seed2``), its
outputs are in ``<out>/pretrain-seed<k>/``."""

PIPELINE_FOLDERS = ("data", *(s for s in Step if s != Step.PREPARE), "minis", "tensorboard", "analysis",
                    "slurm", "specs", "logs")


# Files that mark a folder as another command's output (a run, a checkpoint or model, a data folder, an HF model).
FOREIGN_MARKERS = ("run.json", "checkpoints", "meta.json", "model.pt", "config.json")


OWNER_MARK = ".ds-minimodel-pipeline"  # written into a pipeline's output folder before anything else


def is_pipeline_output(folder: Path) -> bool:
    """Whether ``folder`` is a pipeline's: it carries ``OWNER_MARK``, or (written before the mark existed) it holds
    at least one of the pipeline's step folders, every sub-folder is one, and nothing marks another command's
    output. A folder of loose files alone (a user's own results.json) is not, so it is never written over."""
    entries = list(folder.iterdir())
    if (folder / OWNER_MARK).is_file():
        return True
    folders = [p for p in entries if p.is_dir() and not p.name.startswith(".")]
    return (bool(folders) and not any(p.name in FOREIGN_MARKERS for p in entries)
            and all(p.name in PIPELINE_FOLDERS or p.name.startswith(PRETRAIN_FOLDER) for p in folders))


def own_output(out: Path, config: Path | str) -> None:
    """Refuse a pipeline's folder ``out`` unless it is new, empty or a pipeline's (``is_pipeline_output``), then mark
    it as a pipeline's before any work: every command that writes a pipeline's folder (``pipeline``, ``submit``)
    calls this first."""
    require_output(out, option=f"{config}: out", own=is_pipeline_output, what="a pipeline's output")
    out.mkdir(parents=True, exist_ok=True)
    mark = out / OWNER_MARK
    if not mark.is_file():
        mark.write_text(f"output of ds-minimodel pipeline {config}: a later pipeline may continue it\n")
