#!/usr/bin/env python
"""Many training jobs in one launch of the ranks (the pipeline's shared launch); see ds_minimodel/stages/worker.py."""
from ds_minimodel.stages.cli import exit_now
from ds_minimodel.stages.worker import main

if __name__ == "__main__":
    exit_now(main())
