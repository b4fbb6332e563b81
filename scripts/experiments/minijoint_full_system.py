"""A fifth system for MiniJoint's dev experiment (``scripts/experiments/minijoint_dev.sh``, part ``full-depth``):
MiniJoint's primary adapted as BL_BASE adapts its own, Step 2 over all its layers and the top head (its second head
dropped, ``model.transforms.drop_aux_head``). Beside MiniJoint's Step 2 over its mini-model it splits MiniJoint's
transfer gap in two: what the jointly pretrained primary costs, and what learning the rows over the mini-model costs.

Loaded as a plugin (``systems.load_plugins``): ``DS_MINIMODEL_PLUGINS=minijoint_full_system`` with this folder on
``PYTHONPATH``, so that every launched stage registers it too.
"""
from ds_minimodel.systems import System, register

register(System("minijoint_full", "MiniJoint, whole primary", "minijoint", "primary", step2_layers=lambda d: d.layers,
                description="MiniJoint's primary adapted over all its layers and the top head, as BL_BASE's is"))
