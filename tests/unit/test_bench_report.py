"""``bench/report.py`` rewrites docs/benchmarks.md but keeps the scale section that
``bench/scale_report.py`` wrote, byte for byte (a temporary file; the body is given, so no
benchmark result is read and no plot is drawn)."""

from __future__ import annotations

from pathlib import Path

from shardline.bench.report import SCALE_BEGIN, SCALE_END, keep_scale_section, write_report

SECTION = (f"{SCALE_BEGIN}\n## 6. Scale\n\n| stage | k |\n|:--|--:|\n| `plan` | 0.02 |\n\n"
           f"{SCALE_END}")


def test_a_rewrite_keeps_the_scale_section_as_it_was(tmp_path: Path) -> None:
    doc = tmp_path / "benchmarks.md"
    doc.write_text(f"# Benchmarks\n\nold loader table\n\n{SECTION}\n")
    write_report(doc, body="# Benchmarks\n\nnew loader table\n")
    text = doc.read_text()
    assert text == f"# Benchmarks\n\nnew loader table\n\n{SECTION}\n"
    write_report(doc, body="# Benchmarks\n\nnew loader table\n")     # a second rewrite
    assert doc.read_text() == text


def test_the_section_stays_in_place_when_the_template_has_markers() -> None:
    old = f"intro\n\n{SECTION}\n\nold tail\n"
    new = f"intro 2\n\n{SCALE_BEGIN}\nplaceholder\n{SCALE_END}\n\nnew tail\n"
    assert keep_scale_section(old, new) == f"intro 2\n\n{SECTION}\n\nnew tail\n"


def test_without_a_complete_section_the_rewrite_is_the_template_alone(tmp_path: Path) -> None:
    assert keep_scale_section("no section here\n", "new\n") == "new\n"
    assert keep_scale_section(f"{SCALE_BEGIN}\nhalf a section\n", "new\n") == "new\n"
    doc = tmp_path / "missing" / "benchmarks.md"              # no file yet
    write_report(doc, body="# Benchmarks\n")
    assert doc.read_text() == "# Benchmarks\n"
