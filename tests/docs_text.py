"""The README and the documents under docs/, read once for the tests that hold them to the tool."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
DOCS = {path.name: path.read_text(encoding="utf-8") for path in sorted((ROOT / "docs").glob("*.md"))}
# The README first (its first bash block is the install block), then every document.
EVERYTHING = "\n\n".join([README, *DOCS.values()])


def section(document: str, heading: str) -> str:
    """The text under ``heading`` (a whole heading line) up to the next heading of the same level or above."""
    level = len(heading) - len(heading.lstrip("#"))
    after = DOCS[document].split(heading + "\n", 1)[1]
    out, fenced = [], False
    for line in after.split("\n"):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        stripped = line.lstrip("#")
        if not fenced and line.startswith("#") and stripped.startswith(" ") and len(line) - len(stripped) <= level:
            break
        out.append(line)
    return "\n".join(out)
