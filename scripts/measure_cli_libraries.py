"""Issue 29's choice of a command-line library, by measurement: which of today's entry-script command lines does
tyro, and which does jsonargparse, parse into the same stage spec as the package's own options do, with no
configuration beyond the spec dataclasses themselves?

    pip install --target /tmp/cli_libs tyro jsonargparse    # neither is a dependency of the package
    PYTHONPATH=/tmp/cli_libs .venv/bin/python scripts/measure_cli_libraries.py
"""
import contextlib
import dataclasses
import io
import shlex

from ds_minimodel.stages import adapt, finetune, pretrain
from ds_minimodel.stages.cli import spec_from_args
from ds_minimodel.stages.specs import AdaptSpec, FinetuneSpec, PretrainSpec

CASES = {
    PretrainSpec: (pretrain.build_parser, [
        "--variant minijoint --aux-layer 4 --preset base --ds-config d.json --data data/en --out o --steps 10",
        "--variant minipost --from runs/x --keep-layers 2 --new-layers 2 --ds-config d.json --data d --out o",
        "--preset tiny --seq-len 64 --ds-config d.json --data d --out o --save-every 2 --resume --allow-config-change",
        "--ds-config d.json --data d --out o --forget-every 3 --log-root lr --run-name n --dist-timeout 60",
        "--ds-config d.json --data d --out o --local_rank=0",
        "--ds-config d.json --data d --out o --prefetch 0 --compile --activation-checkpointing --keep-checkpoints 2",
    ]),
    AdaptSpec: (adapt.build_parser, [
        "--system bl_base --body b --data d --out o --ds-config d.json --init focus --new-rows source --freeze-copied",
        "--system minijoint --body b --data d --lang de --out o --ds-config d.json --body-dropout off "
        "--shared-with t.model",
        "--system bl_base --body b --data d --out o --ds-config d.json --train-positions --train-embedding-norm",
    ]),
    FinetuneSpec: (finetune.build_parser, [
        "--model m --task lohelp --format generic --train t --ds-config d.json --out o --epochs 0.5 --max-len 128 "
        "--pooling cls --seed 2",
        "--model m --task xnli --format multinli --train t --dev d --dev-format xnli --language en "
        "--ds-config d.json --out o",
    ]),
}


def with_tyro(spec, argv):
    import tyro

    return tyro.cli(spec, args=argv)


def with_jsonargparse(spec, argv):
    from jsonargparse import ArgumentParser

    parser = ArgumentParser(exit_on_error=False)
    parser.add_class_arguments(spec, as_positional=False)
    parsed = parser.parse_args(argv)
    return spec(**{f.name: parsed[f.name] for f in dataclasses.fields(spec)})


def differences(spec, want, got):
    return {f.name: (getattr(want, f.name), getattr(got, f.name)) for f in dataclasses.fields(spec)
            if getattr(want, f.name) != getattr(got, f.name)}


for name, parse in (("tyro", with_tyro), ("jsonargparse", with_jsonargparse)):
    same, total, failures = 0, 0, []
    for spec, (parser, lines) in CASES.items():
        for line in lines:
            argv, total = shlex.split(line), total + 1
            want = spec_from_args(spec, parser().parse_args(argv))
            err = io.StringIO()
            try:
                with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                    got = parse(spec, argv)
            except BaseException as exc:  # argparse-style parsers exit
                said = (str(exc) or err.getvalue()).strip().splitlines()
                failures.append(f"{spec.__name__} {line[:50]}...: {type(exc).__name__} {said[-1][:99] if said else ''}")
                continue
            if got == want:
                same += 1
            else:
                failures.append(f"{spec.__name__} {line[:50]}...: differs {differences(spec, want, got)}")
    print(f"{name}: {same} of {total} of today's command lines give the same spec")
    for failure in failures:
        print("   ", failure)
