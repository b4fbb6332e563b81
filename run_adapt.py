#!/usr/bin/env python
"""Step 2 (target-language embeddings over a frozen body) entry point; see ``python run_adapt.py --help``."""
import sys

from ds_minimodel.adapt import main

if __name__ == "__main__":
    sys.exit(main())
