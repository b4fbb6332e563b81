"""The pipeline's plan: its jobs (prepare, Step 1 and 1b, Step 2 per target language, Step 3 per task and seed,
Step 4), the folders they write, what each needs and how it runs. Step 4's scoring is ``step4.py``; the command is
``command.py`` (``ds-minimodel pipeline``).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ds_minimodel.config import write_json
from ds_minimodel.data.prepare import prepare, prepare_tokenizer, tokenizer_path
from ds_minimodel.data.shards import META_FILE, read_meta
from ds_minimodel.ds_config import load_ds_config, resolve_batch
from ds_minimodel.errors import InputError
from ds_minimodel.model.embedding_init import WORD_LIST, get_initialiser
from ds_minimodel.model.surgery import extract_minijoint_folder
from ds_minimodel.pipeline import step4
from ds_minimodel.pipeline.launching import finished, train_step
from ds_minimodel.pipeline.ownership import PRETRAIN_FOLDER, PRETRAIN_RUN, STEP2_FOLDER, step2_run
from ds_minimodel.pipeline.sections import Section
from ds_minimodel.pipeline.settings import RELEARN_SUFFIX, PipelineConfig, check, task_finetuning
from ds_minimodel.pipeline.source_model import (
    SOURCE_MODEL_RECORD,
    GivenModel,
    case_folded,
    check_recorded,
    given_primary,
)
from ds_minimodel.pipeline.step2_init import AUTO_INIT, target_init
from ds_minimodel.pipeline.stopping import raise_if_stopped
from ds_minimodel.pipeline.workers import end_shared_launch
from ds_minimodel.systems import Depths, Step, get_primary, get_system, mini_name, mini_system
from ds_minimodel.train import checkpoint

PASSES_NOTED = 50
"""Step 2 reading its target's corpus this many times or more is said before it starts (``Pipeline._note_passes``)."""


def tokenizer_settings(cfg: PipelineConfig, corpus: Any, given: Any = None) -> dict[str, Any]:
    """``prepare_tokenizer``'s settings for one of ``cfg``'s corpora (the source or a target), with ``given`` the
    source model where the config names one (its own tokenizer reads the source text)."""
    tokenizer = corpus.tokenizer
    if corpus is cfg.source and given is not None:
        tokenizer = given.tokenizer["path"]
    return {"vocab_size": corpus.vocab_size or cfg.vocab_size, "character_coverage": corpus.character_coverage,
            "tokenizer": None if tokenizer is None else Path(tokenizer),
            "lowercase": tokenizer is None and case_folded(corpus.lowercase, given), "fit_vocab": cfg.fit_vocab}


@dataclass(frozen=True)
class Job:
    """One unit of the pipeline that can run on its own (one batch job under Slurm), after the jobs it needs."""

    step: Step
    what: str = ""
    """The primary (Steps 1 and 3), the system (Steps 1b and 2), or ``mini-<system>`` (Step 3) it is for."""
    pretrain_seed: int | None = None
    """A further pretraining run's seed (``pretrain_seeds``), None for the main run."""
    after: tuple[str, ...] = ()
    array: tuple[str, ...] = ()
    """Step 2 only: the target languages, one run each (one task of a Slurm job array)."""
    step2_seed: int | None = None
    """Step 2 only: a further Step-2 run's seed (``step2_seeds``), None for the main run's."""

    @property
    def name(self) -> str:
        """``step2-minijoint``, ``step1-base.seed2``, ``step2-minipost.step2-seed3``, ``prepare``: the name ``--only``
        and Slurm know it by."""
        seed = "" if self.pretrain_seed is None else f"{PRETRAIN_RUN}{self.pretrain_seed}"
        return f"{self.step}{'-' if self.what else ''}{self.what}{seed}{step2_run(self.step2_seed)}"

    @property
    def trains(self) -> bool:
        """False for data preparation and Step 4 (no training ranks: one process)."""
        return self.step not in (Step.PREPARE, Step.TRANSFER)


class Pipeline:
    """The method's steps as a plan of jobs over one config; every path of every step's output is decided here.

    ``jobs()`` lists them in an order that satisfies their dependencies; ``run(job)`` runs one, after checking that
    what it needs is finished. ``run_all`` is the whole method in one process; ``pipeline.submit`` makes one
    Slurm job of each.
    """

    def __init__(self, cfg: PipelineConfig, source_path: str, *, launcher: str = "deepspeed", verbose: bool = False,
                 pretrain_seed: int | None = None) -> None:
        """``pretrain_seed``: one of the config's ``pretrain_seeds``, a further pretraining run, planned by the main
        pipeline (which checks the config once) in ``<out>/pretrain-seed<k>/`` with job names ending ``.seed<k>``."""
        self.cfg, self.source_path, self.launcher, self.verbose = cfg, source_path, launcher, verbose
        self.seeds = cfg.step3.seeds
        """Step 3's finetuning seeds (each task's settings: ``task_finetuning``)."""
        self.given: GivenModel | None = None
        """``source.model``, read and checked once (None: Step 1 pretrains every primary)."""
        if pretrain_seed is None:
            self.given = check(cfg, source_path, world_size=None if launcher == "srun" else cfg.ranks)
        self.root = Path(cfg.out)
        """The pipeline's output folder: the main run's, and where the shared data and the results are."""
        self.seed = cfg.seed if pretrain_seed is None else pretrain_seed
        self.pretrain_seed = pretrain_seed
        self.suffix = "" if pretrain_seed is None else f"{PRETRAIN_RUN}{pretrain_seed}"
        self.out = self.root if pretrain_seed is None else self.root / f"{PRETRAIN_FOLDER}{pretrain_seed}"
        self.log_root = self.root / "tensorboard"
        self.extra_runs = {} if pretrain_seed is not None else {
            k: Pipeline(cfg, source_path, launcher=launcher, verbose=verbose, pretrain_seed=k)
            for k in cfg.pretrain_seeds}
        self.languages = [c.lang for c in [self.cfg.source, *self.cfg.targets]]
        self.primaries = cfg.primaries()
        self.relearn_lang = f"{self.cfg.source.lang}{RELEARN_SUFFIX}"
        """The source-relearn control's name where a target language's would stand (runs, results)."""
        if pretrain_seed is None:
            check_recorded(self.source_model_record(), self.given, self.step1_dir(given_primary()), source_path)

    # -- the plan
    def _job(self, step: Step, what: str = "", **kw: Any) -> Job:
        return Job(step, what, self.pretrain_seed, **kw)

    def job_name(self, step: Step, what: str, *, step2_seed: int | None = None) -> str:
        """The name of this run's job of ``step`` for ``what`` (Step 2: of the further Step-2 run ``step2_seed``)."""
        return self._job(step, what, step2_seed=step2_seed).name

    def body_job(self, system: str) -> str:
        entry = get_system(system)
        return self.job_name(entry.body_step, system if entry.step1b else entry.primary)

    def jobs(self) -> list[Job]:
        """Every job, in an order that satisfies their dependencies. A config with no task plans no Step 3 and no
        Step 4: the pipeline learns the target languages' embeddings and ends (``ends_at_step2``)."""
        jobs = [Job(Step.PREPARE), *self._training_jobs()]
        for run in self.extra_runs.values():
            jobs += run._training_jobs()
        if not self.ends_at_step2:
            jobs.append(Job(Step.TRANSFER, after=tuple(j.name for j in jobs
                                                         if j.step in (Step.ADAPT, Step.FINETUNE))))
        return jobs

    @property
    def ends_at_step2(self) -> bool:
        """No task in the config: nothing to finetune or score, the target embeddings are what the run makes."""
        return not self.cfg.tasks

    def _training_jobs(self) -> list[Job]:
        """Steps 1-3 of this pretraining run (job names end with its suffix: none for the main run)."""
        targets, main = tuple(t.lang for t in self.cfg.targets), self.pretrain_seed is None
        step1 = {v: self._job(Step.PRETRAIN, v, after=(Job(Step.PREPARE).name,)) for v in self.primaries}
        jobs = list(step1.values())
        jobs += [self._job(Step.MINIPOST, s, after=(step1[get_system(s).primary].name,))
                 for s in self.cfg.systems if get_system(s).step1b]
        relearn = (self.relearn_lang,) if main else ()  # the controls: the main run only
        jobs += [self._job(Step.ADAPT, s, after=(self.body_job(s),),
                           array=targets + (relearn if s in self.cfg.source_relearn else ())) for s in self.cfg.systems]
        jobs += [self._job(Step.ADAPT, s, after=(self.body_job(s),), array=targets, step2_seed=k)
                 for k in (self.cfg.step2_seeds if main else ()) for s in self.cfg.systems]
        if self.ends_at_step2:
            return jobs
        jobs += [self._job(Step.FINETUNE, v, after=(step1[v].name,)) for v in self.primaries]
        jobs += [self._job(Step.FINETUNE, mini_name(s), after=(self.body_job(s),))
                 for s in (self.cfg.source_minis if main else ())]
        return jobs

    def job(self, name: str) -> Job:
        if (job := next((j for j in self.jobs() if j.name == name), None)) is not None:
            return job
        why = " (it names no task: Steps 3 and 4 have nothing to do)" if self.ends_at_step2 and name.startswith(
            (Step.FINETUNE, Step.TRANSFER)) else ""
        raise InputError(f"{self.source_path}: no job {name!r} in this pipeline{why}; its jobs are "
                         + ", ".join(j.name for j in self.jobs()))

    def step2_runs(self) -> list[tuple[Pipeline, int | None]]:
        """Every Step-2 run of the plan as (its pretraining run, its Step-2 seed or None): the main one, each further
        Step-2 run (``step2_seeds``) over the main body, and each further pretraining run's (``pretrain_seeds``)."""
        return [(self, k) for k in (None, *self.cfg.step2_seeds)] + [(run, None) for run in self.extra_runs.values()]

    def finetuned(self) -> list[str]:
        """What Step 3 finetunes: every primary, then (the main run) ``mini-<system>`` for each of ``source_minis``."""
        return [*self.primaries, *(mini_name(s) for s in (self.cfg.source_minis if not self.suffix else ()))]

    # -- where everything is
    def data_dir(self, lang: str) -> Path:
        return self.root / "data" / lang

    def step1_dir(self, variant: str) -> Path:
        return self.out / Step.PRETRAIN / variant

    def step1b_dir(self, system: str) -> Path:
        return self.out / Step.MINIPOST / system

    def step2_dir(self, lang: str, system: str, step2_seed: int | None = None) -> Path:
        """The Step-2 run of ``system`` in ``lang``: the main run's, or the further Step-2 run ``step2_seed``'s."""
        return self.out / (Step.ADAPT if step2_seed is None else f"{STEP2_FOLDER}{step2_seed}") / lang / system

    def step3_dir(self, task: str, variant: str, seed: int) -> Path:
        return self.out / Step.FINETUNE / task / variant / f"seed{seed}"

    def mini_dir(self, system: str) -> Path:
        """Where the mini-model of a system with a ``mini`` body is cut out of its primary, for ``source_minis``."""
        return self.out / "minis" / system

    def source_model_record(self) -> Path:
        return self.out / Step.PRETRAIN / SOURCE_MODEL_RECORD

    def _data(self, lang: str, needed_by: str) -> Path:
        folder = self.data_dir(lang)
        if not (folder / META_FILE).is_file():
            raise InputError(f"{needed_by} needs the prepared {lang} data in {folder}; run the prepare job first")
        return folder

    def finished_run(self, run_dir: Path, job: str, needed_by: str) -> Path:
        """The last checkpoint of job ``job``'s finished run in ``run_dir``; refused, naming ``needed_by``, when the run
        is not finished."""
        if not finished(run_dir):
            raise InputError(f"{needed_by} needs the finished run in {run_dir}; run the {job} job first")
        return checkpoint.latest_checkpoint(run_dir)

    def _primary(self, variant: str, needed_by: str) -> Path:
        """The model of primary ``variant``: Step 1's final checkpoint, or, for the one ``source.model`` gives, that
        model (a bare encoder: the checkpoint of the job that trained its head)."""
        job = self.job_name(Step.PRETRAIN, variant)
        if self.given is None or variant != given_primary():
            return self.finished_run(self.step1_dir(variant), job, needed_by)
        if not self.source_model_record().is_file():
            raise InputError(f"{needed_by} needs the given source model recorded in {self.source_model_record()}; "
                             f"run the {job} job first")
        if self.given.needs_head:
            return self.finished_run(self.step1_dir(variant), job, needed_by)
        return Path(self.given.path)

    def _body(self, system: str, needed_by: str) -> Path:
        """What ``system``'s Step 2 trains over: Step 1b's output, or its primary's model."""
        if get_system(system).step1b:
            return self.finished_run(self.step1b_dir(system), self.body_job(system), needed_by)
        return self._primary(get_system(system).primary, needed_by)

    # -- running
    def run_all(self) -> dict[str, Any]:
        summary: dict[str, Any] = {}
        for job in self.jobs():
            for value in job.array or (None,):
                summary = self.run(job.name, value)
        return summary

    def checked_job(self, name: str, value: str | None = None) -> Job:
        """Job ``name``, refused if it does not exist or does not run for ``value`` (a Step-2 job's language)."""
        job = self.job(name)
        if job.array and value is not None and value not in job.array:
            raise InputError(f"{self.source_path}: {name} runs for {', '.join(job.array)}; not for {value!r}")
        return job

    def run(self, name: str, value: str | None = None) -> dict[str, Any]:
        """Run job ``name`` (for Step 2: for the target language ``value``, or all of them when None)."""
        job = self.checked_job(name, value)
        if job.step == Step.PREPARE:
            return self._prepare()
        if job.step == Step.TRANSFER:
            end_shared_launch()
            return step4.transfer(self)
        run = self if job.pretrain_seed is None else self.extra_runs[job.pretrain_seed]
        if job.step == Step.PRETRAIN:
            run._step1(job.what)
        elif job.step == Step.MINIPOST:
            run._step1b(job.what)
        elif job.step == Step.ADAPT:
            for lang in [value] if value is not None else job.array:
                run._step2(job.what, lang, job.step2_seed)
        else:
            run._step3(job.what)
        return {}

    def _train(self, section: Section, run_dir: Path, run_name: str, job: dict[str, Any], *,
               leave_out: tuple[str, ...] = ()) -> None:
        """One training job: its spec, ``section``'s values (but ``leave_out``) and the plan's ``job`` values."""
        name = run_name + self.suffix
        spec_file = self.root / "specs" / f"{name}.json"
        spec = section.spec(f"{spec_file} (the pipeline's settings)", leave_out=leave_out, **job, out=run_dir,
                            log_root=self.log_root, run_name=name)
        train_step(spec, spec_file, self.cfg.ranks, self.launcher, verbose=self.verbose,
                   log=self.root / "logs" / f"{name}.log")

    def _prepare(self) -> dict[str, Any]:
        """Every language's tokenizer first, the smallest corpus's first (a corpus that cannot give its vocabulary
        is refused within seconds, before the other tokenizers and any encoding), then every corpus encoded."""
        settings = {}
        for corpus in sorted([self.cfg.source, *self.cfg.targets], key=lambda c: Path(c.corpus).stat().st_size):
            settings[corpus.lang] = tokenizer_settings(self.cfg, corpus, self.given)
            if settings[corpus.lang]["lowercase"] and corpus.lowercase is None:
                print(f"[pipeline] {corpus.lang}: its tokenizer case-folds text, as source.model's does (an uncased "
                      f"model; \"lowercase\": false in its corpus settings keeps case)", flush=True)
            prepare_tokenizer(Path(corpus.corpus), self.data_dir(corpus.lang), **settings[corpus.lang])
        for corpus in [self.cfg.source, *self.cfg.targets]:
            prepare(Path(corpus.corpus), self.data_dir(corpus.lang), **settings[corpus.lang])
            raise_if_stopped(f"{corpus.lang}'s data is whole: run the pipeline again to continue")
        return {}

    def _common(self, job: str) -> dict[str, Any]:
        return {"seq_len": self.cfg.seq_len, "seed": self.seed, "data": self._data(self.cfg.source.lang, job)}

    def _step1(self, variant: str) -> None:
        if self.given is not None and variant == given_primary():
            self._step1_given(variant)
            return
        one_head = get_primary(variant).aux_head_layer(Depths()) is None  # step1.aux_weight: MiniJoint's alone
        self._train(self.cfg.step1, self.step1_dir(variant), f"{Step.PRETRAIN}-{variant}",
                    {"variant": variant, "aux_layer": self.cfg.aux_layer, "small_layers": self.cfg.small_layers,
                     "preset": self.cfg.preset, "model_config": self._model_file(),
                     **self._common(self.job_name(Step.PRETRAIN, variant))},
                    leave_out=("aux_weight",) * one_head)

    def _model_file(self) -> Path | None:
        """The config's ``model`` fields as the file Step 1's spec names, under a name of their content's hash: other
        fields give another file, which the check of a finished run's settings sees as a change."""
        if self.cfg.model is None:
            return None
        text = json.dumps(self.cfg.model, sort_keys=True)
        path = self.root / "specs" / f"model-{hashlib.sha256(text.encode()).hexdigest()[:12]}.json"
        if not path.is_file():
            path.parent.mkdir(parents=True, exist_ok=True)
            write_json(path, self.cfg.model)
        return path

    def _step1_given(self, variant: str) -> None:
        """Step 1 of the primary ``source.model`` gives: its record first (``check_recorded`` reads it), then for a bare
        encoder its MLM head trained (``run_head.py``: body and embeddings frozen) in ``step1/<variant>``."""
        job = self.job_name(Step.PRETRAIN, variant)
        if not self.source_model_record().is_file():  # else the same record: check_recorded compared them
            self.source_model_record().parent.mkdir(parents=True, exist_ok=True)
            write_json(self.source_model_record(), self.given.to_record())
        if not self.given.needs_head:
            print(f"[pipeline] {job}: given, {self.given.path} (weights {self.given.weights_sha256[:12]}); "
                  "nothing to pretrain", flush=True)
            return
        self._train(self.cfg.head, self.step1_dir(variant), job, {"from_": self.given.path, **self._common(job)})

    def _step1b(self, system: str) -> None:
        """Step 1b of ``system``: its primary's bottom layers, new layers trained on top (``run_minipost.py``)."""
        job, entry = f"{Step.MINIPOST}-{system}", get_system(system)
        base, own = self._primary(entry.primary, job), entry.depths_of(self.cfg.depths())
        self._train(self.cfg.step1b, self.step1b_dir(system), job,
                    {"from_": base, "keep_layers": own.keep, "new_layers": own.new, **self._common(job)})

    def _step2(self, system: str, lang: str, step2_seed: int | None = None) -> None:
        """Step 2 for one system and target language (with ``step2_seed``: that further Step-2 run's, with that seed
        over the same body); every checkpoint is kept for Step 4."""
        job = self.job_name(Step.ADAPT, system, step2_seed=step2_seed)
        needed_by = f"{job} ({lang})"
        body = self._body(system, needed_by)
        relearn = lang == self.relearn_lang
        data = self._data(self.cfg.source.lang if relearn else lang, needed_by)
        target = None if relearn else next(t for t in self.cfg.targets if t.lang == lang)
        init, anchors, why = target_init(self.cfg.step2, target)
        anchored: dict[str, Any] = {}
        if relearn and self.cfg.relearn_anchor is not None:  # copies what the anchor language would copy
            anchored = {"shared_with": str(tokenizer_path(self._data(self.cfg.relearn_anchor, needed_by)))}
        elif relearn:
            init = "specials"
        entry = get_initialiser(init)
        if WORD_LIST in entry.needs:  # (no source-relearn control with such an init: PipelineConfig.check refuses it)
            anchored = {"word_list": target.word_list, "source_data": str(self._data(self.cfg.source.lang, needed_by)),
                        **({"source_static_vectors": self.cfg.source.static_vectors}
                           if self.cfg.source.static_vectors else {})}
        if anchors:  # (a target without a list is refused at load, but under init auto, which anchors none there)
            anchored.update(word_list=target.word_list, word_anchors=True)
        if target is not None and target.static_vectors is not None:  # (only with an init that uses them: load)
            anchored["static_vectors"] = target.static_vectors
        if self.cfg.step2.get("init") == AUTO_INIT:
            print(f"[pipeline] {job} {lang}: init {init} ({why})", flush=True)
        run_dir = self.step2_dir(lang, system, step2_seed)
        if not relearn and not finished(run_dir):
            self._note_passes(job, lang, data)
        self._train(self.cfg.step2, run_dir, f"{Step.ADAPT}-{lang}-{system}{step2_run(step2_seed)}",
                    {"system": system, "body": body, "data": data, **anchored, "init": init, "lang": lang,
                     "seq_len": self.cfg.seq_len, "seed": self.seed if step2_seed is None else step2_seed},
                    leave_out=("init", *entry.unused_options, *("word_anchors",) * (not anchors)))

    def _note_passes(self, job: str, lang: str, data: Path) -> None:
        """Before a Step 2 (of job ``job``) that reads its target's corpus ``PASSES_NOTED`` times or more, say so: on
        test, Hindi's 0.39 MB read 95 times lost 6 points through Step 2 where Chinese's 1.47 MB read 16 times gained
        14 (RESULTS.md)."""
        meta = read_meta(data / META_FILE)
        if meta is None or not meta.get("num_tokens"):
            return
        ds_config = self.cfg.step2.get("ds_config")
        try:  # the global batch as the run will have it (the check before any work refused a config that has none)
            batch = resolve_batch(load_ds_config(ds_config), self.cfg.ranks, source=ds_config).global_batch
        except InputError:  # under srun the allocation decides the world size: a note is never an error
            return
        steps, tokens = self.cfg.step2.get("steps"), meta["num_tokens"]
        passes = steps * batch * self.cfg.seq_len / tokens
        if passes >= PASSES_NOTED:
            print(f"[pipeline] {job} {lang}: {steps:,} updates of {batch} x "
                  f"{self.cfg.seq_len} tokens read {lang}'s {tokens:,} tokens up to {passes:.0f} times over; on test, "
                  "Hindi's 0.39 MB read 95 times scored lower after Step 2 than before it (RESULTS.md): check a "
                  "shorter Step 2 on dev", flush=True)

    def _mini_model(self, system: str) -> Path:
        """The model a ``source_minis`` system's Step 2 trains over: Step 1b's output, or (a ``mini`` body) the layers
        below its primary's second head and that head, cut out once into ``mini_dir``."""
        job = self.job_name(Step.FINETUNE, mini_name(system))
        body = self._body(system, job)
        if get_system(system).step1b:
            return body
        folder = self.mini_dir(system)
        if not (folder / checkpoint.META).is_file():  # meta.json is written last: its absence means not done
            extract_minijoint_folder(body, folder)
        return folder

    def _step3(self, variant: str) -> None:
        """Step 3 for a primary (or ``mini-<system>``, a system's mini-model): each task and seed, embeddings frozen."""
        source = self.cfg.source.lang
        if (system := mini_system(variant)) is not None:
            primary = self._mini_model(system)
        else:
            primary = self._primary(variant, self.job_name(Step.FINETUNE, variant))
        for task in self.cfg.tasks:
            own = task_finetuning(self.cfg.step3, task)
            for seed in self.seeds:
                self._train(own, self.step3_dir(task.name, variant, seed),
                            f"{Step.FINETUNE}-{task.name}-{variant}-seed{seed}",
                            {"model": primary, "task": task.name, "format": task.format, "train": task.train,
                             "dev": task.dev.get(source), "dev_format": task.eval_format, "language": source,
                             "seed": seed})
