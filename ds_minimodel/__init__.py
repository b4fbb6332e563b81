"""ds_minimodel: mini-model adaptation (Marchisio et al., 2023) on DeepSpeed.

Import the submodules you need (``ds_minimodel.model``, ``ds_minimodel.engine``...);
nothing heavy is imported here so that the CLI tools start fast.
"""

__version__ = "0.1.0"
