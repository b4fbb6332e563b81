"""``ds-minimodel <command>`` (also ``python -m ds_minimodel <command>``): one entry for every tool of the package.

``ds-minimodel`` alone lists the commands; ``ds-minimodel <command> --help`` gives a command's options. The training
stages (pretrain, minipost, head, adapt, finetune) run one process here; several ranks come from a launcher, which
wants a script path: ``deepspeed run_pretrain.py ...`` (or ``torchrun``, ``mpirun``, ``srun``), or ``ds-minimodel
launch``.
"""
from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable

from ds_minimodel.errors import InputError, disk_fault, report

# command -> (module whose main(argv) runs it, or "module:function" for another function, one line of help). Modules
# are imported only when their command runs, so that listing the commands or running a light one (hostfile, flops)
# never imports torch.
COMMANDS: dict[str, tuple[str, str]] = {
    "prepare": ("ds_minimodel.data.prepare", "train a SentencePiece tokenizer and binarise a corpus into shards"),
    "pretrain": ("ds_minimodel.stages.pretrain", "Step 1: pretrain an MLM (BL_BASE's, BL_SMALL's, MiniJoint's)"),
    "minipost": ("ds_minimodel.stages.pretrain:main_minipost", "Step 1b: MiniPost's new layers on a primary's base"),
    "head": ("ds_minimodel.stages.pretrain:main_head", "train the MLM head of a bare encoder, its body frozen"),
    "adapt": ("ds_minimodel.stages.adapt", "Step 2: learn a target language's embeddings over a frozen body"),
    "finetune": ("ds_minimodel.stages.finetune", "Step 3: finetune the body on an English task, embeddings frozen"),
    "evaluate": ("ds_minimodel.tasks.evaluate", "Step 4: swap target embeddings in and score zero-shot"),
    "baselines": ("ds_minimodel.tasks.baselines", "majority class and bag-of-words scores of a task"),
    "surgery": ("ds_minimodel.model.surgery", "extract a mini-model, plug embeddings into a model"),
    "hf": ("ds_minimodel.model.hf_command", "import a Hugging Face BERT/DistilBERT/RoBERTa folder, export ours"),
    "pipeline": ("ds_minimodel.pipeline.command", "the whole method from one config file, resumable"),
    "submit": ("ds_minimodel.pipeline.submit", "a pipeline as one Slurm batch job per step"),
    "analysis": ("ds_minimodel.pipeline.report", "the paper's tables, speedups and plots from results.json"),
    "flops": ("ds_minimodel.tools.flops_check", "the paper's FLOP formulas, figures and a measured cross-check"),
    "bench": ("ds_minimodel.tools.bench", "speed and memory benchmarks"),
    "gpu-run": ("ds_minimodel.tools.gpu_run", "everything a lent GPU should measure, in minutes, as one command"),
    "align": ("ds_minimodel.tools.align", "label-free probe: target sentences retrieve their English pairs"),
    "probe": ("ds_minimodel.tools.probe", "MLM loss of a body with given embeddings, on fixed masks"),
    "launch": ("ds_minimodel.cluster.launch", "check a hostfile and batch sizes, then run the deepspeed launcher"),
    "hostfile": ("ds_minimodel.cluster.hostfile", "check a hostfile against a DeepSpeed config"),
}
TRAINING = ("pretrain", "minipost", "head", "adapt", "finetune")


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"  {name:<{width}}  {text}" for name, (_, text) in COMMANDS.items()]
    return ("ds-minimodel: mini-model adaptation (Marchisio et al., 2023) on DeepSpeed: extend a pretrained masked\n"
            "language model to a new language, with the new embeddings learned over a shallow mini-model.\n\n"
            "usage: ds-minimodel <command> [options]\n\ncommands:\n" + "\n".join(lines) +
            "\n\n`ds-minimodel <command> --help` gives a command's options; `ds-minimodel pipeline --config "
            "configs/demo.json` runs the whole method on the bundled demo data.")


def entry(command: str) -> Callable[[list[str]], int]:
    """The function that runs ``command``."""
    module, _, function = COMMANDS[command][0].partition(":")
    return getattr(importlib.import_module(module), function or "main")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):  # what the tool is, its commands and the way on: not an error
        print(usage())
        return 0
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        print(f"ds-minimodel: unknown command {command!r}\n\n{usage()}", file=sys.stderr)
        return 2
    sys.argv[0] = f"ds-minimodel {command}"  # argparse's prog
    try:
        code = entry(command)(rest)
    except InputError as err:  # a bad input a command did not report itself: one line, no traceback
        code = report(err)
    except BrokenPipeError:  # output piped into a reader that stopped (| head): not an error of the command
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as err:  # a full, read-only or forbidden disk: one line, no traceback
        fault = disk_fault(err)
        if fault is None:
            raise
        code = report(fault)
    if command in TRAINING:
        from ds_minimodel.stages.cli import exit_now

        exit_now(code)
    return code


if __name__ == "__main__":
    sys.exit(main())
