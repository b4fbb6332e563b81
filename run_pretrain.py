#!/usr/bin/env python
"""Step 1 (pretraining) entry point; see ``python run_pretrain.py --help`` and README.md."""
from ds_minimodel.stages.cli import exit_now
from ds_minimodel.stages.pretrain import main

if __name__ == "__main__":
    exit_now(main())
