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


class RetryAfterTest(unittest.TestCase):
    def test_a_number_of_seconds_is_read_spaces_and_all(self):
        now = sending.datetime.now(sending.timezone.utc)
        for value, seconds in (("5", 5.0), (" 7 ", 7.0), ("999", 120.0)):
            with self.subTest(value=value):
                self.assertEqual(sending.retry_after_seconds(value, now), seconds)

    def test_the_backoff_doubles_from_one_second(self):
        rng = types.SimpleNamespace(uniform=lambda low, high: high)  # the top of the jitter
        for attempt, seconds in ((1, 1.0), (2, 2.0), (3, 4.0), (10, 30.0)):
            with self.subTest(attempt=attempt):
                self.assertEqual(sending.backoff_seconds(attempt, rng), seconds)


class RedactFormsTest(unittest.TestCase):
    def test_a_key_in_its_json_escaped_form_is_redacted_whole(self):
        key = 'abcd"efgh'
        self.assertEqual(sending.redact_key('saw abcd\\"efgh here', [key]), "saw [REDACTED] here")

    def test_a_pplx_shaped_key_is_redacted(self):
        self.assertEqual(sending.redact("key pplx-Ab_c-9 end", []), "key [REDACTED] end")

    def test_a_number_that_is_the_key_is_redacted_and_another_is_kept(self):
        patterns = sending.secret_patterns(["12345678"])
        for value, cleaned in ((12345678, "[REDACTED]"), (7, 7), (1.5, 1.5), (True, True)):
            with self.subTest(value=value):
                self.assertEqual(sending.clean(value, patterns), cleaned)

    def test_nan_and_infinity_are_spelled_as_strings(self):
        for value, cleaned in ((float("nan"), "NaN"), (float("inf"), "Infinity"),
                               (float("-inf"), "-Infinity"), (2.5, 2.5)):
            with self.subTest(value=value):
                self.assertEqual(sending.clean(value, []), cleaned)


class ApiError(Exception):
    def __init__(self, body, status_code=400):
        super().__init__("fallback words")
        self.body, self.status_code = body, status_code


class ErrorWordsTest(unittest.TestCase):
    def test_the_apis_own_kind_is_kept(self):
        for body, kind in (({"error": {"type": "invalid_request"}}, "invalid_request"),
                           ({"error": {"code": "rate_limit", "type": "x"}}, "rate_limit"),
                           ({"type": "bare"}, "bare"), (None, None)):
            with self.subTest(body=body):
                self.assertEqual(sending.error_kind(ApiError(body)), kind)

    def test_the_apis_own_message_is_kept_redacted(self):
        for body, words in (({"error": {"message": f"bad key {KEY}"}}, "bad key [REDACTED]"),
                            ({"error": "plain words"}, "plain words"),
                            ({"error": {"message": ""}}, "fallback words")):
            with self.subTest(body=body):
                self.assertEqual(sending.error_message(ApiError(body), [KEY]), words)


class ReceiveTest(unittest.TestCase):
    def test_each_terminal_event_ends_the_stream_with_its_response(self):
        for kind in sending.TERMINAL_EVENTS:
            with self.subTest(kind):
                response = {"id": "r1", "status": kind}
                events = [{"type": "response.created", "response": {"id": "r1"}},
                          {"type": kind, "response": response}]
                self.assertEqual(sending.receive(events, None), response)

    def test_the_terminal_events(self):
        self.assertEqual(sending.TERMINAL_EVENTS, (
            "response.completed", "response.incomplete", "response.cancelled"))

    def test_a_dropped_stream_is_resumed_three_times_from_before_any_event(self):
        calls = []

        def reconnect(response_id, after):
            calls.append((response_id, after))
            return []
        events = [{"type": "response.created", "response": {"id": "r1"}}]
        with self.assertRaises(sending.StreamEnded) as caught:
            sending.receive(events, reconnect)
        self.assertEqual(calls, [("r1", -1)] * 3)
        self.assertEqual(str(caught.exception),
                         "the stream ended before its answer; fetch it by its id with --resume")

    def test_another_responses_id_is_a_mismatch(self):
        events = [{"type": "response.created", "response": {"id": "r1"}},
                  {"type": "response.in_progress", "response": {"id": "r2"}}]
        with self.assertRaises(sending.ReceiptMismatch):
            sending.receive(events, None)


class Failing(Exception):
    def __init__(self, status_code):
        super().__init__(f"status {status_code}")
        self.status_code = status_code


class RetryingClientTest(unittest.TestCase):
    def client(self, create, retries=0):
        pause = mock.Mock()
        pause.sleep.return_value = False
        client = types.SimpleNamespace(responses=types.SimpleNamespace(create=create))
        return sending.RetryingClient(client, retries, pause, [KEY], "row", 10), pause

    def test_an_answer_is_marked_answered(self):
        sender, _ = self.client(lambda **request: "answer")
        self.assertFalse(sender.answered)
        self.assertEqual(sender.responses.create(model="m"), "answer")
        self.assertTrue(sender.answered)

    def test_a_failure_keeps_its_words_and_is_not_answered(self):
        def create(**request):
            raise Failing(400)
        sender, pause = self.client(create)
        with self.assertRaises(Failing):
            sender.responses.create(model="m")
        self.assertFalse(sender.answered)
        self.assertEqual(sender.error_message, "status 400")
        pause.hold.assert_not_called()

    def test_a_429_holds_every_start(self):
        def create(**request):
            raise Failing(429)
        sender, pause = self.client(create)
        with mock.patch.object(sending, "backoff_seconds", return_value=3.0), \
                self.assertRaises(Failing):
            sender.responses.create(model="m")
        pause.hold.assert_called_once_with(3.0)

    def test_a_retry_after_header_sets_the_wait(self):
        exc = Failing(503)
        exc.response = types.SimpleNamespace(headers={"retry-after": "4"})
        sender, _ = self.client(None)
        self.assertEqual(sender.wait_seconds(exc), 4.0)


class PlanOrderTest(unittest.TestCase):
    def test_one_job_sends_the_next_only_after_the_last_is_in(self):
        seen = []

        def send(index, entry):
            seen.append(f"send {entry}")
            return entry
        plan = sending.Plan(list(enumerate("AB")), 1, send, sending.Pause())
        for _, row in plan.finished():
            seen.append(f"got {row}")
        self.assertEqual(seen, ["send A", "got A", "send B", "got B"])

    def test_a_dropped_entry_is_never_sent(self):
        sent = []
        plan = sending.Plan(list(enumerate("ABC")), 1, lambda i, e: sent.append(e) or e,
                            sending.Pause())
        plan.drop(0)
        self.assertEqual([row for _, row in plan.finished()], ["B", "C"])
        self.assertEqual(sent, ["B", "C"])

    def test_the_first_entry_neither_dropped_nor_blocked_starts(self):
        plan = sending.Plan([], 1, None, sending.Pause(), blocked=lambda index: index == 1)
        plan.drop(0)
        table = [([(0, "a"), (1, "b"), (2, "c")], 2), ([(1, "b")], None), ([(3, "d")], 0)]
        for waiting, place in table:
            with self.subTest(waiting=waiting):
                self.assertEqual(plan.next_entry(waiting), place)


class InterruptsTest(unittest.TestCase):
    def test_a_second_signal_stops_at_once_by_its_kind(self):
        for number, kind in ((sending.signal.SIGTERM, sending.Terminated),
                             (sending.signal.SIGINT, KeyboardInterrupt)):
            with self.subTest(number=number):
                interrupts = sending.Interrupts(sending.Plan([], 1, None, sending.Pause()))
                with contextlib.redirect_stderr(io.StringIO()):
                    interrupts.handle(number, None)
                with self.assertRaises(KeyboardInterrupt) as caught:
                    interrupts.handle(number, None)
                self.assertIs(type(caught.exception), kind)

    def test_an_interrupted_run_raises_by_the_signals_kind(self):
        for number, kind in ((sending.signal.SIGTERM, sending.Terminated),
                             (sending.signal.SIGINT, KeyboardInterrupt)):
            with self.subTest(number=number):
                interrupts = sending.Interrupts(None)
                interrupts.signal = number
                with self.assertRaises(KeyboardInterrupt) as caught:
                    interrupts.raise_if_interrupted()
                self.assertIs(type(caught.exception), kind)


if __name__ == "__main__":
    unittest.main()
