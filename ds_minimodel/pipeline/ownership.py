"""Which folders are a pipeline's own, so that a pipeline continues its own output and never writes over
another command's (or a user's) files."""
from __future__ import annotations

import argparse
from pathlib import Path

from ds_minimodel.errors import InputError, report
from ds_minimodel.folders import require_output

PRETRAIN_RUN, PRETRAIN_FOLDER = ".seed", "pretrain-seed"
"""A further pretraining run (``pretrain_seeds``): its job names end ``.seed<k>`` (``step1-base.seed2``), its
outputs are in ``<out>/pretrain-seed<k>/``."""

STEP2_RUN, STEP2_FOLDER = ".step2-seed", "step2-seed"
"""A further Step-2 run (``step2_seeds``): its job names end ``.step2-seed<k>`` (``step2-minipost.step2-seed2``), its
runs are in ``<out>/step2-seed<k>/<lang>/<system>/``."""


def step2_run(step2_seed: int | None) -> str:
    """What a further Step-2 run's names end with (its jobs, its runs' names, its Step-4 cache): ``.step2-seed<k>``;
    nothing for the main run (``step2_seed`` None)."""
    return "" if step2_seed is None else f"{STEP2_RUN}{step2_seed}"

OWNER_MARK = ".ds-minimodel-pipeline"  # written into a pipeline's output folder before anything else


def is_pipeline_output(folder: Path) -> bool:
    """Whether ``folder`` is a pipeline's: it carries ``OWNER_MARK``. Never judged by its shape: a user's folder
    holding results.json and sub-folders named ``data/`` and ``logs/`` looks like a pipeline's and is not."""
    return (folder / OWNER_MARK).is_file()


def own_output(out: Path, config: Path | str, *, mark: bool = True) -> None:
    """Refuse a pipeline's folder ``out`` unless it is new, empty or a pipeline's (``is_pipeline_output``), then mark
    it as a pipeline's before any work: every command that writes a pipeline's folder (``pipeline``, ``submit``)
    calls this first. ``mark`` False: the check alone, for a command that only reads the folder (``--list``)."""
    require_output(out, option="out", source=config, own=is_pipeline_output,
                   what=f"a pipeline's output (its folders carry {OWNER_MARK}; one a pipeline wrote before that file "
                        f"existed continues once you create it)")
    if not mark:
        return
    out.mkdir(parents=True, exist_ok=True)
    mark_file = out / OWNER_MARK
    if not mark_file.is_file():
        mark_file.write_text(f"output of ds-minimodel pipeline {config}: a later pipeline may continue it\n")


def main(argv: list[str] | None = None) -> int:
    """``python -m ds_minimodel.pipeline.ownership OUT CONFIG``: claim ``OUT`` for the pipeline of ``CONFIG`` before a
    script links another run's finished steps into it (``scripts/reference_wechsel.sh``), as the pipeline itself
    would claim it; a folder that is not new, empty or a pipeline's is refused with one line, exit 2."""
    p = argparse.ArgumentParser(prog="python -m ds_minimodel.pipeline.ownership", description=main.__doc__)
    p.add_argument("out", type=Path, help="the pipeline's out folder")
    p.add_argument("config", help="the pipeline's config file, named in the mark")
    args = p.parse_args(argv)
    try:
        own_output(args.out, args.config)
    except InputError as err:
        return report(err)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
