#!/usr/bin/env python
"""Entry point of MLM-head training for a bare encoder; see ``python run_head.py --help`` and README.md."""
from ds_minimodel.stages.cli import exit_now
from ds_minimodel.stages.pretrain import main_head

if __name__ == "__main__":
    exit_now(main_head())
