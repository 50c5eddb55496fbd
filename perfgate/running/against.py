"""``perfgate run --against REF``: base and head measured in the same job, worker processes interleaved.

REF is checked out in a temporary git worktree. Its workers run with the base checkout's workloads AND
its perfgate package (PYTHONPATH and working folder inside the worktree), so the base side measures what
REF would have measured. For each case, each base process runs side by side with a head process and the
two sample in turns, in short bursts (perfgate.protocol.lockstep): the pair sees the same moments of a shared
machine, so its speed changing over seconds cancels in their ratio, and alternating which goes first in
each round guards against order effects. A case whose workload or toggle REF lacks runs on head only and is judged ``new``.
No torch here.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfgate.model.config import ConfigError, Settings
from perfgate.model.results import STATUS_OK, CaseResult, CaseSpec
from perfgate.reports import console
from perfgate.running import inherit, run_folders, runner, workers
from perfgate.running.plan import Catalog, parse_probe_answer


def _git(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=120)


@dataclass
class BaseCheckout:
    """REF checked out in a temporary worktree, with what its workers need to run."""

    ref: str
    commit: str
    path: Path  # the worktree's top folder
    repo_top: Path  # the current repository's top folder
    python_path: str  # PYTHONPATH for base workers: the base's perfgate package when it has one
    workloads_dirs: tuple[Path, ...]
    catalog: Catalog | None = None
    notes: list[str] = field(default_factory=list)
    lock_fd: int | None = None  # held while this process uses the worktree (``prune_stale_worktrees``)
    # the Python (and variables) its workers run under: ``run --base-python/--base-env``; None: this one's
    interpreter: inherit.Interpreter | None = None
    environment: dict[str, Any] = field(default_factory=dict)  # its probe's: torch, Python, packages
    worktree: bool = True  # False: this tree itself (``same_tree``), nothing checked out
    link_dir: Path | None = None  # a folder holding only a link to this perfgate (``use_interpreter``)

    @property
    def cwd(self) -> Path | None:
        """The base workers' folder: inside the worktree, or (this tree itself) where the head's run."""
        return self.path if self.worktree else None

    @property
    def side_interpreter(self) -> inherit.Interpreter:
        return self.interpreter or inherit.THIS_INTERPRETER

    def describe(self) -> str:
        """The base side in a comparison's source: ``git:REF (COMMIT)``, the interpreter it ran under, the
        variables set for it."""
        parts = [f"git:{self.ref} ({self.commit[:12]})"] if self.worktree else ["this tree"]
        if self.interpreter is not None and self.interpreter.python:
            parts.append(f"under {self.interpreter.python}")
        if self.interpreter is not None and self.interpreter.env:
            parts.append("with " + " ".join(f"{k}={v}" for k, v in self.interpreter.env))
        return " ".join(parts)

    def close(self) -> None:
        if self.link_dir is not None:
            shutil.rmtree(self.link_dir, ignore_errors=True)
            self.link_dir = None
        if not self.worktree:
            return
        _git(self.repo_top, "worktree", "remove", "--force", str(self.path))
        shutil.rmtree(self.path.parent, ignore_errors=True)
        _git(self.repo_top, "worktree", "prune")
        if self.lock_fd is not None:
            os.close(self.lock_fd)
            self.lock_fd = None


HOLDER_PREFIX = "perfgate-against-"  # tempfile folder holding one worktree ("base") and its lock file
LOCK_FILE = "owner.lock"
UNLOCKED_STALE_S = 24 * 3600  # a worktree of a perfgate from before lock files: stale after a day


def _lock(holder: Path) -> int:
    """Create and hold ``holder``'s lock (flock: the kernel lets it go when this process ends, however)."""
    import fcntl

    fd = os.open(holder / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def _is_stale(holder: Path) -> bool:
    """True when no running perfgate holds ``holder``'s lock (its owner was killed, or SIGTERM'd before
    perfgate removed worktrees on SIGTERM)."""
    import fcntl

    try:
        fd = os.open(holder / LOCK_FILE, os.O_RDWR)
    except FileNotFoundError:
        try:
            return time.time() - holder.stat().st_mtime > UNLOCKED_STALE_S
        except OSError:
            return True  # the folder is gone: only git's registration is left
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True  # released when fd closes, below
    except OSError:
        return False  # a running perfgate holds it
    finally:
        os.close(fd)


def prune_stale_worktrees(repo_top: Path) -> list[Path]:
    """Remove the perfgate worktrees of ``repo_top`` that no running perfgate owns (``run --against`` and
    ``bisect`` killed before they could clean up), with their git registration. Returns the removed paths."""
    listed = _git(repo_top, "worktree", "list", "--porcelain")
    removed = []
    for line in listed.stdout.splitlines() if listed.returncode == 0 else []:
        if not line.startswith("worktree "):
            continue
        path = Path(line[len("worktree "):])
        if path.name != "base" or not path.parent.name.startswith(HOLDER_PREFIX) or not _is_stale(path.parent):
            continue
        _git(repo_top, "worktree", "remove", "--force", str(path))
        shutil.rmtree(path.parent, ignore_errors=True)
        removed.append(path)
    _git(repo_top, "worktree", "prune")
    return removed


@contextmanager
def interruptible() -> Iterator[None]:
    """SIGTERM (what a CI cancellation sends) raises KeyboardInterrupt, as Ctrl-C does, so that the
    ``finally`` blocks that remove worktrees run."""
    def stop(signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    if threading.current_thread() is not threading.main_thread():  # only the main thread may set handlers
        yield
        return
    old = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


@contextmanager
def checked_out(settings: Settings, ref: str) -> Iterator[BaseCheckout]:
    """``checkout(settings, ref)``, removed on the way out. Ctrl-C and SIGTERM are held back while it is
    made, so that one arriving then cannot leave a worktree that nothing knows to remove; a held signal
    is raised once the checkout is in hand, and removes it."""
    blockable = hasattr(signal, "pthread_sigmask")
    base: BaseCheckout | None = None
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM}) if blockable else None
    try:
        try:
            base = checkout(settings, ref)
        finally:
            if blockable:
                signal.pthread_sigmask(signal.SIG_SETMASK, old)  # type: ignore[arg-type]  # blockable: old is a mask
        yield base
    finally:
        if base is not None:
            base.close()


def _map_into(path: Path, repo_top: Path, base_top: Path) -> Path | None:
    if repo_top == base_top:  # this tree itself (``same_tree``): every path is its own
        return Path(path).resolve()
    try:
        return base_top / Path(path).resolve().relative_to(repo_top)
    except ValueError:
        return None


def _repo_top(root: Path) -> Path | None:
    """The top folder of the git repository around ``root``, or None outside one."""
    top = _git(root, "rev-parse", "--show-toplevel")
    return Path(top.stdout.strip()).resolve() if top.returncode == 0 else None


def has_commit(root: Path, commit: str) -> bool:
    """Whether the git repository around ``root`` holds ``commit`` (a full hash, checked by the caller)."""
    top = _repo_top(root)
    return top is not None and _git(top, "cat-file", "-e", f"{commit}^{{commit}}").returncode == 0


def _workloads_in_submodule(settings: Settings, repo_top: Path, commit: str) -> tuple[str, str] | None:
    """(workloads dir, submodule path) for the first workloads dir that lies in a submodule of ``commit``:
    `git worktree add` checks no submodule out, so REF's side would find that folder empty."""
    listed = _git(repo_top, "ls-tree", "-r", "-z", commit)
    links = [Path(entry.split("\t", 1)[1]) for entry in listed.stdout.split("\0")
             if entry.startswith("160000 ") and "\t" in entry] if listed.returncode == 0 else []
    for d in settings.workloads_dirs if links else ():
        try:
            rel = Path(d).resolve().relative_to(repo_top)
        except ValueError:
            continue  # outside the repository: base and head share it
        for link in links:
            if rel == link or link in rel.parents:
                return rel.as_posix(), link.as_posix()
    return None


def checkout(settings: Settings, ref: str) -> BaseCheckout:
    """Check REF out in a temporary worktree; ConfigError when REF is not a commit of this repository."""
    repo_top = _repo_top(settings.root)
    if repo_top is None:
        raise ConfigError(f"--against {ref}: {settings.root} is not inside a git repository")
    rev = _git(repo_top, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    if rev.returncode != 0:
        raise ConfigError(f"--against {ref}: not a commit in {repo_top} (a branch, tag or hash is valid)")
    commit = rev.stdout.strip()
    in_submodule = _workloads_in_submodule(settings, repo_top, commit)
    if in_submodule is not None:
        d, sub = in_submodule
        raise ConfigError(f"--against {ref}: the workloads dir {d} lies in the git submodule {sub} at "
                          f"{commit[:12]}, and a worktree of {ref} holds no submodule's files: its side would have "
                          "no workloads to compare with; keep the workloads in the repository itself")
    for stale in prune_stale_worktrees(repo_top):
        console.echo(f"perfgate: removed the stale worktree {stale} (its perfgate did not finish)", err=True)
    holder = Path(tempfile.mkdtemp(prefix=HOLDER_PREFIX))
    path = holder / "base"
    lock_fd = _lock(holder)  # before the worktree exists: no other perfgate's prune can take it for stale
    add = _git(repo_top, "worktree", "add", "--detach", str(path), commit)
    if add.returncode != 0:
        os.close(lock_fd)
        shutil.rmtree(holder, ignore_errors=True)
        raise ConfigError(f"--against {ref}: git worktree add failed: {add.stderr.strip()[-300:]}")
    notes = []
    pkg_parent = Path(inherit.package_parent())
    mapped_pkg = _map_into(pkg_parent, repo_top, path)
    if mapped_pkg is not None and workers.worker_module(mapped_pkg) is not None:  # REF's own perfgate, either layout
        python_path = base_python_path(str(mapped_pkg))
    else:
        python_path = base_python_path(str(pkg_parent))
        notes.append(f"{ref} carries no perfgate package; its cases run with this perfgate")
    dirs = []
    for wd in settings.workloads_dirs:
        mapped = _map_into(wd, repo_top, path)
        if mapped is None:
            dirs.append(Path(wd))
            notes.append(f"workloads dir {wd} is outside the repository; base and head share it")
        elif mapped.is_dir():
            dirs.append(mapped)
    return BaseCheckout(ref=ref, commit=commit, path=path, repo_top=repo_top, python_path=python_path,
                        workloads_dirs=tuple(dirs), notes=notes, lock_fd=lock_fd)


def same_tree(settings: Settings, interpreter: inherit.Interpreter) -> BaseCheckout:
    """The base side of ``run --base-python PATH`` alone: this tree's code and workloads and this perfgate,
    run under ``interpreter``: the change is the environment."""
    top = settings.root.resolve()
    commit = _git(top, "rev-parse", "HEAD")
    base = BaseCheckout(ref="this tree", commit=commit.stdout.strip() if commit.returncode == 0 else "", path=top,
                        repo_top=top, python_path=base_python_path(inherit.package_parent()),
                        workloads_dirs=tuple(Path(d) for d in settings.workloads_dirs), worktree=False)
    use_interpreter(base, interpreter)
    return base


def use_interpreter(base: BaseCheckout, interpreter: inherit.Interpreter) -> None:
    """Run ``base``'s workers under ``interpreter``. Where they would import this perfgate, they find it
    through a folder that holds a link to its package and nothing else: the folder this perfgate lies in
    is often the head environment's site-packages, whose torch and packages would otherwise stand in
    for the base environment's own."""
    base.interpreter = interpreter
    head_parent = Path(inherit.package_parent()).resolve()
    first = base.python_path.split(os.pathsep)[0]
    if interpreter.python and first and Path(first).resolve() == head_parent:
        link_dir = Path(tempfile.mkdtemp(prefix="perfgate-link-"))
        (link_dir / "perfgate").symlink_to(head_parent / "perfgate", target_is_directory=True)
        base.link_dir = link_dir
        base.python_path = base_python_path(str(link_dir))


def base_python_path(base_package_parent: str) -> str:
    """PYTHONPATH for base workers: the folder holding the base's perfgate first, then the user's own entries
    (where packages the workloads or perfgate need may live: a head worker keeps them too, inherit.worker_env),
    less this perfgate's folder, which would otherwise stand in for the base's."""
    head = Path(inherit.package_parent()).resolve()
    user = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and Path(p).resolve() != head]
    return os.pathsep.join(dict.fromkeys([base_package_parent, *user]))


def probe_base(base: BaseCheckout, threads: int) -> Catalog:
    """What the base checkout's own perfgate sees in its own workloads. Under another interpreter
    (``--base-python``), a probe that fails, or a workload file that fails to import there, is an
    InfrastructureError naming the interpreter and what it lacks: never a case judged `new` or `fixed`
    because one side could not run."""
    interp = base.side_interpreter
    try:
        proc = workers.run_worker_command(workers.probe_args(base.workloads_dirs), threads, workers.PROBE_TIMEOUT_S,
                                          {"PYTHONPATH": base.python_path}, cwd=base.cwd, interpreter=interp)
    except OSError as exc:  # the interpreter cannot be started at all
        raise workers.InfrastructureError(f"the base side's Python {interp.executable} cannot be started: "
                                          f"{exc.strerror or exc}") from exc
    if proc.returncode != 0:
        if base.interpreter is not None:
            raise workers.InfrastructureError(f"the base side's Python {interp.executable} cannot run perfgate's "
                                              f"worker: {workers._tail(proc.stderr, 1) or f'exit {proc.returncode}'}")
        raise workers.InfrastructureError(f"the worker probe of {base.ref} failed: {workers._tail(proc.stderr, 1)} "
                                          f"(its workers' PYTHONPATH: {base.python_path})")
    data = parse_probe_answer(proc.stdout, f"the worker probe of {base.ref}")
    base.catalog = Catalog.from_probe(data)
    env = data.get("environment")
    base.environment = {str(k): v for k, v in env.items() if _environment_value(v)} if isinstance(env, dict) else {}
    if base.interpreter is not None and base.catalog.errors:
        err = base.catalog.errors[0]
        raise workers.InfrastructureError(f"the base side's Python {interp.executable} cannot import the workload "
                                          f"file {err.get('file')}: "
                                          f"{str(err.get('error', '')).rsplit(': failed to import: ', 1)[-1]}")
    for err in base.catalog.errors:
        base.notes.append(f"{base.ref}: {err['error']}")
    return base.catalog


def _environment_value(value: Any) -> bool:
    """A value results.json's environment can hold (a scalar, or a list of them): the base's probe is untrusted."""
    scalar = (str, int, float, bool, type(None))
    return isinstance(value, scalar) or (isinstance(value, list) and all(isinstance(v, scalar) for v in value))


def base_suite_cases(base: BaseCheckout, settings: Settings, suite: str, workloads: tuple[str, ...] = (),
                     toggles: tuple[str, ...] = (), size: str | None = None, device: str | None = None
                     ) -> tuple[list[CaseSpec] | None, str]:
    """The cases of ``suite`` as REF plans them: its own configuration (the pyproject.toml at the same place
    in its worktree) and its own catalog (``probe_base``), narrowed by the same command-line choices; [] when
    REF has no such suite. (None, why) when REF's cannot be planned."""
    from perfgate.model import config
    from perfgate.running import plan

    where = f"{base.ref} ({base.commit[:12]})"
    if base.catalog is None:
        return None, f"{where} was not probed"
    if settings.source is not None:
        mapped = _map_into(settings.source, base.repo_top, base.path)
        if mapped is None or not mapped.is_file():
            return None, f"{where} has no {settings.source.name} where this checkout has one"
        load_args: dict[str, Any] = {"config": mapped}
    else:
        load_args = {"cwd": _map_into(settings.root, base.repo_top, base.path) or base.path}
    try:
        base_settings = config.load(**load_args)
        if suite not in base_settings.suites:
            return [], ""
        return plan.plan_cases(base_settings.suite(suite), base.catalog, workloads, toggles, size, device), ""
    except ConfigError as exc:
        return None, f"suite {suite!r} could not be planned at {where}: {exc}"


def _import_error(base: BaseCheckout, head_file: str | None) -> str | None:
    """The import error of the base's copy of ``head_file`` (the exception), when its probe reported one."""
    cat = base.catalog
    mapped = _map_into(Path(head_file), base.repo_top, base.path) if head_file and cat is not None else None
    if mapped is None or cat is None:
        return None
    for err in cat.errors:
        file = err.get("file")
        if isinstance(file, str) and Path(file).resolve() == mapped.resolve():
            return str(err.get("error", "")).rsplit(": failed to import: ", 1)[-1]
    return None


def base_has(base: BaseCheckout, spec: CaseSpec, head_file: str | None = None) -> str | None:
    """None when REF can run ``spec``; else why not (its workload, size or a toggle does not exist there, or
    the base's copy of ``head_file``, the head's workload file, failed to import)."""
    cat = base.catalog
    # a ref by its name and the commit it is at; a commit (settling against a baseline's) by its short hash
    where = f"commit {base.commit[:12]}" if base.ref == base.commit else f"{base.ref} ({base.commit[:12]})"
    if cat is None or spec.workload not in cat.workloads:
        error = _import_error(base, head_file)
        if error is not None:
            return f"workload {spec.workload!r} could not be loaded at {where}: its file failed to import there ({error})"
        return f"workload {spec.workload!r} does not exist at {where}"
    info = cat.workloads[spec.workload]
    if spec.size not in info.get("sizes", {}):
        return f"size {spec.size!r} of {spec.workload} does not exist at {where}"
    known = {t["name"] for t in cat.toggles} | set(info.get("variants", {}))
    missing = [t for t in spec.toggles if t not in known]
    if missing:
        return f"toggle {', '.join(missing)} does not exist at {where}"
    return None


def side_compile_caches(spec: CaseSpec, run_dir: Path, base_dir: Path, persistent: Path | None
                        ) -> tuple[tuple[dict[str, str], str], tuple[dict[str, str], str]]:
    """runner.compile_cache_env for head and base: each side's own cache, fresh (cold means cold on both
    sides) or persistent (base in ``persistent/against-base``), never shared, so that neither side's first
    compile finds the other's graphs."""
    return (runner.compile_cache_env(run_dir, spec, persistent),
            runner.compile_cache_env(base_dir, spec, persistent / "against-base" if persistent else None))


def lockstep_pair(base_job: runner.LockstepJob, head_job: runner.LockstepJob, settings: Settings,
                  index: int) -> tuple[workers.ProcessOutcome, workers.ProcessOutcome]:
    """Pair ``index``: base and head workers sampling in turns (runner.run_lockstep), the side that goes
    first alternating from pair to pair; returns (base, head)."""
    first_base = index % 2 == 0
    outs = runner.run_lockstep([base_job, head_job] if first_base else [head_job, base_job], settings, rotate=index)
    return (outs[0], outs[1]) if first_base else (outs[1], outs[0])


def _unsampled(result: dict[str, Any]) -> bool:
    """A worker that ended ok without a timed sample: stopped by its lockstep partner before sampling."""
    return result.get("status") == STATUS_OK and not (result.get("process") or {}).get("samples_ns")


def run_pair(spec: CaseSpec, head_file: str, base: BaseCheckout, settings: Settings, run_dir: Path,
             base_dir: Path, sampler: Any = None) -> tuple[CaseResult, CaseResult | None]:
    """Run one case on head and base, processes alternating A B B A ...; base None when REF lacks the case.

    Without ``sampler``: ``settings.processes`` pairs. With one (perfgate.judging.sequential.Sampler): pairs are
    added look by look until it is settled or its budget is spent (``metadata["sampling"]`` says which)."""
    t0 = time.perf_counter()
    missing = base_has(base, spec, head_file)
    base_file = base.catalog.workloads[spec.workload]["file"] if missing is None and base.catalog else None
    (head_env, head_cache), (base_env, base_cache) = side_compile_caches(spec, run_dir, base_dir,
                                                                         settings.compile_cache)
    base_env["PYTHONPATH"] = base.python_path
    head_results: list[dict[str, Any]] = []
    base_results: list[dict[str, Any]] = []
    t_head = t_base = 0.0
    target: int | None = sampler.first if sampler is not None else settings.processes
    while target is not None:
        while len(head_results) < target:
            i = len(head_results)
            head_job = runner.LockstepJob(runner.case_config(spec, head_file, settings, i, run_dir, profile=(i == 0)),
                                          run_folders.run_work_dir(run_dir), head_env)
            if base_file is None:  # REF lacks the case: head alone, as a plain run would measure it
                out = workers.run_worker(head_job.cfg, settings.timeout_s, settings.threads, head_job.work_dir,
                                         head_env)
                head_results.append(out.result)
                t_head += out.wall_s
            else:
                base_cfg = runner.case_config(spec, base_file, settings, i, base_dir, profile=(i == 0))
                base_cfg["timing"].pop("layouts", None)  # pairs never regroup; an older base worker lacks the key
                base_job = runner.LockstepJob(base_cfg, base_dir / ".work", base_env, base.cwd, base.side_interpreter)
                # base and head side by side, sampling in turns: the same moments of the machine for both
                base_out, head_out = lockstep_pair(base_job, head_job, settings, i)
                if base_out.result.get("status") != STATUS_OK and _unsampled(head_out.result):
                    # the base failed before sampling and stopped the head with it: the head is measured
                    # alone, as a plain run would, so a `fixed` verdict rests on a head that ran its steps
                    t_head += head_out.wall_s
                    head_out = workers.run_worker(head_job.cfg, settings.timeout_s, settings.threads,
                                                  head_job.work_dir, head_env)
                head_results.append(head_out.result)
                base_results.append(base_out.result)
                t_head += head_out.wall_s
                t_base += base_out.wall_s
            if any(r.get("status") != STATUS_OK for r in head_results + base_results):
                break  # a skip or failure on either side ends the case for both
        head = runner.case_from_results(spec, head_results, len(head_results), t0, head_cache)
        base_case = (runner.case_from_results(spec, base_results, len(base_results), t0, base_cache)
                     if base_file is not None else None)
        ended = head.status != STATUS_OK or (base_case is not None and base_case.status != STATUS_OK)
        if sampler is None or ended:
            if sampler is not None and ended:
                sampler.end("a process skipped or failed")
            target = None
        elif base_file is None:  # no look can compare with a base that lacks the case: say why, not "settled"
            sampler.end(f"not compared: {missing}")
            target = None
        else:
            target = sampler.next_target(len(head_results), time.perf_counter() - t0, head, base_case)
    if sampler is not None:
        head.metadata["sampling"] = sampler.record(len(head.processes), time.perf_counter() - t0)
    head.duration_s = t_head
    if base_case is None:
        head.metadata["against"] = missing
        return head, None
    base_case.duration_s = t_base
    return head, base_case
