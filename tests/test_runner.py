"""perfgate.running.runner: a killed orchestrator leaves a valid results.json and no worker; run folders."""

from __future__ import annotations

import functools
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, TEST_WORKLOADS, cli_env

from perfgate.model.results import load_results
from perfgate.protocol import layout
from perfgate.running import inherit, run_folders, workers
from perfgate.running.inherit import worker_env
from perfgate.running.run_folders import latest_run_dir, mark_latest, new_run_id, unique_run_dir


def processes_mentioning(text: str) -> list[int]:
    """Pids of live processes whose command line contains ``text`` (Linux /proc)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().split(") ", 1)[1][0]
        except OSError:
            continue
        if text in cmdline and state != "Z":
            pids.append(int(entry.name))
    return pids


def wait_for(condition, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.slow
def test_killing_the_orchestrator_leaves_valid_results_and_no_worker(tmp_path):
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "perfgate", "run", "--workloads-dir", str(TEST_WORKLOADS), "-w", "tiny",
           "-w", "slow_build", "-t", "eager", "--processes", "1", "--samples", "3", "--out", str(out)]
    orchestrator = subprocess.Popen(cmd, cwd=REPO, env=cli_env(), stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL)
    try:
        def first_case_done_and_second_running():
            results = out / "results.json"
            if not results.is_file() or not load_results(results).cases:
                return None
            return processes_mentioning(str(out / ".work"))

        workers = wait_for(first_case_done_and_second_running, 120, "case 1 written and case 2's worker")
        os.kill(orchestrator.pid, signal.SIGKILL)
        orchestrator.wait(timeout=30)
    finally:
        if orchestrator.poll() is None:
            orchestrator.kill()
            orchestrator.wait()
    run = load_results(out / "results.json")  # valid JSON, the current schema
    assert [c.key for c in run.cases] == ["tiny/smoke/eager/cpu"]
    assert run.cases[0].status == "ok" and run.finished_at is None
    # PR_SET_PDEATHSIG: the slow worker dies with its parent instead of sleeping on
    wait_for(lambda: not processes_mentioning(str(out / ".work")), 10, f"workers {workers} to die")


def _alive(pid: int) -> bool:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def _started_pids(pids_file: Path) -> list[int]:
    return [int(p) for p in pids_file.read_text().split()] if pids_file.is_file() else []


def _all_end(pids: list[int], at_least: int, what: str) -> None:
    """At least ``at_least`` pids, all of which end within 10 s; any still alive is killed either way."""
    try:
        assert len(pids) >= at_least, pids
        wait_for(lambda: not [p for p in pids if _alive(p)], 10, f"{what} {pids} to end")
    finally:
        for p in pids:
            if _alive(p):
                os.kill(p, signal.SIGKILL)


needs_linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="subreapers and /proc are Linux's")


@needs_linux
@pytest.mark.parametrize("start, hang_s, timeout_s", [("fork", "3600", "5"), ("spawn", "3600", "10"),
                                                       ("fork", "0", "60")])
@pytest.mark.slow
def test_a_worker_leaves_no_process_behind(tmp_path, start, hang_s, timeout_s):
    """Children in the worker's process group, in a session of their own, and orphaned below it: all end
    with the worker, at a timeout (fork server or spawned) and when it ends by itself."""
    pids_file = tmp_path / "pids"
    proc = subprocess.run([sys.executable, "-m", "perfgate", "run", "--workloads-dir", str(TEST_WORKLOADS), "-w",
                           "spawns_children", "-t", "eager", "--processes", "1", "--samples", "3",
                           "--timeout", timeout_s, "--out", str(tmp_path / "run")], cwd=REPO,
                          env=cli_env(PERFGATE_TEST_PIDS_FILE=str(pids_file), PERFGATE_WORKER_START=start,
                                      PERFGATE_TEST_HANG_S=hang_s),
                          capture_output=True, text=True, timeout=300)
    pids = _started_pids(pids_file)
    try:
        assert proc.returncode == (3 if hang_s != "0" else 0), proc.stdout + proc.stderr  # 3: no case could run
        case = load_results(tmp_path / "run" / "results.json").cases[0]
        assert case.status == ("failed" if hang_s != "0" else "ok")
    finally:
        _all_end(pids, 3, "the workload's processes")  # a build: 3 more


@needs_linux
@pytest.mark.slow
def test_killing_the_orchestrator_ends_what_its_workers_started(tmp_path):
    pids_file = tmp_path / "pids"
    cmd = [sys.executable, "-m", "perfgate", "run", "--workloads-dir", str(TEST_WORKLOADS), "-w", "spawns_children",
           "-t", "eager", "--processes", "1", "--samples", "3", "--out", str(tmp_path / "run")]
    orchestrator = subprocess.Popen(cmd, cwd=REPO, env=cli_env(PERFGATE_TEST_PIDS_FILE=str(pids_file)),
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pids: list[int] = []
    try:
        pids = wait_for(lambda: len(_started_pids(pids_file)) >= 3 and _started_pids(pids_file), 120,
                        "the workload's three processes")
        os.kill(orchestrator.pid, signal.SIGKILL)
        orchestrator.wait(timeout=30)
        wait_for(lambda: not [p for p in pids if _alive(p)], 15, f"the workload's processes {pids} to end")
    finally:
        if orchestrator.poll() is None:
            orchestrator.kill()
            orchestrator.wait()
        for p in pids:
            if _alive(p):
                os.kill(p, signal.SIGKILL)


def test_run_ids_folders_and_latest(tmp_path):
    run_id = new_run_id("smoke", now=0)
    assert run_id.endswith("-smoke") and len(run_id.split("-")) == 3
    first = unique_run_dir(tmp_path, "r")
    assert first == tmp_path / "r"
    first.mkdir()
    assert unique_run_dir(tmp_path, "r") == tmp_path / "r-2"
    assert latest_run_dir(tmp_path) is None
    (first / "results.json").write_text("{}")
    assert latest_run_dir(tmp_path) == first  # no LATEST: the newest results.json
    second = tmp_path / "r-2"
    second.mkdir()
    (second / "results.json").write_text("{}")
    os.utime(first / "results.json", (time.time() + 10, time.time() + 10))
    mark_latest(tmp_path, second)
    assert latest_run_dir(tmp_path) == second


@pytest.mark.parametrize("latest", [b"../elsewhere", b"/abs/elsewhere", b"..", b"\xff\xfe", b"link", b"run\x00"])
def test_latest_names_only_a_run_folder_of_the_reports_folder(tmp_path, latest):
    """reports/LATEST (a file in the checkout, committed or not) named any folder: `../elsewhere` or an
    absolute path made `baseline update`, `trace` and `tensorboard` read a run outside reports/, and bytes
    that are not UTF-8 were exit 3 ('unexpected UnicodeDecodeError'). Such a LATEST is ignored."""
    reports, elsewhere = tmp_path / "reports", tmp_path / "elsewhere"
    for d in (reports / "run", elsewhere):
        d.mkdir(parents=True)
        (d / "results.json").write_text("{}")
    (tmp_path / "abs").mkdir()
    (tmp_path / "abs" / "elsewhere").symlink_to(elsewhere)
    (reports / "link").symlink_to(elsewhere)
    os.utime(elsewhere / "results.json", (time.time() + 10, time.time() + 10))
    (reports / "LATEST").write_bytes(latest.replace(b"/abs", str(tmp_path / "abs").encode()))
    assert latest_run_dir(reports) == reports / "run"


@pytest.mark.parametrize("text, fixed", [("42", True), ("\u00b2", False), ("\u0664\u0662", False), ("x", False)])
def test_a_layout_seed_that_is_no_plain_integer_draws_one(monkeypatch, text, fixed):
    """PERFGATE_LAYOUT_SEED='²' passed str.isdigit() and then failed int(): exit 3 at the run's first layout."""
    from perfgate.protocol import layout

    monkeypatch.setenv(layout.LAYOUT_SEED_ENV, text)
    monkeypatch.setattr(layout, "_seed", [])
    seed = layout.run_seed()
    assert isinstance(seed, int) and (seed == 42) == fixed
    assert isinstance(layout.reseed(1), int)


def test_worker_env_pins_threads():
    env = worker_env(3)
    assert env["OMP_NUM_THREADS"] == "3" and env["MKL_NUM_THREADS"] == "3"
    assert str(REPO) in env["PYTHONPATH"].split(os.pathsep)


def test_workers_get_the_allow_list_and_what_the_config_names_not_secrets(monkeypatch):
    from perfgate.running import inherit

    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cret")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_x")
    monkeypatch.setenv("PERFGATE_HISTORY_URL", "postgresql://u:pw@db/h")
    monkeypatch.setenv("MY_KNOB", "1")
    monkeypatch.setenv("SIM_DATA_DIR", "/data")
    monkeypatch.setenv("PERFGATE_LAYOUT", "fixed")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    monkeypatch.setenv("LANG", "C.UTF-8")
    monkeypatch.setattr(inherit, "_config_env_names", ())
    env = worker_env(1)
    for kept in ("PATH", "PERFGATE_LAYOUT", "CUDA_VISIBLE_DEVICES", "LANG", "PYTHONHASHSEED", "OMP_NUM_THREADS"):
        assert kept in env, kept
    for secret in ("AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN", "PERFGATE_HISTORY_URL", "MY_KNOB", "SIM_DATA_DIR"):
        assert secret not in env, secret
    inherit.set_config_env_names(["MY_KNOB", "SIM_*"])
    env = worker_env(1)
    assert env["MY_KNOB"] == "1" and env["SIM_DATA_DIR"] == "/data" and "GITHUB_TOKEN" not in env


@pytest.mark.slow
def test_a_workload_sees_only_the_allow_list_and_the_configured_names(tmp_path):
    """End to end: `perfgate run` with a secret in its environment; the workload records what it sees."""
    (tmp_path / "workloads").mkdir()
    (tmp_path / "workloads" / "envspy.py").write_text(
        "import json, os\n"
        "from perfgate.workload import Built, Workload\n"
        "import torch\n"
        "class EnvSpy(Workload):\n"
        "    name = 'envspy'\n"
        "    description = 'records the environment it sees (test only)'\n"
        "    sizes = {s: {'steps': 1} for s in ('smoke', 'pr', 'full')}\n"
        "    def build(self, params, device, dtype, variants):\n"
        f"        open({str(tmp_path / 'seen.json')!r}, 'w').write(json.dumps(dict(os.environ)))\n"
        "        return Built(model=None, state=torch.zeros(2))\n"
        "    def step(self, model, state, built, params):\n"
        "        return state + 1\n")
    (tmp_path / "pyproject.toml").write_text('[tool.perfgate]\nworker_env = ["MY_KNOB"]\n')
    proc = subprocess.run([sys.executable, "-m", "perfgate", "run", "-w", "envspy", "-t", "eager", "--processes",
                           "1", "--samples", "3", "--out", str(tmp_path / "run")], cwd=tmp_path,
                          env=cli_env(GITHUB_TOKEN="ghp_secret", MY_KNOB="7", PERFGATE_WORKER_START="spawn"),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    seen = json.loads((tmp_path / "seen.json").read_text())
    assert "GITHUB_TOKEN" not in seen and seen["MY_KNOB"] == "7" and "PATH" in seen


def _tiny_run(tmp_path: Path, **env: str) -> dict:
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "perfgate", "run", "--workloads-dir", str(TEST_WORKLOADS), "-w",
                           "tiny", "-w", "fault_abort", "-t", "eager", "--processes", "2", "--samples", "3",
                           "--out", str(out)], cwd=REPO, env=cli_env(**env), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = load_results(out / "results.json")
    assert not list((out / ".work").glob("zygote-*.log"))  # the fork server cleaned up after itself
    assert not list((out / ".work").glob("probe-*"))  # and the probe after itself
    return {c.spec.workload: c for c in run.cases}


@pytest.mark.slow
def test_workers_are_forked_from_a_zygote_by_default_and_spawned_on_request(tmp_path):
    """Fork server or not, each worker is a process of its own: the same results, the same fault classes."""
    if not sys.platform.startswith("linux"):
        pytest.skip("the fork server is Linux only")
    forked = _tiny_run(tmp_path / "fork")
    spawned = _tiny_run(tmp_path / "spawn", PERFGATE_WORKER_START="spawn")
    for cases, how in ((forked, "fork"), (spawned, "spawn")):
        tiny = cases["tiny"]
        assert tiny.status == "ok" and len(tiny.processes) == 2
        assert tiny.metadata["worker_start"] == how
        assert cases["fault_abort"].failure_class == "crash" and "SIGABRT" in cases["fault_abort"].message


HEAPSPY = """
import ctypes, os
import torch
from perfgate.workload import Built, Workload
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
class HeapSpy(Workload):
    name = "heapspy"
    description = "records where a worker's first allocations land (test only)"
    sizes = {s: {"steps": 1} for s in ("smoke", "pr", "full")}
    def build(self, params, device, dtype, variants):
        where = [libc.malloc(n) for n in (24, 200, 1000, 5000, 40000, 100000, 1 << 26)]
        with open(os.environ["HEAPSPY_OUT"], "a") as fh:
            fh.write(f"{os.getpid()} " + " ".join(f"{a:x}" for a in where) + "\\n")
        return Built(model=None, state=torch.zeros(2))
    def step(self, model, state, built, params):
        return state + 1
"""


def _heapspy_project(root: Path, *env_names: str) -> None:
    (root / "workloads").mkdir()
    (root / "workloads" / "heapspy.py").write_text(HEAPSPY)
    names = ", ".join(f'"{n}"' for n in ("HEAPSPY_OUT", *env_names))
    (root / "pyproject.toml").write_text(f"[tool.perfgate]\nworker_env = [{names}]\n")


@pytest.mark.slow
def test_a_request_too_large_for_the_fork_server_is_spawned_instead(tmp_path):
    """The zygote takes requests of up to REQUEST_MAX bytes into a buffer it made once; a worker whose
    environment is larger is spawned, with a line that says why, and measures all the same."""
    from perfgate.running.zygote import REQUEST_MAX

    if not sys.platform.startswith("linux"):
        pytest.skip("the fork server is Linux only")
    big = {f"BIG{i}": "x" * 100_000 for i in range(3)}  # one variable may hold 128 KiB at most (execve)
    assert sum(map(len, big.values())) > REQUEST_MAX
    _heapspy_project(tmp_path, *big)
    proc = subprocess.run([sys.executable, "-m", "perfgate", "run", "-w", "heapspy", "-t", "eager",
                           "--processes", "2", "--samples", "3", "--out", str(tmp_path / "run")], cwd=tmp_path,
                          env=cli_env(HEAPSPY_OUT=str(tmp_path / "heap.txt"), **big), capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"over {REQUEST_MAX} bytes" in proc.stderr and "spawning this worker instead" in proc.stderr
    case = json.loads((tmp_path / "run" / "results.json").read_text())["cases"][0]
    assert case["status"] == "ok" and case["metadata"]["worker_start"] == "spawn"
    assert len(case["processes"]) == 2


@pytest.mark.slow
def test_the_fork_server_serves_on_after_a_request_too_large_for_it(tmp_path):
    """The zygote numbers requests as it receives them; one refused before sending must not shift the
    numbers, or every later worker would wait a minute for an answer under another number."""
    from perfgate.running.zygote import REQUEST_MAX, Zygote, ZygoteUnavailable

    if not sys.platform.startswith("linux"):
        pytest.skip("the fork server is Linux only")
    z = Zygote(worker_env(1, None), None, tmp_path)
    try:
        with pytest.raises(ZygoteUnavailable, match=f"over {REQUEST_MAX} bytes"):
            z.spawn("x", str(tmp_path / "out.json"), str(tmp_path / "log"), {"BIG": "x" * REQUEST_MAX}, None)
        t0 = time.perf_counter()
        child = z.spawn("x", str(tmp_path / "out.json"), str(tmp_path / "log"), {}, None)
        child.wait(60)  # the case file does not exist: the worker fails at once, it was forked all the same
        assert time.perf_counter() - t0 < 30 and child.pid > 0
    finally:
        z.close()


GLIBC = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"
GLIBC_STEADY = "steady" if GLIBC else "unavailable"  # what a worker's steady_malloc() gives here

# Two large temporaries alive at once, then freed, every step: with glibc's default thresholds the second step
# on takes them from the heap's top and the frees hand the top back to the kernel (past twice the raised
# mmap threshold), so every step faults them in again; with the steady thresholds they stay (docs/gate.md)
THRASH = r"""
import ctypes, json, resource
from perfgate.protocol import layout
state = layout.steady_malloc()
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_size_t], [ctypes.c_void_p]
faults = []
for step in range(20):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    a, b = libc.malloc(1 << 20), libc.malloc(1 << 20)
    ctypes.memset(a, 1, 1 << 20); ctypes.memset(b, 1, 1 << 20)
    libc.free(b); libc.free(a)
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
big = libc.malloc(16 << 20)  # after the loop: freeing a mapped block this size would raise glibc's thresholds
heaps = [[int(x, 16) for x in line.split()[0].split("-")] for line in open("/proc/self/maps")
         if line.rstrip().endswith("[heap]")]
in_heap = any(lo <= big < hi for lo, hi in heaps)
print(json.dumps({"state": state, "in_heap": in_heap, "faults": faults}))
"""


@pytest.mark.skipif(not GLIBC, reason="the steady thresholds are glibc's mallopt parameters")
def test_the_steady_allocator_keeps_large_temporaries_instead_of_faulting_them_in_every_step():
    """The conv rollout's "performance modes" were glibc's malloc: some processes handed their large
    temporaries back to the kernel at every step and faulted them in again (12,000-18,000 page faults a unit,
    1.3-2x slower), others not, depending on what they had allocated before. A worker fixes the thresholds
    first (PERFGATE_MALLOC=steady, the default): a 16 MiB block comes from the heap and a step's two 1 MiB
    temporaries fault in once, not every step; PERFGATE_MALLOC=system keeps glibc's defaults."""
    seen = {}
    for policy in ("steady", "system"):
        proc = subprocess.run([sys.executable, "-c", THRASH], env=cli_env(PERFGATE_MALLOC=policy),
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        seen[policy] = json.loads(proc.stdout)
    steady, system = seen["steady"], seen["system"]
    assert steady["state"] == "steady" and system["state"] == "system"
    assert steady["in_heap"] and not system["in_heap"], seen
    assert sum(steady["faults"][2:]) < 50, seen  # faulted in once, then kept
    assert min(system["faults"][2:]) >= 400, seen  # 2 MiB = 512 pages, in every step


def test_an_unknown_malloc_policy_is_the_default(monkeypatch):
    monkeypatch.setenv(layout.MALLOC_ENV, "jemalloc")
    assert layout.malloc_policy() == "steady"
    monkeypatch.setenv(layout.MALLOC_ENV, "system")
    assert layout.malloc_policy() == "system" and layout.steady_malloc() == "system"


MALLOC_SHIM = """
#include <stddef.h>
extern void *__libc_malloc(size_t);
void *malloc(size_t n) { return __libc_malloc(n); }
"""
ALLOCATOR_STATE = ("from perfgate.protocol import layout\n"
                   "print(layout.steady_malloc(), layout.malloc_state(), layout.preloaded_malloc())\n")


@pytest.mark.slow
def test_a_preloaded_allocator_is_recorded_as_preloaded_and_left_alone(tmp_path):
    """jemalloc or tcmalloc through LD_PRELOAD serve malloc instead of glibc: setting glibc's thresholds
    there succeeds and changes nothing, so perfgate sets nothing and records ``preloaded`` with the library.
    A stand-in: a shared object of one malloc, built here, interposed the way a real one is."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if not GLIBC or compiler is None:
        pytest.skip("needs glibc and a C compiler to build an LD_PRELOAD'ed malloc")
    (tmp_path / "shim.c").write_text(MALLOC_SHIM)
    shim = tmp_path / "libshim.so"
    built = subprocess.run([compiler, "-shared", "-fPIC", "-O2", "-o", str(shim), str(tmp_path / "shim.c")],
                           capture_output=True, text=True, timeout=120)
    if built.returncode != 0:
        pytest.skip(f"the C compiler could not build a shared object: {built.stderr[-300:]}")
    env = {k: v for k, v in cli_env().items() if k not in (layout.MALLOC_ENV, "LD_PRELOAD")}
    plain = subprocess.run([sys.executable, "-c", ALLOCATOR_STATE], env=env, capture_output=True, text=True,
                           timeout=120)
    assert plain.stdout.split() == ["steady", "steady", "None"], plain.stdout + plain.stderr
    preloaded = subprocess.run([sys.executable, "-c", ALLOCATOR_STATE], env={**env, "LD_PRELOAD": str(shim)},
                               capture_output=True, text=True, timeout=120)
    assert preloaded.stdout.split() == ["preloaded", "preloaded", str(shim)], preloaded.stdout + preloaded.stderr


USER_THRESHOLD_PROBE = """
import ctypes, json
from perfgate.protocol import layout
held = layout.hold_malloc()
libc = ctypes.CDLL("libc.so.6")
class Info(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                     "fsmblks", "uordblks", "fordblks", "keepcost")]
libc.mallinfo2.restype = Info
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
before = libc.mallinfo2().hblks
block = libc.malloc(1 << 20)
print(json.dumps({**held, "mapped": libc.mallinfo2().hblks - before}))
"""


@pytest.mark.parametrize("knob", [{"MALLOC_MMAP_THRESHOLD_": "65536"},
                                  {"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=65536"}])
def test_a_users_own_malloc_threshold_is_kept_and_recorded(knob):
    """A team measuring what its production runs sets glibc's own knob: the steady policy keeps that
    threshold as set (a 1 MiB block is still mapped, past the user's 64 KiB), fixes the other, and says
    which is which; glibc's knobs reach the workers and are recorded among the tuning variables."""
    if not GLIBC or not hasattr(__import__("ctypes").CDLL(None), "mallinfo2"):
        pytest.skip("glibc 2.33 or later (mallinfo2) needed")
    env = {k: v for k, v in cli_env(**knob).items() if k != layout.MALLOC_ENV}
    proc = subprocess.run([sys.executable, "-c", USER_THRESHOLD_PROBE], env=env, capture_output=True, text=True,
                          timeout=120)
    held = json.loads(proc.stdout.strip().splitlines()[-1])
    assert held["malloc"] == "steady" and held["mapped"] == 1, held
    assert held["user"] == {"mmap_threshold": next(iter(knob))}
    assert held["set"] == {"trim_threshold": layout.STEADY_TRIM_THRESHOLD}
    assert layout.user_thresholds({}) == {}
    (name, value), = knob.items()
    tuning = {"MALLOC_ARENA_MAX": "2", name: value}
    assert all(inherit.passed_to_workers(n, ()) for n in tuning)
    assert inherit.tuning_environment(tuning) == dict(sorted(tuning.items()))


def test_layout_draws_are_seeded_per_process_and_spread():
    from perfgate.protocol import layout

    draws = [layout.draw(i, seed=7, which="drawn") for i in range(64)]
    assert draws == [layout.draw(i, seed=7, which="drawn") for i in range(64)]  # a seed and index: one layout
    assert len({(d.heap_offset, d.mmap_pages) for d in draws}) == 64
    other = [layout.draw(i, seed=8, which="drawn") for i in range(64)]
    assert sum(a == b for a, b in zip(draws, other, strict=True)) <= 1  # another run: other layouts
    offsets = [d.heap_offset for d in draws] + [d.heap_offset for d in other]
    assert all(d % layout.HEAP_STEP == 0 and 0 < d <= layout.HEAP_SPAN for d in offsets)
    assert max(offsets) - min(offsets) > layout.HEAP_SPAN // 2  # spread over the span, not one corner
    pages = [d.mmap_pages for d in draws + other]
    assert all(0 <= n < layout.MMAP_PAGES for n in pages) and max(pages) - min(pages) > layout.MMAP_PAGES // 2
    # the pre-2026-11-26 policy: a heap offset per index, every offset of a page once over 64 indices
    fixed = [layout.draw(i, which="fixed") for i in range(layout.INDEX_OFFSETS)]
    assert len({(d.heap_offset - layout.INDEX_BASE) % 4096 for d in fixed}) == layout.INDEX_OFFSETS
    assert {d.mmap_pages for d in fixed} == {0} and {d.seed for d in fixed} == {None}


def test_the_none_layout_policy_draws_nothing_and_keeps_aslr_off(monkeypatch):
    """PERFGATE_LAYOUT=none switches the drawn layouts off (benchmarks/gate_ablation.py): no heap offset, no
    reserved pages, and still no address-space randomisation, so only the draws differ from the default."""
    from perfgate.protocol import layout

    monkeypatch.setenv(layout.LAYOUT_ENV, "none")
    assert layout.policy() == "none"
    assert layout.draw(3, seed=7) == layout.Layout("none", None, 0, 0)
    assert layout.fixed_layout_wanted() == sys.platform.startswith("linux")


@pytest.mark.slow
def test_each_worker_lands_where_its_drawn_layout_puts_it(tmp_path):
    """A worker forked after the k-th request must not inherit a heap that handling k requests shaped, and
    each process draws its own layout from the run's seed (perfgate.protocol.layout): with one seed, index i's
    allocations sit where they sat in the last run relative to index 0's, whatever the run folder is
    called (at one length: a name of another length moves the heap, docs/gate.md) or how many processes run;
    another seed moves them; results.json records every draw."""
    from perfgate.protocol import layout

    if not sys.platform.startswith("linux"):
        pytest.skip("the fork server is Linux only")
    _heapspy_project(tmp_path)
    runs = []
    for n, name, seed in ((4, "run-a", "11"), (5, "run-b", "11"), (4, "run-c", "12")):
        seen = tmp_path / f"{name}.txt"
        proc = subprocess.run([sys.executable, "-m", "perfgate", "run", "-w", "heapspy", "-t", "eager",
                               "--processes", str(n), "--samples", "3", "--out", str(tmp_path / name)],
                              cwd=tmp_path, env=cli_env(HEAPSPY_OUT=str(seen), PERFGATE_LAYOUT="drawn",
                                                        PERFGATE_LAYOUT_SEED=seed),
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        first: dict[str, str] = {}  # each worker's first build (process 0 builds once more, for accuracy)
        for line in seen.read_text().splitlines():
            pid, where = line.split(" ", 1)
            first.setdefault(pid, where)
        runs.append(list(first.values()))  # in process order: one process at a time
        data = json.loads((tmp_path / name / "results.json").read_text())
        assert data["environment"]["layout_policy"] == "drawn" and data["environment"]["layout_seed"] == int(seed)
        drawn = [{k: v for k, v in p["layout"].items() if k != "moved_to" and not k.startswith("malloc")}
                 for p in data["cases"][0]["processes"]]
        assert drawn == [layout.draw(i, seed=int(seed), which="drawn").to_json() for i in range(n)]
        assert data["environment"]["malloc"] == GLIBC_STEADY
        assert {p["layout"]["malloc"] for p in data["cases"][0]["processes"]} == {GLIBC_STEADY}
        # the reserved pages move every later mapping (the 64 MiB allocation is one: past the steady allocator's
        # 32 MiB mmap threshold, docs/gate.md) by exactly that much
        big = [int(row.split()[-1], 16) for row in runs[-1]]
        assert [b - big[0] for b in big] == [(drawn[0]["mmap_pages"] - d["mmap_pages"]) * 4096 for d in drawn], runs[-1]
    assert [len(r) for r in runs] == [4, 5, 4]
    shown = "\n".join(runs[0] + ["--"] + runs[1] + ["--"] + runs[2])
    # Where each index's mapping lands relative to index 0's: the same in both runs of one seed, another with
    # another seed. Only the mapping: small allocations land in whatever free chunk the fork server's heap
    # happens to hold (on the CI machine one run served the 24-byte one from the same hole in every worker,
    # the other run from the heap's top), so their places are not a property of the draw. Not the addresses
    # themselves either: one run's fork server once started 0x140 bytes further up than the other's.
    mapped = [[int(row.split()[-1], 16) for row in run] for run in runs]
    assert [a - mapped[1][0] for a in mapped[1][:4]] == [a - mapped[0][0] for a in mapped[0]], shown
    assert [a - mapped[2][0] for a in mapped[2]] != [a - mapped[0][0] for a in mapped[0]], shown
    # the heap offset moves what is served from the heap's top: the workers of a run do not all land alike
    assert all(len({" ".join(row.split()[:-1]) for row in run}) >= 2 for run in runs), shown
    assert len(set(runs[1])) >= 4, shown


@pytest.mark.slow
def test_a_worker_sampling_three_layouts_builds_the_workload_on_each(tmp_path):
    """``[tool.perfgate.timing] layouts = 3``: each process takes its samples in three groups, the workload
    built anew on another drawn layout for each (what it allocates lands elsewhere), and records the groups
    and the layouts it moved to."""
    from perfgate.protocol import layout

    if not sys.platform.startswith("linux"):
        pytest.skip("the fork server is Linux only")
    _heapspy_project(tmp_path)
    with (tmp_path / "pyproject.toml").open("a") as fh:
        fh.write("[tool.perfgate.timing]\nlayouts = 3\n")
    seen = tmp_path / "builds.txt"
    proc = subprocess.run([sys.executable, "-m", "perfgate", "run", "-w", "heapspy", "-t", "eager", "--processes", "2",
                           "--samples", "3", "--out", str(tmp_path / "run")], cwd=tmp_path,
                          env=cli_env(HEAPSPY_OUT=str(seen), PERFGATE_LAYOUT="drawn", PERFGATE_LAYOUT_SEED="5"),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    processes = json.loads((tmp_path / "run" / "results.json").read_text())["cases"][0]["processes"]
    for i, p in enumerate(processes):
        assert len(p["layout_groups"]) == 3 and min(p["layout_groups"]) >= 3
        assert p["layout"]["moved_to"] == [layout.draw(i, 5, "drawn", g).to_json() for g in (1, 2)]
    builds: dict[str, list[int]] = {}
    for line in seen.read_text().splitlines():
        pid, *where = line.split()
        builds.setdefault(pid, []).append(int(where[-1], 16))  # the 64 MiB allocation of each build
    assert len(builds) == 2 and all(len(set(b)) >= 3 for b in builds.values()), builds


BIG_MODEL = """
import torch
from perfgate.workload import Built, Workload
class BigModel(Workload):
    name = "big_model"
    description = "a model holding one large parameter (test only)"
    sizes = {s: {"steps": 1, "mib": 64} for s in ("smoke", "pr", "full")}
    def build(self, params, device, dtype, variants):
        weight = torch.ones(params["mib"] << 18, dtype=dtype, device=device)  # touched: resident
        return Built(model=weight, state=torch.zeros(4, dtype=dtype, device=device))
    def step(self, model, state, built, params):
        return state + model[:4]
class FreshTemporaries(BigModel):
    name = "fresh_temporaries"
    description = "a step that maps a large temporary in anew every time (test only)"
    def build(self, params, device, dtype, variants):
        return Built(model=None, state=torch.zeros(4, dtype=dtype, device=device))
    def step(self, model, state, built, params):
        temporary = torch.empty(params["mib"] << 18, dtype=state.dtype)  # past the steady mmap threshold
        temporary.fill_(1.0)
        return state + temporary[:4]
"""
MODEL_BYTES = 64 << 20


def _big_model_run(tmp_path: Path, layouts: int, *workloads: str) -> dict[str, dict]:
    (tmp_path / "workloads").mkdir(exist_ok=True)
    (tmp_path / "workloads" / "big_model.py").write_text(BIG_MODEL)
    (tmp_path / "pyproject.toml").write_text(f"[tool.perfgate]\n[tool.perfgate.timing]\nlayouts = {layouts}\n")
    out = tmp_path / f"run-{layouts}"
    proc = subprocess.run([sys.executable, "-m", "perfgate", "run", *(a for w in workloads for a in ("-w", w)),
                           "-t", "eager", "--processes", "1", "--samples", "3", "--out", str(out)], cwd=tmp_path,
                          env=cli_env(PERFGATE_LAYOUT="drawn"), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    cases = {c["spec"]["workload"]: c for c in json.loads((out / "results.json").read_text())["cases"]}
    assert all(c["status"] == "ok" for c in cases.values()), cases
    return cases


@pytest.mark.slow
def test_peak_memory_does_not_count_one_model_per_layout_and_page_faults_show_fresh_temporaries(tmp_path):
    """``layouts = 3`` builds the workload three times in a process: the earlier builds are dropped before
    the next, so ``peak_rss_bytes`` reads one model's worth, as with one layout (it read three). And
    ``page_faults_per_step`` counts what the steps map in anew: a step that faults in a large temporary every
    time shows it, one that does not stays near nothing. Each worker records what its allocator held."""
    if not sys.platform.startswith("linux"):
        pytest.skip("layouts are drawn on Linux only")
    one = _big_model_run(tmp_path, 1, "big_model", "fresh_temporaries")
    three = _big_model_run(tmp_path, 3, "big_model")
    assert len(three["big_model"]["processes"][0]["layout_groups"]) == 3
    peaks = [run["big_model"]["metrics"]["peak_rss_bytes"] for run in (one, three)]
    assert peaks[1] - peaks[0] < MODEL_BYTES / 2, peaks
    quiet = one["big_model"]["metrics"]["page_faults_per_step"]
    faulting = one["fresh_temporaries"]["metrics"]["page_faults_per_step"]
    assert faulting >= MODEL_BYTES / (2 << 20) / 2 and quiet < faulting / 10, (quiet, faulting)  # huge pages or not
    held = one["big_model"]["processes"][0]["layout"]
    if GLIBC:
        assert held["malloc"] == "steady" and held["malloc_user"] == {}
        assert held["malloc_set"] == {"mmap_threshold": layout.STEADY_MMAP_THRESHOLD,
                                      "trim_threshold": layout.STEADY_TRIM_THRESHOLD}


def test_compile_cache_is_fresh_per_case_unless_a_persistent_one_is_named(tmp_path):
    from perfgate.model.results import CaseSpec
    from perfgate.running.runner import case_from_results, compile_cache_env

    spec = CaseSpec("w", "smoke", ("compile",), "cpu")
    env, state = compile_cache_env(tmp_path / "run", spec)
    stale = Path(env["TORCHINDUCTOR_CACHE_DIR"]) / "old"
    stale.mkdir(parents=True)
    env, state = compile_cache_env(tmp_path / "run", spec)  # fresh: emptied every time
    assert state == "fresh" and not stale.exists()
    assert Path(env["TORCHINDUCTOR_CACHE_DIR"]).is_relative_to(tmp_path / "run" / ".work")

    keep = tmp_path / "keep"
    env, state = compile_cache_env(tmp_path / "run", spec, keep)
    assert state == "persistent-cold" and Path(env["TORCHINDUCTOR_CACHE_DIR"]).is_relative_to(keep)
    Path(env["TORCHINDUCTOR_CACHE_DIR"]).mkdir(parents=True)
    (Path(env["TORCHINDUCTOR_CACHE_DIR"]) / "fxgraph").write_text("x")
    assert compile_cache_env(tmp_path / "run", spec, keep)[1] == "persistent-warm"
    assert (Path(env["TORCHINDUCTOR_CACHE_DIR"]) / "fxgraph").exists()  # kept between runs

    from perfgate.running.against import side_compile_caches

    # --against: base and head never share a cache, so neither side's first compile finds the other's
    for persistent in (None, keep):
        (head, head_state), (base, base_state) = side_compile_caches(spec, tmp_path / "run", tmp_path / "run" / "base",
                                                                     persistent)
        dirs = {Path(head["TORCHINDUCTOR_CACHE_DIR"]), Path(base["TORCHINDUCTOR_CACHE_DIR"])}
        assert len(dirs) == 2 and not any(a.is_relative_to(b) for a in dirs for b in dirs if a != b)
        if persistent:
            assert all(d.is_relative_to(keep) for d in dirs)
            assert (head_state, base_state) == ("persistent-warm", "persistent-cold")

    proc = {"process": {"samples_ns": [1000, 1000], "loops": 1}}
    results = [{"status": "ok", **proc, "compile": {"compile_s": 9.0}, "metadata": {}},
               {"status": "ok", **proc, "compile": {"compile_s": 1.5}}]
    cold = case_from_results(spec, results, 2, 0.0, "fresh")
    assert cold.metrics == {"compile_cold_s": 9.0, "compile_warm_s": 1.5} and cold.metadata["compile_cache"] == "fresh"
    warm = case_from_results(spec, results, 2, 0.0, "persistent-warm")
    assert warm.metrics == {"compile_warm_s": 9.0}  # process 0 found the cache warm: no cold figure
    failed = case_from_results(spec, [results[0], {"status": "failed", "failure_class": "oom", "message": "m"}],
                               2, 0.0, "fresh")
    assert (failed.status, failed.failure_class, len(failed.processes)) == ("failed", "oom", 1)
    assert failed.metadata == {"failed_process": 1}


# ---------------------------------------------------------------- the address-space layout (docs/gate.md)

_START_STACK = "import sys; print(open('/proc/self/stat').read().rsplit(')', 1)[1].split()[25])"


def _start_stack(arg: str, env: dict[str, str], padded: bool) -> int:
    """The new process's mm->start_stack (/proc/self/stat field 28), started as perfgate starts workers."""
    cmd = [sys.executable, "-c", _START_STACK, arg]
    out = subprocess.run(cmd, env=layout.padded_env(cmd, env) if padded else env, capture_output=True,
                         text=True, check=True, preexec_fn=functools.partial(workers._die_with_parent, os.getpid()))
    return int(out.stdout)


@pytest.mark.skipif(workers.address_layout() != "fixed", reason="no fixed address-space layout here (not Linux, "
                    "PERFGATE_LAYOUT=random, or personality(2) refused)")
def test_workers_start_with_the_same_stack_whatever_their_argv_and_environment_sizes():
    env = inherit.worker_env(1)
    short = ("runs/a", {**env})
    long_ = ("runs/" + "b" * 700, {**env, "CI_JOB_URL": "https://ci.example/" + "9" * 99})
    more = [("runs/a", {**env, **{f"CI_VAR_{i}": "1" for i in range(n)}}) for n in (1, 2, 3)]
    # unpadded, the stack starts below the strings and one pointer per entry (the kernel rounds the pointer
    # block to 16 bytes, hence 1, 2 and 3 more variables: both parities): a longer run folder moves it
    assert _start_stack(short[0], short[1], padded=False) != _start_stack(long_[0], long_[1], padded=False)
    padded = {_start_stack(arg, e, padded=True) for arg, e in (short, long_, *more, short)}
    assert len(padded) == 1


def test_layout_padding_fills_the_exec_strings_to_a_page():
    for extra in (0, 1, 4095, 4096, 5000):
        cmd = ["python", "-m", "perfgate.worker.main", "x" * extra]
        env = layout.padded_env(cmd, {"A": "1", layout.LAYOUT_PAD_ENV: "stale"})
        size = sum(len(a) + 1 for a in cmd) + sum(len(k) + len(v) + 2 for k, v in env.items())
        assert size % 4096 == 0 and (len(cmd) + len(env)) % 64 == 0 and env["A"] == "1"
        assert layout.padded_env(cmd, env) == env  # padding a padded environment changes nothing


ONE_WORKLOAD = '''

class OneWorkload(Workload):
    name = "{name}"
    description = "{description} (test only)"
    sizes = {{"smoke": {{"n": 4}}, "pr": {{"n": 4}}, "full": {{"n": 4}}}}
    channels_last_applies = False

    def build(self, params, device, dtype, variants):
        before_build()
        return Built(model=None, state=torch.zeros(params["n"], device=device, dtype=dtype))

    def step(self, model, state, built, params):
        return state + 1.0
'''
DAEMON_WORKLOAD = '''"""Double-forks a daemon (sleep) when imported, as a careless workload file might; its pid goes to
$PERFGATE_TEST_PIDS_FILE. With PERFGATE_TEST_DIE_IN_BUILD set, build() starts one more and kills its worker
(os._exit), so the worker cannot end what it started (test only)."""

import os

import torch

from perfgate.workload import Built, Workload


def start_daemon():
    first = os.fork()
    if first == 0:  # the daemon's parent: a session of its own, one more fork, gone
        os.setsid()
        second = os.fork()
        if second == 0:
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            os.execvp("sleep", ["sleep", "300"])
        with open(os.environ["PERFGATE_TEST_PIDS_FILE"], "a") as fh:
            fh.write(f"{second}\\n")
        os._exit(0)
    os.waitpid(first, 0)


start_daemon()


def before_build():
    if os.environ.get("PERFGATE_TEST_DIE_IN_BUILD"):
        start_daemon()
        os._exit(1)
''' + ONE_WORKLOAD.format(name="daemon_at_import", description="starts a daemon when imported")


def _daemon_workloads(tmp_path: Path) -> Path:
    folder = tmp_path / "daemon_workloads"
    folder.mkdir()
    (folder / "daemon.py").write_text(DAEMON_WORKLOAD)
    return folder




@needs_linux
@pytest.mark.slow
def test_a_daemon_a_workload_file_starts_at_import_does_not_outlive_perfgate_list(tmp_path):
    """`perfgate list` imports the workload files in a probe: it runs them on the worker's path now."""
    pids_file = tmp_path / "pids"
    proc = subprocess.run([sys.executable, "-m", "perfgate", "list", "--workloads-dir", str(_daemon_workloads(tmp_path))],
                          cwd=REPO, env=cli_env(PERFGATE_TEST_PIDS_FILE=str(pids_file)), capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0 and "daemon_at_import" in proc.stdout, proc.stdout + proc.stderr
    _all_end(_started_pids(pids_file), 1, "the daemons")


@needs_linux
@pytest.mark.slow
def test_a_daemon_left_by_a_spawned_worker_that_died_does_not_outlive_the_run(tmp_path):
    """Spawned workers (PERFGATE_WORKER_START=spawn): one daemon from the probe's import, one from the worker's,
    one from its build, after which the worker dies without ending anything: perfgate, their subreaper
    while the worker ran, ends them."""
    pids_file = tmp_path / "pids"
    proc = subprocess.run([sys.executable, "-m", "perfgate", "run", "--workloads-dir", str(_daemon_workloads(tmp_path)),
                           "-w", "daemon_at_import", "-t", "eager", "--processes", "1", "--samples", "3",
                           "--out", str(tmp_path / "run")], cwd=REPO,
                          env=cli_env(PERFGATE_TEST_PIDS_FILE=str(pids_file), PERFGATE_WORKER_START="spawn",
                                      PERFGATE_TEST_DIE_IN_BUILD="1"),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 3, proc.stdout + proc.stderr  # its only case crashed
    run = load_results(tmp_path / "run" / "results.json")
    assert run.cases[0].failure_class == "crash"
    assert run.environment["probe_start"] == "spawn"  # PERFGATE_WORKER_START=spawn spawns the probe too
    _all_end(_started_pids(pids_file), 3, "the daemons")


@needs_linux
@pytest.mark.slow
def test_a_runs_probe_is_forked_and_a_daemon_its_workload_file_starts_at_import_does_not_outlive_the_run(tmp_path):
    """By default a run's probe is a child of the fork server its workers come from (one `import torch` for
    both), isolated as a worker is: the daemon the workload file starts at import, in the probe and again in
    the worker, ends with them."""
    pids_file = tmp_path / "pids"
    proc = subprocess.run([sys.executable, "-m", "perfgate", "run", "--workloads-dir", str(_daemon_workloads(tmp_path)),
                           "-w", "daemon_at_import", "-t", "eager", "--processes", "1", "--samples", "3",
                           "--out", str(tmp_path / "run")], cwd=REPO,
                          env=cli_env(PERFGATE_TEST_PIDS_FILE=str(pids_file)), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "spawning" not in proc.stderr, proc.stderr
    run = load_results(tmp_path / "run" / "results.json")
    assert run.environment["probe_start"] == "fork"
    assert run.cases[0].status == "ok" and run.cases[0].metadata["worker_start"] == "fork"
    assert not list((tmp_path / "run" / ".work").glob("probe-*"))  # its catalog and log files are gone
    _all_end(_started_pids(pids_file), 2, "the daemons")


@needs_linux
@pytest.mark.slow
def test_the_probe_and_the_runs_workers_share_one_fork_server(tmp_path, monkeypatch):
    """The probe forked for a run's folder comes from the fork server the run's workers are then forked by
    (workers._zygote_for's key: threads, PYTHONPATH, folder, scratch folder, interpreter), or the saving is lost."""
    monkeypatch.delenv(workers.WORKER_START_ENV, raising=False)
    work = run_folders.run_work_dir(tmp_path / "run")
    try:
        probe = workers.run_probe([TEST_WORKLOADS], 1, work)
        assert probe["environment"]["probe_start"] == "fork" and "tiny" in probe["workloads"]
        # a run's probe does not ask whether each toggle runs here (that imports dynamo); list and doctor do
        assert not any("unmet_here" in t for t in probe["toggles"])
        asked = workers.run_probe([TEST_WORKLOADS], 1, work, toggles_here=True)
        assert asked["environment"]["pid"] != probe["environment"]["pid"]  # a child of the same fork server
        assert all("unmet_here" in t for t in asked["toggles"]), asked["toggles"]
        here = {t["name"]: t["unmet_here"] for t in asked["toggles"]}
        assert here["eager"] is None and (here["cuda-graphs"] is None) == asked["environment"]["cuda_available"]
        server = workers._zygotes.get((1, None, None, str(work), inherit.THIS_INTERPRETER.key()))
        assert server is not None and server.alive()
        cache_env = {"TORCHINDUCTOR_CACHE_DIR": str(work / "compile-cache" / "x" / "inductor")}  # a case's
        assert workers._zygote_for(1, cache_env, None, work) is server
        assert not list(work.glob("probe-*"))
    finally:
        workers.close_zygotes()


@needs_linux
@pytest.mark.slow
def test_a_probe_an_older_fork_server_does_not_answer_is_spawned(tmp_path, monkeypatch):
    """A fork server from before probe requests takes one for the empty request: its child exits at once and
    writes no catalog. The probe is then spawned, as it was before."""

    class Exited:
        pid, returncode = 0, 0

        def wait(self, timeout=None):
            return 0

        def poll(self):
            return 0

    class OlderZygote:
        def spawn(self, case, out, log, env, cwd, fds=(), probe=None, toggles_here=False):
            assert case == "" and probe == [str(TEST_WORKLOADS)]
            return Exited()

    monkeypatch.setattr(workers, "_zygote_for", lambda *args: OlderZygote())
    probe = workers.run_probe([TEST_WORKLOADS], 1, tmp_path / "work")
    assert probe["environment"]["probe_start"] == "spawn" and "tiny" in probe["workloads"]
    assert not list((tmp_path / "work").glob("probe-*"))


@pytest.mark.slow
def test_a_spawned_probe_answers_after_a_workload_file_printed_half_a_line(tmp_path):
    """`perfgate list` (a spawned probe) stopped with "the worker probe printed no catalog" (exit 3) when a
    workload file wrote to stdout on import without a newline: the catalog landed on the end of that line."""
    folder = tmp_path / "prints"
    folder.mkdir()
    (folder / "prints.py").write_text((TEST_WORKLOADS / "faults.py").read_text()
                                      + "\nimport sys\nsys.stdout.write('loading without a newline')\n")
    probe = workers.run_probe([folder], 1)
    assert probe["environment"]["probe_start"] == "spawn" and "tiny" in probe["workloads"]


HANGS_AT_IMPORT = '''"""Writes its pid to $PERFGATE_TEST_PIDS_FILE, then hangs while imported (test only)."""
import os
import time

with open(os.environ["PERFGATE_TEST_PIDS_FILE"], "a") as fh:
    fh.write(f"{os.getpid()}\\n")
time.sleep(600)
'''


@needs_linux
@pytest.mark.slow
def test_a_forked_probe_past_its_timeout_is_killed(tmp_path, monkeypatch):
    """A workload file that hangs when imported: the forked probe is killed at the probe's timeout, and the
    run stops with an infrastructure error that says so."""
    monkeypatch.delenv(workers.WORKER_START_ENV, raising=False)
    pids_file = tmp_path / "pids"
    monkeypatch.setenv("PERFGATE_TEST_PIDS_FILE", str(pids_file))
    monkeypatch.setattr(workers, "PROBE_TIMEOUT_S", 5)  # counts from the fork: torch is imported by then
    folder = tmp_path / "hangs"
    folder.mkdir()
    (folder / "hangs.py").write_text(HANGS_AT_IMPORT)
    try:
        with pytest.raises(workers.InfrastructureError, match="did not answer within 5 s"):
            workers.run_probe([folder], 1, tmp_path / "work")
        pids = _started_pids(pids_file)
        assert len(pids) == 1 and not _alive(pids[0])
        assert not list((tmp_path / "work").glob("probe-*"))
    finally:
        workers.close_zygotes()


def test_the_runners_tracking_id_reaches_workers_and_no_config_passes_a_withheld_variable(monkeypatch):
    """GitHub's runner ends a job's leftover processes by RUNNER_TRACKING_ID in their environment; the history
    store's URL is a credential that no `worker_env` pattern can let through."""
    monkeypatch.setenv("RUNNER_TRACKING_ID", "github_1234")
    monkeypatch.setenv("PERFGATE_HISTORY_URL", "postgresql://u:secret@db/perf")
    monkeypatch.setattr(inherit, "_config_env_names", ("PERFGATE_HISTORY_URL", "PERFGATE_*"))
    env = worker_env(1)
    assert env["RUNNER_TRACKING_ID"] == "github_1234"
    assert "PERFGATE_HISTORY_URL" not in env
    assert not inherit.passed_to_workers("PERFGATE_HISTORY_URL", ["PERFGATE_HISTORY_URL"])


# ---------------------------------------------------------------- what a workload can read of its ancestors

SECRET = "perfgate-test-secret-d41d8cd9"
PEEK_WORKLOAD = '''"""Reads /proc/PID/environ of every ancestor of its worker, as a hostile workload would, and writes what it
got to $PERFGATE_TEST_PEEK_FILE, one JSON line per ancestor (test only)."""

import json
import os

import torch

from perfgate.workload import Built, Workload


def peek():
    found, pid = [], os.getppid()
    while pid > 1:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            cmd = fh.read().replace(b"\\0", b" ").decode(errors="replace")[:300]
        try:
            with open(f"/proc/{pid}/environ", "rb") as fh:
                environ = fh.read().decode(errors="replace")
            found.append({"pid": pid, "cmd": cmd, "readable": True, "secret": SECRET in environ})
        except OSError as exc:
            found.append({"pid": pid, "cmd": cmd, "readable": False, "error": str(exc)})
        with open(f"/proc/{pid}/stat") as fh:
            pid = int(fh.read().rsplit(") ", 1)[1].split()[1])
    with open(os.environ["PERFGATE_TEST_PEEK_FILE"], "a") as fh:
        fh.write(json.dumps(found) + "\\n")


before_build = peek
'''.replace("SECRET", repr(SECRET)) + ONE_WORKLOAD.format(name="peeks_at_ancestors",
                                                         description="reads its ancestors' environment")
NOBODY = 65534


def _as_nobody() -> None:
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)


def _unprivileged(python: str) -> tuple[list[str], object]:
    """How to run ``python`` as an unprivileged user of the same uid for parent and children: this user when
    it is not root; else uid 65534, when ``python`` is one that user can run. Skips otherwise."""
    if os.geteuid() != 0:
        return [python], None
    try:
        usable = subprocess.run([python, "-c", "import torch"], preexec_fn=_as_nobody, capture_output=True,
                                timeout=120, cwd="/").returncode == 0
    except OSError:  # it cannot even start it
        usable = False
    if not usable:
        pytest.skip(f"running as root, and uid {NOBODY} cannot run {python} with torch (set "
                    "PERFGATE_TEST_UNPRIVILEGED_PYTHON to one it can): root reads every process's environment, "
                    "not dumpable or not, so only an unprivileged user can show the boundary (docs/ci.md)")
    return [python], _as_nobody


@needs_linux
def test_a_private_process_environment_is_unreadable_to_a_child_of_the_same_user(tmp_path):
    """The mechanism, without torch: a parent holding a secret in its environment calls
    keep_environment_private(), and a child of the same (unprivileged) user cannot read it."""
    python = sys.executable
    if os.geteuid() == 0:  # this interpreter may be out of uid 65534's reach (under /root): any that is not
        python = next((p for p in ("/usr/bin/python3", sys.executable)
                       if subprocess.run([p, "-c", "import tomllib"], preexec_fn=_as_nobody, capture_output=True,
                                         timeout=60, cwd="/").returncode == 0), None)
        if python is None:
            pytest.skip(f"no Python that uid {NOBODY} can run")
    child = ("import os\ntry:\n    data = open(f'/proc/{os.getppid()}/environ', 'rb').read()\n"
             "    print('read', " + repr(SECRET.encode()) + " in data)\nexcept OSError as exc:\n    print('refused', exc.errno)\n")
    parent = ("import subprocess, sys\nfrom perfgate.protocol.reaper import keep_environment_private\n"
              "private = keep_environment_private()\n"
              "out = subprocess.run([sys.executable, '-c', sys.argv[1]], env={}, capture_output=True, text=True)\n"
              "print(private, out.stdout.strip(), out.stderr.strip())\n")
    import tempfile

    # a copy of the package that uid 65534 can read: the checkout may lie in a folder only root can enter
    # (a clone under a 0700 folder, as `mktemp -d` or root's home makes), and pytest's tmp_path is 0700 too
    base = Path(tempfile.mkdtemp(prefix="perfgate-private-env-"))
    try:
        shutil.copytree(REPO / "perfgate", base / "perfgate", ignore=shutil.ignore_patterns("__pycache__"))
        for folder, _, files in os.walk(base):
            os.chmod(folder, 0o755)
            for name in files:
                os.chmod(os.path.join(folder, name), 0o644)
        proc = subprocess.run([python, "-c", parent, child], capture_output=True, text=True, timeout=60, cwd="/",
                              env={"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(base),
                                   "PYTHONDONTWRITEBYTECODE": "1", "PERFGATE_HISTORY_URL": SECRET},
                              preexec_fn=_as_nobody if os.geteuid() == 0 else None)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    assert proc.stdout.split()[:3] == ["True", "refused", "13"], proc.stdout + proc.stderr  # EACCES


@needs_linux
@pytest.mark.parametrize("start", ["fork", "spawn"])
def test_a_workload_reading_its_ancestors_environment_gets_nothing_secret(start):
    """A real run whose workload reads /proc/PID/environ of each of its ancestors (the fork server, perfgate,
    what started perfgate): perfgate's environment holds a history URL and a cloud key, and none of it
    reaches the workload. Runs as an unprivileged user: root reads everything (docs/ci.md)."""
    import tempfile

    python, preexec = _unprivileged(os.environ.get("PERFGATE_TEST_UNPRIVILEGED_PYTHON", sys.executable))
    base = Path(tempfile.mkdtemp(prefix="perfgate-peek-"))  # not under pytest's 0700 folder: uid 65534 writes here
    try:
        base.chmod(0o777)
        (base / "workloads").mkdir(mode=0o777)
        (base / "workloads" / "peek.py").write_text(PEEK_WORKLOAD)
        peek_file = base / "peek.jsonl"
        env = cli_env(PERFGATE_TEST_PEEK_FILE=str(peek_file), PERFGATE_WORKER_START=start, HOME=str(base),
                      PERFGATE_HISTORY_URL=f"postgresql://perf:{SECRET}@db.internal/perf",
                      AWS_SECRET_ACCESS_KEY=SECRET, PYTHONDONTWRITEBYTECODE="1")
        proc = subprocess.run([*python, "-m", "perfgate", "run", "--workloads-dir", str(base / "workloads"), "-w",
                               "peeks_at_ancestors", "-t", "eager", "--processes", "1", "--samples", "3",
                               "--out", str(base / "run")], cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=300, preexec_fn=preexec)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        looks = [json.loads(line) for line in peek_file.read_text().splitlines()]
        assert looks and all(looks)
        for ancestors in looks:
            assert not [a for a in ancestors if a.get("secret")], ancestors
            (perfgate,) = [a for a in ancestors if " -m perfgate run " in a["cmd"]]
            assert not perfgate["readable"], perfgate  # not dumpable: EACCES for the same user
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_two_runs_started_in_the_same_second_get_folders_of_their_own(tmp_path, monkeypatch):
    """Two `perfgate run`s into one reports folder within the same second (two terminals, shards side by side):
    each reserves its run folder, so neither writes into the other's (results.json overwritten)."""
    from perfgate.commands import session
    from perfgate.model import config

    (tmp_path / "pyproject.toml").write_text("[tool.perfgate]\n")
    settings = config.load(cwd=tmp_path)
    suite = settings.suite(settings.default_suite)
    monkeypatch.setattr(run_folders, "new_run_id", lambda *a, **k: "20260101-000000-smoke")
    check, other = session.check_writable_dir, []

    def the_other_run_starts_now(path):  # between this run choosing its folder and creating it
        if not other:
            other.append(None)
            other[0] = session.run_folder(settings, session.RunOptions(), suite)[0]
        return check(path)

    monkeypatch.setattr(session, "check_writable_dir", the_other_run_starts_now)
    mine, created = session.run_folder(settings, session.RunOptions(), suite)
    assert mine != other[0] and mine.is_dir() and other[0].is_dir()
    assert created[0] == mine  # what a usage error then removes: its own folder, never the other run's


def test_a_first_run_creates_its_folder_and_the_missing_reports_folders(tmp_path):
    """run_folder says which folders it made (removed again after a usage error): the run's, reserved, and the
    reports folder's missing parents; with --out, that folder and its missing parents."""
    from perfgate.commands import session
    from perfgate.model import config

    (tmp_path / "pyproject.toml").write_text('[tool.perfgate]\nreports_dir = "out/reports"\n')
    settings = config.load(cwd=tmp_path)
    suite = settings.suite(settings.default_suite)
    run_dir, created = session.run_folder(settings, session.RunOptions(), suite)
    assert run_dir.parent == settings.reports_dir and run_dir.is_dir()
    assert created == [run_dir, settings.reports_dir, tmp_path / "out"]
    again, created = session.run_folder(settings, session.RunOptions(), suite)
    assert again != run_dir and created == [again]
    out = tmp_path / "mine" / "run"
    run_dir, created = session.run_folder(settings, session.RunOptions(out=str(out)), suite)
    assert run_dir == out and out.is_dir() and created == [out, out.parent]


@needs_linux
@pytest.mark.parametrize("start", ["fork", "spawn"])
@pytest.mark.slow
def test_an_interrupt_while_a_worker_runs_ends_it_and_all_it_started(tmp_path, monkeypatch, start):
    """perfgate used from Python (a notebook, a script) and interrupted mid-case (Ctrl-C, the kernel's
    interrupt): the KeyboardInterrupt reaches the caller, and the worker and what it started end with it, not
    with the interpreter (PR_SET_PDEATHSIG never fires while the caller lives on)."""
    import threading

    from perfgate.model.results import CaseSpec

    pids_file = tmp_path / "pids"
    monkeypatch.setenv("PERFGATE_TEST_PIDS_FILE", str(pids_file))
    monkeypatch.setenv(workers.WORKER_START_ENV, start)
    cfg = {"spec": CaseSpec("spawns_children", "smoke", ("eager",), "cpu").to_json(),
           "workload_file": str(TEST_WORKLOADS / "faults.py"), "process_index": 0,
           "layout": layout.draw(0).to_json(), "threads": 1, "seed": 0, "max_memory_mb": None,
           "timing": {"samples": 3}, "run_dir": str(tmp_path / "run"), "profile": False}
    main = threading.get_ident()

    def interrupt_once_the_workload_runs():
        wait_for(lambda: len(_started_pids(pids_file)) >= 3, 120, "the workload's three processes")
        signal.pthread_kill(main, signal.SIGINT)

    threading.Thread(target=interrupt_once_the_workload_runs, daemon=True).start()
    try:
        with pytest.raises(KeyboardInterrupt):
            workers.run_worker(cfg, 600, 1, tmp_path / "run" / ".work")
        _all_end(_started_pids(pids_file), 3, "the workload's processes")
        assert not list((tmp_path / "run" / ".work").glob("case-*"))  # its case, output and log files
    finally:
        workers.close_zygotes()


@needs_linux
@pytest.mark.slow
def test_a_run_made_from_python_leaves_no_fork_server_behind(tmp_path, monkeypatch):
    """`perfgate run` called in-process (a notebook, a script, a test): when it returns, its fork servers have
    ended; before, each run's stayed (torch imported) until the interpreter exited."""
    from click.testing import CliRunner

    from perfgate.cli import main

    monkeypatch.chdir(REPO)
    out = tmp_path / "run"
    result = CliRunner().invoke(main, ["run", "--workloads-dir", str(TEST_WORKLOADS), "-w", "tiny", "-t", "eager",
                                       "--processes", "1", "--samples", "3", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert not [k for k in workers._zygotes if str(out) in k[3]]
    wait_for(lambda: not processes_mentioning(str(out / ".work")), 10, "the run's fork server to end")


@needs_linux
@pytest.mark.slow
def test_sigterm_ends_a_run_as_ctrl_c_does(tmp_path):
    """A CI cancellation's SIGTERM mid-case: exit 130 with one line (before: killed by the signal, exit 143,
    nothing said), results.json valid with the cases finished, the worker and all it started ended."""
    pids_file, out = tmp_path / "pids", tmp_path / "run"
    cmd = [sys.executable, "-m", "perfgate", "run", "--workloads-dir", str(TEST_WORKLOADS), "-w", "tiny",
           "-w", "spawns_children", "-t", "eager", "--processes", "1", "--samples", "3", "--out", str(out)]
    orchestrator = subprocess.Popen(cmd, cwd=REPO, env=cli_env(PERFGATE_TEST_PIDS_FILE=str(pids_file)),
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    pids: list[int] = []
    try:
        pids = wait_for(lambda: len(_started_pids(pids_file)) >= 3 and _started_pids(pids_file), 120,
                        "the workload's three processes")
        orchestrator.send_signal(signal.SIGTERM)
        _, err = orchestrator.communicate(timeout=60)
        assert orchestrator.returncode == 130, err
        assert "interrupted" in err and len(err.strip().splitlines()) == 1, err
        assert [c.key for c in load_results(out / "results.json").cases] == ["tiny/smoke/eager/cpu"]
    finally:
        if orchestrator.poll() is None:
            orchestrator.kill()
            orchestrator.wait()
        _all_end(pids, 3, "the workload's processes")


@needs_linux
@pytest.mark.slow
def test_a_timed_out_forked_worker_is_ended_by_its_fork_server_not_by_a_pid_reused_since(tmp_path):
    """The fork server reaps a worker the moment it exits, so by the time a timeout kills it its pid may be
    another process's. The kill goes through the fork server, which ends only a child it has not reaped: a
    process that took the number since is left alone (it was stopped and killed)."""
    from perfgate.running.zygote import Zygote

    z = Zygote(worker_env(1, None), None, tmp_path)
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    try:
        child = z.spawn("no-such-case.json", str(tmp_path / "out.json"), str(tmp_path / "log"), {}, None)
        child.wait(120)  # failed at once (no case file), and reaped by the fork server
        child.pid = victim.pid  # the kernel gave its number to another process since
        handle = workers.WorkerHandle(child, str(tmp_path / "case.json"), str(tmp_path / "out.json"),
                                      str(tmp_path / "log"), time.perf_counter())
        handle.kill()
        with pytest.raises(subprocess.TimeoutExpired):
            victim.wait(timeout=2)
    finally:
        victim.kill()
        victim.wait()
        z.close()


@needs_linux
@pytest.mark.parametrize("start", ["fork", "spawn"])
@pytest.mark.slow
def test_workers_started_from_a_short_lived_thread_outlive_it(tmp_path, monkeypatch, start):
    """PR_SET_PDEATHSIG fires when the *thread* that started a child exits: perfgate used from a thread that
    ends (the notebook API in a thread, a pool's task) must not lose its workers, nor its fork server, then."""
    import threading

    monkeypatch.setenv(workers.WORKER_START_ENV, start)
    from perfgate.model.results import CaseSpec

    cfg = {"spec": CaseSpec("tiny", "smoke", ("eager",), "cpu", params=(("steps", 2), ("n", 8))).to_json(),
           "workload_file": str(TEST_WORKLOADS / "faults.py"), "process_index": 0,
           "layout": layout.draw(0).to_json(), "threads": 1, "seed": 0, "max_memory_mb": None,
           "timing": {"samples": 3, "min_time_s": 0.5}, "run_dir": str(tmp_path / "run"), "profile": False}
    handles = []
    starter = threading.Thread(target=lambda: handles.append(workers.start_worker(cfg, 1, tmp_path / "run" / ".work")))
    starter.start()
    starter.join()
    try:
        outcome = handles[0].finish(300)
    finally:
        workers.close_zygotes()
    assert outcome.result["status"] == "ok", outcome.result


def test_a_base_perfgate_of_either_layout_runs_its_own_worker_module(tmp_path):
    """An --against base from before the modules moved into packages has perfgate/worker.py, not
    perfgate/worker/main.py: its workers (and its probe) must run the module its own perfgate has, or the
    base side could not start (and a base without either runs with this perfgate)."""
    flat, packaged, none = tmp_path / "flat", tmp_path / "packaged", tmp_path / "none"
    (flat / "perfgate").mkdir(parents=True)
    (flat / "perfgate" / "worker.py").write_text("")
    (packaged / "perfgate" / "worker").mkdir(parents=True)
    (packaged / "perfgate" / "worker" / "main.py").write_text("")
    none.mkdir()
    assert workers.worker_module(flat) == "perfgate.worker"
    assert workers.worker_module(packaged) == workers.WORKER_MODULE == "perfgate.worker.main"
    assert workers.worker_module(none) is None
    assert workers._worker_module_for({"PYTHONPATH": os.pathsep.join([str(flat), str(packaged)])}) == "perfgate.worker"
    assert workers._worker_module_for({"PYTHONPATH": str(none)}) == workers.WORKER_MODULE
    assert workers._worker_module_for(None) == workers.WORKER_MODULE
