"""Shared pytest fixtures. Keep this file small; add new fixtures under a section header naming their owner."""
from __future__ import annotations

import pytest
import torch

# --- determinism (all tiers) ---------------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _seed_torch() -> None:
    """Every test starts from the same RNG state, so random weights and inputs do not depend on test order."""
    torch.manual_seed(0)
