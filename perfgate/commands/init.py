"""``perfgate init``: set perfgate up in a git repository. No torch here.

Writes ``[tool.perfgate]`` into the repository's pyproject.toml (created, or appended to without touching
any other table), ``workloads/example_mlp.py`` (one commented example workload that runs), and, unless
``suite_only``, ``.github/workflows/perfgate.yml`` (the CPU pull-request gate) and
``.github/workflows/perfgate-baselines.yml``, both calling perfgate's reusable action pinned by commit;
with a GPU runner label also ``perfgate-gpu.yml`` and ``perfgate-label.yml``, the label-approved GPU gate
of perfgate's own repository (pull_request_target, the approved commit pinned, judged by the pinned
perfgate with the base's rules, one aggregate commit status). It also keeps ``/reports/`` and ``/.perfgate/``
(run output, the history store) in ``.gitignore``: created, or appended to, never replaced.

Everything is planned and checked before the first write: a file that exists with other content stops
the command (exit 2) unless ``force``; a file that already holds what would be written is left alone,
so running it twice changes nothing.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from perfgate.model.config import ConfigError, read_toml_text
from perfgate.reports.console import echo
from perfgate.util.storage import atomic_write_text
from perfgate.util.validation import TooLarge, read_capped

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]  # the same module on Python 3.10

# The reusable action the generated workflows call, pinned by full commit SHA (zizmor and GitHub's
# hardening guide require it). A release updates this to its own commit; `--action` overrides it.
ACTION = "perfgate/perfgate@6c1596dd476be7f3a88d5096e29bc6acd4304365"
ACTION_VERSION = "v0.1.0"
ACTION_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9_.-]+@[0-9a-f]{40}")
# A self-hosted runner label (GitHub allows letters, digits and - _ . in custom labels).
LABEL_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")
BRANCH_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_./-]{0,99}")
TABLE_HEADER = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
WORKLOAD_FILE = Path("workloads") / "example_mlp.py"
# What perfgate writes into the repository that no commit should carry: each run's folder and reports/LATEST
# (reports_dir = "reports" in the table init writes) and the history store's default SQLite file
# (.perfgate/history.db). Anchored: a reports/ folder of the user's own deeper down is theirs.
GITIGNORE = Path(".gitignore")
IGNORED = ("/reports/", "/.perfgate/")
GITIGNORE_HEADER = "# perfgate: each run's output and the history store (added by perfgate init)"
WORKFLOWS = Path(".github") / "workflows"
CUDA_TORCH_INDEX = "https://download.pytorch.org/whl/cu128"
CPU_TORCH_INDEX = "https://download.pytorch.org/whl/cpu"


@dataclass(frozen=True)
class Planned:
    """One file init would write: its path under the repository and its full new content."""

    path: Path
    text: str
    state: str  # "create", "update", "unchanged", or "conflict" (exists and differs, no --force)
    why: str = ""


def _template(name: str) -> str:
    return resources.files("perfgate").joinpath("templates").joinpath("init").joinpath(name).read_text(encoding="utf-8")


def repository_top(cwd: Path) -> Path:
    """The top folder of the git repository ``cwd`` is in; ConfigError when it is not in one."""
    try:
        proc = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=cwd, capture_output=True, text=True,
                              timeout=30)
    except FileNotFoundError as exc:
        raise ConfigError("perfgate init needs git on PATH (its workflows compare commits with --against)") from exc
    if proc.returncode != 0:
        raise ConfigError(f"{cwd}: not inside a git repository; run `git init` first (perfgate init sets up a repository)")
    return Path(proc.stdout.strip())


def _default_branch(top: Path) -> str:
    proc = subprocess.run(["git", "symbolic-ref", "--short", "HEAD"], cwd=top, capture_output=True, text=True,
                          timeout=30)
    branch = proc.stdout.strip()
    return branch if proc.returncode == 0 and BRANCH_RE.fullmatch(branch) else "main"


def perfgate_table(gpu_runner: str | None) -> str:
    """The ``[tool.perfgate]`` text init writes (with a ``gpu`` suite when there is a GPU runner)."""
    text = _template("pyproject-table.toml")
    if gpu_runner:
        text += _template("pyproject-gpu-suite.toml")
    return text


def _perfgate_spans(lines: list[str]) -> list[tuple[int, int]]:
    """Line ranges [start, end) of every ``[tool.perfgate]`` / ``[tool.perfgate.*]`` table, with the
    comment lines directly above its first header."""
    spans: list[tuple[int, int]] = []
    start: int | None = None
    for i, line in enumerate(lines):
        m = TABLE_HEADER.match(line)
        if not m:
            continue
        name = m.group(1).replace(" ", "").replace('"', "")
        ours = name == "tool.perfgate" or name.startswith("tool.perfgate.")
        if ours and start is None:
            start = i
            while start > 0 and lines[start - 1].lstrip().startswith("#"):
                start -= 1
        elif not ours and start is not None:
            spans.append((start, i))
            start = None
    if start is not None:
        spans.append((start, len(lines)))
    return spans


def merged_pyproject(existing: str | None, table: str, force: bool, path: Path) -> tuple[str, str]:
    """The new pyproject.toml text and its state. Other tables are kept byte for byte; an existing
    ``[tool.perfgate]`` is replaced only with ``force``. ConfigError (exit 2) otherwise."""
    if existing is None:
        return table, "create"
    try:
        before = tomllib.loads(existing)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc}); fix it before perfgate init") from exc
    if "perfgate" not in before.get("tool", {}):
        sep = "" if not existing or existing.endswith("\n\n") else ("\n" if existing.endswith("\n") else "\n\n")
        new = existing + sep + table
        state = "update"
    else:
        if table in existing:
            return existing, "unchanged"
        if not force:
            return existing, "conflict"
        lines = existing.splitlines(keepends=True)
        spans = _perfgate_spans(lines)
        if not spans:
            raise ConfigError(f"{path}: [tool.perfgate] is written as dotted keys; move it into its own table "
                              f"or delete it, then run perfgate init again")
        kept = [line for i, line in enumerate(lines) if not any(a <= i < b for a, b in spans)]
        rest = "".join(kept).rstrip("\n")
        new = (rest + "\n\n" if rest else "") + table
        state = "update"
    try:
        after = tomllib.loads(new)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: cannot add [tool.perfgate] without rewriting other tables ({exc})") from exc
    before.get("tool", {}).pop("perfgate", None)
    after.get("tool", {}).pop("perfgate", None)
    for data in (before, after):
        if data.get("tool") == {}:
            data.pop("tool")
    if before != after:
        raise ConfigError(f"{path}: adding [tool.perfgate] would change other tables; add it by hand "
                          f"(perfgate's docs/configuration.md)")
    return new, state


def _ignore_target(line: str) -> str:
    """The folder a .gitignore line ignores, spelled without its anchoring and trailing ``/``, ``/*`` or
    ``/**`` (``/reports/*``, ``reports/`` and ``reports`` all say "reports"), with a leading ``!`` where the
    line re-includes it (``!reports/``: "!reports"); "" for comments."""
    text = line.strip()
    if not text or text.startswith("#"):
        return ""
    negated = text.startswith("!")
    return ("!" if negated else "") + text.lstrip("!").rstrip("*").rstrip("/").lstrip("/")


def _ignored_in_text(text: str) -> set[str]:
    """The folders the .gitignore ``text`` ignores, read line by line as git does: a later ``!folder/``
    takes an earlier ``folder/`` back. The fallback where git cannot answer (``_ignored_by_git``)."""
    ignored: set[str] = set()
    for line in text.splitlines():
        target = _ignore_target(line)
        if target.startswith("!"):
            ignored.discard(target[1:])
        elif target:
            ignored.add(target)
    return ignored


def _ignored_by_git(top: Path, entry: str) -> bool | None:
    """Whether the repository's own .gitignore makes git ignore what perfgate writes under ``entry``
    (``/reports/``), asked of git itself (``git check-ignore``: negations, ``**`` and every other rule as
    git reads them); an ignore of this clone alone (.git/info/exclude, a global excludes file) does not
    count, no other clone has it. None where git cannot answer."""
    probe = entry.strip("/") + "/perfgate-run/results.json"
    try:
        proc = subprocess.run(["git", "check-ignore", "--no-index", "-v", probe], cwd=top, capture_output=True,
                              text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode == 1:
        return False
    if proc.returncode != 0:
        return None
    source, _, rest = proc.stdout.partition(":")
    pattern = rest.partition(":")[2]
    return source == GITIGNORE.name and not pattern.startswith("!")


def planned_gitignore(top: Path) -> Planned:
    """The .gitignore init leaves: created with IGNORED, or an existing one with the entries it lacks appended
    (every byte it had kept; an entry it has in any spelling is not added again), or left alone when it has
    them all. Never replaced, so no --force is involved. ConfigError for a link, a folder, a file over the
    size cap or one that is not UTF-8."""
    path = top / GITIGNORE
    if path.is_symlink() or (path.exists() and not path.is_file()):
        raise ConfigError(f"{path}: not a regular file; perfgate init writes only regular files")
    existing: str | None = None
    if path.exists():
        try:
            existing = read_capped(path)
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read ({exc.strerror or exc})") from exc
        except TooLarge as exc:
            raise ConfigError(f"{path}: {exc} (PERFGATE_MAX_FILE_MB raises the limit); add /reports/ and "
                              "/.perfgate/ to it by hand") from exc
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start}); add /reports/ and /.perfgate/ to it "
                              "by hand") from exc
    have = _ignored_in_text(existing or "")
    asked = {entry: _ignored_by_git(top, entry) if existing is not None else False for entry in IGNORED}
    missing = [entry for entry in IGNORED
               if not (asked[entry] if asked[entry] is not None else entry.strip("/") in have)]
    if existing is not None and not missing:
        return Planned(GITIGNORE, existing, "unchanged")
    block = "\n".join([GITIGNORE_HEADER, *missing]) + "\n"
    if existing is None:
        return Planned(GITIGNORE, block, "create")
    sep = "" if not existing else ("\n" if existing.endswith("\n") else "\n\n")
    return Planned(GITIGNORE, existing + sep + block, "update")


def workflow_texts(action: str, gpu_runner: str | None, default_branch: str) -> dict[Path, str]:
    """The workflow files init writes, keyed by their path in the repository."""
    repo, sha = action.split("@", 1)
    subs = {
        "@@ACTION@@": action,
        "@@ACTION_REPO@@": repo,
        "@@ACTION_SHA@@": sha,
        "@@ACTION_VERSION@@": ACTION_VERSION,
        "@@DEFAULT_BRANCH@@": default_branch,
        "@@GPU_LABEL@@": gpu_runner or "",
        # baselines are measured on a pool apart from the one that runs pull-request code (docs/ci.md)
        "@@BASELINE_RUNNER@@": f"[self-hosted, {gpu_runner}, perfgate-main]" if gpu_runner else "ubuntu-latest",
        "@@BASELINE_SUITE@@": "gpu" if gpu_runner else "smoke",
        "@@TORCH_INDEX@@": CUDA_TORCH_INDEX if gpu_runner else CPU_TORCH_INDEX,
    }
    names = [("perfgate.yml", "workflow-perfgate.yml"), ("perfgate-baselines.yml", "workflow-baselines.yml")]
    if gpu_runner:
        names += [("perfgate-gpu.yml", "workflow-gpu.yml"), ("perfgate-label.yml", "workflow-label.yml")]
    out = {}
    for name, template in names:
        text = _template(template)
        for key, value in subs.items():
            text = text.replace(key, value)
        out[WORKFLOWS / name] = text
    return out


def plan(top: Path, gpu_runner: str | None = None, suite_only: bool = False, force: bool = False,
         action: str = ACTION) -> list[Planned]:
    """What init would write in the repository at ``top``; nothing is written. ConfigError on bad input."""
    if gpu_runner is not None and not LABEL_RE.fullmatch(gpu_runner):
        raise ConfigError(f"--gpu-runner {gpu_runner!r}: not a runner label (letters, digits, - _ . only)")
    if not ACTION_RE.fullmatch(action):
        raise ConfigError(f"--action {action!r}: must be OWNER/REPO@<40-hex commit SHA> (actions are pinned by commit)")
    pyproject = top / "pyproject.toml"
    if pyproject.is_symlink() or (pyproject.exists() and not pyproject.is_file()):
        raise ConfigError(f"{pyproject}: not a regular file; perfgate init writes only regular files")
    existing = read_toml_text(pyproject) if pyproject.exists() else None
    text, state = merged_pyproject(existing, perfgate_table(gpu_runner), force, pyproject)
    planned = [Planned(Path("pyproject.toml"), text, state,
                       "it already has a [tool.perfgate] table" if state == "conflict" else "")]
    files = {WORKLOAD_FILE: _template("example_workload.py")}
    if not suite_only:
        files.update(workflow_texts(action, gpu_runner, _default_branch(top)))
    for rel, new in files.items():
        target = top / rel
        for parent in [target, *target.parents]:
            if parent == top:
                break
            if parent.is_symlink():
                raise ConfigError(f"{parent}: is a symbolic link; perfgate init writes only inside the repository")
            if parent != target and parent.exists() and not parent.is_dir():
                # checked here, before anything is written: apply() would otherwise fail half-way
                raise ConfigError(f"{parent}: exists and is not a folder; perfgate init writes {rel} inside it")
        if not target.exists():
            planned.append(Planned(rel, new, "create"))
        elif not target.is_file():
            raise ConfigError(f"{target}: exists and is not a file")
        elif target.read_text(encoding="utf-8", errors="replace") == new:
            planned.append(Planned(rel, new, "unchanged"))
        else:
            planned.append(Planned(rel, new, "update" if force else "conflict", "it exists with other content"))
    planned.append(planned_gitignore(top))
    return planned


def apply(top: Path, planned: list[Planned]) -> None:
    """Write every planned file that is new or changes (atomically, one by one). Refuses, writing
    nothing, when any file is a conflict."""
    conflicts = [p for p in planned if p.state == "conflict"]
    if conflicts:
        listed = ", ".join(f"{p.path} ({p.why})" for p in conflicts)
        raise ConfigError(f"{top}: refusing to overwrite {listed}; perfgate init --force replaces "
                          f"{'it' if len(conflicts) == 1 else 'them'}")
    for p in planned:
        if p.state in ("create", "update"):
            atomic_write_text(top / p.path, p.text)


RUNNER_GROUPS_WARNING = (
    "warning: runner groups are required for the GPU workflows: a label is a string any job can ask for, a "
    "fork's edited workflow included. Put the PR pool (LABEL + perfgate-pr) in a runner group limited to "
    ".github/workflows/perfgate-gpu.yml on your default branch, the main pool (LABEL + perfgate-main) in one "
    "limited to perfgate-baselines.yml, and register the runners ephemeral (perfgate's docs/ci.md, "
    "\"Registering the self-hosted GPU runners\"; runner groups need an organisation)")

NEXT_STEPS = """next:
  git add .gitignore pyproject.toml workloads .github && git commit -m "perfgate: workloads"
  perfgate run && perfgate baseline update   # this machine's baseline in baselines/, recorded from that commit
  git add baselines && git commit -m "perfgate: baseline"
then `perfgate run --gate` (against baselines/) or `perfgate run --against HEAD~1 --gate` after a change.
(Commit the workloads first: `run --gate` settles a changed case in lockstep against the baseline's
recorded commit, and a commit without them settles nothing.)"""


def initialize(gpu_runner: str | None, suite_only: bool, force: bool, action: str | None) -> None:
    """`perfgate init` in the git repository around the current folder: plan, check, write, then what each
    file got and the next steps."""
    top = repository_top(Path.cwd())
    planned = plan(top, gpu_runner, suite_only, force, action or ACTION)
    apply(top, planned)
    for p in planned:
        echo(f"{p.state:>9}  {p.path}")
    if gpu_runner and not suite_only:
        echo(RUNNER_GROUPS_WARNING.replace("LABEL", gpu_runner), err=True)
    echo(NEXT_STEPS.replace(" .github", "") if suite_only else NEXT_STEPS)  # no workflows written
