"""Each benchmark owns one "## ..." section of benchmarks/README.md and rewrites only it."""

from __future__ import annotations

from pathlib import Path

README = Path(__file__).resolve().parent / "README.md"


def write_section(heading: str, text: str, readme: Path = README, after: str | None = None) -> None:
    """Replace the section that starts with the line `heading` (up to the next "## ",
    or to the first "### " subsection that `text` does not make),
    or add it at the end (or, given `after`, right after the section whose heading line
    starts with it); every other section is left as it is."""
    old = readme.read_text() if readme.exists() else "# Benchmarks\n"
    lines = old.splitlines(keepends=True)
    if not text.endswith("\n"):
        text += "\n"
    start = next((i for i, line in enumerate(lines) if line.rstrip("\n") == heading), None)
    if start is None and after is not None:
        at = next((i for i, line in enumerate(lines) if line.startswith(after)), None)
        if at is not None:
            start = next((i for i in range(at + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
            readme.write_text("".join(lines[:start]) + text + "\n" + "".join(lines[start:]))
            return
    if start is None:
        readme.write_text(old + ("" if old.endswith("\n") else "\n") + "\n" + text)
        return
    # Up to the next "## ", or to the first "### " the new text does not make: subsections
    # written by hand under a generated section (findings, later runs) are kept.
    made = {line.rstrip("\n") for line in text.splitlines() if line.startswith("### ")}
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")
                or (lines[i].startswith("### ") and lines[i].rstrip("\n") not in made)), len(lines))
    tail = lines[end:]
    readme.write_text("".join(lines[:start]) + text + ("\n" if tail else "") + "".join(tail))
