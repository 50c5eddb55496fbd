"""`perfgate run --changed-since REF`: which workloads a change touches, with a safe default. No torch.

The files changed since REF (``git diff`` against the merge base of REF and HEAD, the working tree's
uncommitted and untracked files included, or, given a ``head`` commit, that commit's tree) are matched
against what each workload owns: its own file and its ``depends_on`` patterns (perfgate.workload). The run
keeps the cases of the workloads a changed file belongs to and skips the others, each "skipped: unchanged by
this pull request". Everything runs, and the run says why, whenever the change cannot be trusted to leave a
workload alone: perfgate's configuration or a dependency file changed, a file no workload owns changed (a
shared file), a file was renamed or copied, a workload file was deleted, or git could not say what changed
(no git, an unknown REF, no merge base). A new workload file runs everything too: a judge on the base
commit (`perfgate merge --changed-since`) does not know it, and must choose as the shards chose. ``select``
is pure; ``changes_since`` asks git; ``read_pull_request_files`` reads the list GitHub gives of a pull
request's files instead.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfgate.model.results import SKIPPED_UNCHANGED, STATUS_SKIPPED, CaseResult, CaseSpec
from perfgate.util.paths import bad_project_glob, matches_project_glob

# Files that set what every case measures, wherever they are in the repository: the configuration
# ([tool.perfgate] lives in pyproject.toml) and the dependency declarations and lock files of Python projects.
DEPENDENCY_FILES = (
    "pyproject.toml", "setup.py", "setup.cfg", "Pipfile", "Pipfile.lock", "poetry.lock", "uv.lock", "pdm.lock",
    "environment.yml", "environment.yaml", "conda-lock.yml", "MANIFEST.in",
)
DEPENDENCY_GLOBS = ("requirements*.txt", "**/requirements*.txt", "requirements/**", "constraints*.txt",
                    "**/constraints*.txt", "**/*.lock")
SKIP_WORDS = "skipped: unchanged by this pull request"
MAX_SHOWN = 5  # changed files named in a reason; the whole list is in results.json
MAX_RECORDED = 2000  # changed files kept in results.json


@dataclass(frozen=True)
class Change:
    """One changed file, as git names it: ``status`` A (added), M, D (deleted), T, R (renamed), C (copied),
    U; ``path`` relative to the project's root (``outside`` when it is not below it: then relative to the
    repository's top), ``old_path`` the other side of a rename or copy."""

    status: str
    path: str
    old_path: str | None = None
    outside: bool = False


@dataclass(frozen=True)
class Owner:
    """What one workload owns: its file (relative to the project's root; None when it is outside it) and
    its ``depends_on`` patterns."""

    file: str | None
    patterns: tuple[str, ...] = ()


@dataclass(frozen=True)
class Selection:
    """What a change selects. ``workloads`` None: everything runs, ``reasons`` say why; else the workloads
    whose cases run, ``reasons`` saying which changed file chose each."""

    since: str
    workloads: frozenset[str] | None
    reasons: tuple[str, ...]
    base: str | None = None  # the merge base compared with
    changed: tuple[str, ...] = field(default=())

    @property
    def everything(self) -> bool:
        return self.workloads is None

    def runs(self, workload: str) -> bool:
        return self.workloads is None or workload in self.workloads

    def skip_message(self) -> str:
        """The message of a case this selection skips."""
        return f"{SKIP_WORDS} (none of its workload's files changed since {self.since})"

    def describe(self) -> str:
        """What runs and why, in words."""
        if self.workloads is None:
            return f"every case runs: {'; '.join(self.reasons)}"
        chosen = ", ".join(sorted(self.workloads)) or "none"
        return f"runs workload(s) {chosen}: {'; '.join(self.reasons) or 'no workload file changed'}"

    def summary(self, skipped: int, total: int) -> str:
        """One line for the console: how many cases it skips, then ``describe``."""
        if self.workloads is None:
            return self.describe()
        return f"{skipped} of {total} case(s) {SKIP_WORDS} since {self.since}; {self.describe()}"

    def to_json(self) -> dict[str, Any]:
        return {"since": self.since, "base": self.base, "everything": self.everything,
                "workloads": None if self.workloads is None else sorted(self.workloads),
                "reasons": list(self.reasons), "changed": list(self.changed[:MAX_RECORDED]),
                "changed_count": len(self.changed)}


def everything(since: str, reason: str, base: str | None = None, changed: Sequence[str] = ()) -> Selection:
    return Selection(since=since, workloads=None, reasons=(reason,), base=base, changed=tuple(changed))


def _shown(paths: Sequence[str]) -> str:
    head = ", ".join(paths[:MAX_SHOWN])
    return head + (f" and {len(paths) - MAX_SHOWN} more" if len(paths) > MAX_SHOWN else "")


def is_dependency_file(path: str, config_file: str | None = None) -> bool:
    """Is ``path`` (relative, '/'-joined) perfgate's configuration or a dependency file?"""
    name = path.rsplit("/", 1)[-1]
    return path == config_file or name in DEPENDENCY_FILES or any(
        matches_project_glob(g, path) for g in DEPENDENCY_GLOBS)


def select(changes: Sequence[Change], owners: Mapping[str, Owner], since: str, *, base: str | None = None,
           config_file: str | None = None) -> Selection:
    """The workloads ``changes`` touch, or everything with the reasons (the module's docstring).

    A ``depends_on`` pattern of a workload whose own file this change edits does not claim a file: the
    pattern itself may be what changed, so such a file counts as shared (everything runs)."""
    changed = tuple(c.path for c in changes)
    if not changes:
        return everything(since, f"no file changed since {since}: nothing to choose by", base, changed)
    shared: list[str] = []
    why_all: list[str] = []
    by_file: dict[str, list[str]] = {}
    for name, owner in owners.items():
        if owner.file is not None:
            by_file.setdefault(owner.file, []).append(name)
    edited = {n for c in changes if not c.outside for n in by_file.get(c.path, [])}
    chosen: dict[str, list[str]] = {}
    for c in changes:
        if c.status in ("R", "C"):
            why_all.append(f"{c.old_path} {'renamed' if c.status == 'R' else 'copied'} to {c.path}")
        elif c.outside:
            shared.append(f"{c.path} (outside the project)")
        elif is_dependency_file(c.path, config_file):
            why_all.append(f"{c.path} changed (perfgate's configuration or a dependency file)")
        elif c.status == "D" and c.path in by_file:
            why_all.append(f"workload file {c.path} deleted")
        elif c.status == "A" and c.path in by_file:  # the judge's older tree does not know it: a shared file there
            why_all.append(f"new workload file {c.path}")
        elif c.status not in ("A", "M", "D", "T"):
            why_all.append(f"{c.path} changed in a way perfgate does not know ({c.status!r})")
        else:
            owned = list(by_file.get(c.path, []))
            owned += [n for n, o in owners.items() if n not in owned and n not in edited
                      and any(matches_project_glob(p, c.path) for p in o.patterns)]
            if not owned:
                shared.append(c.path)
            for n in owned:
                chosen.setdefault(n, []).append(c.path)
    if shared:
        why_all.append(f"shared file(s) changed, owned by no workload: {_shown(shared)}")
    if why_all:
        return Selection(since, None, tuple(why_all), base, changed)
    reasons = tuple(f"{n}: {_shown(paths)}" for n, paths in sorted(chosen.items()))
    return Selection(since, frozenset(chosen), reasons, base, changed)


def owners_of(workloads: Mapping[str, Mapping[str, Any]], root: Path) -> dict[str, Owner]:
    """Each workload's Owner from the probe's catalog (``describe()`` plus ``file``). The catalog comes from a
    worker that imported the workload files: a pattern that is not a project glob owns nothing."""
    owners = {}
    top = root.resolve()
    for name, info in workloads.items():
        file: str | None = None
        try:
            file = Path(str(info.get("file", ""))).resolve().relative_to(top).as_posix()
        except ValueError:
            file = None
        raw = info.get("depends_on") or ()
        patterns = tuple(p for p in raw if bad_project_glob(p) is None) if isinstance(raw, (list, tuple)) else ()
        owners[name] = Owner(file, patterns)
    return owners


def _git(cwd: Path, *args: str) -> subprocess.CompletedProcess[str] | None:
    try:
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return None


def _first_line(out: subprocess.CompletedProcess[str]) -> str:
    return (out.stderr.strip().splitlines() or ["no answer"])[-1][:200]


def changes_since(root: Path, ref: str, head: str | None = None) -> tuple[list[Change], str] | str:
    """The files changed between the merge base of ``ref`` and HEAD (``head``: that commit instead) and the
    working tree (``head``: that commit's tree), with that base; or, as a string, why git cannot say."""
    for name in (ref, head):  # never an option to git (`--output=FILE`): refused, whoever gave it
        if name is not None and (not name.strip() or name.startswith("-") or not name.isprintable()):
            return f"{name!r} is not a git ref"
    root = root.resolve()
    top_out = _git(root, "rev-parse", "--show-toplevel")
    if top_out is None:
        return "git is not available"
    if top_out.returncode != 0:
        return f"{root} is not in a git repository"
    top = Path(top_out.stdout.strip()).resolve()
    tip = head or "HEAD"
    for name in (ref, tip):
        known = _git(root, "rev-parse", "--verify", "--quiet", f"{name}^{{commit}}")
        if known is None or known.returncode != 0:
            return f"{name!r} is no commit git knows here (fetch it: a CI checkout needs fetch-depth: 0)"
    mb = _git(root, "merge-base", ref, tip)
    if mb is None or mb.returncode != 0:
        return f"{ref} and {tip} have no merge base"
    base = mb.stdout.strip()
    diff = ["diff", "--name-status", "-z", "-M", "--no-ext-diff", "--no-textconv", base]
    out = _git(top, *diff, *([head] if head else []), "--")
    if out is None or out.returncode != 0:
        return f"git diff {base[:12]} failed: {_first_line(out) if out else 'no answer'}"
    entries = _parse_name_status(out.stdout)
    if head is None:  # new files not yet added: a workload file being written, a helper it imports
        untracked = _git(top, "ls-files", "-z", "--others", "--exclude-standard")
        if untracked is not None and untracked.returncode == 0:
            entries += [("A", p, None) for p in untracked.stdout.split("\0")
                        if p and not _bytecode(p)]
    return [_relative(status, path, old, top, root) for status, path, old in entries], base


def _bytecode(path: str) -> bool:
    """Python's own cache (``__pycache__/``, ``.pyc``): written by importing the workloads, never a change."""
    return path.endswith((".pyc", ".pyo")) or "__pycache__/" in f"/{path}"


def _parse_name_status(text: str) -> list[tuple[str, str, str | None]]:
    """``git diff --name-status -z`` -> (status letter, path, old path of a rename or copy)."""
    fields = text.split("\0")
    out: list[tuple[str, str, str | None]] = []
    i = 0
    while i < len(fields) and fields[i]:
        status = fields[i][0]
        if status in ("R", "C") and i + 2 < len(fields):
            out.append((status, fields[i + 2], fields[i + 1]))
            i += 3
        elif i + 1 < len(fields):
            out.append((status, fields[i + 1], None))
            i += 2
        else:
            break
    return out


def _relative(status: str, path: str, old: str | None, top: Path, root: Path) -> Change:
    """A git path (relative to the repository's top) made relative to the project's root."""
    def rel(p: str) -> tuple[str, bool]:
        try:
            return (top / p).relative_to(root).as_posix(), False
        except ValueError:
            return p, True

    new, outside = rel(path)
    return Change(status, new, rel(old)[0] if old else None, outside)


# GitHub's words for a pull request's file (`GET /repos/{owner}/{repo}/pulls/{number}/files`, ``status``)
GITHUB_STATUS = {"added": "A", "removed": "D", "modified": "M", "changed": "M", "renamed": "R", "copied": "C"}
MAX_LISTED = 10_000  # files in a list GitHub gave (it gives at most 3000 of a pull request)


def read_pull_request_files(path: Path, root: Path) -> list[Change] | str:
    """The changes in ``path``: a JSON list of GitHub's pull-request files (objects with ``status``,
    ``filename`` and, for a rename, ``previous_filename``, as `gh api repos/R/pulls/N/files` answers them),
    paths relative to the repository's top; or, as a string, why it cannot be read. It comes from a CI
    job: read under the size cap, each entry checked; a status GitHub may add later is kept as ``?``."""
    from perfgate.util.validation import SchemaError, read_json_file

    try:
        data = read_json_file(path, "pull request's files")
    except SchemaError as exc:
        return str(exc)
    if not isinstance(data, list) or len(data) > MAX_LISTED:
        return f"{path}: not a list of at most {MAX_LISTED} files (objects with status and filename)"
    top_out = _git(root, "rev-parse", "--show-toplevel")
    top = Path(top_out.stdout.strip()) if top_out is not None and top_out.returncode == 0 else root
    entries: list[tuple[str, str, str | None]] = []
    for i, item in enumerate(data):
        name = item.get("filename") if isinstance(item, dict) else None
        status = item.get("status") if isinstance(item, dict) else None
        old = item.get("previous_filename") if isinstance(item, dict) else None
        if not (isinstance(name, str) and name and isinstance(status, str) and (old is None or isinstance(old, str))):
            return f"{path}: entry {i} is not an object with a status and a filename"
        entries.append((GITHUB_STATUS.get(status, "?"), name, old))
    return [_relative(status, name, old, top.resolve(), root.resolve()) for status, name, old in entries]


def selection_for_run(root: Path, config_file: Path | None, workloads: Mapping[str, Mapping[str, Any]],
                      since: str, run_all: bool = False, head: str | None = None,
                      listed: Path | None = None) -> Selection:
    """`run --changed-since SINCE` (``run_all``: with ``--all``): what to run, from git (or, ``listed``, the
    files GitHub lists for the pull request) and the catalog."""
    if run_all:
        return everything(since, "--all: every case runs, whatever changed")
    base: str | None = None
    if listed is not None:
        found_listed = read_pull_request_files(listed, root)
        if isinstance(found_listed, str):
            return everything(since, f"cannot tell what changed since {since}: {found_listed}")
        changes = found_listed
    else:
        found = changes_since(root, since, head)
        if isinstance(found, str):
            return everything(since, f"cannot tell what changed since {since}: {found}")
        changes, base = found
    config = None
    if config_file is not None:
        try:
            config = config_file.resolve().relative_to(root.resolve()).as_posix()
        except ValueError:
            config = None
    return select(changes, owners_of(workloads, root), since, base=base, config_file=config)


def split_cases(cases: Sequence[CaseSpec], selection: Selection) -> tuple[list[CaseSpec], list[CaseResult]]:
    """The cases ``selection`` runs, and a skipped result for each of the others (``skipped_as_unchanged``)."""
    run = [c for c in cases if selection.runs(c.workload)]
    skipped = [CaseResult(spec=c, status=STATUS_SKIPPED, message=selection.skip_message(),
                          metadata={"skipped_as": SKIPPED_UNCHANGED, "changed_since": selection.since})
               for c in cases if not selection.runs(c.workload)]
    return run, skipped
