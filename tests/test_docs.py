"""The user docs (README.md, docs/*.md) stand alone: no file outside the repository, no internal notes; links
resolve; README's demo figures are docs/demo.md's; the paper's citation is the card's."""

import re
from pathlib import Path

import pytest

from elfreg.card import PAPER_BIBTEX, PAPER_URL

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
# references a reader cannot open: the project's internal notes, machine paths, sections of files outside the repo
OUTSIDE = [r"\bspec\s*§", r"\bthe spec\b", r"\bseeds?/\d", r"\bseeds? 0\d\d\b", r"reference facts", r"\bfacts §",
           r"\.\./shared", r"/work/", r"elf-reference-facts", r"(?<![\w-])ELF-REG\.md", r"house-style",
           r"shared/(spec|seeds|notes)"]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
DOC_PATH = re.compile(r"(?<![\w/.])((?:docs|configs|benchmarks|tests|src)/[\w./-]+\.(?:md|py|yaml|json|png))")


def _pages_ids():
    return [str(p.relative_to(REPO)) for p in PAGES]


@pytest.mark.parametrize("page", PAGES, ids=_pages_ids())
def test_no_doc_names_what_is_outside_the_repository(page):
    text = page.read_text(encoding="utf-8")
    for pattern in OUTSIDE:
        hits = [m.group(0) for m in re.finditer(pattern, text)]
        assert not hits, f"{page.name}: {pattern!r} -> {hits[:3]}"
    if page.name != "method.md":   # a § is docs/method.md's (or the paper's), said right before it
        for m in re.finditer("§", text):
            before = text[max(0, m.start() - 30):m.start()]
            assert "method.md" in before or "paper" in before, f"{page.name}: a § of what? ...{before}§"


@pytest.mark.parametrize("page", PAGES, ids=_pages_ids())
def test_links_and_named_files_are_in_the_repository(page):
    text = page.read_text(encoding="utf-8")
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):   # https:, mailto:
            continue
        assert (page.parent / target).resolve().is_relative_to(REPO), f"{page.name}: link {target} leaves the repo"
        assert (page.parent / target).exists(), f"{page.name}: link {target} does not exist"
    for name in DOC_PATH.findall(text):
        if "*" in name or "{" in name or name.startswith("docs/adaptive_exit"):
            continue
        assert (REPO / name).exists() or (REPO / "src" / "elfreg" / name).exists() or name.endswith(".png"), \
            f"{page.name}: names {name}, which is not in the repository"


def _pct(text: str) -> list[float]:
    return [float(x) for x in re.findall(r"(\d+(?:\.\d+)?) ± (\d+(?:\.\d+)?)", text) for x in x[:1]]


def row_head(demo: str) -> str:
    """The header row of docs/demo.md's table of what the defaults give."""
    return next(line for line in demo.splitlines() if line.startswith("| 16 NFE, mean ± std"))


def test_readme_demo_figures_are_docs_demo_md():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    demo = (REPO / "docs" / "demo.md").read_text(encoding="utf-8")
    row = next(line for line in demo.splitlines() if line.startswith("| early-stop (the goal's cell)"))
    cells = re.findall(r"(\d+\.\d) ± (\d+\.\d) %", row)   # ELF, ELF-REG native bf16; ELF, ELF-REG AVX2 fp32
    elf, reg, elf2, reg2 = cells
    said = re.search(r"\*\*ELF (\d+\.\d) ± (\d+\.\d) %, ELF-REG\s+(\d+\.\d) ± (\d+\.\d) %\*\*", readme)
    assert said and (said[1], said[2]) == elf and (said[3], said[4]) == reg
    # the AVX2 ELF-REG column predates the pairing of ELF-REG's draws with ELF's: README gives ELF's alone there
    avx2 = re.search(r"trains in fp32, ELF (\d+\.\d) ± (\d+\.\d) %", readme)
    assert avx2 and (avx2[1], avx2[2]) == elf2 and "AVX2 fp32 (before the pairing)" in row_head(demo)
    gap = re.search(r"ELF-REG is (\d+(?:\.\d+)?) points \*(below|above)\* ELF", readme)
    diff = round(float(elf[0]) - float(reg[0]), 1)
    assert gap and float(gap[1]) == abs(diff) and gap[2] == ("below" if diff > 0 else "above")
    # docs/demo.md says the same gap
    assert re.search(rf"ELF-REG is below ELF by {abs(diff)} points", demo)


def test_readme_and_method_cite_the_paper_as_the_card_does():
    for page in (REPO / "README.md", REPO / "docs" / "method.md"):
        text = page.read_text(encoding="utf-8")
        assert PAPER_BIBTEX in text and PAPER_URL in text, page.name


def _helps(parser):
    """The help text of a parser and of every subcommand below it."""
    import argparse

    yield parser.prog, parser.format_help()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _helps(sub)


def test_no_help_text_names_what_is_outside_the_repository():
    from elfreg.cli import build_parser

    for prog, text in _helps(build_parser()):
        for pattern in OUTSIDE:
            assert not re.search(pattern, text), f"{prog} --help: {pattern}"


def test_readme_demo_times_are_docs_demo_md():
    readme = " ".join((REPO / "README.md").read_text(encoding="utf-8").split())
    demo = (REPO / "docs" / "demo.md").read_text(encoding="utf-8")
    rows = [line for line in demo.splitlines() if line.startswith(("| native bf16", "| AVX2 only"))]
    # the "make demo in all" column of the CPU-class table: Intel native, Intel AVX2, AMD native, AMD AVX2
    times = [float(re.findall(r"\*\*(\d+\.\d) min\*\*", row)[0]) for row in rows]
    said = re.search(r"took (\d+(?:\.\d)?) minutes on an Intel CPU with native bf16 \(.*?; (\d+\.\d) on an AMD Zen 4\) "
                     r"and (\d+\.\d) minutes with AVX2-only kernels \((\d+\.\d) on the AMD", readme)
    assert said and len(times) == 5
    for text, value in zip((said[1], said[3], said[2], said[4]), times):
        places = len(text.partition(".")[2])
        assert float(text) == round(value, places), (text, value)
    # the last row: this version timed again, what it ran and its accuracies
    again = re.search(r"ran two \((\d+\.\d) minutes; ELF (\d+\.\d) %, ELF-REG (\d+\.\d) %\)", readme)
    accs = re.findall(r"\*\*(\d+\.\d) ± [\d.]+ / (\d+\.\d) ± [\d.]+ %\*\*", rows[-1])
    assert again and accs and "2 training seeds" in rows[-1]
    assert (float(again[1]), again[2], again[3]) == (times[-1], *accs[0])
