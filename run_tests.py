"""Run test modules in worker processes that share one import.

    python -W error run_tests.py [--workers N] [-v] MODULE...

make test and make test-fast use it. The modules, and the SDK they import
(about 1 s of CPU), are loaded once; then N workers are forked from this
process and take the tests one at a time from a shared counter, the slow ones
first, so a worker that drew short tests takes more of them and both cores stay
busy to the end. Each worker reports in full (its own unittest report, -v for a
line per test) when it ends, then one line totals them:

    OK: 410 of 410 tests ran in 3 workers, 0 failed, 2 skipped, 33.6 s

"failed" and "skipped" count tests, not subtests: a test that failed or erred,
and an unexpected success, fail. A test that runs longer than TEST_SECONDS ends its worker
with every thread's traceback. Class and module fixtures run in each worker
that takes one of their tests (this suite has none).

Exit codes: 0 every test ran and passed; 1 a test failed, or a worker died
before its report (its tests count as not run); 2 bad usage or a module that
does not load; 130/143 interrupted.
"""

import argparse
import atexit
import contextlib
import faulthandler
import gc
import multiprocessing
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import unittest

WORKERS = 2  # this machine's cores; a third worker only shares them
TEST_SECONDS = 600  # one test at most: the longest waits 300 s on a child process
COUNTS = "run_tests.py counts:"  # a worker's last line: tests claimed, failed, skipped


def slow_first(tests):
    """The tests marked slow (testing.slow) first, each group in the given order:
    a long test that starts last keeps one core busy after the other is done."""
    def marked(test):
        method = getattr(type(test), getattr(test, "_testMethodName", ""), None)
        return hasattr(method, "slow_tier") or hasattr(type(test), "slow_tier")
    return sorted(tests, key=lambda test: not marked(test))


def flat(suite):
    """The tests of a suite, in the loader's order."""
    for test in suite:
        if isinstance(test, unittest.TestSuite):
            yield from flat(test)
        else:
            yield test


class Claimed(unittest.TestSuite):
    """The tests this worker claims from the shared counter, one at a time."""

    _cleanup = False  # the tests are not held in _tests, so there is nothing to free

    def __init__(self, tests, counter, report):
        super().__init__()
        self.all, self.counter, self.report, self.claimed = tests, counter, report, 0

    def __iter__(self):
        while True:
            with self.counter.get_lock():
                index = self.counter.value
                self.counter.value += 1
            if index >= len(self.all):
                faulthandler.cancel_dump_traceback_later()
                return
            self.claimed += 1
            # A hung test ends the worker, its stack in the report, not the run;
            # what the report holds so far is written first, in its order.
            self.report.flush()
            faulthandler.dump_traceback_later(TEST_SECONDS, exit=True, file=self.report)
            yield self.all[index]


def tests_in(entries):
    """The ids of the tests that unittest's entries name, a subtest as its test."""
    return {getattr(test, "test_case", test).id() for test, *_ in entries}


def failed_tests(result):
    """How many tests failed, erred or passed unexpectedly."""
    return len(tests_in(result.failures + result.errors)
               | tests_in((test,) for test in result.unexpectedSuccesses))


def work(tests, counter, verbosity, report):
    """Run claimed tests with unittest's own runner; the counts go last in the report."""
    with open(report, "w", encoding="utf-8") as stream:
        claimed = Claimed(tests, counter, stream)
        result = unittest.TextTestRunner(stream=stream, verbosity=verbosity).run(claimed)
        stream.write(f"\n{COUNTS} {claimed.claimed} {failed_tests(result)} "
                     f"{len(tests_in(result.skipped))}\n")
        return result.wasSuccessful()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("modules", nargs="+", metavar="MODULE", help="test modules to run")
    parser.add_argument("--workers", type=int, default=WORKERS,
                        help=f"processes that run the tests (default {WORKERS})")
    parser.add_argument("-v", "--verbose", action="store_true", help="a line per test")
    options = parser.parse_args(argv)
    started = time.monotonic()
    suite = unittest.defaultTestLoader.loadTestsFromNames(options.modules)
    tests = slow_first(flat(suite))
    broken = [test for test in tests if type(test).__name__ == "_FailedTest"]
    if broken:
        print(f"run_tests.py: cannot load {broken[0].id()}: "
              f"{broken[0]._exception}", file=sys.stderr)
        return 2
    # fork() copies only the thread that calls it: a lock another thread held
    # would stay held in every worker. Loading must start none.
    if threading.active_count() != 1:
        print("run_tests.py: loading the modules started a thread; cannot fork safely",
              file=sys.stderr)
        return 2
    # What loading made (the SDK's thousands of classes) lives as long as the
    # workers: kept out of the collector's full passes.
    gc.freeze()
    counter = multiprocessing.Value("i", 0)
    folder = tempfile.mkdtemp(prefix="run-tests-")
    workers = {}
    stopped = []

    def stop(number, frame):
        stopped.append(number)
        for pid in workers:
            with contextlib.suppress(ProcessLookupError):  # it ended just now
                os.kill(pid, number)

    try:
        for number in range(max(1, options.workers)):
            report = os.path.join(folder, f"worker-{number}.log")
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    code = 0 if work(tests, counter, 2 if options.verbose else 1, report) else 1
                    # As a worker that ended normally would: the helpers' exit steps
                    # stop and reap what the tests started (a warm interpreter).
                    atexit._run_exitfuncs()
                finally:
                    sys.stdout.flush()
                    sys.stderr.flush()
                    os._exit(code)
            workers[pid] = report
        for number in (signal.SIGINT, signal.SIGTERM):
            signal.signal(number, stop)
        passed, claimed, failed, skipped = True, 0, 0, 0
        for pid, report in workers.items():
            code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
            try:
                with open(report, encoding="utf-8") as handle:
                    text = handle.read()
            except FileNotFoundError:
                text = ""
            body, _, counts = text.rstrip("\n").rpartition("\n")
            if code not in (0, 1) or not counts.startswith(COUNTS):
                print(text, file=sys.stderr)
                print(f"run_tests.py: a worker ended with exit code {code} before its "
                      "report; the tests it had taken count as not run", file=sys.stderr)
                passed = False
                continue
            print(body, file=sys.stderr)
            numbers = [int(part) for part in counts.removeprefix(COUNTS).split()]
            claimed, failed, skipped = (claimed + numbers[0], failed + numbers[1],
                                        skipped + numbers[2])
            passed = passed and code == 0
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if stopped:
        print(f"run_tests.py: interrupted; {claimed} of {len(tests)} tests ran",
              file=sys.stderr)
        return 128 + stopped[0]
    # A test not run is one a dead worker took: passed is already False for it.
    verdict = "OK" if passed and failed == 0 else "FAILED"
    print(f"\n{verdict}: {claimed} of {len(tests)} tests ran in {len(workers)} workers, "
          f"{failed} failed, {skipped} skipped, {time.monotonic() - started:.1f} s",
          file=sys.stderr)
    return 0 if verdict == "OK" else 1


if __name__ == "__main__":
    raise SystemExit(main())
