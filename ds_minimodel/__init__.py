"""ds_minimodel: mini-model adaptation (Marchisio et al., 2023) on DeepSpeed.

The folders follow a run (ARCHITECTURE.md): ``data`` -> ``model`` -> ``train`` -> ``stages`` -> ``tasks`` ->
``pipeline``, with ``cluster`` for launching and ``tools`` beside them; ``systems`` registers the systems compared.
Import the submodules you need; nothing heavy is imported here so that the command line starts fast.
"""

import logging

__version__ = "0.1.0"


def _drop_cpu_fallback_notice(record: logging.LogRecord) -> bool:
    """DeepSpeed says "Setting accelerator to CPU. If you have GPU or other accelerator, we were unable to detect it"
    in every process of a CPU run (13 of a 5-language pipeline's 230 lines): it finds no accelerator exactly where
    torch sees none, so there is nothing to act on. Every run records the device it used."""
    return "Setting accelerator to CPU" not in record.getMessage()


# DeepSpeed's logger is looked up by name when deepspeed is imported: the filter set here, before that, stays on it.
logging.getLogger("DeepSpeed").addFilter(_drop_cpu_fallback_notice)
