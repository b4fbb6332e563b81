#!/usr/bin/env python
"""Step 2 (target-language embeddings over a frozen body) entry point; see ``python run_adapt.py --help``."""
from ds_minimodel.stages.adapt import main
from ds_minimodel.stages.cli import exit_now

if __name__ == "__main__":
    exit_now(main())
