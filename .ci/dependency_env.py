#!/usr/bin/env python3
"""Which dependency files a pull request changes, for the reusable action (action.yml): when it changes
them, the action builds the base side's environment from the base commit's files and runs
`perfgate run --against BASE --base-python ENV/bin/python`, so the bump is measured as the change.

  dependency_env.py changed BASE [--perfgate-dir DIR]   GITHUB_OUTPUT lines: changed=true|false,
                                                        key=<hash of BASE's dependencies>, files=<what changed>
  dependency_env.py export REV OUT_DIR                  REV's dependencies as requirements files in OUT_DIR,
                                                        their paths one a line (for `pip install -r`)

Dependency files (docs/upgrades.md): every `requirements*.txt` at the repository's top (pip-compile and
`uv pip compile` lock files are such files), and the `[project] dependencies` of its pyproject.toml (the
list only: the rest of that file changes for other reasons). Standard library only; runs in the
repository's folder; what it reads is the pull request's and is handled as data (never run, never a
path outside OUT_DIR).
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import subprocess
import sys
from pathlib import Path

REQUIREMENTS = "requirements*.txt"
PYPROJECT = "pyproject.toml"
PYPROJECT_LABEL = "pyproject.toml [project] dependencies"
MAX_FILE_BYTES = 1 << 20


def _git(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", *args], capture_output=True, timeout=120)


def _show(rev: str, path: str) -> bytes | None:
    out = _git("show", f"{rev}:{path}")
    return out.stdout[:MAX_FILE_BYTES] if out.returncode == 0 else None


def _pyproject_dependencies(text: bytes) -> list[str] | None:
    """[project] dependencies of a pyproject.toml; None when it has none or cannot be read as TOML."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: the whole file stands for its dependencies
        return [hashlib.sha256(text).hexdigest()]
    try:
        deps = tomllib.loads(text.decode("utf-8")).get("project", {}).get("dependencies")
    except (UnicodeDecodeError, tomllib.TOMLDecodeError, AttributeError):
        return None
    return [d for d in deps if isinstance(d, str)] if isinstance(deps, list) else None


def dependencies(rev: str) -> dict[str, str]:
    """REV's dependency files: {label: content}; requirements files by their name, pyproject's list as lines."""
    listed = _git("ls-tree", "--name-only", rev)
    if listed.returncode != 0:
        raise SystemExit(f"dependency_env: {rev!r} is not a commit here: {listed.stderr.decode(errors='replace').strip()}")
    names = listed.stdout.decode(errors="replace").splitlines()
    out: dict[str, str] = {}
    for name in sorted(n for n in names if fnmatch.fnmatchcase(n, REQUIREMENTS)):
        content = _show(rev, name)
        if content is not None:
            out[name] = content.decode(errors="replace")
    if PYPROJECT in names:
        content = _show(rev, PYPROJECT)
        deps = _pyproject_dependencies(content) if content is not None else None
        if deps:
            out[PYPROJECT_LABEL] = "\n".join(deps) + "\n"
    return out


def changed(base: str, perfgate_dir: str | None) -> list[str]:
    """GITHUB_OUTPUT lines: whether the work tree's commit (HEAD) changes BASE's dependencies, which, and a
    cache key for an environment built from BASE's (with this perfgate's own requirements, which it holds)."""
    before, after = dependencies(base), dependencies("HEAD")
    differ = sorted(k for k in {*before, *after} if before.get(k) != after.get(k))
    material = dict(before)
    if perfgate_dir:
        own = Path(perfgate_dir, PYPROJECT)
        material["perfgate"] = own.read_text(errors="replace") if own.is_file() else ""
    key = hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:32]
    return [f"changed={'true' if differ else 'false'}", f"key={key}", f"files={', '.join(differ)}"]


def export(rev: str, out_dir: Path) -> list[Path]:
    """REV's dependencies written into ``out_dir`` as requirements files (a requirements file's relative `-r`
    and `-c` lines find their neighbours there); their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for label, content in dependencies(rev).items():
        name = "pyproject-dependencies.txt" if label == PYPROJECT_LABEL else Path(label).name
        path = out_dir / name
        path.write_text(content)
        written.append(path)
    return written


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "changed":
        perfgate_dir = argv[3] if len(argv) >= 4 and argv[2] == "--perfgate-dir" else None
        print("\n".join(changed(argv[1], perfgate_dir)))
        return 0
    if len(argv) == 3 and argv[0] == "export":
        print("\n".join(str(p) for p in export(argv[1], Path(argv[2]))))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
