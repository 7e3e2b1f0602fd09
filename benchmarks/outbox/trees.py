"""The two idemflow versions ``outbox`` compares, as folders: a git revision's ``idemflow/``
(``git archive``) and a snapshot of the work tree's.

Why apart: getting a version of the library onto disk is git plumbing, unrelated to measuring it.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _git(*args: str) -> bytes:
    return subprocess.run(["git", "-C", str(ROOT), *args], check=True, capture_output=True).stdout


@contextlib.contextmanager
def revision_tree(revision: str) -> Iterator[tuple[Path, str]]:
    """``idemflow/`` at ``revision``, extracted into a temporary folder: (folder, commit)."""
    commit = _git("rev-parse", "--verify", f"{revision}^{{commit}}").decode().strip()
    with tempfile.TemporaryDirectory(prefix="idemflow-revision-") as folder:
        archive = _git("archive", "--format=tar", commit, "idemflow")
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(folder, filter="data")
        yield Path(folder), commit


@contextlib.contextmanager
def work_tree_snapshot() -> Iterator[tuple[Path, str]]:
    """``idemflow/`` of the work tree copied into a temporary folder, so that edits made while the
    benchmark runs do not mix versions within it: (folder, a digest of its files)."""
    with tempfile.TemporaryDirectory(prefix="idemflow-candidate-") as folder:
        shutil.copytree(
            ROOT / "idemflow", Path(folder) / "idemflow", ignore=shutil.ignore_patterns("__pycache__")
        )
        digest = hashlib.sha256()
        for path in sorted((Path(folder) / "idemflow").rglob("*")):
            if path.is_file():
                digest.update(path.relative_to(folder).as_posix().encode() + b"\0" + path.read_bytes())
        yield Path(folder), digest.hexdigest()[:12]


@contextlib.contextmanager
def candidate_tree(revision: str | None, baseline: str) -> Iterator[tuple[Path, str]]:
    """The candidate's ``idemflow/``: the work tree's (``revision`` None) or a revision's; with a
    description saying which, and how many of its files differ from the baseline commit."""
    if revision is None:
        with work_tree_snapshot() as (folder, digest):
            changed = _git("diff", "--name-only", baseline, "--", "idemflow").decode().split()
            untracked = _git("ls-files", "--others", "--exclude-standard", "--", "idemflow").decode().split()
            count = len({*changed, *untracked})
            yield folder, f"the work tree's idemflow (snapshot {digest}; {count} files differ)"
    else:
        with revision_tree(revision) as (folder, commit):
            count = len(_git("diff", "--name-only", baseline, commit, "--", "idemflow").decode().split())
            yield folder, f"idemflow at {revision} = {commit[:12]} ({count} files differ)"
