"""Shared pytest fixtures. Keep this file small; add new fixtures under a section header naming their owner."""
from __future__ import annotations

import pytest
import torch

# --- determinism (all tiers) ---------------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _seed_torch() -> None:
    """Every test starts from the same RNG state, so random weights and inputs do not depend on test order."""
    torch.manual_seed(0)


# --- the gpu marker (all tiers) ------------------------------------------------------------------------------------


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``gpu`` skip, with the reason, where torch sees no CUDA device."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU: torch.cuda.is_available() is False on this machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
