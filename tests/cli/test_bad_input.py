"""Every class of bad input, fed to the real ``pjrt-hub`` in a subprocess.

The contract (pjrt_hub/cli.py): each bad input ends in its documented exit code (2 usage, 3 bad
input, 4 plugin failed while working, 5 no plugin of that name, 1 a plugin asked for is not fine)
with one line that names the thing and what is wrong, never a traceback; and no input file is
touched. Each case is a short process that never gets as far as compiling a real program (so
numba is not imported), then each is judged on its own. Most cases are forked from one server
process that has imported what every ``pjrt-hub`` start imports (numpy, ml_dtypes, the CLI): the
child runs ``pjrt_hub.cli`` as ``python -m`` does, with its own argv, environment, working
directory and standard streams, and its exit status is the process's. The cases that set
variables of their own, and one that checks the forked runs against a fresh interpreter, start
``python -m pjrt_hub.cli`` itself.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import struct
import subprocess
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from pjrt_hub.backends.stablehlo.parser import MAX_NESTING

from ..corpus import CORPUS as CORPORA

CORPUS = CORPORA / "public"

ADD = """func.func public @main(%arg0: tensor<4xf32>, %arg1: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.add %arg0, %arg1 : tensor<4xf32>
  return %0 : tensor<4xf32>
}
"""


@dataclass(frozen=True)
class Case:
    id: str
    argv: tuple[str, ...]
    code: int
    #: Text the one-line message must contain (the file or plugin named, and what is wrong).
    says: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    #: Where the message is: stderr for errors; stdout for a report (list, check, conformance).
    stream: str = "stderr"
    #: For a report on stdout: the line starts with this.
    line_starts: str = ""


class _Unpicklable:
    """Unpickling this creates the marker file: proof that a pickle was (or was not) loaded."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def _npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def _npy_with_header(header: str, data: bytes = b"", version: tuple[int, int] = (1, 0)) -> bytes:
    text = header + " " * (-(len(header) + 11) % 64 + 63) + "\n"
    return b"\x93NUMPY" + bytes(version) + struct.pack("<H", len(text)) + text.encode("latin1") + data


def _zip(path: Path, members: dict[str, bytes], compression: int = zipfile.ZIP_STORED) -> None:
    with zipfile.ZipFile(path, "w", compression) as archive:
        for name, data in members.items():
            archive.writestr(name, data)


def _make_files(root: Path) -> None:
    """The bad (and a few good) inputs, once for every case."""
    good = {"in0": np.arange(4, dtype=np.float32), "in1": np.ones(4, np.float32)}
    (root / "add.mlir").write_text(ADD)
    np.savez(root / "good.npz", **good)
    noise = np.random.default_rng(0).random(4096).astype(np.float32)  # does not deflate to nothing
    np.savez_compressed(root / "compressed.npz", in0=noise, in1=noise)
    data = (root / "good.npz").read_bytes()
    packed = (root / "compressed.npz").read_bytes()
    (root / "empty.npz").write_bytes(b"")
    (root / "truncated_half.npz").write_bytes(data[: len(data) // 2])
    (root / "truncated_head.npz").write_bytes(data[:30])
    corrupt = bytearray(packed)
    corrupt[200:400] = b"\xa5" * 200  # inside in0's deflate stream (16 KB), after its local header
    (root / "corrupt_deflate.npz").write_bytes(bytes(corrupt))
    flipped = bytearray(data)
    flipped[data.index(b"\x93NUMPY") + 140] ^= 0xFF  # a byte of in0's data: the CRC no longer holds
    (root / "bad_crc.npz").write_bytes(bytes(flipped))
    np.save(root / "array.npy", good["in0"])
    (root / "a_directory.npz").mkdir()
    _zip(root / "claims_4tib.npz", {"in0.npy": _npy_with_header(
        "{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776,), }")})
    _zip(root / "short_member.npz", {"in0.npy": _npy(good["in0"])[:-5], "in1.npy": _npy(good["in1"])})
    marker = root / "UNPICKLED"
    _zip(root / "pickle.npz", {"in0.npy": _npy(np.array([_Unpicklable(marker)], dtype=object)),
                               "in1.npy": _npy(good["in1"])})
    _zip(root / "not_npy_member.npz", {"in0": b"just bytes", "in1.npy": _npy(good["in1"])})
    with zipfile.ZipFile(root / "duplicate.npz", "w") as archive:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # zipfile warns about the duplicate it writes
            archive.writestr("in0.npy", _npy(good["in0"]))
            archive.writestr("in0.npy", _npy(good["in0"]))
    np.savez(root / "ambiguous.npz", in0=good["in0"], in00=good["in1"])
    np.savez(root / "leading_zero.npz", in00=good["in0"], in1=good["in1"])
    np.savez(root / "structured.npz", in0=np.zeros(4, dtype=[("a", "<f4")]), in1=good["in1"])
    _zip(root / "npy_version_9.npz", {"in0.npy": _npy(good["in0"]).replace(b"NUMPY\x01\x00", b"NUMPY\x09\x00", 1)})
    _zip(root / "garbage_header.npz", {"in0.npy": _npy_with_header("{'descr': <<<garbage")})
    (root / "not_zip.npz").write_bytes(b"this is text, not an archive\n")

    (root / "latin1.mlir").write_bytes(ADD.replace("public", "publ\xefc").encode("latin1"))
    (root / "bytecode.mlir").write_bytes(b"ML\xefR\x00\x01\x02garbage")
    (root / "empty.mlir").write_text("")
    (root / "no_main.mlir").write_text(ADD.replace("@main", "@other"))
    (root / "deep.mlir").write_text("func.func @main() -> " + "(" * (MAX_NESTING + 1) + ")" * (MAX_NESTING + 1) + " {\n}\n")
    (root / "syntax.mlir").write_text(ADD.replace("%arg0, %arg1 :", "%arg0 %arg1 :"))
    (root / "a_directory.mlir").mkdir()

    (root / "text.so").write_text("not a shared library\n")
    (root / "libs").mkdir()
    (root / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (root / "huge.json").write_bytes(b" " * (2 << 20))
    (root / "latin1.json").write_bytes(b'{"library_path": "\xff"}')
    (root / "no_library_path.json").write_text('{"create_options": {}}')
    os.link(root / "good.npz", root / "hardlink.npz")
    os.symlink("good.npz", root / "symlink.npz")


RUN = ("run", "add.mlir", "--plugin", "reference", "--inputs")
LONG = "/" + "x" * 5000 + ".so"
ENV_PLUGINS = ",".join(["deep:deep.json", "huge:huge.json", f"long:{LONG}", "garbage", "latin:latin1.json",
                        "nolib:no_library_path.json", "dir:libs", "null:/dev/null"])

CASES = [
    # .npz inputs of run: exit 3, naming the file (and the member) and what is wrong.
    Case("npz-empty", (*RUN, "empty.npz"), 3, ("empty.npz", "is empty")),
    Case("npz-truncated-half", (*RUN, "truncated_half.npz"), 3, ("truncated_half.npz", "truncated or corrupt")),
    Case("npz-truncated-head", (*RUN, "truncated_head.npz"), 3, ("truncated_head.npz", "truncated or corrupt")),
    Case("npz-corrupt-deflate", (*RUN, "corrupt_deflate.npz"), 3,
         ("corrupt_deflate.npz", "'in0'", "truncated or corrupt")),
    Case("npz-bad-crc", (*RUN, "bad_crc.npz"), 3, ("bad_crc.npz", "'in0'", "CRC")),
    Case("npz-short-member", (*RUN, "short_member.npz"), 3, ("short_member.npz", "'in0'", "truncated or corrupt")),
    Case("npz-claims-4TiB", (*RUN, "claims_4tib.npz"), 3, ("claims_4tib.npz", "'in0'", "4.0 TiB")),
    Case("npz-pickle", (*RUN, "pickle.npz"), 3, ("pickle.npz", "'in0'", "never unpickles")),
    Case("npz-not-npy-member", (*RUN, "not_npy_member.npz"), 3, ("not_npy_member.npz", "'in0'", "not a .npy")),
    Case("npz-duplicate-member", (*RUN, "duplicate.npz"), 3, ("duplicate.npz", "more than one member", "in0")),
    Case("npz-ambiguous-names", (*RUN, "ambiguous.npz"), 3, ("ambiguous.npz", "'in00'", "ambiguous", "in0 is there")),
    Case("npz-leading-zero", (*RUN, "leading_zero.npz"), 3, ("leading_zero.npz", "'in00'", "ambiguous")),
    Case("npz-structured", (*RUN, "structured.npz"), 3, ("structured.npz", "'in0'", "structured dtype")),
    Case("npz-format-version", (*RUN, "npy_version_9.npz"), 3, ("npy_version_9.npz", "'in0'", "version")),
    Case("npz-garbage-header", (*RUN, "garbage_header.npz"), 3, ("garbage_header.npz", "'in0'", "cannot be read")),
    Case("npz-not-zip", (*RUN, "not_zip.npz"), 3, ("not_zip.npz", "no zip header")),
    Case("npz-is-npy", (*RUN, "array.npy"), 3, ("array.npy", "single .npy array", "numpy.savez")),
    Case("npz-dev-null", (*RUN, "/dev/null"), 3, ("/dev/null", "not a regular file")),
    Case("npz-directory", (*RUN, "a_directory.npz"), 3, ("a_directory.npz", "is a directory")),
    Case("npz-missing", (*RUN, "nowhere.npz"), 3, ("nowhere.npz", "does not exist")),
    # The program of run: exit 3.
    Case("program-not-utf8", ("run", "latin1.mlir", "--plugin", "reference", "--inputs", "good.npz"), 3,
         ("latin1.mlir", "not UTF-8")),
    Case("program-bytecode", ("run", "bytecode.mlir", "--plugin", "reference", "--inputs", "good.npz"), 3,
         ("bytecode.mlir", "bytecode")),
    Case("program-empty", ("run", "empty.mlir", "--plugin", "reference", "--inputs", "good.npz"), 3,
         ("no module",)),
    Case("program-dev-null", ("run", "/dev/null", "--plugin", "reference", "--inputs", "good.npz"), 3,
         ("/dev/null", "not a regular file")),
    Case("program-directory", ("run", "a_directory.mlir", "--plugin", "reference", "--inputs", "good.npz"), 3,
         ("a_directory.mlir", "is a directory")),
    Case("program-missing", ("run", "nowhere.mlir", "--plugin", "reference", "--inputs", "good.npz"), 3,
         ("nowhere.mlir", "does not exist")),
    Case("program-without-main", ("run", "no_main.mlir", "--plugin", "reference", "--inputs", "good.npz"), 3,
         ("no @main", "@other")),
    Case("program-deep-nesting", ("run", "deep.mlir", "--plugin", "reference", "--inputs", "good.npz"), 3,
         ("line 1", f"nest deeper than {MAX_NESTING} levels")),
    Case("program-syntax", ("run", "syntax.mlir", "--plugin", "reference", "--inputs", "good.npz"), 3,
         ("line 2",)),
    # --out: refused before any work, exit 2; inputs untouched.
    Case("out-missing-directory", (*RUN, "good.npz", "--out", "nowhere/out.npz"), 2, ("nowhere", "does not exist")),
    Case("out-is-a-directory", (*RUN, "good.npz", "--out", "libs"), 2, ("libs", "is a directory")),
    Case("out-is-the-input", (*RUN, "good.npz", "--out", "good.npz"), 2, ("good.npz", "input of this run")),
    Case("out-is-the-input-by-another-path", (*RUN, "good.npz", "--out", "./libs/../good.npz"), 2,
         ("good.npz", "input of this run")),
    Case("out-symlink-to-input", (*RUN, "good.npz", "--out", "symlink.npz"), 2, ("symlink.npz", "input of this run")),
    Case("out-hardlink-to-input", (*RUN, "good.npz", "--out", "hardlink.npz"), 2, ("hardlink.npz", "input of this run")),
    Case("out-is-the-program", (*RUN, "good.npz", "--out", "add.mlir"), 2, ("add.mlir", "input of this run")),
    # Options.
    Case("option-run-without-inputs", ("run", "add.mlir"), 2, ("--inputs",)),
    Case("option-unknown", ("run", "add.mlir", "--frobnicate"), 2, ("--frobnicate",)),
    Case("option-negative-timeout", ("run", "add.mlir", "--inputs", "good.npz", "--timeout", "-1"), 2,
         ("--timeout", "> 0")),
    Case("option-nan-timeout-scale", ("conformance", "--timeout-scale", "nan"), 2, ("--timeout-scale", "> 0")),
    Case("option-junit-unwritable", ("conformance", "--plugin", "reference", "--case", "version/loaded",
                                     "--junit", "/proc/nowhere/junit.xml"), 2, ("--junit", "/proc/nowhere")),
    Case("option-bad-framework-version", ("check", "--framework-version", "x.y"), 2, ("--framework-version", "x.y")),
    Case("bench-no-such-plugin", ("bench", "--plugin", "nosuch", "--no-warm"), 5, ("nosuch",)),
    Case("bench-no-such-program", ("bench", "--program", "nope"), 2, ("nope", "known:")),
    Case("bench-spread-of-one", ("bench", "--spread", "1"), 2, ("--spread 1", "at least 2 processes")),
    Case("bench-under-load-zero", ("bench", "--under-load", "0"), 2, ("--under-load 0", "at least 1")),
    Case("bench-spread-and-load", ("bench", "--spread", "2", "--under-load", "1"), 2,
         ("--spread and --under-load cannot be combined",)),
    Case("bench-spread-and-collectives", ("bench", "--spread", "2", "--collectives"), 2,
         ("--spread and --collectives cannot be combined",)),
    Case("conformance-case-matches-nothing", ("conformance", "--plugin", "reference", "--case", "nosuch*"), 2,
         ("'nosuch*'", "matches no case")),
    Case("conformance-no-such-plugin", ("conformance", "--plugin", "nosuch"), 5, ("nosuch",)),
    Case("conformance-every-case-skipped", ("conformance", "--plugin", "reference", "--case", "abi/*"), 1,
         ("nothing was tested",), stream="stdout", line_starts="NOT OK"),
    Case("conformance-plugin-refused", ("conformance", "--plugin", "reference", "--framework-version", "0.1",
                                        "--case", "version/loaded"), 1,
         ("1 cases failed",), stream="stdout", line_starts="NOT OK"),
    # probe of what is not a library: exit 3, saying why.
    Case("probe-missing", ("probe", "./nowhere.so"), 3, ("nowhere.so", "does not exist"),
         stream="stdout", line_starts="  not probed"),
    Case("probe-directory", ("probe", "./libs"), 3, ("libs", "is a directory"), stream="stdout",
         line_starts="  not probed"),
    Case("probe-not-a-library", ("probe", "./text.so"), 3, ("not a shared library (no ELF header)",), stream="stdout",
         line_starts="  not probed"),
    Case("probe-dev-null", ("probe", "/dev/null"), 3, ("/dev/null", "not a regular file"), stream="stdout",
         line_starts="  not probed"),
    # PJRT_NAMES_AND_LIBRARY_PATHS entries that are not plugins: per-plugin failures, never a crash.
    *[Case(f"env-list-{name}", ("list",), 0, says, env={"PJRT_NAMES_AND_LIBRARY_PATHS": ENV_PLUGINS},
           stream="stdout", line_starts=f"{name}: failed:")
      for name, says in [("deep", ("deep.json", "nests too deeply")), ("huge", ("huge.json", "larger than")),
                         ("long", ("5004 characters", "File name too long")),
                         ("garbage", ("invalid value 'garbage'",)), ("latin", ("latin1.json", "not UTF-8")),
                         ("nolib", ("library_path",)), ("dir", ("libs", "is a directory")),
                         ("null", ("/dev/null", "not a regular file"))]],
    Case("env-check", ("check",), 1, ("deep.json", "nests too deeply"),
         env={"PJRT_NAMES_AND_LIBRARY_PATHS": ENV_PLUGINS}, stream="stdout", line_starts="  - deep: failed:"),
    Case("env-probe-deep", ("probe", "deep"), 3, ("deep.json", "nests too deeply"),
         env={"PJRT_NAMES_AND_LIBRARY_PATHS": ENV_PLUGINS}, stream="stdout", line_starts="  not probed"),
    Case("env-probe-long", ("probe", "long"), 3, ("File name too long",),
         env={"PJRT_NAMES_AND_LIBRARY_PATHS": ENV_PLUGINS}, stream="stdout", line_starts="  not probed"),
    Case("env-run-huge", ("run", "add.mlir", "--plugin", "huge", "--inputs", "good.npz"), 1,
         ("huge", "larger than"), env={"PJRT_NAMES_AND_LIBRARY_PATHS": ENV_PLUGINS}),
]


def _command() -> list[str]:
    return [sys.executable, "-m", "pjrt_hub.cli"]


def _snapshot(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()}


#: The fork server: reads one JSON request a line (argv, env, cwd, the files for the standard
#: streams), forks, and answers with the child's exit status. The child does what
#: ``python -m pjrt_hub.cli ARGV`` does after the interpreter has started: it runs the module as
#: ``__main__`` and leaves SystemExit and any exception to the interpreter, which prints and
#: exits as it would there (atexit handlers included).
_FORK_SERVER = r"""
import json, os, runpy, signal, sys
# What most cases would import again (and, without bytecode files, compile again); nothing is called.
import ml_dtypes, numpy, pjrt_hub.cli, pjrt_hub._registry, pjrt_hub._run, pjrt_hub.backends.stablehlo

for line in sys.stdin:
    request = json.loads(line)
    pid = os.fork()
    if pid == 0:
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        for fd, (path, flags) in enumerate([(os.devnull, os.O_RDONLY),
                                            (request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                                            (request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)]):
            opened = os.open(path, flags, 0o600)
            os.dup2(opened, fd)
            os.close(opened)
        sys.stdin = open(0, closefd=False)
        signal.alarm(600)  # a case that hangs ends as a signalled process, as a time-out would
        sys.argv = ["-m", *request["argv"]]
        runpy.run_module("pjrt_hub.cli", run_name="__main__", alter_sys=True)
        sys.exit(0)
    _, status = os.waitpid(pid, 0)
    print(os.waitstatus_to_exitcode(status), flush=True)
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("bad-inputs")
    streams = tmp_path_factory.mktemp("bad-input-streams")
    _make_files(root)
    before = _snapshot(root)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PJRT_", "ENABLE_PJRT"))}
    # Only the built-in Python plugins are considered: the cases are about the inputs.
    base.update(PJRT_HUB_CACHE=str(tmp_path_factory.mktemp("hub-cache")), PYTHONWARNINGS="ignore")

    def fresh(argv: tuple[str, ...], env: dict[str, str]) -> subprocess.CompletedProcess:
        return subprocess.run([*_command(), *argv], cwd=root, env={**base, **env},
                              capture_output=True, text=True, timeout=600)

    server = subprocess.Popen([sys.executable, "-c", _FORK_SERVER], cwd=root, env=base, text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def forked(argv: tuple[str, ...], number: int) -> subprocess.CompletedProcess:
        out, err = streams / f"{number}.out", streams / f"{number}.err"
        assert server.stdin is not None and server.stdout is not None
        server.stdin.write(json.dumps({"argv": argv, "env": base, "cwd": str(root),
                                       "stdout": str(out), "stderr": str(err)}) + "\n")
        server.stdin.flush()
        code = int(server.stdout.readline())
        return subprocess.CompletedProcess(argv, code, out.read_text(), err.read_text())

    # Cases that read the same command's output (the lines of one `list`) share one process.
    keys = list(dict.fromkeys(_key(c) for c in CASES))
    try:
        done = {key: fresh(key[0], dict(key[1])) if key[1] else forked(key[0], number)
                for number, key in enumerate(keys)}
    finally:
        assert server.stdin is not None
        server.stdin.close()
        server.wait(timeout=60)
    assert server.returncode == 0
    # A forked case is what a fresh interpreter gives, to the byte.
    check = _key(CASES[0])
    witness = fresh(check[0], {})
    assert (witness.returncode, witness.stdout, witness.stderr) == (
        done[check].returncode, done[check].stdout, done[check].stderr)
    return root, before, {c.id: done[_key(c)] for c in CASES}


def _key(case: Case) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    return case.argv, tuple(sorted(case.env.items()))


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_exits_with_its_code_and_one_line(runs, case):
    root, _, results = runs
    done = results[case.id]
    both = done.stdout + done.stderr
    assert "Traceback" not in both, both
    assert done.returncode == case.code, f"exit {done.returncode}, expected {case.code}:\n{both}"
    if case.stream == "stderr":
        lines = [ln for ln in done.stderr.splitlines() if not ln.startswith("pjrt-hub: warning:")]
        assert len(lines) == 1, f"expected one line on stderr, got:\n{done.stderr}"
        (line,) = lines
    else:
        matching = [ln for ln in done.stdout.splitlines() if ln.startswith(case.line_starts)]
        assert len(matching) == 1, f"expected one line starting {case.line_starts!r}:\n{done.stdout}"
        (line,) = matching
    for text in case.says:
        assert text in line, f"{text!r} not in {line!r}"


def test_no_input_file_was_touched(runs):
    root, before, results = runs
    assert set(results) == {c.id for c in CASES}
    assert _snapshot(root) == before
    assert not (root / "UNPICKLED").exists(), "a pickled member was unpickled"
    assert not [p for p in root.iterdir() if p.name.startswith(".") and p.name.endswith(".tmp")]

