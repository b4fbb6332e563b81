#!/usr/bin/env python
"""Step 1b (MiniPost's mini-model) entry point; see ``python run_minipost.py --help`` and README.md."""
from ds_minimodel.stages.cli import exit_now
from ds_minimodel.stages.pretrain import main_minipost

if __name__ == "__main__":
    exit_now(main_minipost())
