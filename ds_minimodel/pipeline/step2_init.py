"""Step 2's initialiser in a pipeline config: which one each target language starts from (``step2.init``, or auto),
and the check, before any work starts, that each has what it needs (gensim or given static vectors, a word list,
anyascii, enough text)."""
from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING

from ds_minimodel.data.bilingual import WordList, check_covered
from ds_minimodel.data.static_vectors import StaticSettings
from ds_minimodel.errors import InputError, require_file

if TYPE_CHECKING:
    from ds_minimodel.pipeline.settings import CorpusSettings, PipelineConfig, Step2Settings

AUTO_INIT = "auto"


def target_init(step2: Step2Settings, target: CorpusSettings | None) -> tuple[str, bool, str]:
    """(the initialiser ``target``'s Step 2 starts from, whether its word list anchors rows, why): ``step2.init`` and
    ``step2.word_anchors``, or under auto FOCUS, anchored by the target's word list where it has one (the dev sets:
    over the help-page lists FOCUS with anchors transferred to seven of eight languages, WECHSEL with them to six, at
    a level mean macro-F1, and both well ahead of WECHSEL alone; RESULTS.md "Word anchors"). ``target`` None: the
    source-relearn control's (never anchored; focus under auto: WECHSEL would align the source with itself)."""
    if step2.get("init") != AUTO_INIT:
        return step2.get("init"), bool(step2.word_anchors) and target is not None, "step2.init"
    if target is not None and target.word_list is not None:
        return "focus", True, f"auto: FOCUS with word anchors from its word list {target.word_list}"
    return "focus", False, ("auto: no word list, FOCUS needs only the target corpus; on dev FOCUS alone lifted none of "
                            "eight languages far from English 10 points over the majority class, with a word list's "
                            "anchors seven: give such a language one (targets[].word_list; "
                            "scripts/make_help_lexicons.py, scripts/make_dictionaries.py; RESULTS.md)")


def vector_languages(cfg: PipelineConfig) -> list[CorpusSettings]:
    """The languages whose Step 2 uses static vectors, given or trained: each target whose initialiser needs them,
    and the source where some target's aligns both languages' (WECHSEL)."""
    from ds_minimodel.model.embedding_init import STATIC_VECTORS, WORD_LIST, get_initialiser

    needs = {t.lang: get_initialiser(target_init(cfg.step2, t)[0]).needs for t in cfg.targets}
    aligned = any({STATIC_VECTORS, WORD_LIST} <= n for n in needs.values())
    return [cfg.source] * aligned + [t for t in cfg.targets if STATIC_VECTORS in needs[t.lang]]


def check_step2_init(cfg: PipelineConfig, source: str) -> None:
    """Each target's initialiser, with what it needs (``source``: the config file, for messages)."""
    from ds_minimodel.model.embedding_init import INITIALISERS, NEW_ROWS, STATIC_VECTORS, WORD_LIST, initialisers_that

    step2, init = cfg.step2, cfg.step2.get("init")
    choices = [*(name for name, entry in INITIALISERS.items() if entry.pipeline), AUTO_INIT]
    if init not in choices or step2.get("new_rows") not in NEW_ROWS:
        raise InputError(f"{source}: step2.init must be one of {', '.join(choices)} and step2.new_rows one of "
                         f"{', '.join(NEW_ROWS)}; got {init!r}, {step2.get('new_rows')!r}")
    recipes = {target.lang: target_init(step2, target) for target in cfg.targets}
    inits = {lang: init for lang, (init, _, _) in recipes.items()}
    static, listed = initialisers_that(need=STATIC_VECTORS), initialisers_that(need=WORD_LIST)
    translit, anchoring = initialisers_that(transliterate=True), initialisers_that(word_anchors=True)
    if step2.rare_vectors == "ngrams" and not set(inits.values()) <= set(static):
        raise InputError(f"{source}: step2.rare_vectors is drawn or ngrams, and ngrams works with init "
                         f"{' or '.join(static)} (their static vectors); got {step2.rare_vectors!r} with init "
                         f"{init!r}")
    if step2.transliterate and (not set(inits.values()) & set(translit)
                                or importlib.util.find_spec("anyascii") is None):
        raise InputError(f"{source}: step2.transliterate works with init {' or '.join(translit)} and needs "
                         f"anyascii (pip install anyascii); init is {init!r}")
    using = vector_languages(cfg)
    trained = [c.lang for c in using if c.static_vectors is None]
    if cfg.source_relearn and cfg.relearn_anchor is not None and target_init(step2, None)[0] in static:
        trained.append(f"{cfg.source.lang}, the anchored source-relearn control")
    if trained and importlib.util.find_spec("gensim") is None:
        raise InputError(f"{source}: step2.init {init} trains static vectors ({', '.join(trained)}) with gensim, "
                         "which is not installed (pip install gensim, or the package's [focus] extra; or give "
                         "each language its static_vectors)")
    from ds_minimodel.data.static_vectors import check_enough_text, check_given

    for target in [cfg.source, *cfg.targets]:
        if target.static_vectors is not None and not any(c is target for c in using):
            if target is cfg.source:
                aligning = " or ".join(name for name in listed if name in static)
                raise InputError(f"{source}: source.static_vectors are for a target's step2.init {aligning} (the "
                                 f"source's side of the alignment), not {init}")
            raise InputError(f"{source}: {target.lang}'s static_vectors are for a target's step2.init "
                             f"{' or '.join(static)}, not {inits[target.lang]}")
        if inits.get(target.lang) in static:
            require_file(target.corpus, "corpus", f"{source}: {target.lang}")
            check_enough_text(Path(target.corpus), f"{source}: {target.lang}'s init {inits[target.lang]}")
        if target.static_vectors is not None:
            check_given(target.static_vectors, target.corpus, StaticSettings(rare=step2.get("rare_vectors")),
                        f"{source}: {target.lang}'s static_vectors")
    if cfg.source.word_list is not None:
        raise InputError(f"{source}: source.word_list: a word list belongs to a target language")
    if init in listed and cfg.source_relearn:
        raise InputError(f"{source}: the source-relearn control (source_relearn) with step2.init {init} would "
                         "align the source language with itself; run it with an initialiser that needs no word list "
                         "(or auto)")
    for target in cfg.targets:
        anchored = recipes[target.lang][1]
        if anchored and inits[target.lang] not in anchoring:
            raise InputError(f"{source}: step2.word_anchors works with init {' or '.join(anchoring)}; "
                             f"{target.lang}'s init is {inits[target.lang]}")
        if (inits[target.lang] in listed or anchored) and target.word_list is None:
            needs = (f"step2.init {inits[target.lang]} needs a bilingual word list for every target language"
                     if not anchored else "step2.word_anchors needs a bilingual word list for every target language "
                     "(under init auto, only where it has one)")
            raise InputError(f"{source}: {needs}; {target.lang} has none (targets[].word_list)")
        if target.word_list is not None:
            if inits[target.lang] not in listed and not anchored:
                raise InputError(f"{source}: {target.lang}'s word_list is used by step2.init {' or '.join(listed)} "
                                 f"(or auto) or step2.word_anchors only, not {init}")
            words = WordList.read(target.word_list)
            if inits[target.lang] in listed:
                check_covered(words, Path(cfg.source.corpus), StaticSettings.dim)
