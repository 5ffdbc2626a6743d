"""Helpers shared by the test modules: temp folders, the in-process harness,
the real CLI in a fresh interpreter or forked from a warm one, and a loopback
simulated API.

Nothing here talks to any address but 127.0.0.1.
"""

import atexit
import contextlib
import importlib
import io
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import unittest
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
# make test-fast sets TEST_TIER=fast: in-process tests only. A test that spawns a
# process, drives a browser or waits in real time is marked @slow("why") and
# runs in make test; in the fast tier starting a process fails the test, so a
# slow test cannot hide there unmarked.
FAST_TIER = os.environ.get("TEST_TIER") == "fast"


def slow(why):
    """Mark a test (or a class) that belongs to make test alone; run_tests.py
    starts these first, so the short in-process tests fill the end."""
    def mark(test):
        test.slow_tier = why
        return unittest.skipIf(FAST_TIER, f"slow tier, make test runs it: {why}")(test)
    return mark


if FAST_TIER:
    class _NoProcess(subprocess.Popen):
        def __init__(self, *args, **kwargs):
            raise AssertionError("a fast-tier test started a process; mark it @slow(...)")

    subprocess.Popen = _NoProcess
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
BROWSER_SECONDS = 60  # one headless page load; a cold start takes a few seconds
KEY = "pplx-test-key-0123456789abcdef"  # key-shaped and long enough to be redacted


# Test folders in memory where the machine has it: a record is fsynced after
# every row, which on a disk costs more than the rest of a fast test.
MEMORY = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


def temp_dir(test):
    """A new folder removed when the test ends."""
    folder = tempfile.mkdtemp(dir=MEMORY)
    test.addCleanup(shutil.rmtree, folder, True)
    return folder


def read_json(path):
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def read_text(path):
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def write_text(path, text):
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)
    return path


def quiet(function, *args, **kwargs):
    """(function's result, its stdout, its stderr)."""
    output, errors = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(output), contextlib.redirect_stderr(errors):
        result = function(*args, **kwargs)
    return result, output.getvalue(), errors.getvalue()


def clean_env(**extra):
    """The environment a new user has: no PERPLEXITY_* variable unless given."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("PERPLEXITY_")}
    return {**base, **extra}


def loopback_env(server, key=KEY):
    """Environment that points the real SDK at a simulated API on 127.0.0.1."""
    return clean_env(PERPLEXITY_API_KEY=key, PERPLEXITY_BASE_URL=server.url,
                     NO_PROXY="127.0.0.1", no_proxy="127.0.0.1")


def cli(script, *args, env=None, cwd=None, timeout=120):
    """Run a project script as a new user would: a fresh interpreter, -W error."""
    return subprocess.run([sys.executable, "-W", "error", os.path.join(HERE, script), *args],
                          capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          env=clean_env() if env is None else env)


def exit_code(stop):
    """The exit code the interpreter makes of a SystemExit: a message is printed
    on stderr and gives 1."""
    if stop.code is None or isinstance(stop.code, int):
        return stop.code or 0
    print(stop.code, file=sys.stderr)
    return 1


def in_process(script, *args, env, cwd=None):
    """A project script's main(args) in this interpreter, with env as the whole
    environment and cwd as the folder: a CompletedProcess, as cli() gives.

    For a test whose subject is the real SDK over real HTTP, not the process: a
    fresh interpreter costs about 1 s of CPU, most of it loading the SDK. Signals,
    closed streams, start-up and the printed commands keep real processes.
    """
    module = importlib.import_module(script.removesuffix(".py"))

    def main():
        try:
            return module.main(list(args))
        except SystemExit as stop:
            return exit_code(stop)

    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.dict(os.environ, env, clear=True))
        if cwd is not None:
            stack.enter_context(contextlib.chdir(cwd))
        code, output, errors = quiet(main)
    return subprocess.CompletedProcess([script, *args], code, output, errors)


def popen(test, script, *args, env, flags=()):
    """A project script started to be signalled or cut off while it runs: a child
    of a warm interpreter (below), stdout and stderr piped as text. The run is
    killed when the test ends, if it is still running. flags: the interpreter's
    own (-W error), as on a command line."""
    run = warm_interpreter(env, tuple(flags)).start(os.path.join(HERE, script), args, env)
    test.addCleanup(run.end)
    return run


def run_warm(test, script, *args, env, timeout=120):
    """A project script run to its end, as cli() runs it (-W error), as a child of
    a warm interpreter: a CompletedProcess."""
    run = popen(test, script, *args, env=env, flags=("-W", "error"))
    output, errors = run.communicate(timeout=timeout)
    return subprocess.CompletedProcess(run.args, run.returncode, output, errors)


# --------------------------------------------------------------------------
# The warm interpreter: popen() forks a run from an interpreter that loaded
# the SDK once, instead of starting a new one (about 1 s of CPU each). The run is a
# real process, its own pid, signals and pipes, running the script as __main__
# with its own argv, environment and folder. What it shares with the others is
# what the interpreter did before the script, so a run goes to an interpreter
# started with the same flags and the same variables that shape start-up
# (PYTHON*, LANG, LC_*, HOME): the SDK loaded, the streams set up, the hash
# seed. Tests of start-up itself (a closed stream, an old Python, a missing
# SDK, Ctrl+C while it loads) and every printed command start a fresh one.
# --------------------------------------------------------------------------

_WARM = {}  # (pid, flags, start-up variables) -> WarmInterpreter
WARM_TIMEOUT = 120  # seconds for a warm interpreter to load the SDK and fork a run


def start_up(env):
    """The variables of env that shape an interpreter's start-up."""
    return tuple(sorted((name, value) for name, value in env.items()
                        if name.startswith(("PYTHON", "LC_")) or name in ("LANG", "HOME")))


def warm_interpreter(env, flags):
    key = (os.getpid(), flags, start_up(env))  # a forked test worker starts its own
    if key not in _WARM:
        _WARM[key] = WarmInterpreter(env, flags)
        atexit.register(_WARM[key].stop)
    return _WARM[key]


class WarmInterpreter:
    """A fresh interpreter that loads the SDK, then forks a run per request."""

    def __init__(self, env, flags):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        code = f"import sys; sys.path[0] = {HERE!r}; import testing; testing.serve_runs()"
        # Its own output goes to a file, never to the suite's: a run left behind
        # must not hold the pipe a CI job reads the suite through.
        self.log = tempfile.TemporaryFile()
        self.process = subprocess.Popen(
            [sys.executable, *flags, "-c", code], stdin=theirs, stdout=self.log,
            stderr=self.log, cwd=HERE, env=env)
        theirs.close()
        self.control = ours

    def stop(self):
        """End the loop (every run has ended with its test: popen's cleanup)."""
        self.control.close()
        self.process.wait(timeout=60)
        self.log.close()

    def failed(self):
        """Why no run came, for the test's failure message."""
        self.log.seek(0)
        return (f"the warm interpreter ended with exit code {self.process.poll()}: "
                f"{self.log.read()[-2000:].decode(errors='replace')}")

    def start(self, script, args, env):
        reads, writes = zip(os.pipe(), os.pipe(), os.pipe())  # stdout, stderr, status
        with open(os.devnull, "rb") as stdin:
            request = json.dumps({"script": script, "args": list(args), "env": env,
                                  "cwd": os.getcwd()}).encode()
            try:
                socket.send_fds(self.control, [request], [stdin.fileno(), *writes])
            except OSError as error:
                raise AssertionError(f"{self.failed()} ({error})") from None
        for fd in writes:
            os.close(fd)
        return WarmRun([script, *args], *reads, interpreter=self)


def serve_runs():
    """The warm interpreter's loop (its stdin is the control socket): for each
    request a watcher is forked, which forks the run, reports its pid, waits for
    it and reports its exit code. Ends at once when the test process goes:
    tearing down the SDK's classes would cost a second of CPU for nothing."""
    import perplexity  # noqa: F401 - the load every run would otherwise pay again

    control = socket.socket(fileno=os.dup(0))
    nothing = os.open(os.devnull, os.O_RDONLY)
    os.dup2(nothing, 0)
    os.close(nothing)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # watchers need no reaping
    while True:
        message, fds, _, _ = socket.recv_fds(control, 1 << 20, 4)
        if not message:  # the test process is gone: nothing of this one to tidy
            os._exit(0)
        if os.fork() == 0:
            control.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            pid = os.fork()
            if pid == 0:
                os.close(fds[3])
                run_script(json.loads(message), fds[:3])
            for fd in fds[:3]:
                os.close(fd)
            os.write(fds[3], f"{pid}\n".encode())
            _, status = os.waitpid(pid, 0)
            os.write(fds[3], f"{os.waitstatus_to_exitcode(status)}\n".encode())
            os._exit(0)
        for fd in fds:
            os.close(fd)


def run_script(request, fds):
    """In the forked run: the script as `python SCRIPT ARGS...` would run it."""
    import runpy

    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = [request["script"], *request["args"]]
    sys.path[0] = os.path.dirname(request["script"])
    code, interrupted = 0, False
    try:
        runpy.run_path(request["script"], run_name="__main__")
    except SystemExit as stop:
        code = exit_code(stop)
    except KeyboardInterrupt:  # the interpreter ends by the signal itself
        traceback.print_exc()
        interrupted = True
    except BaseException:  # noqa: BLE001 - the interpreter's own last resort
        traceback.print_exc()
        code = 1
    threading._shutdown()  # the interpreter waits for the threads that are not daemons
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError) as error:  # as the interpreter's last flush
            with contextlib.suppress(OSError, ValueError):
                print(f"Exception ignored in: {stream!r}\n{type(error).__name__}: {error}",
                      file=sys.__stderr__)
            code = 120
    if interrupted:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(code & 0xFF)


class WarmRun:
    """A run of the warm interpreter, with the parts of subprocess.Popen the tests use."""

    def __init__(self, args, stdout, stderr, status, interpreter):
        self.args, self.returncode, self.status, self.told = args, None, status, b""
        self.interpreter = interpreter
        self.stdout, self.stderr = open(stdout), open(stderr)  # as text=True opens them
        pid = self.line(WARM_TIMEOUT)
        if pid is None:
            raise AssertionError(f"no run started within {WARM_TIMEOUT} s; "
                                 f"{interpreter.failed()}")
        self.pid = int(pid)

    def line(self, timeout):
        """The next line of the run's status, or None after timeout seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self.told:
            left = None if deadline is None else max(0, deadline - time.monotonic())
            if not select.select([self.status], [], [], left)[0]:
                return None
            data = os.read(self.status, 64)
            if not data:  # the watcher is gone: no status will ever come
                raise AssertionError(f"the run's watcher ended without its exit code; "
                                     f"{self.interpreter.failed()}")
            self.told += data
        line, self.told = self.told.split(b"\n", 1)
        return line.decode()

    def poll(self):
        return self.wait(0) if self.returncode is None else self.returncode

    def wait(self, timeout=None):
        if self.returncode is None:
            line = self.line(timeout)
            if line is None:
                if timeout == 0:
                    return None
                raise subprocess.TimeoutExpired(self.args, timeout)
            self.returncode = int(line)
            os.close(self.status)
        return self.returncode

    def send_signal(self, number):
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):  # it ended just now
                os.kill(self.pid, number)

    def kill(self):
        self.send_signal(signal.SIGKILL)

    def end(self):
        """When the test ends: kill the run if it still goes, then close its pipes."""
        self.kill()
        with contextlib.suppress(subprocess.TimeoutExpired, AssertionError):
            self.wait(30)
        if self.returncode is None:
            os.close(self.status)
        for stream in (self.stdout, self.stderr):
            stream.close()

    def communicate(self, timeout=None):
        """(stdout, stderr): what is left of each, read to the end; then the exit code."""
        found = {}
        readers = [threading.Thread(target=lambda name=name, stream=stream: found.update(
            {name: stream.read()}), daemon=True)
            for name, stream in (("stdout", self.stdout), ("stderr", self.stderr))
            if not stream.closed]
        for reader in readers:
            reader.start()
        deadline = None if timeout is None else time.monotonic() + timeout
        for reader in readers:
            reader.join(None if deadline is None else max(0, deadline - time.monotonic()))
            if reader.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout)
        for stream in (self.stdout, self.stderr):
            stream.close()
        self.wait(None if deadline is None else max(0, deadline - time.monotonic()))
        return found.get("stdout"), found.get("stderr")


def wait_until(condition, timeout=60, what="the condition"):
    """Poll condition() until true; fail the test with `what` after timeout seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


def saved_rows(path):
    """Rows in the record at path, 0 while it does not exist or is being replaced."""
    try:
        return len(read_json(path)["runs"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0


def loopback_server(test, cases=None, unsafe_models=()):
    """A simulated Agent API on 127.0.0.1, stopped when the test ends."""
    import regression
    import simulated_api

    server = simulated_api.start(regression.CASES if cases is None else cases, unsafe_models)
    test.addCleanup(server.stop)
    return server


class Harness(unittest.TestCase):
    """regression.main() in-process over the simulated API's answers (MockTransport).

    self.state is the simulated API's state; self.before_request(request), when
    set, runs first for every request (record, delay or fail it).
    """

    unsafe_models = ()

    def setUp(self):
        import regression
        import simulated_api

        self.regression = regression
        self.folder = temp_dir(self)
        self.out = self.path("r.json")
        self.state = simulated_api.new_state(regression.CASES, unsafe_models=self.unsafe_models)
        self.before_request = None
        self.client_kwargs = []  # what main() built each client with
        for patcher in (mock.patch.dict(os.environ, {"PERPLEXITY_API_KEY": KEY}),
                        mock.patch.object(regression, "Perplexity", self.fake_perplexity)):
            patcher.start()
            self.addCleanup(patcher.stop)

    def path(self, name):
        return os.path.join(self.folder, name)

    def write(self, name, text):
        return write_text(self.path(name), text)

    def cases_file(self, *ids):
        """A cases file of the built-in cases named, in the test's folder: for a
        run whose other cases play no part (each is a request, or a row to judge)."""
        cases = {case["id"]: case for case in self.regression.CASES}
        return self.write("built-in-cases.json", json.dumps([cases[i] for i in ids]))

    def fake_perplexity(self, **kwargs):
        import simulated_api

        self.client_kwargs.append(kwargs)

        def before(request):
            if self.before_request is not None:
                self.before_request(request)

        return simulated_api.sdk_client(self.state, before, api_key=KEY, **kwargs)

    def main(self, *args, out=True):
        """(exit code, stdout, stderr) of regression.main with --out self.out."""
        argv = ["--out", self.out, *args] if out else list(args)
        return quiet(self.regression.main, argv)

    def record(self, path=None):
        return read_json(path or self.out)


def dump_dom(path, user_data):
    """The DOM headless Chromium builds from a file; no name can resolve, so
    even a mistake in the page could not reach the network."""
    command = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
               "--disable-background-networking", "--disable-component-update",
               "--host-resolver-rules=MAP * ~NOTFOUND", f"--user-data-dir={user_data}",
               "--dump-dom", "file://" + path]
    done = subprocess.run(command, capture_output=True, text=True, timeout=BROWSER_SECONDS)
    if done.returncode != 0:
        raise AssertionError(f"chromium exit {done.returncode}: {done.stderr[-2000:]}")
    return done.stdout


def workflow_step(name, workflow="github-actions.yml"):
    """The `run: |` script of one step of an example GitHub Actions workflow."""
    lines = read_text(os.path.join(HERE, "examples", workflow)).splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == f"- name: {name}")
    run = next(i for i in range(start, len(lines)) if lines[i].strip() == "run: |")
    indent = len(lines[run]) - len(lines[run].lstrip()) + 2
    script = []
    for line in lines[run + 1:]:
        if line.strip() and len(line) - len(line.lstrip()) < indent:
            break
        script.append(line[indent:])
    return "\n".join(script) + "\n"
