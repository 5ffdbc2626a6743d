"""sending.py and vocabulary.Parser in-process: redaction, the 429 pause of a
plan, and the hint for a mistyped flag. No SDK, no network, no subprocess."""

import contextlib
import io
import json
import threading
import time
import types
import unittest
from unittest import mock

import sending
from vocabulary import Parser

KEY = "sk-test-key-0123456789abcdef"  # not pplx-shaped: only the key's own redaction finds it
PAUSE = 0.05  # seconds a 429 holds new starts in the plan test


class RedactTest(unittest.TestCase):
    TABLE = [
        ("the key as a bearer token", f"Authorization: Bearer {KEY}", [KEY],
         "Authorization: Bearer [REDACTED]"),
        ("the key inside a bearer token", f"Authorization: Bearer x{KEY}y", [KEY],
         "Authorization: Bearer [REDACTED]"),
        ("the key in a quoted bearer header", f'{{"Authorization": "Bearer {KEY}"}}', [KEY],
         '{"Authorization": "Bearer [REDACTED]"}'),
        ("already redacted", "Authorization: Bearer [REDACTED]", [],
         "Authorization: Bearer [REDACTED]"),
        ("already redacted, the key known", "bearer [REDACTED], then", [KEY],
         "bearer [REDACTED], then"),
        ("a token that is not the key", "Authorization: Bearer abc.def-123", [KEY],
         "Authorization: Bearer [REDACTED]"),
    ]

    def test_redact_leaves_one_whole_marker(self):
        for name, text, secrets, expected in self.TABLE:
            with self.subTest(name):
                self.assertEqual(sending.redact(text, secrets), expected)

    def test_redacting_twice_changes_nothing(self):
        for name, text, secrets, _ in self.TABLE:
            with self.subTest(name):
                once = sending.redact(text, secrets)
                self.assertEqual(sending.redact(once, secrets), once)


class CleanTest(unittest.TestCase):
    def test_a_key_echoed_as_an_object_key_is_redacted(self):
        table = [
            ("raw", {KEY: 1}),
            ("upper case", {KEY.upper(): 1}),
            ("inside a longer key", {f"header {KEY}": 1}),
            ("nested", {"outer": [{KEY: {"inner": 2}}]}),
        ]
        for name, value in table:
            with self.subTest(name):
                cleaned = json.dumps(sending.clean(value, sending.secret_patterns([KEY])))
                self.assertNotIn(KEY.lower(), cleaned.lower())

    def test_a_key_of_eight_characters_is_redacted_and_of_seven_is_not(self):
        table = [
            ("8 characters", "abcdefgh", "saw [REDACTED] here"),
            ("7 characters: could be an ordinary word", "abcdefg", "saw abcdefg here"),
        ]
        for name, key, expected in table:
            with self.subTest(name):
                cleaned = sending.clean(f"saw {key} here", sending.secret_patterns([key]))
                self.assertEqual(cleaned, expected)

    def test_a_key_spelled_in_json_escapes_is_redacted(self):
        escaped = "".join(f"\\u{ord(c):04x}" for c in KEY)
        table = [
            ("every character escaped", f"key {escaped} echoed"),
            ("the first letter escaped", f"key \\u0073{KEY[1:]} echoed"),
            ("upper-case hex digits", f"key {KEY.replace('-', chr(92) + 'u002D')} echoed"),
            ("a dash escaped", f"key {KEY.replace('-', chr(92) + 'u002d')} echoed"),
        ]
        for name, text in table:
            with self.subTest(name):
                cleaned = sending.clean(text, sending.secret_patterns([KEY]))
                self.assertEqual(cleaned, "key [REDACTED] echoed")


class RateLimited(Exception):
    status_code = 429  # as the SDK's RateLimitError; no response, so no Retry-After


class PlanPauseTest(unittest.TestCase):
    def test_no_entry_starts_until_a_final_429s_pause_ends(self):
        # A's 429 is its last attempt (no retries): it ends at once and frees its
        # slot, and the next entry must still find the pause already held.
        pause = sending.Pause()
        answered_429 = []  # when A's 429 came back
        a_reported = threading.Event()  # A's row is made: its worker reports next
        starts = {}  # entry: (time it started, the pause's end as it then stood)

        def create(**request):
            answered_429.append(time.monotonic())
            raise RateLimited("rate limited")

        client = types.SimpleNamespace(responses=types.SimpleNamespace(create=create))

        def send(index, name):
            starts[name] = (time.monotonic(), pause.until)
            if name == "A":
                sender = sending.RetryingClient(client, 0, pause, [], "A", 10)
                with contextlib.suppress(RateLimited):
                    sender.responses.create(model="m")
                a_reported.set()
            elif name == "B":
                # Keeps a second request in flight until A's 429 is in, as with --jobs.
                if not a_reported.wait(10):
                    raise AssertionError("A never reported")
            return name

        plan = sending.Plan(list(enumerate("ABCD")), 2, send, pause)
        with mock.patch.object(sending, "backoff_seconds", return_value=PAUSE):
            rows = sorted(row for _, row in plan.finished())
        self.assertEqual(rows, ["A", "B", "C", "D"])
        for name in "CD":
            with self.subTest(name):
                started, until = starts[name]
                self.assertGreaterEqual(until, answered_429[0] + PAUSE)  # A's pause was held
                self.assertGreaterEqual(started, until)  # and it had run out


class ParserTest(unittest.TestCase):
    def parser(self):
        parser = Parser(prog="tool")
        parser.add_argument("--out")
        parser.add_argument("--models", nargs="+")
        return parser

    def error(self, argv):
        stderr = io.StringIO()
        with contextlib.redirect_stderr(stderr), self.assertRaises(SystemExit) as exit:
            self.parser().parse_args(argv)
        self.assertEqual(exit.exception.code, 2)
        return stderr.getvalue()

    def test_an_unknown_flag_names_the_closest_known_one_on_one_line(self):
        table = [
            ("a typo", ["--ouput"], "--ouput (did you mean --out?)"),
            ("with its value", ["--ouput=results.json"],
             "--ouput=results.json (did you mean --out?)"),
            ("followed by a value", ["--ouput", "x"], "--ouput x (did you mean --out?)"),
            ("two typos", ["--ouput", "x", "--modles", "a"],
             "--ouput x --modles a (did you mean --out for --ouput, --models for --modles?)"),
            ("nothing close", ["--zzz"], "--zzz"),
            ("not a flag, though close to one", ["--out", "x", "out"], "out"),
            ("an empty argument", ["--out", "x", ""], ""),
        ]
        for name, argv, unrecognized in table:
            with self.subTest(name):
                self.assertEqual(self.error(argv),
                                 f"tool: error: unrecognized arguments: {unrecognized}\n")

    def test_an_abbreviated_flag_is_still_taken(self):
        args = self.parser().parse_args(["--mod", "a", "b", "--ou", "x"])
        self.assertEqual((args.models, args.out), (["a", "b"], "x"))


if __name__ == "__main__":
    unittest.main()
