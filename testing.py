"""Helpers shared by the test modules: temp folders, the in-process harness,
the real CLI in a fresh interpreter, and a loopback simulated API.

Nothing here talks to any address but 127.0.0.1.
"""

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
# make test-fast sets TEST_TIER=fast: in-process tests only. A test that spawns a
# process, drives a browser or waits in real time is marked @slow("why") and
# runs in make test; in the fast tier starting a process fails the test, so a
# slow test cannot hide there unmarked.
FAST_TIER = os.environ.get("TEST_TIER") == "fast"


def slow(why):
    """Mark a test (or a class) that belongs to make test alone."""
    return unittest.skipIf(FAST_TIER, f"slow tier, make test runs it: {why}")


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


def popen(script, *args, env):
    return subprocess.Popen([sys.executable, os.path.join(HERE, script), *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


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
