"""Faults and hostile input (issue 4): signals, --resume, rate limits, redaction, fuzzing."""

import contextlib
import io
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime
from unittest import mock

import httpx

import compare_runs
import regression
import simulated_api

HERE = os.path.dirname(os.path.abspath(__file__))
KEY = "pplx-secret-0123456789abcdef"


def temp_dir(test):
    folder = tempfile.mkdtemp()
    test.addCleanup(shutil.rmtree, folder, True)
    return folder


def raw(path):
    with open(path, "rb") as handle:
        return handle.read()


def read(path):
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


class PureTest(unittest.TestCase):
    now = datetime(2026, 11, 30, 12, 0, 0, tzinfo=timezone.utc)

    def test_retry_after_seconds(self):
        table = [
            ("seconds", "7", 7.0),
            ("capped", "86400", 120.0),
            ("zero", "0", 0.0),
            ("http date", format_datetime(self.now + timedelta(seconds=30), usegmt=True), 30.0),
            ("date in the past", format_datetime(self.now - timedelta(seconds=30), usegmt=True),
             0.0),
            ("negative", "-5", None),
            ("garbage", "soon", None),
            ("empty", "", None),
            ("absent", None, None),
        ]
        for name, value, expected in table:
            with self.subTest(name):
                self.assertEqual(regression.retry_after_seconds(value, self.now), expected)

    def test_backoff_is_bounded_and_jittered(self):
        rng = random.Random(7)
        for attempt in range(1, 12):
            ceiling = min(regression.BACKOFF_CAP, regression.BACKOFF_BASE * 2 ** (attempt - 1))
            with self.subTest(attempt=attempt):
                wait = regression.backoff_seconds(attempt, rng)
                self.assertTrue(ceiling / 2 <= wait <= ceiling, wait)

    def test_redact(self):
        table = [
            ("the key", f"key {KEY} echoed", [KEY], "key [REDACTED] echoed"),
            ("a bearer token", "Authorization: Bearer abc.def-123", [], "Authorization: Bearer [REDACTED]"),
            ("another pplx key", "saw pplx-Zz09_-x here", [], "saw [REDACTED] here"),
            ("short keys are not redacted", "a b c", ["b"], "a b c"),
            ("nothing secret", "invalid request body", [KEY], "invalid request body"),
        ]
        for name, text, secrets, expected in table:
            with self.subTest(name):
                self.assertEqual(regression.redact(text, secrets), expected)

    def test_error_message_prefers_the_api_words_and_is_bounded(self):
        request = httpx.Request("POST", "http://127.0.0.1/v1/responses")
        response = httpx.Response(400, request=request)
        from perplexity import BadRequestError
        exc = BadRequestError("Error code: 400", response=response,
                              body={"error": {"message": "x" * 900 + KEY}})
        message = regression.error_message(exc, [KEY])
        self.assertEqual(message, "x" * 500)
        exc = BadRequestError("Error code: 400", response=response,
                              body={"error": {"message": 'json: unknown field "X"'}})
        self.assertEqual(regression.error_message(exc, [KEY]), 'json: unknown field "X"')


class RetryTest(unittest.TestCase):
    """with_retries through the real SDK: only the API's own 429 and 503."""

    def setUp(self):
        self.state = simulated_api.new_state(regression.CASES, unsafe_models=())
        self.raise_in_transport = None
        sleep = mock.patch.object(regression.time, "sleep")
        self.sleep = sleep.start()
        self.addCleanup(sleep.stop)

    def client(self):
        def before_request(request):
            if self.raise_in_transport:
                raise self.raise_in_transport(request)

        return simulated_api.sdk_client(self.state, before_request, api_key=KEY, max_retries=0)

    def send(self, retries=2):
        stats = {"attempts": 0, "waited_seconds": 0.0, "error_message": None}
        pause = {"until": 0.0, "lock": threading.Lock()}
        wrapped = regression.with_retries(self.client(), retries, pause, stats, [KEY])
        row = regression.run_one(wrapped, regression.CASES[0], "m")
        return row, stats, pause

    def test_429_and_503_are_retried_with_the_advertised_wait(self):
        for status in (429, 503):
            with self.subTest(status=status):
                self.state["faults"] = [simulated_api.error(status, "slow down",
                                                            [("Retry-After", "3")])]
                row, stats, _ = self.send()
                self.assertTrue(row["passed"], row)
                self.assertEqual((stats["attempts"], stats["waited_seconds"]), (2, 3.0))

    def test_429_pauses_new_starts_but_503_does_not(self):
        self.state["faults"] = [simulated_api.error(429, "slow", [("Retry-After", "5")])]
        _, _, pause = self.send()
        self.assertGreater(pause["until"], time.monotonic() + 4)
        self.state["faults"] = [simulated_api.error(503, "busy", [("Retry-After", "5")])]
        _, _, pause = self.send()
        self.assertEqual(pause["until"], 0.0)

    def test_without_retry_after_the_wait_is_backoff(self):
        self.state["faults"] = [simulated_api.error(503, "busy")]
        with mock.patch.object(regression, "backoff_seconds", return_value=0.75) as backoff:
            row, stats, _ = self.send()
        self.assertTrue(row["passed"])
        backoff.assert_called_once_with(1)
        self.assertEqual(stats["waited_seconds"], 0.75)

    def test_other_failures_are_never_retried(self):
        table = [
            ("500", simulated_api.error(500, "internal"), None, "InternalServerError"),
            ("400", simulated_api.error(400, "bad"), None, "BadRequestError"),
            ("timeout", None, lambda request: httpx.ReadTimeout("t", request=request),
             "APITimeoutError"),
            ("dropped", None, lambda request: httpx.RemoteProtocolError("x", request=request),
             "APIConnectionError"),
        ]
        for name, fault, raiser, error in table:
            with self.subTest(name):
                self.state["faults"] = [fault] if fault else []
                self.raise_in_transport = raiser
                row, stats, _ = self.send()
                self.assertEqual((row["error"], stats["attempts"]), (error, 1))
                self.assertTrue(stats["error_message"])
                self.sleep.assert_not_called()

    def test_retries_are_bounded(self):
        for retries in (0, 2):
            with self.subTest(retries=retries):
                self.state["faults"] = [simulated_api.error(429, "slow", [("Retry-After", "1")])
                                        for _ in range(5)]
                row, stats, _ = self.send(retries)
                self.assertEqual((row["error_status"], stats["attempts"]), (429, retries + 1))


class InProcessTest(unittest.TestCase):
    def setUp(self):
        self.folder = temp_dir(self)
        self.out = os.path.join(self.folder, "r.json")
        self.state = simulated_api.new_state(regression.CASES, unsafe_models=())
        self.arrivals = []
        env = mock.patch.dict(os.environ, {"PERPLEXITY_API_KEY": KEY})
        env.start()
        self.addCleanup(env.stop)
        patcher = mock.patch.object(regression, "Perplexity", self.fake_perplexity)
        patcher.start()
        self.addCleanup(patcher.stop)

    def fake_perplexity(self, **kwargs):
        return simulated_api.sdk_client(
            self.state, lambda request: self.arrivals.append(time.monotonic()),
            api_key=KEY, **kwargs)

    def main(self, *args):
        output, errors = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(output), contextlib.redirect_stderr(errors):
            code = regression.main(list(args))
        return code, output.getvalue(), errors.getvalue()

    def test_a_429_holds_every_new_start_until_its_wait_is_over(self):
        self.state["faults"] = [simulated_api.error(429, "slow", [("Retry-After", "1")])]
        code, _, _ = self.main("--out", self.out, "--jobs", "4")
        self.assertEqual(code, 0)
        first = self.arrivals[0]
        later = [t - first for t in self.arrivals if t - first > 0.2]
        self.assertTrue(later)
        self.assertTrue(all(t >= 0.95 for t in later), later)
        rows = read(self.out)["runs"]
        self.assertEqual(sum(r["attempts"] for r in rows), 9)
        self.assertEqual(read(self.out)["execution"]["retries"], 2)

    def test_resume_reruns_error_rows_and_missing_rows_only(self):
        self.state["faults"] = [simulated_api.error(401, "bad key")]
        self.state["faults"][0:0] = []
        first_code, _, _ = self.main("--out", self.out)
        self.assertEqual(first_code, 2)
        self.assertEqual(len(read(self.out)["runs"]), 1)
        before = len(self.state["requests"])
        code, output, _ = self.main("--resume", self.out)
        self.assertEqual(code, 0)
        self.assertEqual(len(self.state["requests"]) - before, 8)
        record = read(self.out)
        self.assertEqual(len(record["runs"]), 8)
        self.assertFalse(any(r["error"] for r in record["runs"]))
        self.assertEqual(record["execution"]["resumed"], 1)
        self.assertEqual(os.listdir(self.folder), ["r.json"])

    def test_resume_keeps_good_rows_without_sending_them_again(self):
        self.main("--out", self.out)
        record = read(self.out)
        del record["runs"][2:5]
        with open(self.out, "w", encoding="utf-8") as handle:
            json.dump(record, handle)
        kept = [json.dumps(r, sort_keys=True) for r in record["runs"]]
        before = len(self.state["requests"])
        code, output, _ = self.main("--resume", self.out)
        self.assertEqual(code, 0)
        self.assertEqual(len(self.state["requests"]) - before, 3)
        self.assertIn("5 of 8 rows kept", output)
        resumed = read(self.out)
        self.assertEqual([(r["repeat"], r["case_id"], r["model"]) for r in resumed["runs"]],
                         [(r, c["id"], m) for r, c, m in regression.run_order(
                             regression.MODELS, regression.CASES, 1)])
        self.assertTrue(set(kept) <= {json.dumps(r, sort_keys=True) for r in resumed["runs"]})
        self.assertEqual(resumed["created_at"], record["created_at"])

    def test_resume_refusals_name_the_problem_and_touch_nothing(self):
        self.main("--out", self.out)
        original = read(self.out)

        def variant(change):
            record = json.loads(json.dumps(original))
            change(record)
            path = os.path.join(self.folder, f"v{len(os.listdir(self.folder))}.json")
            with open(path, "w", encoding="utf-8") as handle:
                json.dump(record, handle)
            return path

        table = [
            ("instructions", variant(lambda r: r["config"].update(instructions="old")),
             "instructions"),
            ("tool", variant(lambda r: r["config"]["tool"].update(max_results=9)), "tool"),
            ("code", variant(lambda r: r.update(code_sha256="0" * 64)), "code_sha256"),
            ("sdk", variant(lambda r: r.update(sdk_version="0.1.0")), "perplexityai"),
            ("foreign row", variant(lambda r: r["runs"].append(dict(r["runs"][0], repeat=5))),
             "not one of this run"),
            ("not a record", variant(lambda r: r.pop("config")), "not a record"),
            ("row model a list", variant(lambda r: r["runs"][0].update(model=["x"])),
             "no valid model"),
            ("row passed disagrees", variant(lambda r: r["runs"][0].update(passed=False)),
             "disagree"),
            ("row cost not a number", variant(lambda r: r["runs"][0].update(cost_usd="cheap")),
             "invalid cost_usd"),
            ("missing", os.path.join(self.folder, "none.json"), "No such file"),
        ]
        for name, path, words in table:
            with self.subTest(name):
                before = raw(path) if os.path.exists(path) else None
                sent = len(self.state["requests"])
                code, _, errors = self.main("--resume", path)
                self.assertEqual(code, 2)
                self.assertIn(words, errors)
                self.assertEqual(len(errors.splitlines()), 1)
                self.assertEqual(len(self.state["requests"]), sent)
                if before is not None:
                    self.assertEqual(raw(path), before)

    def test_resume_with_run_flags_is_a_usage_error(self):
        for flags in (["--models", "a"], ["--repeats", "2"], ["--out", "x.json"]):
            with self.subTest(flags=flags), self.assertRaises(SystemExit) as raised:
                self.main("--resume", self.out, *flags)
            self.assertEqual(raised.exception.code, 2)


class EndToEndTest(unittest.TestCase):
    """The real CLI over loopback: SIGTERM then --resume, a 429, an echoed key."""

    def setUp(self):
        self.folder = temp_dir(self)
        self.out = os.path.join(self.folder, "r.json")
        self.server = simulated_api.start(regression.CASES, unsafe_models=())
        self.addCleanup(self.server.stop)
        self.env = {**{k: v for k, v in os.environ.items() if not k.startswith("PERPLEXITY")},
                    "PERPLEXITY_API_KEY": KEY, "PERPLEXITY_BASE_URL": self.server.url,
                    "NO_PROXY": "127.0.0.1"}

    def run_cli(self, *args):
        return subprocess.run([sys.executable, "-W", "error", os.path.join(HERE, "regression.py"),
                               *args], env=self.env, capture_output=True, text=True, timeout=120)

    def test_sigterm_mid_run_then_resume_sends_exactly_the_missing_requests(self):
        self.server.state["latency"] = 0.05
        process = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "regression.py"), "--out", self.out,
             "--repeats", "3"], env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if os.path.exists(self.out) and len(read(self.out)["runs"]) >= 3:
                break
            time.sleep(0.01)
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=60)
        self.assertEqual(process.returncode, 143, stderr)
        self.assertNotIn("Traceback", stderr)
        self.assertIn("Interrupted:", stderr)
        self.assertIn(f"--resume {self.out}", stderr)
        record = read(self.out)
        saved = len(record["runs"])
        self.assertTrue(3 <= saved < 24, saved)
        self.assertEqual(record["summary"]["exit_code"], 2)
        self.assertEqual(os.listdir(self.folder), ["r.json"])
        sent = len(self.server.state["requests"])

        self.server.state["latency"] = 0.0
        result = self.run_cli("--resume", self.out)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(len(self.server.state["requests"]) - sent, 24 - saved)
        record = read(self.out)
        self.assertEqual(len(record["runs"]), 24)
        self.assertTrue(record["summary"]["complete"])

    def test_sigint_exits_130_with_the_record_saved(self):
        self.server.state["latency"] = 0.2
        process = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "regression.py"), "--out", self.out],
            env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        while not self.server.state["requests"]:
            time.sleep(0.01)
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=60)
        self.assertEqual(process.returncode, 130)
        self.assertNotIn("Traceback", stderr)
        self.assertEqual(read(self.out)["summary"]["exit_code"], 2)

    def test_429_with_retry_after_on_the_first_request_still_passes(self):
        self.server.state["faults"] = [simulated_api.error(429, "rate limited",
                                                           [("Retry-After", "1")])]
        result = self.run_cli("--out", self.out)
        self.assertEqual(result.returncode, 0, result.stderr)
        rows = read(self.out)["runs"]
        self.assertTrue(all(r["passed"] for r in rows))
        self.assertEqual((rows[0]["attempts"], rows[0]["waited_seconds"]), (2, 1.0))
        self.assertEqual(len(self.server.state["requests"]), 9)

    def test_an_echoed_key_never_reaches_the_record_or_the_console(self):
        self.server.state["echo_auth"] = True
        result = self.run_cli("--out", self.out)
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


class CompareFuzzTest(unittest.TestCase):
    """compare_runs.py answers every hostile file with exit 0, 1 or 2, never a crash."""

    def setUp(self):
        self.folder = temp_dir(self)
        self.good = compare_runs.demo_record(unsafe_models=())
        self.good_path = self.write("good.json", json.dumps(self.good))

    def write(self, name, text):
        path = os.path.join(self.folder, name)
        # surrogatepass: a lone surrogate becomes bytes that are not UTF-8.
        with open(path, "w", encoding="utf-8", errors="surrogatepass") as handle:
            handle.write(text)
        return path

    def compare(self, text):
        path = self.write("fuzz.json", text)
        with contextlib.redirect_stdout(io.StringIO()) as output:
            code = compare_runs.main([self.good_path, path])
        return code, output.getvalue()

    def test_known_holes(self):
        deep = '{"config": {}, "runs": ' + "[" * 100_000 + "]" * 100_000 + "}"
        huge = json.loads(json.dumps(self.good))
        huge["config"]["repeats"] = 1_000_000_000
        string_models = json.loads(json.dumps(self.good))
        string_models["config"]["models"] = "offline/model"
        big_int = json.dumps(self.good).replace('"repeats": 1', '"repeats": 1' + "0" * 5000)
        for name, text in [("deep nesting", deep), ("billion repeats", json.dumps(huge)),
                           ("models a string", json.dumps(string_models)),
                           ("5000-digit repeats", big_int),
                           ("NaN repeats", json.dumps(self.good).replace('"repeats": 1', '"repeats": NaN'))]:
            with self.subTest(name):
                code, output = self.compare(text)
                self.assertEqual(code, 2)
                self.assertTrue(output.startswith("NOT_COMPARABLE: "), output[:200])

    def test_300_seeded_mutations(self):
        rng = random.Random(20261130)
        junk = [None, 0, -1, 1.5, 10 ** 9, "", "x", [], {}, True, [None], {"a": 1}]

        def breaking(record):
            """Mutations that make a record malformed: each must be NOT_COMPARABLE."""
            config, runs = record["config"], record["runs"]
            row = rng.choice(runs)
            choice = rng.randrange(12)
            if choice == 0:
                config["models"] = rng.choice([j for j in junk if j != ["offline/model"]])
            elif choice == 1:
                config["repeats"] = rng.choice([0, -1, 11, 1.0, True, "1", None, 10 ** 12])
            elif choice == 2:
                runs.remove(row)
            elif choice == 3:
                runs.append(dict(row))
            elif choice == 4:
                row["passed"] = rng.choice([None, 0, 1, "true", not row["passed"]])
            elif choice == 5:
                row["reasons"] = rng.choice([None, "wrong_code", [1], {}, [None]])
            elif choice == 6:
                row["error"] = rng.choice(["APIStatusError", 1, True, ["x"]])
            elif choice == 7:
                row[rng.choice(["model", "case_id", "repeat"])] = rng.choice(junk + [2])
            elif choice == 8:
                config["cases"] = rng.choice([None, [], "x", [1], config["cases"] * 2])
            elif choice == 9:
                del record[rng.choice(["config", "runs"])]
            elif choice == 10:
                record["runs"] = rng.choice(junk[:3] + ["x", {}])
            else:
                return rng.choice(["[]", "null", '"x"', "7"])
            return json.dumps(record)

        def harmless(record):
            """Mutations that keep a record valid: any verdict, but no crash."""
            row = rng.choice(record["runs"])
            field = rng.choice(["answer_text", "response", "seconds", "cost_usd", "extra"])
            row[field] = rng.choice(junk)
            if rng.random() < 0.3:
                record["sdk_version"] = rng.choice(junk)
            if rng.random() < 0.3:
                record["config"]["instructions"] = rng.choice(junk)
            return json.dumps(record)

        def truncated(record):
            text = json.dumps(record)
            return text[: rng.randrange(1, len(text) - 2)]

        outcomes = {0: 0, 1: 0, 2: 0}
        for number in range(300):
            record = json.loads(json.dumps(self.good))
            kind = rng.choice([breaking, breaking, harmless, truncated])
            text = kind(record)
            if rng.random() < 0.1:  # a few stray bytes anywhere
                spot = rng.randrange(len(text))
                text = text[:spot] + rng.choice(["\x00", "}", "\ud800", "é", "[[["]) + text[spot:]
                kind = None if kind is harmless else kind
            with self.subTest(number=number, kind=getattr(kind, "__name__", "bytes")):
                code, output = self.compare(text)
                self.assertIn(code, (0, 1, 2))
                outcomes[code] += 1
                if kind in (breaking, truncated):
                    self.assertEqual(code, 2, output[:300])
                    self.assertTrue(output.startswith("NOT_COMPARABLE: "))
        self.assertGreater(outcomes[2], 150)
        self.assertGreater(outcomes[0] + outcomes[1], 20)


if __name__ == "__main__":
    unittest.main()
