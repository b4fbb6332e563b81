"""The ``reference`` part of ``ds-minimodel gpu-run``: ``configs/reference_gpu.json`` through the whole pipeline with
step counts set from measured throughput so that it ends before the run's deadline, and beside it a Step-1 body of
the CPU reference's shape trained as long as the time allows; results and body packed for the trip back."""
from __future__ import annotations

import importlib.util
import json
import shutil
import sys
import tarfile
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from ds_minimodel.config import get_preset, read_json, write_json
from ds_minimodel.errors import InputError
from ds_minimodel.pipeline.settings import PipelineConfig
from ds_minimodel.pipeline.step2_init import target_init, vector_languages
from ds_minimodel.tools.gpu_common import (
    REPO,
    GpuRunSpec,
    Run,
    bench_cmd,
    device_name,
    ds_config,
    materialise,
    skipped,
)
from ds_minimodel.tools.gpu_plan import (
    RESERVE_S,
    bench_median,
    choice_problem,
    chosen_config,
    plan_reference,
    startup_seconds,
    step3_shape,
    stored_reference,
    stored_sizing,
    tiny_plan,
)
from ds_minimodel.tools.gpu_tokenizers import carried, carried_vectors

CPU_REFERENCE = REPO / "configs/reference.json"
"""The CPU reference run's config: the body trained beside the GPU run has its shape and tokenizer."""

PART_PIECE = 15 * 2**20
"""Largest file brought back (the device tool returns files of at most 16 MiB)."""
def time_reference_shapes(run: Run, end: float) -> dict[str, Any]:
    """Seconds per update of every stage of the reference run at its own shapes (Steps 1, 1b and 2 in one process,
    Step 3 in another), and with ``--body`` of the body's Step 1 (a third process, 16 s on the sixth lease): what
    ``plan_reference`` sizes the run from."""
    s, ref, sizing = run.sizes, reference_shape(run), {}
    processes = [("reference", "step1,step1-dual,step1b,step2-bl_base,step2-bl_small,step2-minijoint,step2-minipost",
                  ref["preset"], s.sizing_micro or ref["micro"], ref["ds"]),
                 ("reference step3", "step3", ref["preset"], s.sizing_micro or ref["step3_batch"], ref["ds3"])]
    if run.spec.body:
        processes.append(("body", "step1", ref["body_preset"], s.sizing_micro or ref["body_micro"], ref["body_ds"]))
    for name, stages, preset, micro_batch, ds in processes:
        rows, status = run.timed(f"sizing: {name}", [
            *bench_cmd(run, "one-stage", stages, preset=preset, vocab=ref["vocab"], seq_len=ref["seq_len"],
                       micro=micro_batch, ds=ds), "--layers", str(get_preset(preset).num_layers),
            "--mini-layers", str(ref["aux"]), "--new-layers", str(ref["new"])], 150, end)
        sizing[name] = {**status, "micro_batch": micro_batch, "median_s": {r["stage"]: r["median_s"] for r in rows}}
    return sizing


def reference_shape(run: Run) -> dict[str, Any]:
    """The reference run's settings that its sizing needs: preset, depths, batch, DeepSpeed files."""
    config = PipelineConfig.load(REPO / run.spec.config)
    step1_ds = read_json(REPO / config.step1.ds_config)
    cpu_ds = PipelineConfig.load(CPU_REFERENCE).step1.ds_config
    ds3 = reference_ds(run, "step3", config.step3.ds_config)  # the file the run's Step 3 trains with
    return {"preset": run.sizes.reference_preset or config.preset, "seq_len": config.seq_len,
            "vocab": run.sizes.reference_vocab or config.vocab_size, "aux": config.aux_layer,
            "new": config.new_layers, "micro": step1_ds["train_micro_batch_size_per_gpu"],
            "ds": ds_config(run, "reference", base=config.step1.ds_config),
            "ds3": ds3, "step3_batch": read_json(ds3)["train_batch_size"],
            "body_preset": run.sizes.reference_preset or "reference",
            "body_micro": read_json(REPO / cpu_ds)["train_batch_size"],
            "body_ds": ds_config(run, "body", base=cpu_ds, batch=run.sizes.sizing_micro)}


def argument_problem(spec: GpuRunSpec) -> str | None:
    """What is wrong with the reference part's options against ``--config``, before any work starts; or None."""
    path = REPO / spec.config
    if not path.is_file():
        return f"--config {spec.config}: not found"
    try:
        config = PipelineConfig.load(path)
    except InputError as err:
        return f"--config: {err}"
    problem = choice_problem(config, spec.systems, spec.languages, spec.config)
    if problem:
        return problem
    if spec.english and not Path(spec.english).is_file():
        return f"--english {spec.english}: not a file"
    if spec.plan_from is not None and spec.body:
        return (f"--plan-from {spec.plan_from} with --body: that run's jobs were timed without a body sharing the "
                "GPU, so a plan from them would not leave the body its turns; drop one of the two")
    if spec.plan_from is not None:
        import torch

        device = device_name(torch.cuda.is_available())
        try:
            ref, measured_on = stored_reference(spec.plan_from)
            timed = stored_sizing(spec.plan_from, None)["reference"]["median_s"]
        except InputError as err:
            return str(err)
        if measured_on != device and not any(bench_median(ref.get("sizing") or {}, stage) for stage in timed):
            return (f"--plan-from {spec.plan_from}: measured on {measured_on or 'a device it does not name'}, not on "
                    f"this {device}, and it holds no bench medians to scale its jobs' times to this device by")
        # What plan_reference reads: every Step-1 kind, Step 1b, and Step 2 of each system this run trains.
        needed = ["step1", "step1-dual", "step1b", *(f"step2-{name}" for name in spec.systems or config.systems)]
        missing = [stage for stage in needed if stage not in timed]
        if missing:
            return (f"--plan-from {spec.plan_from}: its jobs time no {', '.join(missing)}, which this run needs; "
                    "plan without it, or from a run of these systems")
    return None


def reference_ds(run: Run, section: str, base: str | Path) -> Path:
    """The reference run's DeepSpeed file for a pipeline section, from ``base`` on one rank: Step 3 at the sizes'
    ``step3_batch``, the MLM stages at their ``sizing_micro`` (None: the file's own batch)."""
    s = run.sizes
    return ds_config(run, f"reference_{section}", base=base,
                     batch=s.step3_batch if section == "step3" else s.sizing_micro)


def reference_config(run: Run) -> PipelineConfig:
    """``--config`` as this run uses it: its output in the work folder, the larger English corpus (``--english``),
    the target languages and finetuning seeds of ``--languages`` and ``--seeds``, every data file unpacked."""
    spec, s, cut = run.spec, run.sizes, run.sizes.corpus_bytes
    config = chosen_config(PipelineConfig.load(REPO / spec.config), spec.systems, spec.languages, spec.seeds,
                           spec.relearn)

    def fused(section: str, settings: Any) -> Any:  # DeepSpeed's fused Adam on a GPU, torch's on a CPU
        path = str(reference_ds(run, section, settings.ds_config))
        # --prefetch-in: where the MLM stages' micro-batches are built (Step 3's features need no building)
        process = ({"prefetch_process": spec.prefetch_process}
                   if spec.prefetch_process is not None and section != "step3" else {})
        return replace(settings, ds_config=path, **process)

    made = replace(
        config, out=str(run.work / "reference_gpu"), preset=s.reference_preset or config.preset,
        vocab_size=s.reference_vocab or config.vocab_size,
        source=replace(config.source,
                       corpus=materialise(run.work, spec.english or config.source.corpus, max_bytes=cut)),
        targets=[replace(t, corpus=materialise(run.work, t.corpus, max_bytes=cut),
                         word_list=t.word_list and str(REPO / t.word_list)) for t in config.targets],
        step1=fused("step1", config.step1), step1b=config.step1b and fused("step1b", config.step1b),
        step2=fused("step2", config.step2), step3=fused("step3", config.step3),
        tasks=[replace(task, train=materialise(run.work, task.train),  # whole: a cut can lose labels its tests hold
                       **{split: {lang: materialise(run.work, path, lines=s.task_lines)
                                  for lang, path in getattr(task, split).items() if lang in ("en", *spec.languages)}
                          for split in ("dev", "test")})
               for task in config.tasks])
    # Tokenizers trained before the run on these very corpora (scripts/gpu_prepare.py): none is trained again; so
    # are FOCUS's static vectors, which the GPU machine has no gensim to train.
    def own(corpus: Any) -> Any:
        return replace(corpus, tokenizer=carried(spec.tokenizers, made, corpus) or corpus.tokenizer,
                       static_vectors=carried_vectors(spec.tokenizers, made, corpus))

    return without_untrainable_vectors(replace(made, source=own(made.source), targets=[own(t) for t in made.targets]))


def without_untrainable_vectors(config: PipelineConfig) -> PipelineConfig:
    """``config``, or with Step 2 starting from the paper's overlap rows (anchored by the word lists where the
    recipe anchors and every target has one) where static vectors would have to be trained (a target without
    carried ones, as ``--tiny``'s cut corpora) and gensim is not installed: the reference part runs rather than
    fails; ``step2_inits`` records what each target started from."""
    needs = [c.lang for c in vector_languages(config) if c.static_vectors is None]
    if not needs or importlib.util.find_spec("gensim") is not None:
        return config
    # Word anchors stay where every target has its list (the pipeline's word_anchors asks that of each).
    anchors = (any(target_init(config.step2, t)[1] for t in config.targets)
               and all(t.word_list for t in config.targets))
    print(f"[gpu-run] reference: no static vectors carried for {', '.join(needs)} and no gensim to train them: "
          f"Step 2 starts from the overlap rows{' and word anchors' * anchors}", flush=True)
    return replace(config, step2=replace(config.step2, init="overlap", word_anchors=anchors),
                   source=replace(config.source, static_vectors=None),
                   targets=[replace(t, static_vectors=None, word_list=t.word_list if anchors else None)
                            for t in config.targets])


def step2_inits(config: PipelineConfig) -> dict[str, str]:
    """What each target's Step 2 starts from, for the part's record: ``focus + word anchors (carried vectors)``,
    ``overlap``."""
    def named(target: Any) -> str:
        init, anchored, _ = target_init(config.step2, target)
        return init + " + word anchors" * anchored + " (carried vectors)" * bool(target.static_vectors)

    return {t.lang: named(t) for t in config.targets}


def write_config(path: Path, config: PipelineConfig) -> None:
    """A pipeline config file that ``PipelineConfig.load`` reads back as ``config``."""
    write_json(path, asdict(config))


def start_data(run: Run) -> None:
    """Start, in the background, the reference run's data preparation and the body's (CPU work: SentencePiece and
    sharding), so that they are done by the time the part begins."""
    config = reference_config(run)
    write_config(run.config_path, config)
    run.spawn("reference_prepare", [sys.executable, "-m", "ds_minimodel", "pipeline", "--config", run.config_path,
                                    "--only", "prepare"])
    if not run.spec.body:
        return
    # The body: the CPU reference's tokenizer (the same call on the same file as its pipeline's prepare), applied to
    # the larger English corpus.
    cpu = PipelineConfig.load(CPU_REFERENCE)
    cpu_english = materialise(run.work, cpu.source.corpus, max_bytes=run.sizes.corpus_bytes)
    tok, data = run.work / "bodies" / "tokenizer", run.work / "bodies" / "en"
    run.spawn("body_prepare", [sys.executable, "-c", (
        "from pathlib import Path; from ds_minimodel.data.prepare import prepare; "
        f"prepare(Path({cpu_english!r}), Path({str(tok)!r}), "
        f"vocab_size={run.sizes.reference_vocab or cpu.vocab_size}, progress=False); "
        f"prepare(Path({config.source.corpus!r}), Path({str(data)!r}), "
        f"tokenizer=Path({str(tok / 'spm.model')!r}), progress=False)")])


def sizing_source(spec: GpuRunSpec, device: str, benched: dict[str, Any]) -> tuple[str, bool]:
    """Where the reference part's seconds per update come from, and whether it times the reference shapes first:
    an earlier run's jobs on this device ("stored": nothing timed), on another device ("scaled": this device's
    bench of the same shapes first, the bench part's where it ran), ``--tiny``'s caps ("caps": a check that the
    steps run), or this device's bench alone ("bench")."""
    if spec.plan_from is not None:
        source = "stored" if stored_reference(spec.plan_from)[1] == device else "scaled"
    else:
        source = "caps" if spec.tiny else "bench"
    timed = all((benched.get(k) or {}).get("status") == "ok"
                for k in ("reference", "reference step3", *(("body",) if spec.body else ())))
    return source, source in ("scaled", "bench") and not timed


def part_reference(run: Run, budget: float) -> dict[str, Any]:
    spec = run.spec
    found: dict[str, Any] = {"config": str(spec.config), "english": spec.english or "the config's",
                             "languages": ",".join(spec.languages), "seeds": ",".join(map(str, spec.seeds))}
    sizing = dict((run.figures["parts"].get("bench") or {}).get("sizing") or {})
    found["device"] = device_name(run.cuda)
    source, timing = sizing_source(spec, found["device"], sizing)
    found["sized_by"] = source
    if source == "stored":  # checked before any work (argument_problem); read with the config below
        sizing = {}
    elif source == "caps":
        sizing = {"tiny": True}
    elif timing:
        sizing = found["sizing"] = time_reference_shapes(run, time.monotonic() + min(budget, 300))
        if not all(sizing[k]["status"] == "ok" for k in sizing):
            return {**found, **skipped("the reference shapes could not be timed, so no run could be sized to the "
                                       "time left")}
    if "reference step3" in sizing:
        sizing["startup_s"] = startup_seconds(run, sizing["reference step3"])
    found["prepare"] = run.join("reference_prepare", run.left() - RESERVE_S)
    config = PipelineConfig.load(run.config_path)
    if spec.plan_from is not None:
        here = sizing if source == "scaled" else None
        if here is not None:
            found["sizing_here"] = here
        sizing = found["sizing"] = stored_sizing(spec.plan_from, found["device"], step3_shape(config), here=here)
    found["step2_init"] = step2_inits(config)
    beside = spec.body
    plan = found["plan"] = (plan_reference(run, config, sizing, body_beside=beside) if "reference step3" in sizing
                            else tiny_plan(run))
    if beside:
        found["body_prepare"] = run.join("body_prepare", run.left() - RESERVE_S)
    body = start_body(run, plan) if beside and found["body_prepare"]["status"] == "ok" else None
    if plan["train_s"] < 20 and not spec.tiny:
        found["pipeline"] = skipped(f"{plan['available_s']:.0f} s left: too little for {plan['jobs']} jobs")
    else:
        found["pipeline"] = run_pipeline(run, config, plan)
    found["results"] = pack_reference(run, Path(config.out))
    if body is not None:
        found["body"] = {**run.join("body", run.left() - 10), **pack_body(run, body)}
    ok = found["pipeline"]["status"] == "ok" and (not beside or (found.get("body") or {}).get("status") == "ok")
    return {**found, "status": "ok" if ok else "partial"}


def start_body(run: Run, plan: dict[str, Any]) -> Path:
    """The body of the CPU reference's shape, trained on this GPU beside the reference run (its own process)."""
    body = run.work / "bodies" / "run"
    ref = reference_shape(run)
    run.spawn("body", [sys.executable, "run_pretrain.py", "--variant", "base", "--preset", ref["body_preset"],
                       "--seq-len", str(ref["seq_len"]), "--ds-config", ref["body_ds"], "--data",
                       run.work / "bodies" / "en", "--out", body, "--steps", str(plan["body_steps"]),
                       "--save-every", str(plan["body_steps"]), "--log-every", str(max(1, plan["body_steps"] // 50))])
    return body


def run_pipeline(run: Run, config: PipelineConfig, plan: dict[str, Any]) -> dict[str, Any]:
    steps = plan["steps"]

    def sized(section: str) -> Any:
        settings, n = getattr(config, section), steps[section]
        return settings and replace(settings, steps=n, save_every=n if section != "step2" else max(1, n // 5),
                                    log_every=max(1, n // 20))

    config = replace(config, step1=sized("step1"), step1b=sized("step1b"), step2=sized("step2"),
                     step3=replace(config.step3, epochs=plan["epochs"]))
    write_config(run.config_path, config)
    code, output, seconds = run.sh("reference pipeline", [sys.executable, "-m", "ds_minimodel", "pipeline",
                                                          "--config", run.config_path], run.left() - 25)
    return {"exit_code": code, "seconds": seconds, "status": "ok" if code == 0 else (
        "timed out" if code is None else "failed"), **({} if code == 0 else {"error": output[-3000:]}),
        **in_updates(Path(config.out), seconds)}


def in_updates(out: Path, seconds: float) -> dict[str, Any]:
    """How much of the pipeline's ``seconds`` its jobs spent in training updates (each run's summary.json, written
    at its end), in all and per job: the share issue 47's target is about (75% of a device command's). With each
    job's whole seconds and those it spent writing checkpoints (where its summary has them), and what the jobs
    leave of the pipeline's seconds (the launch's start, data checks, Step 4, the analysis)."""
    from ds_minimodel.stages.cli import SUMMARY_FILE

    jobs, updates = {}, {}
    for summary in sorted(out.rglob(SUMMARY_FILE)):
        figures = read_json(summary)
        name = figures.get("run", str(summary.parent))
        jobs[name] = round(figures.get("update_seconds", 0.0), 2)
        updates[name] = {"updates": figures.get("step"), "seconds": figures.get("update_seconds", 0.0),
                         **{key: figures[key] for key in ("job_seconds", "save_seconds") if key in figures}}
    total = sum(jobs.values())
    whole = [job["job_seconds"] for job in updates.values() if "job_seconds" in job]
    outside = {"outside_jobs_s": seconds - sum(whole)} if whole and len(whole) == len(updates) else {}
    return {"update_seconds": total, "update_share": total / seconds if seconds else None, "job_updates_s": jobs,
            "job_updates": updates, "save_seconds": sum(job.get("save_seconds", 0.0) for job in updates.values()),
            **outside}


def pack_reference(run: Run, out: Path) -> dict[str, Any]:
    """results, tables, figures and every run's metrics of the reference run into one archive; its headline
    tables into the figures."""
    if not out.is_dir():
        return {"status": "missing"}
    names = ["results.json", "results.csv", "results_mean.csv"]
    with tarfile.open(run.out / "reference_gpu.tar.gz", "w:gz") as tar:
        tar.add(run.config_path, arcname="reference_gpu/config.json")
        for path in sorted(out.rglob("*")):
            rel = path.relative_to(out)
            if path.is_file() and (path.name in names or rel.parts[0] == "analysis"
                                   or path.name in ("metrics.jsonl", "run.json")):
                tar.add(path, arcname=str(Path("reference_gpu") / rel))
    tables = {p.stem: p.read_text(encoding="utf-8") for p in sorted((out / "analysis").glob("*.txt"))}
    return {"status": "ok" if (out / "results.json").is_file() else "partial", "tables": tables}


def pack_body(run: Run, run_dir: Path) -> dict[str, Any]:
    """The body's newest checkpoint as a model folder (weights and meta.json, no optimizer state), its tokenizer
    and metrics, in one tar split into parts of at most 15 MiB."""
    from ds_minimodel.train import checkpoint

    latest = checkpoint.latest_checkpoint(run_dir)
    if latest is None:
        return {"packed": False, "reason": "no checkpoint was written"}
    meta = checkpoint.load_meta(latest)
    folder = run.work / "bodies" / "model"
    shutil.rmtree(folder, ignore_errors=True)
    checkpoint.checkpoint_as_model_folder(latest, folder, tokenizer=run.work / "bodies" / "en" / "spm.model")
    archive = run.work / "bodies" / "body.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(folder, arcname="body/model")
        for path in (run_dir / "metrics.jsonl", run_dir / checkpoint.RUN):
            if path.is_file():
                tar.add(path, arcname=f"body/{path.name}")
    data = archive.read_bytes()
    parts = [data[i:i + PART_PIECE] for i in range(0, len(data), PART_PIECE)]
    for i, piece in enumerate(parts):
        (run.out / f"body.tar.part-{i:02d}").write_bytes(piece)
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()
               if line.startswith("{")] if (run_dir / "metrics.jsonl").is_file() else []
    last = next((m for m in reversed(metrics) if "loss" in m), {})
    return {"packed": True, "step": meta.step, "tokens": meta.tokens, "parts": len(parts),
            "bytes": len(data), "final_loss": last.get("loss"), "weights_sha256": meta.weights_sha256}
