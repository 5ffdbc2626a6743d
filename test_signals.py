"""Signals, closed outputs and --resume on the real CLI: every paid answer is
kept and the printed command finishes the run. Against the loopback simulated
API (127.0.0.1 only); a real process wherever a signal or a stream is the subject."""

import json
import os
import signal
import subprocess
import sys
import threading
import unittest

import simulated_api
from testing import HERE, KEY, in_process, loopback_env, loopback_server, popen, read_json, \
    saved_rows, slow, temp_dir, wait_until


@slow("signals to real processes")
class SignalsAndResumeTest(unittest.TestCase):
    """The real CLI over loopback: SIGTERM then --resume, a 429, an echoed key."""

    def setUp(self):
        self.folder = temp_dir(self)
        self.out = os.path.join(self.folder, "r.json")
        self.server = loopback_server(self)
        self.env = loopback_env(self.server)

    def run_here(self, *args):
        """The real SDK over real HTTP in this interpreter: no signal, no stream closed."""
        return in_process("regression.py", *args, env=self.env)

    def test_sigterm_mid_run_then_the_printed_resume_command_sends_exactly_the_rest(self):
        self.server.state["latency"] = 0.05
        process = popen(self, "regression.py", "--out", self.out, "--repeats", "3", env=self.env)
        wait_until(lambda: saved_rows(self.out) >= 3, what="3 saved rows")
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
        self.assertEqual(process.returncode, 143, stderr)
        self.assertNotIn("Traceback", stderr)
        record = read_json(self.out)
        saved = len(record["runs"])
        self.assertTrue(3 <= saved < 24, saved)
        self.assertEqual(record["summary"]["exit_code"], 2)
        self.assertEqual(os.listdir(self.folder), ["r.json"])
        self.assertIn(f"Interrupted: {saved} of 24 rows are saved", stderr)
        hint = stderr.rsplit("finish it with: ", 1)[1].strip()
        sent = len(self.server.state["requests"])
        self.server.state["latency"] = 0.0
        result = subprocess.run(hint, shell=True, env=self.env, capture_output=True,
                                text=True, timeout=120)  # exactly as printed
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(len(self.server.state["requests"]) - sent, 24 - saved)
        record = read_json(self.out)
        self.assertEqual(len(record["runs"]), 24)
        self.assertTrue(record["summary"]["complete"])

    def test_a_closed_output_pipe_is_one_line_exit_2_and_a_resume_hint(self):
        self.server.state["latency"] = 0.05
        process = popen(self, "regression.py", "--out", self.out, "--repeats", "3", env=self.env)
        process.stdout.readline()  # the first row, then the reader goes away
        process.stdout.close()
        with process.stderr:
            stderr = process.stderr.read()
        process.wait(timeout=60)
        self.assertEqual(process.returncode, 2)
        self.assertEqual(len(stderr.splitlines()), 1, stderr)
        self.assertIn("standard output failed (Broken pipe)", stderr)
        self.assertIn(f"--resume {self.out}", stderr)
        self.assertGreaterEqual(len(read_json(self.out)["runs"]), 1)
        hint = stderr.rsplit("finish it with: ", 1)[1].strip()
        finished = subprocess.run(hint, shell=True, env=self.env, capture_output=True,
                                  text=True, timeout=120)  # exactly as printed
        self.assertEqual(finished.returncode, 0, finished.stderr)
        self.assertEqual(len(read_json(self.out)["runs"]), 24)

    def test_a_closed_pipe_with_jobs_still_saves_every_answer_in_flight(self):
        self.server.state["latency"] = 0.3
        process = popen(self, "regression.py", "--out", self.out, "--repeats", "3", "--jobs", "8",
                        env=self.env)
        process.stdout.readline()
        process.stdout.close()
        with process.stderr:
            stderr = process.stderr.read()
        process.wait(timeout=60)
        self.assertEqual(process.returncode, 2, stderr)
        self.assertIn("standard output failed", stderr)
        self.assertEqual(len(read_json(self.out)["runs"]), len(self.server.state["requests"]))

    def test_output_streams_on_a_full_disk_still_exit_2(self):
        with open(self.out, "w", encoding="utf-8") as handle:
            handle.write("{}")  # an existing --out: a refusal that must be told
        for script, args in (("regression.py", ["--out", self.out]),
                             ("compare_runs.py", [self.out, self.out])):
            with self.subTest(script), open("/dev/full", "w") as full:
                result = subprocess.run([sys.executable, os.path.join(HERE, script), *args],
                                        stdout=full, stderr=full, env=self.env, timeout=60)
                self.assertEqual(result.returncode, 2)

    def test_sigint_exits_130_with_the_record_saved(self):
        self.server.state["latency"] = 0.2
        process = popen(self, "regression.py", "--out", self.out, env=self.env)
        wait_until(lambda: self.server.state["requests"], what="the first request")
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=60)
        self.assertEqual(process.returncode, 130)
        self.assertNotIn("Traceback", stderr)
        self.assertEqual(read_json(self.out)["summary"]["exit_code"], 2)

    def test_first_signal_saves_every_answer_in_flight(self):
        self.server.state["hold"] = hold = threading.Event()  # answers wait for the signal
        self.addCleanup(hold.set)
        process = popen(self, "regression.py", "--out", self.out, "--repeats", "3", "--jobs", "8",
                        env=self.env)
        wait_until(lambda: len(self.server.state["requests"]) >= 8, what="8 in flight")
        process.send_signal(signal.SIGINT)
        self.assertIn("Stopping: no new request starts", process.stderr.readline())
        hold.set()
        _, stderr = process.communicate(timeout=60)
        self.assertEqual(process.returncode, 130, stderr)
        self.assertEqual(len(read_json(self.out)["runs"]), 8)  # every paid answer kept
        self.assertEqual(len(self.server.state["requests"]), 8)

    def test_a_second_signal_stops_at_once_and_the_record_stays_valid(self):
        self.server.state["latency"] = 20
        process = popen(self, "regression.py", "--out", self.out, "--jobs", "4", env=self.env)
        wait_until(lambda: len(self.server.state["requests"]) >= 4, what="4 in flight")
        process.send_signal(signal.SIGTERM)
        self.assertIn("Stopping:", process.stderr.readline())
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=10)  # well before the 20 s answers
        self.assertEqual(process.returncode, 143)
        self.assertEqual(read_json(self.out)["runs"], [])

    def test_429_with_retry_after_on_the_first_request_still_passes(self):
        self.server.state["faults"] = [simulated_api.error(429, "rate limited",
                                                           [("Retry-After", "1")])]
        result = self.run_here("--out", self.out)
        self.assertEqual(result.returncode, 0, result.stderr)
        rows = read_json(self.out)["runs"]
        self.assertTrue(all(r["passed"] for r in rows))
        self.assertEqual((rows[0]["attempts"], rows[0]["waited_seconds"]), (2, 1.0))
        self.assertEqual(len(self.server.state["requests"]), 9)

    def test_an_echoed_key_never_reaches_the_record_or_the_console(self):
        self.server.state["echo_auth"] = True
        result = self.run_here("--out", self.out)
        self.assertEqual(result.returncode, 2)
        with open(self.out, encoding="utf-8") as handle:
            text = handle.read()
        for where, content in (("record", text), ("stdout", result.stdout),
                               ("stderr", result.stderr)):
            with self.subTest(where):
                self.assertNotIn(KEY, content)
                self.assertNotIn(KEY[5:], content)
        row = json.loads(text)["runs"][0]
        self.assertIn("invalid request", row["error_message"])
        self.assertIn("Bearer [REDACTED]", row["error_message"])
        self.assertIn("Bearer [REDACTED]", result.stdout)


    def test_ctrl_c_while_the_sdk_loads_is_a_quiet_exit_130(self):
        # -v reports each import on stderr: the signal goes once the SDK is loading.
        process = subprocess.Popen([sys.executable, "-v", os.path.join(HERE, "regression.py"),
                                    "--out", self.out], env=self.env, text=True,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for line in process.stderr:
            if "perplexity" in line:
                process.send_signal(signal.SIGINT)
                break
        rest = process.stderr.read()
        process.wait(timeout=60)
        process.stdout.close()
        process.stderr.close()
        self.assertEqual(process.returncode, 130)
        self.assertNotIn("Traceback", rest)
        self.assertFalse(os.path.exists(self.out))


@slow("forks runs from the warm interpreter")
class WarmInterpreterTest(unittest.TestCase):
    """popen() runs a script as `python SCRIPT ARGS` would, as a process of its own."""

    SCRIPT = """import os, sys
print(sys.argv[1:], os.getcwd(), os.environ.get("WHO"), __name__, sys.path[0], flush=True)
print("to stderr", file=sys.stderr)
what = sys.argv[1]
if what == "start-up":
    print(sys.stdout.write_through, sys.stdout.encoding, sys.warnoptions)
if what == "exit":
    sys.exit(3)
if what == "raise":
    raise ValueError("boom")
if what == "interrupt":
    raise KeyboardInterrupt
if what == "wait":
    sys.stdin.read()
    import time
    time.sleep(60)
"""

    def setUp(self):
        self.folder = temp_dir(self)
        self.script = os.path.join(self.folder, "script.py")
        with open(self.script, "w", encoding="utf-8") as handle:
            handle.write(self.SCRIPT)

    def start(self, what):
        return popen(self, self.script, what, env={"WHO": "warm", "PATH": os.environ["PATH"]})

    def test_argv_folder_environment_and_streams_are_the_runs_own(self):
        process = self.start("exit")
        stdout, stderr = process.communicate(timeout=60)
        self.assertEqual(process.returncode, 3)
        self.assertEqual(stdout, f"['exit'] {os.getcwd()} warm __main__ {self.folder}\n")
        self.assertEqual(stderr, "to stderr\n")

    def test_start_up_follows_the_runs_variables_and_flags(self):
        for variables, flags, seen in (
                ({"PYTHONUNBUFFERED": "1"}, (), "True utf-8 []"),
                ({"PYTHONIOENCODING": "latin-1"}, ("-W", "error"), "False iso8859-1 ['error']")):
            with self.subTest(variables):
                process = popen(self, self.script, "start-up", flags=flags,
                                env={"PATH": os.environ["PATH"], **variables})
                stdout, _ = process.communicate(timeout=60)
                self.assertEqual(stdout.splitlines()[-1], seen)

    def test_an_uncaught_exception_is_a_traceback_and_exit_1(self):
        process = self.start("raise")
        _, stderr = process.communicate(timeout=60)
        self.assertEqual(process.returncode, 1)
        self.assertIn("Traceback", stderr)
        self.assertIn("ValueError: boom", stderr)

    def test_an_uncaught_keyboard_interrupt_dies_of_sigint_as_python_does(self):
        process = self.start("interrupt")
        process.communicate(timeout=60)
        self.assertEqual(process.returncode, -signal.SIGINT)

    def test_a_signal_reaches_the_run_and_its_death_is_told(self):
        process = self.start("wait")
        self.assertIn("warm", process.stdout.readline())
        self.assertIsNone(process.poll())
        process.send_signal(signal.SIGKILL)
        process.communicate(timeout=60)
        self.assertEqual(process.returncode, -signal.SIGKILL)


if __name__ == "__main__":
    unittest.main()
