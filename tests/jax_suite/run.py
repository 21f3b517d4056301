"""``python -m tests.jax_suite``: JAX's own tests on numba_cpu, against JAX's CPU, test by test.

The test files are JAX's, for exactly the installed version, kept in pjrt-hub's cache folder
(``jax-tests/<version>/tests``), never in this repository. They come from the jax sdist on PyPI
when it holds ``tests/`` (0.10's does not), else from the tag ``jax-v<version>`` of JAX's git
repository: a bare git directory given with ``--jax-git-dir``, or a shallow, blob-less clone
from GitHub. A ``pytest.ini`` written beside them gives them the settings of JAX's own pytest
configuration that change outcomes (warnings are errors, importlib import mode).

For each chosen file (``NAME`` or ``NAME:KEYWORDS``, the keywords a pytest ``-k`` expression):
pytest collects it once; ``--sample N --seed S`` keeps a reproducible sample of the ids
(:func:`.model.draw_sample`); the sample runs in a child pytest on JAX's CPU
(``JAX_PLATFORMS=cpu``), then the tests that passed there run in a child pytest on numba_cpu
(``JAX_PLATFORMS=numba_cpu,cpu``, ``PJRT_HUB_JAX_PLUGINS=numba_cpu``, and JAX's test utilities
told that the device under test is a CPU). The children load :mod:`.collector`, which writes each
test's outcome as it ends and ends the child when a test overruns ``--timeout``; a child that dies
is started again on the tests that are left, so one hang or abort costs one test. Each run of a
file stops at ``--file-budget`` seconds and the whole at ``--budget``; tests left are "not run".
The report (``jax-suite.json``, ``jax-suite.txt``, the children's output in ``logs/``) compares
the two (:mod:`.model`). Exit status 0 when at least 99.5% of the tests that pass on JAX's CPU
and ran on numba_cpu pass there and every failure is a listed limitation
(``known_failures.toml``), 1 otherwise, 2 on a usage error or when the tests cannot be had.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from importlib import metadata
from pathlib import Path
from typing import Mapping, Sequence

from pjrt_hub._cache_root import cache_folder

from .model import (
    FileReport,
    KnownFailure,
    Outcome,
    SuiteReport,
    TestResult,
    build_file_report,
    build_report,
    draw_sample,
    load_known_failures,
    read_log,
    render_text,
)

REPO = Path(__file__).resolve().parents[2]
KNOWN_FAILURES = Path(__file__).with_name("known_failures.toml")
#: Seconds a download of JAX's tests (pip's sdist, git's clone) may take: offline, it fails.
FETCH_TIMEOUT_S = 300
PLUGIN = "numba_cpu"
JAX_GIT_URL = "https://github.com/jax-ml/jax.git"

#: The files of issue 42, with the keywords that pick api_test's jit, device_put and donation
#: tests (pytest's -k matches class names too, case-insensitively: JitTest, BufferDonationTest).
DEFAULT_FILES = ("lax_test", "lax_numpy_reducers_test", "lax_control_flow_test", "random_lax_test",
                 "lax_vmap_test", "api_test:jit or device_put or donat")
DEFAULT_SEED = 42
DEFAULT_TIMEOUT = 120.0
DEFAULT_FILE_BUDGET = 600.0

#: JAX's pytest settings that change outcomes, written in our words: every warning is an error
#: unless a test says otherwise (JAX ignores the hugepages notice); test modules are imported
#: without being put on sys.path.
_PYTEST_INI = """\
[pytest]
filterwarnings =
    error
    ignore:Transparent hugepages
markers =
    multiaccelerator: may use several accelerators
    SlurmMultiNodeGpuTest: multi-node GPU
addopts = --import-mode=importlib -p no:cacheprovider
"""

#: Variables of the calling shell that change which backends JAX makes, or how.
_DROPPED_ENV = ("JAX_", "XLA_FLAGS", "PJRT_HUB_JAX_PLUGINS", "TPU_", "CUDA_VISIBLE")


class JaxSuiteError(RuntimeError):
    """The tests cannot be had or run (no JAX, no source for this version, a file JAX lacks)."""


# -- JAX's test files --------------------------------------------------------------------------


def jax_version() -> str:
    try:
        return metadata.version("jax")
    except metadata.PackageNotFoundError:
        raise JaxSuiteError("JAX is not installed: pip install -e '.[test,jax]'") from None


def _from_sdist(version: str, dest: Path) -> bool:
    """Extract ``tests/*.py`` of the jax sdist into ``dest``; False when the sdist has none."""
    with tempfile.TemporaryDirectory() as tmp:
        try:
            proc = subprocess.run([sys.executable, "-m", "pip", "download", f"jax=={version}", "--no-binary", ":all:",
                                   "--no-deps", "-q", "-d", tmp],
                                  capture_output=True, text=True, timeout=FETCH_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return False
        archives = list(Path(tmp).glob("jax-*.tar.gz"))
        if proc.returncode != 0 or not archives:
            return False
        found = False
        with tarfile.open(archives[0]) as tar:
            for member in tar.getmembers():
                parts = Path(member.name).parts
                # jax-<v>/tests/<name>.py, the top level of tests/ only
                if member.isfile() and len(parts) == 3 and parts[1] == "tests" and parts[2].endswith(".py"):
                    data = tar.extractfile(member)
                    if data is not None:
                        dest.mkdir(parents=True, exist_ok=True)
                        (dest / parts[2]).write_bytes(data.read())
                        found = True
        return found


def _from_git(git_dir: Path, tag: str, dest: Path) -> None:
    names = subprocess.run(["git", f"--git-dir={git_dir}", "ls-tree", "--name-only", tag, "tests/"],
                           capture_output=True, text=True)
    if names.returncode != 0:
        raise JaxSuiteError(f"{git_dir} has no tag {tag}: {names.stderr.strip()}")
    dest.mkdir(parents=True, exist_ok=True)
    for name in names.stdout.split():
        if name.endswith(".py"):
            blob = subprocess.run(["git", f"--git-dir={git_dir}", "show", f"{tag}:{name}"], capture_output=True,
                                  check=True)
            (dest / Path(name).name).write_bytes(blob.stdout)


def jax_test_files(version: str, *, git_dir: Path | None = None, cache: Path | None = None,
                   fetch: bool = True) -> tuple[Path, str]:
    """The folder of JAX's test files for ``version`` and where they came from, fetched into the
    cache on first use (``fetch=False``: JaxSuiteError unless they are there already)."""
    root = (cache or cache_folder("jax-tests")) / version
    marker = root / "SOURCE.json"
    tests = root / "tests"
    if marker.exists() and tests.is_dir():
        return tests, json.loads(marker.read_text(encoding="utf-8"))["source"]
    if not fetch and git_dir is None:
        raise JaxSuiteError(f"JAX {version}'s test files are not in {root}")
    tag = f"jax-v{version}"
    staging = root / "tests.partial"
    shutil.rmtree(staging, ignore_errors=True)
    if git_dir is not None:
        _from_git(git_dir, tag, staging)
        source = f"git tag {tag} of {git_dir}"
    elif _from_sdist(version, staging):
        source = f"the jax {version} sdist"
    else:
        with tempfile.TemporaryDirectory() as tmp:
            clone = Path(tmp) / "jax.git"
            try:
                proc = subprocess.run(["git", "clone", "--quiet", "--bare", "--depth", "1", "--filter=blob:none",
                                       "--branch", tag, JAX_GIT_URL, str(clone)], capture_output=True, text=True,
                                      timeout=FETCH_TIMEOUT_S, env=dict(os.environ, GIT_TERMINAL_PROMPT="0"))
            except subprocess.TimeoutExpired:
                raise JaxSuiteError(f"cloning {JAX_GIT_URL} at {tag} did not finish within {FETCH_TIMEOUT_S} s; "
                                    "give a JAX git directory with --jax-git-dir") from None
            if proc.returncode != 0:
                raise JaxSuiteError(f"the jax {version} sdist has no tests/, and cloning {JAX_GIT_URL} at {tag} "
                                    f"failed: {proc.stderr.strip()}; give a JAX git directory with --jax-git-dir")
            _from_git(clone, tag, staging)
        source = f"git tag {tag} of {JAX_GIT_URL}"
    (staging / "pytest.ini").write_text(_PYTEST_INI, encoding="utf-8")
    shutil.rmtree(tests, ignore_errors=True)
    staging.rename(tests)
    marker.write_text(json.dumps({"version": version, "source": source}), encoding="utf-8")
    return tests, source


# -- the children ------------------------------------------------------------------------------


def child_env(platform: str, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a child pytest on ``platform`` (``cpu`` or ``numba_cpu``)."""
    env = {k: v for k, v in (os.environ if base is None else base).items()
           if not k.startswith(_DROPPED_ENV)}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    if platform == "cpu":
        env["JAX_PLATFORMS"] = "cpu"
    else:
        env["JAX_PLATFORMS"] = f"{platform},cpu"
        env["PJRT_HUB_JAX_PLUGINS"] = platform
        env["JAX_SUITE_DUT"] = "cpu"
    return env


def _pytest(tests_dir: Path, args: Sequence[str]) -> list[str]:
    return [sys.executable, "-m", "pytest", "-c", str(tests_dir / "pytest.ini"), "--rootdir", str(tests_dir),
            "-p", "no:pjrt_hub", "-p", "tests.jax_suite.collector", *args]


def collect(tests_dir: Path, file: str, keywords: str | None, log: Path) -> list[str]:
    """The node ids of ``file`` (with ``-k keywords``), as JAX's CPU run collects them."""
    args = ["--collect-only", "-q", file] + (["-k", keywords] if keywords else [])
    proc = subprocess.run(_pytest(tests_dir, args), cwd=tests_dir, env=child_env("cpu"), capture_output=True,
                          text=True)
    out_text = proc.stdout
    log.write_text(out_text + proc.stderr, encoding="utf-8")
    if proc.returncode not in (0, 5):
        raise JaxSuiteError(f"pytest could not collect {file} (exit {proc.returncode}); see {log}")
    return [line.strip() for line in out_text.splitlines() if "::" in line and not line.startswith(" ")]


def run_tests(tests_dir: Path, file: str, ids: Sequence[str] | None, platform: str, *, keywords: str | None = None,
              timeout: float, deadline: float, logs: Path) -> tuple[list[str], dict[str, TestResult], list[str]]:
    """Run ``ids`` of ``file`` (None: every test ``-k keywords`` selects) on ``platform`` until
    done or ``deadline`` (time.monotonic()), restarting the child after a test that hung or
    killed it. Returns the ids run, their results (every id has one) and what went wrong with
    the run itself."""
    results: dict[str, TestResult] = {}
    errors: list[str] = []
    chosen = None if ids is None else list(ids)
    remaining = chosen
    stem = Path(file).stem
    attempt = 0
    while (remaining is None or remaining) and time.monotonic() < deadline:
        attempt += 1
        out_path = logs / f"{stem}.{platform}.{attempt}.out"
        log = logs / f"{stem}.{platform}.{attempt}.jsonl"
        log.unlink(missing_ok=True)
        env = child_env(platform) | {"JAX_SUITE_LOG": str(log), "JAX_SUITE_TIMEOUT": str(timeout)}
        args = ["-q", "-rN", file]
        if remaining is None:
            args += ["-k", keywords] if keywords else []
        else:
            ids_file = logs / f"{stem}.{platform}.{attempt}.ids.json"
            ids_file.write_text(json.dumps(remaining), encoding="utf-8")
            env["JAX_SUITE_IDS"] = str(ids_file)
        with open(out_path, "w", encoding="utf-8") as out:
            proc = subprocess.Popen(_pytest(tests_dir, args), cwd=tests_dir, env=env, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)
            try:
                code: int | None = proc.wait(timeout=max(deadline - time.monotonic(), 0))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                code = None
        child = read_log(log)
        if remaining is None:
            if child.collected is None:
                raise JaxSuiteError(f"pytest could not collect {file} on {platform} (exit {code}); see {out_path}")
            chosen = remaining = child.collected
        if child.platform is not None and child.platform != platform:
            # JAX fell back to another backend: its outcomes would say nothing about this one.
            errors.append(f"{file}: the {platform} run's tests ran on JAX's {child.platform!r} backend; see {out_path}")
            break
        results.update(child.results)
        open_test = child.open_test
        if open_test is not None and open_test not in results and code is not None:
            results[open_test] = TestResult(nodeid=open_test, outcome=Outcome.CRASHED,
                                            message=f"the process ended with exit status {code} inside the test")
        left = [i for i in remaining if i not in results]
        interrupted = open_test is not None or any(r.outcome is Outcome.TIMEOUT for r in child.results.values())
        if code not in (None, 0, 1, 5) and left and not interrupted:
            # pytest itself gave up (an INTERNALERROR: CPython 3.11.7 can fail formatting a
            # failure's traceback) with tests left: go on with them. A child that ran nothing
            # gave up on the first of them, which is charged with it.
            interrupted = True
            if not child.results:
                results[left[0]] = TestResult(nodeid=left[0], outcome=Outcome.CRASHED,
                                              message=f"pytest ended with exit status {code} at this test; see "
                                                      f"{out_path.name}")
                left = left[1:]
        if code is None or not interrupted:
            # Out of time, or the child ended on its own: whatever it did not run, it will not.
            if code is not None and left:
                errors.append(f"{file} on {platform}: {len(left)} chosen tests were not collected (exit {code}); "
                              f"see {out_path}")
            break
        remaining = left
    chosen = chosen or []
    for nodeid in chosen:
        results.setdefault(nodeid, TestResult(nodeid=nodeid, outcome=Outcome.NOT_RUN))
    return chosen, results, errors


def run_file(spec: str, tests_dir: Path, *, sample: int | None, seed: int, timeout: float, file_budget: float,
             deadline: float, known: Sequence[KnownFailure], logs: Path) -> tuple[FileReport, list[str]]:
    name, _, keywords = spec.partition(":")
    file = name if name.endswith(".py") else f"{name}.py"
    if not (tests_dir / file).exists():
        raise JaxSuiteError(f"JAX's tests have no {file} (in {tests_dir})")
    start = time.monotonic()
    if sample is None:
        # The CPU run collects the whole file itself.
        ids, collected = None, None
    else:
        ids = collected = collect(tests_dir, file, keywords or None, logs / f"{Path(file).stem}.collect.out")
        ids = draw_sample(ids, sample, seed, file)
    chosen, cpu, errors = run_tests(tests_dir, file, ids, "cpu", keywords=keywords or None, timeout=timeout,
                                    deadline=min(start + file_budget, deadline), logs=logs)
    cpu_seconds = time.monotonic() - start
    passed = [i for i in chosen if cpu[i].outcome is Outcome.PASSED]
    start = time.monotonic()
    _, numba, numba_errors = run_tests(tests_dir, file, passed, PLUGIN, timeout=timeout,
                                       deadline=min(start + file_budget, deadline), logs=logs)
    numba_seconds = time.monotonic() - start
    report = build_file_report(file, keywords=keywords or None,
                               collected=len(collected if collected is not None else chosen), sampled=chosen,
                               cpu=cpu, numba=numba, known=known, cpu_seconds=cpu_seconds,
                               numba_seconds=numba_seconds)
    return report, errors + numba_errors


def run(args: argparse.Namespace) -> SuiteReport:
    version = jax_version()
    from pjrt_hub.jax import JAX_LIMITATIONS

    known = load_known_failures(Path(args.known_failures), JAX_LIMITATIONS, PLUGIN)
    if args.tests_dir:
        tests_dir, source = Path(args.tests_dir).resolve(), f"the folder {args.tests_dir}"
        if not (tests_dir / "pytest.ini").exists():
            (tests_dir / "pytest.ini").write_text(_PYTEST_INI, encoding="utf-8")
    else:
        tests_dir, source = jax_test_files(version, git_dir=Path(args.jax_git_dir) if args.jax_git_dir else None)
    logs = Path(args.output) / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + (args.budget if args.budget else float("inf"))
    specs = list(args.files or DEFAULT_FILES)

    def one(spec: str) -> tuple[FileReport, list[str]]:
        return run_file(spec, tests_dir, sample=args.sample, seed=args.seed, timeout=args.timeout,
                        file_budget=args.file_budget, deadline=deadline, known=known, logs=logs)

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        outcomes = list(pool.map(one, specs))
    errors = [e for _, errs in outcomes for e in errs]
    return build_report([r for r, _ in outcomes], jax_version=version, source=source, seed=args.seed,
                        sample=args.sample, errors=errors)


def write_report(report: SuiteReport, output: Path) -> None:
    output.mkdir(parents=True, exist_ok=True)
    (output / "jax-suite.json").write_text(report.model_dump_json(indent=2), encoding="utf-8")
    (output / "jax-suite.txt").write_text(render_text(report), encoding="utf-8")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tests.jax_suite", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", nargs="*", metavar="FILE[:KEYWORDS]",
                   help=f"JAX test files to run, each with an optional pytest -k expression (default: "
                        f"{', '.join(DEFAULT_FILES)})")
    p.add_argument("--sample", type=int, default=None, help="run N tests drawn from each file (default: all)")
    p.add_argument("--seed", type=int, default=DEFAULT_SEED, help=f"the sample's seed (default {DEFAULT_SEED})")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                   help=f"seconds a test may take on either platform (default {DEFAULT_TIMEOUT:g})")
    p.add_argument("--file-budget", type=float, default=DEFAULT_FILE_BUDGET,
                   help=f"seconds for each file on each platform (default {DEFAULT_FILE_BUDGET:g})")
    p.add_argument("--budget", type=float, default=None, help="seconds for the whole run (default: no bound)")
    p.add_argument("--jobs", type=int, default=1, help="files run at once (default 1)")
    p.add_argument("--output", default="jax-suite-out", help="the report's folder (default jax-suite-out)")
    p.add_argument("--jax-git-dir", default=None, help="a JAX git directory to take the tag's tests/ from")
    p.add_argument("--tests-dir", default=None, help="run the test files of this folder instead of JAX's")
    p.add_argument("--known-failures", default=str(KNOWN_FAILURES),
                   help="the TOML file mapping failing tests to JAX limitations (default: the shipped one)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if args.sample is not None and args.sample < 1:
        p.error("--sample must be at least 1")
    if args.jobs < 1 or args.timeout <= 0 or args.file_budget <= 0 or (args.budget is not None and args.budget <= 0):
        p.error("--jobs, --timeout, --file-budget and --budget must be positive")
    try:
        report = run(args)
    except (JaxSuiteError, ValueError) as exc:
        print(f"jax-suite: {exc}", file=sys.stderr)
        return 2
    write_report(report, Path(args.output))
    sys.stdout.write(render_text(report))
    ratio = "-" if report.ratio is None else f"{report.ratio:.1%}"
    print(f"jax-suite: {report.numba_passed}/{report.compared} = {ratio}; "
          + ("OK" if report.ok else "NOT OK: " + "; ".join(report.problems))
          + f"; report in {Path(args.output) / 'jax-suite.txt'}", file=sys.stderr)
    return 0 if report.ok else 1
