"""ds_minimodel: mini-model adaptation (Marchisio et al., 2023) on DeepSpeed.

The folders follow a run (ARCHITECTURE.md): ``data`` -> ``model`` -> ``train`` -> ``stages`` -> ``tasks`` ->
``pipeline``, with ``cluster`` for launching and ``tools`` beside them; ``systems`` registers the systems compared.
Import the submodules you need; nothing heavy is imported here so that the command line starts fast.
"""

__version__ = "0.1.0"
