"""Requests over the wire: one with its retries and deadline, many as a plan.

The runner (regression.py) builds each row with run_one through a
RetryingClient, runs its plan of rows with Plan, and stops it with
Interrupts; everything that comes back is made clean here, once:

    sender = RetryingClient(client, retries, pause, secrets, label, deadline, finish, fetch)
    response = receive(events, reconnect, on_receipt)  # a background stream's answer
    row = clean(row, secret_patterns(secrets))   # no key in any view, standard JSON
    for index, row in Plan(todo, jobs, send, pause).finished(): ...

Only the API's own 429 and 503 are retried: after a timeout or a dropped
connection a request may have been processed and billed, the same rule the
advisor is tested on. It imports nothing of the project.
"""

import collections
import contextlib
import email.utils
import json
import math
import queue
import random
import re
import signal
import sys
import threading
import time
import types
from datetime import datetime, timezone

RETRY_STATUSES = (429, 503)  # the API said it did not process the request
MAX_RETRY_WAIT = 120  # seconds; a longer Retry-After is waited out at this cap
BACKOFF_BASE = 1.0  # seconds before the first retry without Retry-After, doubling
BACKOFF_CAP = 30.0  # seconds
PAUSE_SLICE = 0.2  # seconds between looks at a stop while a 429 pause runs
MESSAGE_LIMIT = 500  # characters of an API error message kept in a row
MIN_SECRET_LENGTH = 8  # shorter "keys" would redact ordinary words in evidence
ESCAPED = re.compile(r"\\u([0-9a-fA-F]{4})|\\/")  # JSON escapes a key could hide behind
TERMINAL_EVENTS = ("response.completed", "response.incomplete", "response.cancelled")
RECONNECTS = 3  # times one dropped stream is resumed by its id before the row is an error
# A [REDACTED] left by the key's own redaction is taken whole as (part of) the
# token: stopping at its "]" would leave that bracket behind, one more each pass.
BEARER = re.compile(r"(?i)(bearer\s+)(?:\[REDACTED\]|[^\s'\",;}\]])+")

# --------------------------------------------------------------------------
# Pure: retry waits and redaction.
# --------------------------------------------------------------------------


def retry_after_seconds(value, now):
    """Seconds to wait from a Retry-After header (seconds or HTTP-date), capped.

    None for anything unreadable (a superscript digit, a 5,000-digit number):
    the caller then backs off as if the header were absent.
    """
    if not isinstance(value, str) or not value.strip():
        return None
    value = value.strip()
    if re.fullmatch(r"[0-9]{1,9}", value):
        return float(min(int(value), MAX_RETRY_WAIT))
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, OverflowError, IndexError):
        return None
    if when is None or when.tzinfo is None:
        return None
    return min(max((when - now).total_seconds(), 0.0), float(MAX_RETRY_WAIT))


def backoff_seconds(attempt, rng=random):
    """Bounded exponential backoff with jitter, for a 429/503 without Retry-After."""
    ceiling = min(BACKOFF_CAP, BACKOFF_BASE * 2 ** min(attempt - 1, 30))
    return ceiling / 2 + rng.uniform(0, ceiling / 2)


def secret_patterns(secrets):
    """Case-insensitive patterns for each secret long enough to redact, raw or JSON-escaped."""
    patterns = []
    for secret in (secret.strip() for secret in secrets):
        if len(secret) >= MIN_SECRET_LENGTH:
            forms = {secret, json.dumps(secret)[1:-1]}
            patterns.append(re.compile("|".join(re.escape(f) for f in forms), re.IGNORECASE))
    return patterns


def redact_key(text, secrets):
    """text with every occurrence of a secret, in any case, replaced."""
    for pattern in secret_patterns(secrets):
        text = pattern.sub("[REDACTED]", text)
    return text


def redact(text, secrets):
    """text without the API key or anything shaped like a bearer token or key;
    redacting it again changes nothing."""
    text = redact_key(text, secrets)
    text = BEARER.sub(r"\1[REDACTED]", text)
    return re.sub(r"(?i)pplx-[A-Za-z0-9_\-]+", "[REDACTED]", text)


def plainly(text):
    """text with JSON escapes of plain characters (\\u0070, \\/) written out, so
    that a key spelled with escapes is found; other escapes stay as they are."""
    return ESCAPED.sub(plain_escape, text)


def plain_escape(match):
    if match.group(1) is None:
        return "/"
    char = chr(int(match.group(1), 16))
    return char if char.isalnum() or char in "-_.:" else match.group()


def clean(value, patterns):
    """value as standard JSON data without any secret: strings redacted one by one
    (so the JSON around them can never break), NaN and Infinity spelled as strings."""
    if isinstance(value, str):
        if patterns and "\\" in value and any(p.search(plainly(value)) for p in patterns):
            value = plainly(value)  # a key in escapes: a reader would decode it
        for pattern in patterns:
            value = pattern.sub("[REDACTED]", value)
        return value
    if isinstance(value, dict):
        return {clean(str(k), patterns): clean(v, patterns) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(item, patterns) for item in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value).replace("inf", "Infinity").replace("nan", "NaN")
    if isinstance(value, (int, float)) and not isinstance(value, bool) and patterns:
        return value if clean(repr(value), patterns) == repr(value) else "[REDACTED]"
    return value


def error_kind(exc):
    """The API's own name for a failed request's error (`type`, or a text `code`)."""
    body = getattr(exc, "body", None)
    found = body.get("error") if isinstance(body, dict) else None
    found = found if isinstance(found, dict) else body if isinstance(body, dict) else {}
    kinds = [found.get(name) for name in ("code", "type")]
    return next((kind for kind in kinds if isinstance(kind, str) and kind), None)


def error_message(exc, secrets):
    """The API's own words for a failed request, redacted and bounded."""
    body = getattr(exc, "body", None)
    message = body.get("error") if isinstance(body, dict) else None
    if isinstance(message, dict):
        message = message.get("message")
    if not isinstance(message, str) or not message:
        message = str(exc) or type(exc).__name__
    request = getattr(exc, "request", None)
    url = getattr(request, "url", None) if getattr(exc, "status_code", None) is None else None
    if url is not None:  # a connection that failed: where it tried, without a query
        message += f" (tried {getattr(url, 'scheme', '')}://{getattr(url, 'host', '')}" + (
            f":{url.port}" if getattr(url, "port", None) else "") + f"{getattr(url, 'path', '')})"
    return redact(message, secrets)[:MESSAGE_LIMIT]


# --------------------------------------------------------------------------
# I/O: one request within its deadline, the plan of many, stopping them.
# --------------------------------------------------------------------------


def warn(text):
    """A line on stderr, if stderr can still be written: a full disk or a closed
    stream must not turn into a crash (or an exit code other than the one meant)."""
    with contextlib.suppress(OSError, ValueError):
        print(text, file=sys.stderr, flush=True)


class DeadlineExceeded(Exception):
    """A request got no complete answer within its deadline, in total."""


class Helpers:
    """Daemon threads that run requests for call_with_deadline, reused from one
    request to the next: starting a thread per request costs about a
    millisecond. A request abandoned at its deadline keeps its thread busy."""

    def __init__(self):
        self.tasks = queue.SimpleQueue()
        self.lock = threading.Lock()
        self.idle = 0  # threads waiting for a task

    def run(self, call, outcome):
        with self.lock:
            if self.idle:
                self.idle -= 1
            else:
                threading.Thread(target=self.serve, daemon=True).start()
        self.tasks.put((call, outcome))

    def serve(self):
        while True:
            call, outcome = self.tasks.get()
            try:
                outcome.put((True, call()))
            except BaseException as exc:  # Ctrl+C inside a request: re-raised by the caller
                outcome.put((False, exc))
            with self.lock:
                self.idle += 1


HELPERS = Helpers()


def call_with_deadline(call, seconds):
    """call() in a helper thread, given up after `seconds` in total.

    The SDK's timeout bounds each wait for a byte, not the request: a server
    sending a byte a second holds it forever. A request past the deadline is
    abandoned (its thread ends with the process); it may still be billed.
    """
    outcome = queue.Queue(maxsize=1)
    HELPERS.run(call, outcome)
    try:
        succeeded, value = outcome.get(timeout=seconds)
    except queue.Empty:
        raise DeadlineExceeded(f"no complete answer within {seconds} s; it may still "
                               "have been processed and billed") from None
    if succeeded:
        return value
    raise value


class StreamEnded(Exception):
    """A response stream ended without its answer and could not be resumed."""


class ReceiptMismatch(Exception):
    """The API answered a receipt (a response id) with another response: that
    answer is not this row's, and is never saved as it."""


class ReceiptNotKept(Exception):
    """A response id arrived but was not saved as its row's receipt: a refused
    id, or a failed save. The run stops rather than risk paying twice."""


def mismatch(receipt, found):
    """ReceiptMismatch naming the receipt and what came back instead."""
    return ReceiptMismatch(f"the API answered the receipt {str(receipt)[:80]} with the "
                           f"response {str(found)[:80]}")


def receive(events, reconnect, on_receipt=None, response_id=None):
    """The answer of a background response's stream, as JSON data.

    events: the stream's events as dicts. on_receipt(id) runs once, as soon as
    an event names the response's id, before the answer can arrive. When the
    stream ends or breaks before a terminal event, reconnect(id, after) gives
    the events after sequence number `after` of the same response: the answer
    is fetched, never asked for again (it may already be paid for).
    """
    after, drops = -1, 0
    while True:
        try:
            for event in events:
                response = event.get("response") if isinstance(event, dict) else None
                number = event.get("sequence_number") if isinstance(event, dict) else None
                after = max(after, number) if type(number) is int else after
                named = response.get("id") if isinstance(response, dict) else None
                if isinstance(named, str) and named and response_id is None:
                    response_id = named
                    if on_receipt is not None:
                        keep_receipt(on_receipt, response_id)
                elif isinstance(named, str) and named and named != response_id:
                    raise mismatch(response_id, named)
                kind = event.get("type") if isinstance(event, dict) else None
                if kind == "response.failed":  # it carries the error alone
                    return {"id": response_id, "status": "failed", "error": event.get("error")}
                if kind in TERMINAL_EVENTS and isinstance(response, dict):
                    return response
                if kind == "error":
                    raise StreamEnded(f"the stream reported an error: {event.get('message')}")
            problem = ("the stream ended before its answer" if response_id else
                       "the stream closed before its first event (the request may have "
                       "been paid for)")
        except (StreamEnded, ReceiptMismatch, ReceiptNotKept):
            raise
        except Exception as exc:  # noqa: BLE001 - a broken connection: resume it by its id
            if response_id is None:
                raise
            problem = f"the stream broke ({type(exc).__name__})"
        if response_id is None or drops >= RECONNECTS:
            raise StreamEnded(f"{problem}; fetch it by its id with --resume"
                              if response_id else f"{problem}, with no response id")
        drops += 1
        events = reconnect(response_id, after)


def keep_receipt(on_receipt, response_id):
    """on_receipt(response_id); whatever it raises is ReceiptNotKept, never
    mistaken for a broken stream (which would be read on as if it were kept)."""
    try:
        on_receipt(response_id)
    except Exception as exc:
        raise ReceiptNotKept(f"the receipt {str(response_id)[:80]} was not saved "
                             f"({type(exc).__name__}: {exc})") from exc


class Pause:
    """A 429 holds every new start of the run until its wait is over; a stop ends
    every wait at once (a retry is then not sent)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.until = 0.0  # time.monotonic() before which nothing starts
        self.stopped = threading.Event()

    def sleep(self, seconds):
        """Wait seconds; True, at once, if the run is told to stop meanwhile."""
        return self.stopped.wait(seconds)

    def hold(self, seconds):
        with self.lock:
            self.until = max(self.until, time.monotonic() + seconds)

    def remaining(self):
        return self.until - time.monotonic()


class RetryingClient:
    """The SDK client's calls for one row (create an Agent API response, fetch
    one by its id, create a chat completion), waiting out the API's own 429
    and 503 at most `retries` times, each attempt within the deadline.

    finish(result) turns what create returns into the finished response (a
    background stream read to its end) and fetch(id) fetches a kept response
    to its end: both inside the deadline. Nothing else is retried: after a
    timeout or a dropped connection the request may have been processed and
    billed (the verify_outcome rule). It counts the row's attempts and waits
    and keeps the API's redacted message and the kind of its error.
    """

    def __init__(self, client, retries, pause, secrets, label, deadline, finish=None,
                 fetch=None):
        self.client, self.retries, self.pause = client, retries, pause
        self.secrets, self.label, self.deadline = secrets, label, deadline
        self.attempts, self.waited_seconds = 0, 0.0
        self.error_message, self.error_kind, self.answered = None, None, False
        finish = finish or (lambda result: result)
        # Looked up per call, so a client without a chat API still serves Agent models.
        self.responses = types.SimpleNamespace(
            create=lambda **request: self.retrying(
                lambda: finish(client.responses.create(**request))),
            retrieve=lambda response_id: self.retrying(lambda: fetch(response_id)))
        self.chat = types.SimpleNamespace(completions=types.SimpleNamespace(
            create=lambda **request: self.retrying(
                lambda: client.chat.completions.create(**request))))

    def retrying(self, call):
        while True:
            self.attempts += 1
            try:
                response = call_with_deadline(call, self.deadline)
                self.answered = True
                return response
            except Exception as exc:
                status = getattr(exc, "status_code", None)
                seconds = self.wait_seconds(exc) if status in RETRY_STATUSES else None
                if status == 429:
                    # The account is limited: hold every new start now, retried or
                    # not, before this request can end and free its slot for one.
                    self.pause.hold(seconds)
                if status not in RETRY_STATUSES or self.attempts > self.retries:
                    self.error_message = error_message(exc, self.secrets)
                    self.error_kind = error_kind(exc)
                    raise
                self.wait(exc, status, seconds)

    def wait_seconds(self, exc):
        headers = getattr(getattr(exc, "response", None), "headers", None) or {}
        seconds = retry_after_seconds(headers.get("retry-after"), datetime.now(timezone.utc))
        return backoff_seconds(self.attempts) if seconds is None else seconds

    def wait(self, exc, status, seconds):
        warn(f"waiting {seconds:.1f}s: the API answered {status} for {self.label} "
             f"(attempt {self.attempts} of {self.retries + 1})")
        if self.pause.sleep(seconds):  # stopping: the API did not process it, nothing lost
            self.error_message = f"{error_message(exc, self.secrets)} (not retried: stopping)"
            raise exc
        self.waited_seconds += seconds


class Plan:
    """The requests still to send, at most `jobs` in flight, in finishing order.

    finished() yields (plan index, row) as requests finish; stop(why) starts
    nothing new, and the requests already in flight still finish and are
    yielded. No request starts while the 429 pause runs.
    """

    def __init__(self, todo, jobs, send, pause, blocked=None):
        self.todo, self.jobs, self.send, self.pause = todo, jobs, send, pause
        # blocked(index): an entry that must wait (its pair's previous repeat is not
        # in yet); entries given to drop() are never sent.
        self.blocked, self.dropped = blocked, set()
        self.stopped = None  # why nothing new starts: "error", "budget", "interrupted"
        self.note = None  # what a first Ctrl+C says, when not the requests in flight
        self.in_flight = 0
        self.results = queue.Queue()

    def stop(self, why):
        """Start nothing new, send no retry; True the first time only."""
        first = self.stopped is None
        self.stopped = self.stopped or why
        self.pause.stopped.set()
        return first

    def work(self, index, entry):
        try:
            self.results.put((index, self.send(index, entry)))
        except BaseException as exc:  # Ctrl+C inside a request: re-raised below
            self.results.put((index, exc))

    def drop(self, index):
        """Never send this entry."""
        self.dropped.add(index)

    def next_entry(self, waiting):
        """The place in waiting of the first entry that may start now, or None."""
        for place, (index, _) in enumerate(waiting):
            if index not in self.dropped and not self.blocked(index):
                return place
        return None

    def finished(self):
        waiting = collections.deque(self.todo)
        while True:
            while waiting and waiting[0][0] in self.dropped:
                waiting.popleft()
            while self.stopped is None and self.in_flight < self.jobs and waiting:
                place = 0 if self.blocked is None else self.next_entry(waiting)
                if place is None:
                    break  # every entry left waits for a row in flight
                wait = self.pause.remaining()
                if wait > 0 and self.in_flight:
                    break  # collect finished rows while the pause runs out
                if wait > 0:
                    time.sleep(min(wait, PAUSE_SLICE))  # then look at a stop again
                    continue
                index, entry = waiting[place]
                del waiting[place]
                self.in_flight += 1
                if self.jobs == 1:
                    self.work(index, entry)  # in this thread: the default, one at a time
                else:
                    threading.Thread(target=self.work, args=(index, entry), daemon=True).start()
            if not self.in_flight:
                return
            try:
                index, row = self.results.get(timeout=PAUSE_SLICE)
            except queue.Empty:
                continue
            self.in_flight -= 1
            if isinstance(row, BaseException):
                raise row
            yield index, row


class Terminated(KeyboardInterrupt):
    """SIGTERM (how CI cancels a job), handled exactly like Ctrl+C."""


class Interrupts:
    """The first Ctrl+C or SIGTERM stops new starts and lets requests in flight
    finish and be saved; a second one stops at once."""

    def __init__(self, plan):
        self.plan, self.signal, self.previous = plan, None, {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for number in (signal.SIGINT, signal.SIGTERM):
                self.previous[number] = signal.signal(number, self.handle)
        return self

    def __exit__(self, *exc_info):
        for number, handler in self.previous.items():
            signal.signal(number, handler)

    def handle(self, number, frame):
        if self.signal is not None:
            raise Terminated() if number == signal.SIGTERM else KeyboardInterrupt()
        self.signal = number
        self.plan.stop("interrupted")
        warn(self.plan.note or f"Stopping: no new request starts; waiting for {self.plan.in_flight} in "
             "flight to finish and be saved (a second Ctrl+C or SIGTERM stops now, "
             "without them: --resume then fetches each by the id saved for it).")

    def raise_if_interrupted(self):
        if self.signal is not None:
            raise Terminated() if self.signal == signal.SIGTERM else KeyboardInterrupt()
