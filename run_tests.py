"""Run test modules in worker processes that share one import.

    python -W error run_tests.py [--workers N] [-v] MODULE...

make test and make test-fast use it. The modules, and the SDK they import
(about 1.5 s of CPU), are loaded once; then N workers are forked from this
process and take the tests one at a time from a shared counter, the slow ones
first, so a worker that drew short tests takes more of them and both cores stay
busy to the end.
Each worker reports in full (its own unittest report, -v for a line per test),
then one line totals them.

Exit codes: 0 every test passed, 1 a test failed or errored (or a worker died),
2 bad usage or a module that does not load.
"""

import argparse
import gc
import multiprocessing
import os
import shutil
import sys
import tempfile
import threading
import time
import unittest

WORKERS = 2  # this machine's cores; a third worker only shares them


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

    def __init__(self, tests, counter):
        super().__init__()
        self.all, self.counter = tests, counter

    def __iter__(self):
        while True:
            with self.counter.get_lock():
                index = self.counter.value
                self.counter.value += 1
            if index >= len(self.all):
                return
            yield self.all[index]


def work(tests, counter, verbosity, report):
    """Run claimed tests with unittest's own runner; the counts go last in the report."""
    with open(report, "w", encoding="utf-8") as stream:
        result = unittest.TextTestRunner(stream=stream, verbosity=verbosity).run(
            Claimed(tests, counter))
        stream.write(f"\n{result.testsRun} {len(result.failures) + len(result.errors)} "
                     f"{len(result.skipped)}\n")
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
    # workers: kept out of the collector's full passes, and unshared by none.
    gc.freeze()
    counter = multiprocessing.Value("i", 0)
    folder = tempfile.mkdtemp(prefix="run-tests-")
    workers = {}
    for number in range(max(1, options.workers)):
        report = os.path.join(folder, f"worker-{number}.log")
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = 0 if work(tests, counter, 2 if options.verbose else 1, report) else 1
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        workers[pid] = report
    passed, ran, failed, skipped = True, 0, 0, 0
    for pid, report in workers.items():
        code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        try:
            with open(report, encoding="utf-8") as handle:
                text = handle.read()
            os.unlink(report)
        except FileNotFoundError:
            text = ""
        body, _, counts = text.rstrip("\n").rpartition("\n")
        if code not in (0, 1) or counts.count(" ") != 2:
            print(text, file=sys.stderr)
            print(f"run_tests.py: a worker ended with exit code {code} before its report; "
                  "the tests it had taken are not all run", file=sys.stderr)
            passed = False
            continue
        print(body, file=sys.stderr)
        numbers = [int(part) for part in counts.split()]
        ran, failed, skipped = ran + numbers[0], failed + numbers[1], skipped + numbers[2]
        passed = passed and code == 0
    shutil.rmtree(folder, ignore_errors=True)
    verdict = "OK" if passed and ran == len(tests) else "FAILED"
    print(f"\n{verdict}: {ran} of {len(tests)} tests ran in {len(workers)} workers, "
          f"{failed} failed, {skipped} skipped, {time.monotonic() - started:.1f} s",
          file=sys.stderr)
    return 0 if verdict == "OK" else 1


if __name__ == "__main__":
    raise SystemExit(main())
