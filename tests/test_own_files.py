"""Only our own files: no tracked file carries another project's copyright line or licence file.

slimkit's repository holds what its authors wrote. Files copied from other projects (their example scripts,
their config files, their licence texts) are found here by what they carry: a copyright line naming someone
else, the marks of the projects slimkit's faces imitate, or a licence file anywhere but the repository root.
The patterns are assembled from pieces so that this file does not match them itself.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

_COPY = "Copy" + "right"
#: marks of other projects, wherever they appear
FOREIGN = [re.compile(re.escape(_COPY + " (c) " + "Micro" + "soft")),
           re.compile("Open" + "MMLab"),
           re.compile(re.escape("LICENSE" + "-" + "NNI"))]
#: any copyright line: "<C> (c) 2024 Someone", "<C> 2024 Someone", "<C> © Someone"
COPYRIGHT_LINE = re.compile(_COPY + r"\s*(\(c\)|©|\d{4})", re.IGNORECASE)
#: whose copyright lines are slimkit's own
OWN_HOLDERS = re.compile(r"slimkit", re.IGNORECASE)
#: licence files; only the repository root may hold one (the repository's own licence)
LICENCE_NAME = re.compile(r"^(LICEN[CS]E|COPYING|NOTICE)([-._].*)?$", re.IGNORECASE)
MAX_READ = 1_000_000  # characters read per file


def _text(path: Path) -> str | None:
    """The file's text (its first MAX_READ characters), or None for a binary or unreadable file."""
    try:
        data = path.read_bytes()[: 4 * MAX_READ]
    except OSError:
        return None
    if b"\0" in data[:8192]:
        return None
    return data.decode("utf-8", errors="replace")[:MAX_READ]


def offences(root: Path, paths: Iterable[str]) -> list[str]:
    """``"path: why"`` / ``"path:line: text"`` for each foreign licence file and foreign copyright line."""
    found = []
    for rel in paths:
        path = root / rel
        if "/" in rel and LICENCE_NAME.match(Path(rel).name):
            found.append(f"{rel}: a licence file outside the repository root")
        if not path.is_file():  # listed by git but deleted in the working tree
            continue
        text = _text(path)
        if text is None:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            foreign = any(p.search(line) for p in FOREIGN)
            if foreign or (COPYRIGHT_LINE.search(line) and not OWN_HOLDERS.search(line)):
                found.append(f"{rel}:{number}: {line.strip()[:160]}")
    return found


def tracked_files() -> list[str]:
    """The files git tracks in this checkout (skips when this is not a git checkout)."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed: cannot list the repository's tracked files")
    top = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--show-toplevel"], capture_output=True, text=True,
                         check=False)
    if top.returncode != 0 or Path(top.stdout.strip()).resolve() != ROOT:
        pytest.skip(f"{ROOT} is not the root of a git checkout (e.g. an unpacked source archive)")
    listing = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True, check=True)
    return [p for p in listing.stdout.decode("utf-8").split("\0") if p]


def test_no_tracked_file_carries_another_projects_copyright_or_licence():
    found = offences(ROOT, tracked_files())
    assert not found, ("These tracked files carry another project's copyright line or licence file; the "
                       "repository holds only files written here:\n  " + "\n  ".join(found))


def test_the_check_flags_foreign_files_and_passes_our_own(tmp_path):
    files = {
        "LICENSE": "The repository's own licence.\n",
        "vendor/LICENSE.txt": "Some licence text.\n",
        "tests/fixtures/LICENSE" + "-" + "NNI": "text\n",
        "copied/script.py": "# " + _COPY + " (c) " + "Micro" + "soft Corporation.\nprint(1)\n",
        "copied/config.py": "model = dict()  # from " + "Open" + "MMLab's repository\n",
        "copied/other.py": "x = 1\n# " + _COPY + " 2021 Some Person\n",
        "ours/module.py": "# " + _COPY + " (c) 2026 the slimkit authors\n\"\"\"Docs that mention copyrights.\"\"\"\n",
        "ours/image.bin": "\0binary " + _COPY + " (c) nobody",
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    assert offences(tmp_path, files) == [
        "vendor/LICENSE.txt: a licence file outside the repository root",
        "tests/fixtures/LICENSE" + "-" + "NNI: a licence file outside the repository root",
        "copied/script.py:1: # " + _COPY + " (c) " + "Micro" + "soft Corporation.",
        "copied/config.py:1: model = dict()  # from " + "Open" + "MMLab's repository",
        "copied/other.py:2: # " + _COPY + " 2021 Some Person",
    ]
