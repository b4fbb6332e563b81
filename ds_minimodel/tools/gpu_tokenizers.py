"""The GPU reference run's tokenizers, trained on the CPU before a lease and carried to it.

Training them was most of the reference part's data preparation on the seventh lease (56.6 s on the H200's host for
the English and German folders, of which encoding is a few seconds; BENCHMARKS.md, "Tokenizers trained before the
lease"), and a reference part planned from an earlier run's jobs (``--plan-from``) has nothing to do meanwhile.
``scripts/gpu_prepare.py`` trains each of ``configs/reference_gpu.json``'s languages here, exactly as the pipeline's
``prepare`` would (``pipeline.plan.tokenizer_settings``), into ``.gpu/tokenizers/``; the reference part gives one to
its pipeline as that language's ``tokenizer`` only where the corpus is the very text it was trained on (size and
SHA-256) with the same settings, and trains as before otherwise (``--tiny``'s cut corpora, another ``--english``).

Each language whose Step 2 trains static vectors (a target's for FOCUS or WECHSEL, the source's for WECHSEL) gets
them here too, trained on its corpus prepared with its carried tokenizer (``<lang>.npz``, ``data.static_vectors``):
the GPU machine has no gensim (its wheel would not fit the 64 MiB that travel), and the vectors are the pipeline's
``static_vectors`` there, which it checks against the data it prepared (the same tokens on any machine).
"""
from __future__ import annotations

import shutil
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from ds_minimodel.config import file_sha256, read_json, write_json
from ds_minimodel.data.prepare import prepare, prepare_tokenizer
from ds_minimodel.errors import InputError
from ds_minimodel.pipeline.plan import tokenizer_settings
from ds_minimodel.pipeline.settings import PipelineConfig
from ds_minimodel.pipeline.step2_init import vector_languages
from ds_minimodel.tools.gpu_common import REPO, materialise

MANIFEST = "manifest.json"


def recorded_settings(config: PipelineConfig, corpus: Any) -> dict[str, Any]:
    """A corpus's tokenizer settings as the manifest records them (JSON values; the given tokenizer left out)."""
    return {k: v for k, v in tokenizer_settings(config, corpus).items() if k != "tokenizer"}


def train_carried(config_path: Path, english: Path | None, out: Path, *,
                  earlier: Path | None = None) -> dict[str, Any]:
    """Train the tokenizer of each of the config's languages that trains one (its source corpus ``english`` where
    given) into ``out``, with the manifest that ``carried`` checks; one that ``earlier`` (an earlier preparation's
    folder) holds for the same text and settings is copied instead. Returns the manifest."""
    config = PipelineConfig.load(config_path)
    manifest: dict[str, Any] = {}
    out.mkdir(parents=True, exist_ok=True)
    vectored = {c.lang for c in vector_languages(config)}
    with tempfile.TemporaryDirectory() as tmp:
        for corpus in [config.source, *config.targets]:
            settings = tokenizer_settings(config, corpus)
            if settings["tokenizer"] is not None:  # the config gives this language's tokenizer: nothing to train
                continue
            given = english if corpus is config.source and english is not None else REPO / corpus.corpus
            text = Path(materialise(Path(tmp), given))  # the bytes the lease's run will read
            model = carried(earlier, config, replace(corpus, corpus=str(text))) or prepare_tokenizer(
                text, Path(tmp) / corpus.lang, **settings)
            shutil.copy(model, out / f"{corpus.lang}.model")
            manifest[corpus.lang] = {"model": f"{corpus.lang}.model", "corpus": str(given),
                                     "corpus_bytes": text.stat().st_size, "corpus_sha256": file_sha256(text),
                                     "settings": recorded_settings(config, corpus)}
            if corpus.lang in vectored:
                own = replace(corpus, corpus=str(text), tokenizer=str(out / f"{corpus.lang}.model"))
                manifest[corpus.lang]["static_vectors"] = carry_vectors(config, own, Path(tmp), out, earlier)
    write_json(out / MANIFEST, manifest)
    return manifest


def carry_vectors(config: PipelineConfig, corpus: Any, tmp: Path, out: Path, earlier: Path | None) -> str:
    """``corpus`` (its carried tokenizer given) prepared as the pipeline prepares it, and the static vectors its Step
    2 would train on it, into ``out``; those of an earlier preparation where made from the same tokens. The file's
    name."""
    from ds_minimodel.data import static_vectors as sv
    from ds_minimodel.data.tokenizer import Tokenizer

    data, name = tmp / f"{corpus.lang}-data", f"{corpus.lang}.npz"
    prepare(Path(corpus.corpus), data, **tokenizer_settings(config, corpus), progress=False)
    settings = sv.StaticSettings(seed=config.seed, rare=config.step2.get("rare_vectors"))
    pieces = Tokenizer.load(corpus.tokenizer).pieces()
    if earlier is not None and (earlier / name).is_file():
        try:
            sv.train_static_vectors(data, pieces, settings, given=earlier / name)
            shutil.copy(earlier / name, out / name)
            return name
        except InputError:  # other tokens, or another rule for rare pieces: trained again
            pass
    vectors, known, record = sv.train_static_vectors(data, pieces, settings, cache=False)
    sv.keep_vectors(out / name, vectors, known, {k: v for k, v in record.items() if k != "data"})
    return name


def carried_vectors(folder: Path | None, config: PipelineConfig, corpus: Any) -> str | None:
    """The static vectors carried for ``corpus`` where its tokenizer is carried (``carried``: the same text and
    settings), None otherwise."""
    if carried(folder, config, corpus) is None:
        return None
    name = read_json(folder / MANIFEST)[corpus.lang].get("static_vectors")
    return str(folder / name) if isinstance(name, str) and (folder / name).is_file() else None


def carried(folder: Path | None, config: PipelineConfig, corpus: Any) -> str | None:
    """The carried tokenizer of ``corpus``'s language where it was trained on this very text with the settings the
    pipeline would train with now; None where there is none or it differs in any way."""
    if folder is None or not (folder / MANIFEST).is_file():
        return None
    entry = read_json(folder / MANIFEST).get(corpus.lang)
    text = Path(corpus.corpus)
    if not isinstance(entry, dict) or corpus.tokenizer is not None or not text.is_file():
        return None
    model = folder / str(entry.get("model"))
    same = (entry.get("settings") == recorded_settings(config, corpus) and model.is_file()
            and entry.get("corpus_bytes") == text.stat().st_size and entry.get("corpus_sha256") == file_sha256(text))
    return str(model) if same else None
