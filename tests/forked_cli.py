"""`python -m mxrec_ref ARGS` or `python SCRIPT ARGS` without paying TensorFlow's import each time
(CI time, not behaviour).

A test that only needs "run this command, check its exit status, output and files" spends most
of a fresh subprocess on importing TensorFlow (5-8 s).  A server process here imports
TensorFlow and `mxrec_ref.cli` once; each command then runs in a process forked from it, with
its own argv, current folder, environment, stdin from /dev/null and stdout/stderr captured at
the file-descriptor level (C++ log lines included).  The forked process ends the way
``python -m mxrec_ref`` (``sys.exit(main(argv))``) or ``python SCRIPT`` do, at the top of
the program: an uncaught error prints its traceback with status 1, and interpreter shutdown
(threads, atexit, sessions closed by their finalizers, the TF-13 watchdog) is real.

What differs from a fresh process, so tests of these keep a real subprocess: TensorFlow's
start-up lines are never printed (the server imported it quietly), its C++ log level and the
``tensorflow`` logger are those of a quiet, non-verbose start, and modules the server imported
are not imported again (environment read at their import is the server's).

Protocol: one Unix socket; per connection the server forks a handler that reads one JSON
request, forks the runner (its own process group), waits for it (killing the group at the
timeout) and answers one JSON line.
"""
from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MAIN = REPO / "mxrec_ref" / "__main__.py"


class ForkedCli:
    """The client: ``run(args, cwd=..., env=..., timeout=...)`` like ``subprocess.run(
    [sys.executable, "-m", "mxrec_ref", *args], capture_output=True, text=True, ...)``, and
    ``python([script, *args], ...)`` like ``[sys.executable, script, *args]``."""

    def __init__(self):
        self._folder = tempfile.mkdtemp(prefix="mxrec-forked-")      # short: a socket path has 108 bytes
        self.socket_path = os.path.join(self._folder, "socket")
        environment = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}   # a user's default
        environment["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
        self._errors = open(os.path.join(self._folder, "server.err"), "w+")
        self._server = subprocess.Popen([sys.executable, __file__, self.socket_path], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=self._errors, env=environment, cwd=REPO)
        if self._server.stdout.readline().strip() != b"ready":
            self._server.wait(timeout=60)
            self._errors.seek(0)
            raise RuntimeError(f"forked_cli server did not start:\n{self._errors.read()[-3000:]}")

    def run(self, args, *, cwd=None, env=None, timeout=300) -> subprocess.CompletedProcess:
        return self._request(["-m", "mxrec_ref", *args], cwd, env, timeout)

    def python(self, args, *, cwd=None, env=None, timeout=300) -> subprocess.CompletedProcess:
        return self._request(args, cwd, env, timeout)

    def _request(self, args, cwd, env, timeout) -> subprocess.CompletedProcess:
        request = {"argv": [str(a) for a in args], "cwd": str(cwd or os.getcwd()),
                   "env": dict(os.environ if env is None else env), "timeout": timeout}
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
            connection.settimeout(timeout + 60)          # the handler enforces `timeout`; this guards the handler
            connection.connect(self.socket_path)
            with connection.makefile("rwb") as stream:
                stream.write(json.dumps(request).encode() + b"\n")
                stream.flush()
                reply = json.loads(stream.readline())
        command = [sys.executable, *request["argv"]]
        if reply["returncode"] is None:
            raise subprocess.TimeoutExpired(command, timeout, reply["stdout"], reply["stderr"])
        return subprocess.CompletedProcess(command, reply["returncode"], reply["stdout"], reply["stderr"])

    def close(self) -> None:
        self._server.stdin.close()                       # the server ends at end of input
        try:
            self._server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._server.kill()
            self._server.wait()
        self._server.stdout.close()
        self._errors.close()
        for name in os.listdir(self._folder):
            os.unlink(os.path.join(self._folder, name))
        os.rmdir(self._folder)


# ------------------------------------------------------------ the server (this file run as a script)
def _serve(socket_path: str):
    """Accept connections until stdin ends; returns only in a forked runner, with its argv."""
    from mxrec_ref import cli

    cli.import_tensorflow_quietly()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(socket_path)
    listener.listen(16)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    while True:
        readable, _, _ = select.select([listener, sys.stdin], [], [], 1.0)
        _reap()
        if sys.stdin in readable and not os.read(sys.stdin.fileno(), 1):
            _reap(block=True)                            # no orphan handlers (and their CPU time is counted)
            return None
        if listener in readable:
            connection, _ = listener.accept()
            if os.fork() == 0:
                listener.close()
                return _handle(connection)               # in the runner only: its python argv
            connection.close()


def _reap(block: bool = False) -> None:
    try:
        while os.waitpid(-1, 0 if block else os.WNOHANG)[0]:
            pass
    except ChildProcessError:
        pass


def _handle(connection: socket.socket):
    """A handler process: one request, one runner, one reply.  It returns only in the
    runner (the argv to run); the handler itself ends with os._exit."""
    stream = connection.makefile("rwb")
    request = json.loads(stream.readline())
    out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
    runner = os.fork()
    if runner == 0:
        stream.close()
        connection.close()
        _become_runner(request, out, err)
        out.close()
        err.close()
        return request["argv"]
    status = 1
    try:
        returncode = _wait(runner, request["timeout"])
        out.seek(0)
        err.seek(0)
        reply = {"returncode": returncode, "stdout": out.read().decode(errors="replace"),
                 "stderr": err.read().decode(errors="replace")}
        stream.write(json.dumps(reply).encode() + b"\n")
        stream.flush()
        status = 0
    finally:
        if status:
            import traceback

            traceback.print_exc()
        os._exit(status)


def _become_runner(request, out, err) -> None:
    """The process state of ``python -m mxrec_ref ARGV`` run in ``cwd`` with ``env``."""
    os.setpgid(0, 0)                                     # the handler kills the group at the timeout
    sys.stdin.close()
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    sys.stdin = open(0, closefd=False)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(out.fileno(), 1)
    os.dup2(err.fileno(), 2)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    tempfile.tempdir = None                              # cached by the server's first use: TMPDIR is the runner's
    if request["argv"][:2] == ["-m", "mxrec_ref"]:
        sys.argv = [str(MAIN), *request["argv"][2:]]
        sys.path[0] = request["cwd"]                     # `python -m` puts the current folder first
    else:
        sys.argv = [os.path.abspath(request["argv"][0]), *request["argv"][1:]]
        sys.path[0] = os.path.dirname(sys.argv[0])       # `python SCRIPT` puts the script's folder first


def _wait(pid: int, timeout: float) -> int | None:
    """The runner's status as subprocess reports it (-signal when killed); None at the timeout."""
    deadline = time.monotonic() + timeout
    delay = 0.005
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(pid, 0)
            return None
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


if __name__ == "__main__":
    argv = _serve(sys.argv[1])
    if argv is None:
        sys.exit(0)
    if argv[:2] == ["-m", "mxrec_ref"]:
        from mxrec_ref.cli import main

        sys.exit(main(argv[2:]))
    import runpy

    runpy.run_path(sys.argv[0], run_name="__main__")
