"""LibreOffice help pages read into paragraphs by id, and paired across languages."""
from __future__ import annotations

from ds_minimodel.data.help_pages import is_translation, page_paragraphs, parallel_paragraphs

PAGE = """<html><head><meta charset="utf-8"><title>Bereich</title></head><body>
<header><p>Hilfe für LibreOffice</p></header>
<div id="DisplayArea">
<h1 id="hd_1" dir="auto"><a name="x"></a>Bereich  einfügen</h1>
<p id="par_1" class="paragraph">Fügt einen <span class="emph">Bereich</span> ein.<br>Zweite Zeile.</p>
<p class="paragraph">Ohne id: kein Absatz.</p>
<p id="par_2"><span class="switchinline"><span hidden="true" id="CALC_1" class="CALC">Hintergrund</span><span hidden="true" id="default_1">Fläche</span></span> wählen &amp; bestätigen</p>
<div class="embedded"><h2 id="hd_2">Aus einer anderen Seite</h2><p id="par_3">Kopie.</p></div>
<table><tr><td><p id="par_4">In einer Zelle</p></td></tr></table>
<p id="par_5">   </p>
</div></body></html>"""


def test_a_page_is_its_identified_paragraphs_and_headings_in_order():
    assert page_paragraphs(PAGE) == {
        "hd_1": "Bereich einfügen",
        "par_1": "Fügt einen Bereich ein. Zweite Zeile.",  # a line break reads as a space
        "par_2": "Fläche wählen & bestätigen",   # the switch's default case, not the hidden Calc one
        "par_4": "In einer Zelle",
    }   # no header paragraph without an id, nothing of the embedded copy, no empty paragraph
    # inside an application, its case where the switch has one, the default case where it has none
    assert page_paragraphs(PAGE, case="CALC")["par_2"] == "Hintergrund wählen & bestätigen"
    assert page_paragraphs(PAGE, case="WRITER")["par_2"] == "Fläche wählen & bestätigen"


def test_only_real_translations_are_paired():
    assert not is_translation("Print Preview!", "print preview")
    assert not is_translation("Die function SUM Number1 Number2", "The function SUM Number1 Number2")  # 4 of 5
    assert is_translation("Fügt einen Bereich ein.", "Inserts a section.")
    german = {"a/b.html": {"p1": "Zelle leeren", "p2": "Calc", "p3": "nur deutsch"}, "a/c.html": {"p1": "Seite"}}
    english = {"a/b.html": {"p1": "Clear cell", "p2": "Calc"}, "z.html": {"p1": "x"}}
    assert parallel_paragraphs(german, english) == [("a/b.html#p1", "Zelle leeren", "Clear cell")]
