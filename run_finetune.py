#!/usr/bin/env python
"""Step 3 (finetune the body on a source-language task, embeddings frozen); see ``python run_finetune.py --help``."""
from ds_minimodel.stages.cli import exit_now
from ds_minimodel.stages.finetune import main

if __name__ == "__main__":
    exit_now(main())
