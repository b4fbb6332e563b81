#!/usr/bin/env python
"""Step 1 (pretraining) entry point; see ``python run_pretrain.py --help`` and README.md."""
from ds_minimodel.cli import exit_now
from ds_minimodel.pretrain import main

if __name__ == "__main__":
    exit_now(main())
