"""--jobs, the saved order, and checkpoints that are atomic and linear (issue 3). Offline."""

import contextlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from unittest import mock


import regression
import simulated_api

HERE = os.path.dirname(os.path.abspath(__file__))


def temp_dir(test):
    folder = tempfile.mkdtemp()
    test.addCleanup(shutil.rmtree, folder, True)
    return folder


class JobsTest(unittest.TestCase):
    def setUp(self):
        self.folder = temp_dir(self)
        self.state = simulated_api.new_state(regression.CASES, unsafe_models=())
        self.delay = lambda number: 0.0
        self.arrivals = []
        env = mock.patch.dict(os.environ, {"PERPLEXITY_API_KEY": "test-key"})
        env.start()
        self.addCleanup(env.stop)
        patcher = mock.patch.object(regression, "Perplexity", self.fake_perplexity)
        patcher.start()
        self.addCleanup(patcher.stop)

    def fake_perplexity(self, **kwargs):
        lock = threading.Lock()

        def before_request(request):
            with lock:
                self.arrivals.append(json.loads(request.content)["model"])
                number = len(self.arrivals)
            time.sleep(self.delay(number))

        return simulated_api.sdk_client(self.state, before_request, **kwargs)

    def run_main(self, *args):
        out = os.path.join(self.folder, f"run{len(os.listdir(self.folder))}.json")
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            code = regression.main(["--out", out, *args])
        with open(out, encoding="utf-8") as handle:
            return code, json.load(handle)

    def keys(self, record):
        return [(r["repeat"], r["case_id"], r["model"]) for r in record["runs"]]

    def test_jobs_1_and_8_save_the_same_order_when_answers_arrive_out_of_order(self):
        # Later requests answer first: 8 in flight finish in reverse order.
        self.delay = lambda number: 0.01 * (8 - number % 8)
        code1, sequential = self.run_main("--repeats", "2", "--jobs", "1")
        code8, concurrent = self.run_main("--repeats", "2", "--jobs", "8")
        self.assertEqual((code1, code8), (0, 0))
        expected = [(r, c["id"], m) for r, c, m in
                    regression.run_order(regression.MODELS, regression.CASES, 2)]
        self.assertEqual(self.keys(sequential), expected)
        self.assertEqual(self.keys(concurrent), expected)
        strip = lambda record: [{k: v for k, v in r.items() if k not in ("seconds", "response")}
                                for r in record["runs"]]
        self.assertEqual(strip(sequential), strip(concurrent))

    def test_no_new_request_after_an_error_and_in_flight_rows_are_saved(self):
        # The first request to arrive fails at once; the other three in flight
        # are slow, and must still be saved. Nothing new may start.
        self.state["faults"].append(simulated_api.error(401, "invalid api key"))
        self.delay = lambda number: 0.0 if number == 1 else 0.2
        code, record = self.run_main("--repeats", "3", "--jobs", "4")
        self.assertEqual(code, 2)
        self.assertEqual(len(self.arrivals), 4)
        self.assertEqual(len(record["runs"]), 4)
        self.assertEqual(sum(1 for r in record["runs"] if r["error"]), 1)
        self.assertEqual(record["summary"]["exit_code"], 2)

    def test_jobs_live_in_execution_not_config(self):
        _, record = self.run_main("--jobs", "3")
        self.assertEqual(record["execution"]["jobs"], 3)
        self.assertNotIn("jobs", record["config"])

    def test_jobs_out_of_range_is_a_usage_error(self):
        for jobs in ("0", "33"):
            with self.subTest(jobs=jobs), self.assertRaises(SystemExit) as raised, \
                    contextlib.redirect_stderr(io.StringIO()):
                regression.main(["--jobs", jobs, "--out", os.path.join(self.folder, "x")])
            self.assertEqual(raised.exception.code, 2)
        self.assertEqual(self.arrivals, [])

    def test_record_stays_valid_when_a_checkpoint_write_fails_midway(self):
        real_write_all = regression.write_all
        calls = []

        def failing_write_all(fd, data, offset):
            calls.append(1)
            if len(calls) >= 5:  # the disk fills up while the second row is saved
                real_write_all(fd, data[: len(data) // 2], offset)
                raise OSError(28, "No space left on device")
            real_write_all(fd, data, offset)

        out = os.path.join(self.folder, "r.json")
        with mock.patch.object(regression, "write_all", failing_write_all), \
                contextlib.redirect_stdout(io.StringIO()), self.assertRaises(OSError):
            regression.main(["--out", out])
        with open(out, encoding="utf-8") as handle:
            record = json.load(handle)  # the last complete checkpoint, not a torn one
        self.assertEqual(len(record["runs"]), 1)
        self.assertEqual(record["summary"]["exit_code"], 2)


class CheckpointTest(unittest.TestCase):
    def setUp(self):
        self.folder = temp_dir(self)
        self.path = os.path.join(self.folder, "r.json")

    def read(self):
        with open(self.path, encoding="utf-8") as handle:
            return json.load(handle)

    def test_rows_finished_out_of_order_are_saved_in_plan_order(self):
        head = {"created_at": "t", "config": {"models": ["m"]}}
        checkpoint = regression.open_record(self.path, head, {"summary": {"n": 0}})
        self.addCleanup(regression.close_record, checkpoint)
        self.assertEqual(self.read(), {**head, "runs": [], "summary": {"n": 0}})
        for step, index in enumerate([2, 0, 3, 1, 4], 1):
            regression.add_row(checkpoint, index, {"i": index})
            regression.save_record(checkpoint, {"summary": {"n": step}})
            saved = self.read()
            self.assertEqual(saved["summary"], {"n": step})
            self.assertEqual([r["i"] for r in saved["runs"]],
                             sorted([2, 0, 3, 1, 4][:step]))

    def test_open_refuses_an_existing_path_and_leaves_it(self):
        with open(self.path, "w", encoding="utf-8") as handle:
            handle.write("keep")
        with self.assertRaises(FileExistsError):
            regression.open_record(self.path, {"a": 1}, {})
        with open(self.path, encoding="utf-8") as handle:
            self.assertEqual(handle.read(), "keep")
        self.assertEqual(os.listdir(self.folder), ["r.json"])

    def test_close_leaves_only_the_record(self):
        checkpoint = regression.open_record(self.path, {"a": 1}, {"s": 0})
        regression.add_row(checkpoint, 0, {"i": 0})
        regression.save_record(checkpoint, {"s": 1})
        regression.close_record(checkpoint)
        self.assertEqual(os.listdir(self.folder), ["r.json"])
        self.assertEqual(self.read(), {"a": 1, "runs": [{"i": 0}], "s": 1})


class KillTest(unittest.TestCase):
    """SIGKILL the real CLI at several moments: the record is always whole."""

    def test_sigkill_at_any_moment_leaves_a_valid_record(self):
        server = simulated_api.start(regression.CASES)
        self.addCleanup(server.stop)
        server.state["latency"] = 0.01
        folder = temp_dir(self)
        env = {**os.environ, "PERPLEXITY_API_KEY": "test-key",
               "PERPLEXITY_BASE_URL": server.url, "NO_PROXY": "127.0.0.1"}
        saved = []
        for attempt, delay in enumerate((0.0, 0.02, 0.05, 0.1, 0.15, 0.25, 0.4)):
            with self.subTest(delay=delay):
                out = os.path.join(folder, f"r{attempt}.json")
                process = subprocess.Popen(
                    [sys.executable, os.path.join(HERE, "regression.py"), "--out", out,
                     "--repeats", "10", "--jobs", str(1 + attempt % 3)],
                    env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                deadline = time.monotonic() + 30
                while not os.path.exists(out) and time.monotonic() < deadline:
                    time.sleep(0.002)
                time.sleep(delay)
                process.send_signal(signal.SIGKILL)
                process.wait(timeout=30)
                with open(out, encoding="utf-8") as handle:
                    record = json.load(handle)
                self.assertIsInstance(record["runs"], list)
                saved.append(len(record["runs"]))
        self.assertTrue(any(0 < count < 80 for count in saved), saved)  # killed mid-run


if __name__ == "__main__":
    unittest.main()
