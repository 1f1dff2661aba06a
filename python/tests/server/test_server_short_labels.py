"""Annotation texts are short and most-important-first (issue 27 item 4): at most 40
characters whatever the sizes, the total first, then the activations, no zero segment, the
instance count last; the colour is the share of the same total, so texts alike are coloured
alike (a module's temporaries at the peak are in its hover, not its colour)."""

from memlens.server.annotations import annotate
from support.digests import CATS, F, digest, module

GiB = 1024**3
MAX_CHARS = 40


def by_line(anns):
    return {a.line + 1: a for a in anns}


def test_the_widest_numbers_fit_in_40_characters():
    wide = int(1023.94 * 1024**2)
    big = digest([
        module("", "Net", "", source_line=10, parameter=wide, optimizer_state=wide,
               activation=wide, at_parameter=wide),
        *[module(f"h.{i}", "Block", "h.*", source_line=30, constructed_line=12,
                 parameter=wide // 1000, activation=wide // 1000 + 1) for i in range(1000)],
    ], lines=[{"file": F, "line": 50, "bytesAtPeak": wide, "totalBytes": wide,
               "allocations": 1, "categories": {c: wide // 8 for c in CATS}}],
        peak=wide)
    anns = by_line(annotate(big, F, lambda n: False))
    assert anns[10].text == "≈ 3.0 GiB · 1023.9 MiB act"
    assert anns[30].text == "≈ 2.0 MiB · 1.0 MiB act ×1000"
    assert anns[50].text == "≈ 1023.9 MiB at peak (100.0%) · params"
    assert max(len(a.text) for a in anns.values()) <= MAX_CHARS


def test_no_zero_segment_and_a_module_of_temporaries_only_is_not_annotated():
    d = digest([
        module("", "Net", "", source_line=10, parameter=GiB, at_parameter=GiB),
        module("act", "ReLU", "act", constructed_line=12, at_temporary=GiB),  # nn.ReLU
    ], peak=2 * GiB)
    anns = by_line(annotate(d, F, lambda n: False))
    assert anns[10].text == "≈ 1.0 GiB"  # no "0 B act"
    assert 12 not in anns


def test_texts_alike_are_coloured_alike():
    # Two blocks with the same parameters and activations; one also holds temporaries at the
    # peak. The text says the same, and so does the colour.
    d = digest([
        module("", "Net", "", source_line=10, parameter=4 * GiB, at_parameter=4 * GiB),
        module("a", "A", "a", source_line=20, parameter=GiB, activation=GiB),
        module("b", "B", "b", source_line=30, parameter=GiB, activation=GiB,
               at_temporary=3 * GiB),
    ], peak=10 * GiB)
    anns = by_line(annotate(d, F, lambda n: False))
    assert anns[20].text == anns[30].text == "≈ 2.0 GiB · 1.0 GiB act"
    assert anns[20].share == anns[30].share == 0.2
