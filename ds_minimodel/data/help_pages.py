"""LibreOffice help pages as parallel text: the in-domain bilingual resource for WECHSEL's word lists.

The LibreOffice help ships in many languages from one source (Debian's ``libreoffice-help-<lang>`` packages), and
every paragraph and heading of a page carries the same ``id`` in every language, so a page and an id name one
paragraph and its translations. ``page_paragraphs`` reads one HTML page into ``{id: text}``; ``parallel_paragraphs``
pairs two languages' pages by path and id. ``scripts/make_help_lexicons.py`` aligns the pairs' words (eflomal) and
keeps the word pairs the alignment links often (``data.bilingual.lexicon_from_links``).

What a page counts as text: the ``<p>`` and ``<h1>``..``<h6>`` elements that have an ``id``, in page order.
Skipped: ``div.embedded`` blocks (copies of other pages' sections, read on their own page) and the hidden cases of
a switch (``<span hidden>``) but one: the default case, which is what a reader of the page sees, or, given a
``case`` (``CALC``, ``IMPRESS``, ...: ``MODULE_CASES`` names each application's), that case where the switch has
it, as the page reads inside that application. A line break (``<br>``) reads as a space.
"""
from __future__ import annotations

import re
from html.parser import HTMLParser

TEXT_TAGS = {"p", "h1", "h2", "h3", "h4", "h5", "h6"}
MODULE_CASES = {"scalc": "CALC", "swriter": "WRITER", "simpress": "IMPRESS", "sdraw": "DRAW", "smath": "MATH",
                "schart": "CHART", "sdatabase": "BASE", "sbasic": "BASIC"}
"""The switch case a page of each application's help folder shows inside that application."""
VOID_TAGS = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class _PageReader(HTMLParser):
    def __init__(self, case: str | None = None, cased: frozenset[str] = frozenset()) -> None:
        """``case``: the switch case to show where a switch has it; ``cased``: the switches (by their cases' id
        suffix) that have it, whose default case is then hidden."""
        super().__init__(convert_charrefs=True)
        self._case, self._cased = case, cased
        self.paragraphs: dict[str, str] = {}
        self._open: list[tuple[str, bool]] = []  # (tag, hides its content) for every open non-void element
        self._current: tuple[str, str, list[str]] | None = None  # (tag, id, text parts)

    def _hidden(self) -> bool:
        return any(hides for _, hides in self._open)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "br" and self._current is not None and not self._hidden():
            self._current[2].append(" ")
        if tag in VOID_TAGS:
            return
        a = dict(attrs)
        embedded = tag == "div" and "embedded" in (a.get("class") or "").split()
        span_id = a.get("id") or ""
        shown = (self._case is not None and a.get("class") == self._case) or (
            span_id.startswith("default") and span_id.removeprefix("default") not in self._cased)
        hidden_case = tag == "span" and "hidden" in a and not shown
        self._open.append((tag, embedded or hidden_case))
        if tag in TEXT_TAGS and a.get("id") and self._current is None and not self._hidden():
            self._current = (tag, a["id"], [])

    def handle_endtag(self, tag: str) -> None:
        if tag in VOID_TAGS:
            return
        # Close up to the matching open tag (help pages are well-formed; this also tolerates a stray end tag).
        for depth in range(len(self._open) - 1, -1, -1):
            if self._open[depth][0] == tag:
                del self._open[depth:]
                break
        if self._current is not None and tag == self._current[0]:
            _, pid, parts = self._current
            text = re.sub(r"\s+", " ", "".join(parts)).strip()
            if text and pid not in self.paragraphs:
                self.paragraphs[pid] = text
            self._current = None

    def handle_data(self, data: str) -> None:
        if self._current is not None and not self._hidden():
            self._current[2].append(data)


def page_paragraphs(html: str, case: str | None = None) -> dict[str, str]:
    """``{element id: text}`` of one help page, in page order (see the module's docstring for what counts); with
    ``case``, switches show that case where they have it."""
    cased = frozenset() if case is None else frozenset(
        m[1] for m in re.finditer(r'<span hidden="true" id="' + re.escape(case) + r'([^"]*)" class="' + re.escape(case)
                                  + '"', html))
    reader = _PageReader(case, cased)
    reader.feed(html)
    reader.close()
    return reader.paragraphs


def letters(text: str) -> str:
    return re.sub(r"[\W\d_]+", "", text.lower())


def is_translation(target: str, source: str) -> bool:
    """False for a paragraph left in the source language: equal to it but for case, spaces and punctuation, or with at
    least 80% of its words found in the source paragraph (a copied or half-translated string)."""
    if letters(target) == letters(source):
        return False
    words = re.findall(r"\w+", target.lower())
    source_words = set(re.findall(r"\w+", source.lower()))
    return not words or sum(w in source_words for w in words) < 0.8 * len(words)


def parallel_paragraphs(target_pages: dict[str, dict[str, str]], source_pages: dict[str, dict[str, str]]
                        ) -> list[tuple[str, str, str]]:
    """``(page#id, target text, source text)`` for every id that a page has in both languages and whose target text
    is a real translation (``is_translation``); pages are keyed by their path below ``text/``."""
    pairs = []
    for page in sorted(target_pages.keys() & source_pages.keys()):
        source = source_pages[page]
        for pid, text in target_pages[page].items():
            if pid in source and is_translation(text, source[pid]):
                pairs.append((f"{page}#{pid}", text, source[pid]))
    return pairs
