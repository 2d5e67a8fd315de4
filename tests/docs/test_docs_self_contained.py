"""What holds across every document: the docs name only counters that exist, and neither the
docs nor the package point a reader at a file they do not have (the project's working notes
outside the repository)."""

from __future__ import annotations

import re
from pathlib import Path

from docskit import DOCS, ROOT, read  # type: ignore[import-not-found]

from btlcore.protocol.stats import MODULE_COUNTERS, PEER_COUNTERS


def test_docs_name_no_counter_that_does_not_exist() -> None:
    known = set(PEER_COUNTERS) | set(MODULE_COUNTERS)
    for doc in ("api.md", "protocol.md", "backends.md"):
        named = set(re.findall(r"\b(num_[a-z_]+|max_(?:send|recv)_window)\b", read(doc)))
        assert named <= known, f"{doc} names unknown counters {sorted(named - known)}"


# A reader of the docs or a user of the package has the repository, never the notes the
# project was written from: a citation is to an RFC, a paper or a named source file.
_OUTSIDE = re.compile(r"shared/|PROTOCOL-NOTES|\[N§")
_TEXT = {".md", ".py", ".pyi", ".toml", ".txt", ".cfg", ".ini", ".sh", ".json", ".yaml", ".yml", ".rst"}
_SKIP = {"__pycache__", "build", "dist", ".venv", ".git"}


def _shipped_text_files() -> list[Path]:
    files = [ROOT / "README.md", ROOT / "pyproject.toml"]
    files += sorted(DOCS.rglob("*"))
    for top in ("btlcore", "backends", "plugins", "benchmarks"):
        if (ROOT / top).is_dir():
            files += sorted((ROOT / top).rglob("*"))
    return [p for p in files
            if p.is_file() and p.suffix in _TEXT
            and not any(part in _SKIP or part.endswith(".egg-info") for part in p.relative_to(ROOT).parts)]


def test_no_doc_or_package_file_points_outside_the_repository() -> None:
    files = _shipped_text_files()
    assert any(p.name == "protocol.md" for p in files) and any(p.suffix == ".py" for p in files)
    offenders = []
    for path in files:
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if _OUTSIDE.search(line):
                offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:80]}")
    assert not offenders, "references to files outside the repository:\n" + "\n".join(offenders)
