"""Prove that approved advisor decisions did not change before you switch models.

Sends fixed checkout-failure cases to several models through the Perplexity
Agent API (built-in web search), checks every JSON answer with deterministic
rules, and saves every response as evidence.

    export PERPLEXITY_API_KEY=...
    python regression.py                                  # 2 models x 4 cases
    python regression.py --models openai/gpt-5.6-sol --repeats 3 --out run.json
    python regression.py --jobs 8 --junit junit.xml --summary-md summary.md --html run.html
    python regression.py --models chat:sonar-pro openai/gpt-5.6-sol   # migration
    python regression.py --cases incident.toml --instructions advisor.txt --max-cost 2
    python regression.py --batch --cases suite.json --repeats 10   # on the Batch API
    python regression.py --resume run.json                # finish an interrupted run
    python regression.py --regrade run.json --out regraded.json   # re-check, send nothing
    python regression.py --demo demo-run                  # offline, no key

The file reads top to bottom: what is sent (constants); pure checking and
summarising; I/O (one request and its row, the record and the reports); the
command line. How a request is retried, timed out, planned and stopped, and
how its row is redacted, is in sending.py; the record on disk in record.py;
the Batch API's files and batches (--batch) in batching.py.

Exit codes:
    0    every check passed on a complete run
    1    a check failed (a model gave a wrong or unsupported answer)
    2    no verdict: bad input, an API or execution error, a budget stop, a crash
    130  interrupted by Ctrl+C, 143 by SIGTERM (the record is saved; --resume)
"""

import sys

if sys.version_info < (3, 11):  # tomllib, and the exit code: a crash must not be 1
    print(f"regression.py: error: needs Python 3.11 or later, this is "
          f"{sys.version.split()[0]}; run it with python3.11 or newer", file=sys.stderr)
    raise SystemExit(2)

if __name__ == "__main__":  # Ctrl+C while the SDK loads (a second or so): exit 130, quietly.
    # Set whatever a shell left: the CI recipe starts the runner as a background job
    # (SIGINT ignored) and forwards each signal to it, so a SIGINT must count.
    import signal

    signal.signal(signal.SIGINT, lambda number, frame: sys.exit(128 + number))

import argparse
import collections
import contextlib
import dataclasses
import difflib
import functools
import json
import os
import shlex
import shutil
import signal
import stat
import threading
import time
import tomllib
import traceback
from datetime import datetime, timezone
from decimal import Decimal, InvalidOperation

import batching
import checker
import plans
import record
import reports
import suites
# What is asked and how answers are judged live in checker.py (pure, no SDK),
# so every reader of a record judges with the same code; these names are the
# runner's interface too.
from checker import (ACTIONS, CASES, CHAT_PREFIX, CONFIDENCE, FORMAT, INSTRUCTIONS,  # noqa: F401
                     MODELS, TOOL, Tally, answer_seen, answer_text, answered_model,
                     approved_source, chat_answer_text, chat_as_agent, check, pass_rate_lines,
                     receipt_reasons, reported_cost, rfc_document, run_order, runs_needed,
                     same_model, search_result_urls, summary, verdict_line)
from record import MAX_REPEATS
import sending
from sending import (MESSAGE_LIMIT, Interrupts, Pause, Plan, RetryingClient, Terminated,
                     clean, receive, redact, secret_patterns, warn)
from vocabulary import Parser, UserError, crash_report, mend_standard_streams

# --------------------------------------------------------------------------
# Part 1: how it is sent. Every value that can change an answer is recorded
# in the run's `config`; the cases, instructions, tool and format are in
# checker.py.
# --------------------------------------------------------------------------

MAX_STEPS = 5  # agent steps per request: search, maybe a second search, answer
CHAT_SEARCH_CONTEXT = "medium"  # the chat API's own search fields: it has no token budget
CHAT_SEARCH_RESULTS = 5
MAX_OUTPUT_TOKENS = 4096  # the JSON answer is ~200 tokens; room for reasoning
TIMEOUT_SECONDS = 180  # per request, in total: a slow agent run takes about a minute
MAX_JOBS = 32  # requests in flight; more mostly buys rate limits
REFUSED_STATUSES = (400, 404, 422)  # the request itself is wrong: a resume cannot help
MAX_RETRIES = 10  # extra attempts after a 429 or 503 that --retries allows
MAX_BUDGET_DIGITS = 12  # --max-cost between 1e-12 and 1e12 USD: any real budget
DEFAULT_RETRIES = 2  # a 429 or 503 is usually over after a wait or two
MAX_INSTRUCTIONS_BYTES = 64 << 10  # an instructions file is a page of rules, not a book
DEMO_MODELS = ["offline/careful", "offline/hasty"]  # fictional on purpose
CRASH_FOLDER = []  # the record's folder once main knows it: where a crash report goes
# --force-search: the Agent API's documented tool_choice that makes the agent use
# web_search ("auto", the default, lets the model decide; "required" any tool).
FORCED_SEARCH = {"type": "web_search"}
CLOSEST_MODELS = 3  # listed names offered when --check-models does not find a model
DEMO_KEY = "offline-demo-key"  # the simulated API accepts any key
REPORTS = ("junit", "summary_md", "html")  # report options, kept in the record's execution
MAX_RESPONSE_CHARS = 16 << 20  # one saved response; a JSON answer with receipts is ~20 KB
RESPONSE_HEAD_CHARS = 4096  # of a response too large to keep, what the record keeps
BATCH_SAVE_ROWS = 500  # collected rows between saves: a batch's files stay 30 days, so a
                       # crash mid-collection costs a download again, never an answer
FINAL_STATUSES = ("completed", "incomplete", "failed", "cancelled", "requires_action")
# Any other status (queued, in_progress, cancelling, or one the API adds later)
# says the agent run is still going: it is waited for by its id.
DEAD_RECEIPTS = ("AgentRunFailed", "AgentRunCancelled", "AgentRunNeedsAction",
                 "ReceiptMismatch")  # a receipt that can never give this row an answer
SONAR_RETIRED_KINDS = ("agent_api_migration_required", "chat_completions_not_available")
SONAR_RETIRED = ("the Sonar chat-completions API was retired on 2026-09-27 (HTTP 403); "
                 "Sonar is now the Agent API")
NO_VERDICT_STATUSES = {  # agent run statuses that leave nothing to judge: (error, meaning)
    "failed": ("AgentRunFailed", "the agent run failed"),
    "cancelled": ("AgentRunCancelled", "the agent run was cancelled before it answered"),
    "requires_action": ("AgentRunNeedsAction", "the agent run stopped for an action this "
                        "runner never takes"),
}

SDK_NAMES = ("Perplexity", "APIError", "Stream", "httpx")  # loaded on first use


def load_sdk():
    """Import the SDK (about a second) the first time a request needs it, so
    --help, usage errors, --plan and --regrade never pay for it. Sets the
    module's SDK names; one a test has replaced already (regression.Perplexity)
    is kept. A missing package is one line and exit 2."""
    if all(name in globals() for name in SDK_NAMES):
        return
    try:
        import httpx as http
        import perplexity
    except ModuleNotFoundError as missing:
        # A command that works whatever python3 is: a system Python may refuse pip
        # (externally managed), a virtual environment never does.
        home = os.path.relpath(os.path.dirname(os.path.abspath(__file__)))
        venv = os.path.join(home, ".venv")
        print(f"regression.py: error: the package {missing.name} is not installed for "
              f"{sys.executable}; set up the pinned packages once with: "
              f"python3 -m venv {shlex.quote(venv)} && "
              f"{shlex.quote(os.path.join(venv, 'bin', 'pip'))} install -r "
              f"{shlex.quote(os.path.join(home, 'requirements.txt'))}, then run "
              f"{shlex.quote(os.path.join(venv, 'bin', 'python'))} "
              f"{shlex.quote(os.path.join(home, 'regression.py'))}", file=sys.stderr)
        raise SystemExit(2) from None
    for name, value in (("httpx", http), ("APIError", perplexity.APIError),
                        ("Perplexity", perplexity.Perplexity), ("Stream", perplexity.Stream)):
        globals().setdefault(name, value)


def __getattr__(name):
    """regression.Perplexity (and the SDK's other names) for importers and tests,
    loaded on first use."""
    if name in SDK_NAMES:
        load_sdk()
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# --------------------------------------------------------------------------
# Part 2: pure functions: the chat request, describe rows, judge saved rows.
# Data in, data out: no network, no files, no clock but what is passed in.
# --------------------------------------------------------------------------


def tool_and_format(suite):
    """The web_search tool and the response_format a suite's requests carry
    (None: the built-in suite's TOOL and FORMAT)."""
    return (TOOL, FORMAT) if suite is None else (suites.tool_of(suite), suites.format_of(suite))


def chat_request_template(suite=None):
    """The chat-completions request, the Agent API contract in the chat API's fields.

    Only fields the SDK's chat API knows: the API rejects unknown ones.
    """
    tool, answer_format = tool_and_format(suite)
    return {
        "messages": [{"role": "system", "content": "<INSTRUCTIONS>"},
                     {"role": "user", "content": "<the case's question>"}],
        "search_domain_filter": tool["filters"]["search_domain_filter"],
        "web_search_options": {"search_context_size": CHAT_SEARCH_CONTEXT},
        "num_search_results": CHAT_SEARCH_RESULTS,
        "response_format": answer_format,
        "max_tokens": MAX_OUTPUT_TOKENS,
    }


def chat_request(case, model, instructions=INSTRUCTIONS, suite=None):
    """The chat-completions request for one case; the expected answer is never sent."""
    request = chat_request_template(suite)
    request["model"] = model[len(CHAT_PREFIX):]
    request["messages"] = [{"role": "system", "content": instructions},
                           {"role": "user", "content": case["question"]}]
    return request


def run_config(models, cases, repeats, instructions=INSTRUCTIONS, prove=None, suite=None,
               tool_choice=None):
    """Everything sent that can change an answer: the record's `config`."""
    tool, answer_format = tool_and_format(suite)
    config = {
        "models": models,
        "cases": cases,
        "instructions": instructions,
        "tool": tool,
        "response_format": answer_format,
        "repeats": repeats,
        "max_steps": MAX_STEPS,
        "max_output_tokens": MAX_OUTPUT_TOKENS,
        "timeout_seconds": TIMEOUT_SECONDS,
    }
    if any(model.startswith(CHAT_PREFIX) for model in models):
        config["chat_request"] = chat_request_template(suite)
    if prove is not None:  # repeats is then what the rate needs: each pair's most
        config["prove"] = prove
    if tool_choice is not None:  # it can change an answer: recorded, and compared
        config["tool_choice"] = tool_choice
    return config


def row_line(row):
    """One console line per row: repeat, model, case, verdict, cost, seconds."""
    verdict = "PASS" if row["passed"] else "FAIL " + ",".join(row["reasons"])
    if row.get("error"):
        status = f" HTTP {row['error_status']}" if row.get("error_status") else ""
        message = f": {row['error_message']}" if row.get("error_message") else ""
        verdict += f" ({row['error']}{status}{message})"
    named = row.get("answered_model")
    if named and not same_model(row["model"], named):
        verdict += f" (answered by {named})"
    cost = "cost unknown" if row["cost_usd"] is None else f"${row['cost_usd']}"
    took = "(batch)" if row["seconds"] is None else f"{row['seconds']}s"  # timed by the API
    return reports.visible(f"repeat {row['repeat']} {row['model']} {row['case_id']} "
                           f"{verdict} {cost} {took}")


def status_error(response):
    """(error, message) when the API answered but its agent run gave no answer
    to judge (failed, cancelled, waiting for an action, not finished), else None."""
    status = response.get("status") if isinstance(response, dict) else None
    if status not in NO_VERDICT_STATUSES:
        if isinstance(response, dict) and still_running(response):
            return "AgentRunUnfinished", "the API answered before the agent run finished"
        return None
    name, meaning = NO_VERDICT_STATUSES[status]
    error = response.get("error")
    message = error.get("message") if isinstance(error, dict) else None
    return name, (message if isinstance(message, str) and message else meaning)


def too_large(row, size):
    """An execution error row in place of a response too large to keep whole:
    its id, its size and its first characters stay as evidence."""
    response = row["response"]
    head = record.dumps(response)[:RESPONSE_HEAD_CHARS]
    return {**row, "error": "ResponseTooLarge", "error_status": None, "cost_usd": None,
            "response": {"id": response.get("id"), "characters": size, "head": head},
            "answer_text": None, "answered_model": None, "reasons": ["execution_error"],
            "passed": False,
            "error_message": (f"the response is {size:,} characters, more than the "
                              f"{MAX_RESPONSE_CHARS >> 20} Mi a record keeps of one answer; "
                              "its id, size and first characters are kept")}


def still_running(response):
    """Whether a response's status says its agent run is still going."""
    status = response.get("status") if isinstance(response, dict) else None
    return isinstance(status, str) and status not in FINAL_STATUSES


def agent_request(case, model, instructions=INSTRUCTIONS, suite=None, tool_choice=None):
    """The Agent API request for one case, as a plain request and a batch line
    send it; the expected answer is never sent. tool_choice: --force-search."""
    tool, answer_format = tool_and_format(suite)
    request = {"model": model, "instructions": instructions, "input": case["question"],
               "tools": [tool], "response_format": answer_format, "max_steps": MAX_STEPS,
               "max_output_tokens": MAX_OUTPUT_TOKENS}
    if tool_choice is not None:
        request["tool_choice"] = tool_choice
    return request


def resume_problem(saved, config, code_hash, sdk):
    """Why this code cannot resume a saved record whose config it would send, or None."""
    differing = sorted(k for k in set(config) | set(saved["config"])
                       if saved["config"].get(k) != config.get(k))
    if differing:
        return (f"its config differs in {', '.join(differing)} from what this "
                "regression.py sends; start a new run with --out")
    if saved.get("evidence", "live") != "live":
        return "it holds synthetic demo data; run the demo again instead"
    if saved.get("code_sha256") != code_hash:
        return ("it was made by a different regression.py (code_sha256); start a new run, "
                "or re-check it with --regrade")
    if saved.get("sdk_version") != sdk:
        return (f"it was made with perplexityai {saved.get('sdk_version')!r}, this is "
                f"{sdk}; start a new run")
    return None


def places(entries):
    """{(model, case id, repeat): index in the plan}."""
    return {(model, case["id"], repeat): index
            for index, (repeat, case, model) in enumerate(entries)}


def next_step(row, out):
    """What to do after an execution error: resume, unless the request itself is refused."""
    if row.get("error") == "SonarRetired":
        return ("--resume would meet the same 403. Run the Agent API instead into a new "
                "record (Perplexity's own Sonar is --models perplexity/sonar), and compare a "
                "chat: record saved before the retirement with it, giving compare_runs.py "
                f"--switch {row.get('model')}=perplexity/sonar (README: A migration from Sonar).")
    if row.get("error_status") in (400, 403) and "background" in (row.get("error_message")
                                                                  or "").lower():
        return ("The API refused background mode for this organization: start a new run "
                "with --foreground, which sends requests plainly.")
    if row.get("error_status") in REFUSED_STATUSES:
        return ("The API refused the request itself, so sending it again fails the same "
                "way: fix the model name (or the SDK version) and start a new run with --out.")
    return f"Fix the cause shown above, then: {command_hint('--resume', out)}"


def command_hint(*args):
    """A command line that runs as printed from the current folder."""
    python = os.path.relpath(sys.executable)
    script = os.path.relpath(os.path.abspath(__file__))
    python = python if not python.startswith("..") else sys.executable
    script = script if not script.startswith("..") else os.path.abspath(__file__)
    if os.sep not in python:
        python = "." + os.sep + python
    return shlex.join([python, script, *args])


# --------------------------------------------------------------------------
# Part 3: I/O. One request and its whole row, the files a run reads, and the
# reports on disk.
# --------------------------------------------------------------------------


def dump_response(response):
    """The SDK response as plain JSON data, exactly what the API returned."""
    if isinstance(response, dict):  # read as JSON already
        return response
    try:
        # warnings=False: the SDK's loose unions warn on valid but unusual
        # output items, which would otherwise crash a run under -W error.
        return response.model_dump(mode="json", exclude_none=True, warnings=False)
    except TypeError:  # a stand-in response object without pydantic's keyword
        return response.model_dump(mode="json", exclude_none=True)


def run_one(client, case, model, instructions=INSTRUCTIONS, background=False, receipt=None,
            suite=None, tool_choice=None):
    """Send one case to one model and check the answer; never raises Exception.

    suite: the suite the case is of (None: the built-in one). background=True (how the runner sends every Agent API request) creates it
    in background mode and streams it, so its id arrives before its answer;
    by default it is the plain request of the published design. receipt: the
    id of a response the API already holds for this row, fetched instead of
    sent again.
    """
    row = {
        "case_id": case["id"],
        "model": model,
        "error": None,
        "error_status": None,
        "cost_usd": None,
        "response": None,
        "answer_text": None,
        "reasons": [],
        "seconds": None,
        "passed": False,
    }
    started = time.monotonic()
    load_sdk()
    try:
        if model.startswith(CHAT_PREFIX):
            response = client.chat.completions.create(**chat_request(case, model, instructions,
                                                                     suite))
            # The raw chat response is the evidence; check() reads its
            # normalised form, so one checker serves both APIs.
            row["response"] = dump_response(response)
            row["answer_text"] = chat_answer_text(row["response"])
        else:
            if receipt is not None:  # paid for already: fetched by its id, never sent again
                response = client.responses.retrieve(receipt)
            else:
                response = client.responses.create(
                    **agent_request(case, model, instructions, suite, tool_choice),
                    **({"background": True, "stream": True} if background else {}),
                )
            if isinstance(response, Stream):  # a plain SDK client hands back the stream
                response = finished(client, response)
            # Evidence first: a checker crash below must not lose what we paid for.
            row["response"] = dump_response(response)
            # The text as every reader will derive it from the saved response;
            # the SDK's output_text when the response has no message item.
            text = answer_text(model, row["response"])
            row["answer_text"] = getattr(response, "output_text", "") if text is None else text
        judge(row, case, model, suite)
    except Exception as exc:  # noqa: BLE001 - every failure becomes evidence
        status = getattr(exc, "status_code", None)
        row["error"] = type(exc).__name__
        row["error_status"] = status if isinstance(status, int) else None
        row["reasons"] = ["execution_error"]
    row["seconds"] = round(time.monotonic() - started, 3)
    row["passed"] = not row["reasons"]
    return row


def judge(row, case, model, suite=None):
    """The row's cost and reasons from its saved response and answer text: by
    this module's check() for the built-in domain, else by the suite's rules."""
    seen = answer_seen(model, row["response"])
    row["cost_usd"] = reported_cost(seen)
    if suite is None or checker.is_builtin_domain(suite):
        reasons = check(case, seen, row["answer_text"])
    else:
        reasons = checker.judge_answer(suite, case, seen, row["answer_text"])
    row["reasons"] = reasons + receipt_reasons(model, row["response"])


def finished(client, result, on_receipt=None):
    """The finished response of a create call: a background stream read to its
    answer (its id goes to on_receipt first), or the response itself, waited
    for by its id while it is still queued or in progress."""
    load_sdk()
    if isinstance(result, Stream):
        with result:  # closed however it ends: an open stream holds its connection
            if "json" not in result.response.headers.get("content-type", ""):
                return receive(events_of(result), functools.partial(resumed, client),
                               on_receipt)
            # A complete response where a stream was asked for: the SDK would yield
            # no event at all, so the body itself is the answer.
            result = json.loads(result.response.read())
    read = result.get if isinstance(result, dict) else functools.partial(getattr, result)
    status, response_id = read("status", None), read("id", None)
    if status in FINAL_STATUSES or status is None or not isinstance(response_id, str):
        return result
    if on_receipt is not None:
        sending.keep_receipt(on_receipt, response_id)
    return fetched(client, response_id)  # unfinished: fetched by its id, never sent again


def events_of(stream):
    """A stream's server-sent events as JSON data, read from its lines: the SDK
    would build a typed model of every event, a cost per row for events that
    matter only for their id. The stream is closed when they end or stop."""
    with stream:
        kind = None
        for line in stream.response.iter_lines():
            if line.startswith("event:"):
                kind = line[len("event:"):].strip()
            elif line.startswith("data:"):
                try:
                    event = json.loads(line[len("data:"):])
                except ValueError:
                    continue  # not an event of this API: the terminal one still counts
                if kind == "error":
                    event = {"type": "error", "message": event}
                kind = None
                yield without_nulls(event) if isinstance(event, dict) else event


def without_nulls(value):
    """JSON data without null members, as the SDK's dump of a response leaves it."""
    if isinstance(value, dict):
        return {key: without_nulls(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [without_nulls(item) for item in value]
    return value


def resumed(client, response_id, after):
    """The events of a kept response after sequence number `after`."""
    return events_of(client.responses.retrieve(response_id, stream=True,
                                               starting_after=max(after, 0)))


def fetched(client, response_id):
    """A response the API keeps, by its id, waited for to its end."""
    response = dump_response(client.responses.retrieve(response_id))
    if response.get("id") != response_id:
        raise sending.mismatch(response_id, response.get("id"))
    if not still_running(response):
        return response
    return receive(resumed(client, response_id, 0), functools.partial(resumed, client),
                   response_id=response_id)


def send_one(client, index, entry, *, execution, secrets, instructions, pause, receipts,
             suite=None, tool_choice=None):
    """The whole row of one planned request: sent (or fetched by the id an
    earlier process saved), checked, counted and redacted (settled).
    """
    repeat, case, model = entry
    saved_id = receipts.saved_id(index)
    background = not execution["foreground"] and not model.startswith(CHAT_PREFIX)
    on_receipt = functools.partial(receipts.received, index)
    sender = RetryingClient(client, execution["retries"], pause, secrets,
                            f"{model} {case['id']} repeat {repeat}", TIMEOUT_SECONDS,
                            functools.partial(finished, client, on_receipt=on_receipt),
                            functools.partial(fetched, client))
    recovered = None
    if saved_id is not None:
        row = run_one(sender, case, model, instructions, background, receipt=saved_id,
                      suite=suite, tool_choice=tool_choice)
        recovered = f"fetched by its id {saved_id} after an interruption"
        dead = status_error(row["response"]) if not row["error"] else None
        if row["error_status"] == 404:  # the API no longer has it: sent again
            recovered = f"sent again: the API no longer had {saved_id}"
        elif row["error"] == "ReceiptMismatch":
            recovered = (f"sent again: the API answered its receipt {saved_id} with another "
                         "response, which is not this row's; it may have been paid twice")
        elif dead is not None and dead[0] in DEAD_RECEIPTS:
            recovered = (f"sent again: its agent run {saved_id} ended "
                         f"{row['response'].get('status')} without an answer; the new "
                         "request is paid again")
        if recovered.startswith("sent again"):
            warn(f"{model} {case['id']} repeat {repeat}: {recovered}")
            sender.error_message = sender.error_kind = None
            saved_id = None
    if saved_id is None:
        receipts.sending(index, entry)
        row = run_one(sender, case, model, instructions, background, suite=suite,
                      tool_choice=tool_choice)
    message = sender.error_message
    if retired(row, sender, model):
        row["error"] = "SonarRetired"
        message = SONAR_RETIRED
    elif row["error"] and message is None:
        message = ("the API answered, but its answer could not be read as a JSON object "
                   "(not an object, or nested too deeply)" if row["response"] is None
                   and sender.answered else f"{row['error']} raised while checking the answer")
    row.update(attempts=sender.attempts, waited_seconds=round(sender.waited_seconds, 3))
    if recovered is not None:
        row["recovered"] = recovered
    return settled({"repeat": repeat, **row}, message, secrets)


def settled(row, message, secrets):
    """A row as it is kept: its receipt named, an unanswered agent run made an
    execution error, the key redacted, and a response too large cut to its head.

    Every row is made here, once: every view (record, console, JUnit,
    Markdown, HTML) reads this same row.
    """
    row["answered_model"] = answered_model(row["response"])  # the router's receipt
    failed = status_error(row["response"]) if not row["error"] else None
    named = checker.response_id(row)
    if failed is None and not row["error"] and named is not None and not record.saved_id(named):
        failed = ("BadResponseId", "the API gave a response id that is not an id (a '/', a "
                  f"control character or over {record.MAX_ID_CHARS} characters)")
    if failed is None and not row["error"] and answer_text(row["model"], row["response"]) is None:
        # What every reader will derive from the saved response: no answer, no verdict.
        failed = (checker.NO_ANSWER, "the response holds no answer (no assistant message)")
    if failed is not None:  # HTTP 200, but the agent run gave no answer: no verdict
        row.update(error=failed[0], reasons=["execution_error"], passed=False)
        message = redact(failed[1], secrets)[:MESSAGE_LIMIT]
    row["error_message"] = message if row["error"] else None
    row = clean(row, secret_patterns(secrets))
    if row["cost_usd"] is not None and record.cost_problem(row["cost_usd"]):
        row["cost_usd"] = None  # a cost that spelled the key is redacted, so no longer known
    size = len(record.dumps(row["response"])) if row["response"] is not None else 0
    if size > MAX_RESPONSE_CHARS:  # a record must stay small enough for its own readers
        row = too_large(row, size)
    return row


def retired(row, sender, model):
    """Whether a chat request met the retired Sonar chat API (HTTP 403)."""
    return (model.startswith(CHAT_PREFIX) and row["error_status"] == 403
            and (sender.error_kind in SONAR_RETIRED_KINDS
                 or "Sonar is now the Agent API" in (sender.error_message or "")))


def batch_row(run, index, line, batch):
    """The row of plan index from its line of a batch's output or error file
    (None: the batch ended without it), judged like a direct answer."""
    repeat, case, model = run.entries[index]
    row = {"repeat": repeat, "case_id": case["id"], "model": model, "error": None,
           "error_status": None, "cost_usd": None, "response": None, "answer_text": None,
           "reasons": [], "seconds": None, "passed": False}
    answer = line.get("response") if isinstance(line, dict) else None
    answer = answer if isinstance(answer, dict) else {}
    status, body = answer.get("status_code"), answer.get("body")
    message = None
    if status == 200 and isinstance(body, dict):
        row["response"] = body
        try:
            text = answer_text(model, body)
            row["answer_text"] = "" if text is None else text
            judge(row, case, model, run.suite)
        except Exception as exc:  # noqa: BLE001 - every failure becomes evidence
            row.update(error=type(exc).__name__, reasons=["execution_error"])
            message = f"{row['error']} raised while checking the answer"
    else:
        error = (body or {}).get("error") if isinstance(body, dict) else None
        error = error or (line.get("error") if isinstance(line, dict) else None)
        text = error.get("message") if isinstance(error, dict) else None
        if type(status) is not int:  # never run: the batch ended first
            row["error"] = batching.ENDED_WITHOUT.get(batch["status"], "BatchRowMissing")
            text = (f"batch {batch['id']} ended {batch['status']} without an answer for "
                    f"this row{': ' + str(text) if text else ''}")
        else:
            row["error"] = "BatchRequestFailed"
            row["error_status"] = status if type(status) is int else None
        row["reasons"] = ["execution_error"]
        message = redact(str(text or "the batch answered this row with an error"),
                         run.secrets)[:MESSAGE_LIMIT]
    row["passed"] = not row["reasons"]
    row["batch"] = {"id": batch["id"], "custom_id": batching.custom_id(index),
                    "request_id": answer.get("request_id")}
    return settled(row, message, run.secrets)


def run_batch(run, client, plan, saved, started):
    """Submit what is not submitted yet, wait, and collect each batch as it ends.

    Every step is saved in the record before the next, so --resume carries on
    where a stop left off and never submits a part twice. Raises UserError
    (the record saved) when the Batch API refuses a step.
    """
    load_sdk()
    parts = run.batch["parts"]
    if not parts:  # planned once, from what is still to do, and saved before any upload
        sizes = ((index, len(batch_line(run, index))) for index, _ in run.todo())
        parts.extend(batching.parts_of(sizes))
        run.checkpoint()
    resume = command_hint("--resume", run.out)
    later = ("it ends with the demo" if run.demo else  # a demo record is never resumed
             f"{run.out} keeps its ids: collect it later with: {resume}")
    plan.note = ("Stopping: nothing more is uploaded or submitted; every step done is saved"
                 + ("." if run.demo else f": carry on with: {resume}"))
    for part in parts:
        if part["collected"]:
            continue
        if plan.stopped:
            return
        try:
            if part["input_file_id"] is None:
                data = b"".join(map(functools.partial(batch_line, run),
                                    range(part["start"], part["stop"])))
                part["input_file_id"] = arrived_id(batching.upload(client, data), run.secrets)
                del data
                run.checkpoint()
            if plan.stopped:
                return
            if part["batch_id"] is None:
                key = batching.idempotency_key(run.head["created_at"], part)
                part["batch_id"] = arrived_id(batching.create(
                    client, part["input_file_id"], key,
                    batching.metadata(run.head["created_at"], part))["id"], run.secrets)
                run.checkpoint()
        except (APIError, httpx.HTTPError) as exc:
            raise UserError(f"the Batch API refused or failed a step "
                             f"({api_failure(exc, run.secrets)}); the record {run.out} "
                             f"keeps every step done; carry on with: {resume}") from None
    total = sum(part["stop"] - part["start"] for part in parts)
    if plan.stopped:
        return
    print(f"{total} rows in {len(parts)} batch{'es' if len(parts) > 1 else ''} of the "
          f"Batch API ({', '.join(part['batch_id'] for part in parts)}); waiting for the "
          f"answers (within 24 h). Ctrl+C stops the wait, not the batch.", flush=True)
    plan.note = f"Stopping the wait; the batch runs on, and {later}"
    delay, failures, shown = batching.FIRST_POLL_SECONDS, 0, None
    while not plan.stopped:
        for part in parts:
            if part["collected"]:
                continue
            try:
                batch = batching.retrieve(client, part["batch_id"])
            except (APIError, httpx.HTTPError) as exc:
                if getattr(exc, "status_code", None) == 404:
                    raise UserError(f"the Batch API does not know batch {part['batch_id']} "
                                     "(another key or organization, or older than the 30 days "
                                     "it keeps batches): its rows cannot be collected; start "
                                     "a new run") from None
                failures += 1
                if failures > batching.POLL_FAILURES:
                    raise UserError(f"cannot reach the Batch API "
                                     f"({api_failure(exc, run.secrets)}); the batch runs on: "
                                     f"collect it with: {resume}") from None
                continue
            failures = 0
            problem = batching.foreign_problem(batch, run.head["created_at"], part)
            if problem:
                raise UserError(problem)
            counts = batch.get("request_counts")
            part["status"] = batch.get("status")
            part["counts"] = {name: counts.get(name) for name in ("total", "completed", "failed")
                              if type(counts.get(name)) is int} if isinstance(counts, dict) else {}
            if part["status"] in batching.TERMINAL:
                try:
                    collect(run, client, plan, saved, part, batch, started)
                except (APIError, httpx.HTTPError) as exc:
                    raise UserError(f"cannot download the answers of batch {part['batch_id']} "
                                     f"({api_failure(exc, run.secrets)}); the rows saved so "
                                     f"far are kept: collect the rest with: {resume}") from None
        line = batching.counts_line(parts, total, time.monotonic() - started)
        if all(part["collected"] for part in parts):
            break
        if line.split(" (")[0] != shown:
            shown = line.split(" (")[0]
            say(run, plan, line)
        plan.pause.stopped.wait(delay)  # a signal sets it: the wait ends at once
        delay = min(delay * 2, batching.MAX_POLL_SECONDS)
    failed = sum(1 for index, row in run.rows.items() if row["error"] and "batch" in row)
    if failed and all(part["collected"] for part in parts):
        warn(f"{failed} row{'s' if failed > 1 else ''} of the batch ended in an execution "
             "error (an error line, or never run: no verdict); "
             + ("run the demo again" if run.demo else f"send them directly with: {resume}"))


def arrived_id(value, secrets):
    """An id the Batch API gave (a file's, a batch's), or UserError: one that is
    not an id, or that holds the key, is never saved (a record keeps no key)."""
    if not record.saved_id(value):
        raise UserError("the Batch API gave an id that is not an id (a '/', a control "
                         f"character or over {record.MAX_ID_CHARS} characters); nothing "
                         "more was submitted")
    if redact(value, secrets) != value:
        raise UserError("the Batch API gave an id that holds the API key; it is not kept "
                         "and nothing more was submitted: rotate the key, then start a new run")
    return value


def collect(run, client, plan, saved, part, batch, started):
    """The rows of an ended batch, made in the saved order from its files."""
    with contextlib.ExitStack() as files:
        found = []
        for name in ("output_file_id", "error_file_id"):  # an answer beats an error line
            if isinstance(batch.get(name), str):
                handle = files.enter_context(batching.download(client, batch[name]))
                try:
                    found.append((handle, batching.line_places(handle, part["start"],
                                                               part["stop"])))
                except UserError as exc:
                    raise UserError(f"batch {part['batch_id']} is not this part's: {exc}; "
                                     "nothing of it was collected") from None
        for index in range(part["start"], part["stop"]):
            if index in run.rows:  # kept by a collection that a crash cut short
                continue
            line = next((batching.line_at(handle, places[index])
                         for handle, places in found if index in places), None)
            take_row(run, plan, saved, index, batch_row(run, index, line, batch), started,
                     save=(index + 1 - part["start"]) % BATCH_SAVE_ROWS == 0)
    part["collected"] = True
    run.summary = run.tally.summary(brief=True)
    run.checkpoint()


def batch_line(run, index):
    repeat, case, model = run.entries[index]
    return batching.input_line(index, agent_request(case, model, run.instructions, run.suite,
                                                    run.head["config"].get("tool_choice")))


def api_failure(exc, secrets):
    """One redacted line for an error of the files or batches endpoints."""
    status = getattr(exc, "status_code", None)
    text = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    return redact(f"{'HTTP ' + str(status) + ': ' if status else ''}{text}",
                  secrets)[:MESSAGE_LIMIT]


def listed_models(client, secrets):
    """The model names the API lists (GET /v1/models), or (None, why not)."""
    load_sdk()
    try:
        listed = client.models.list()
    except (APIError, httpx.HTTPError) as exc:
        return None, f"the API did not give its model list ({api_failure(exc, secrets)})"
    data = dump_response(listed).get("data") if hasattr(listed, "model_dump") or isinstance(
        listed, dict) else None
    names = [item.get("id") for item in data if isinstance(item, dict)] if isinstance(
        data, list) else []
    names = [name for name in names if isinstance(name, str) and name]
    if not names:
        return None, "the API's model list is empty or not a list of models"
    return names, None


def checked_models(run, client):
    """--check-models: why a model of the run is not one the API lists, or None
    (also when the list cannot be read: that is said in one line)."""
    if client is None or run.regrade:
        return None
    names, why_not = listed_models(client, run.secrets)
    if why_not:
        warn(f"--check-models: {why_not}; going on without checking the models")
        return None
    return model_problem(run.models, names)


def model_problem(models, names):
    """Why a model is not among the listed names (a dated snapshot counts as its
    model; chat: models are not listed there), or None."""
    for model in models:
        if model.startswith(CHAT_PREFIX) or any(same_model(model, name) for name in names):
            continue
        closest = difflib.get_close_matches(model, names, CLOSEST_MODELS, 0.3)
        return (f"--check-models: {model} is not in the API's model list; closest listed: "
                f"{', '.join(closest) or 'none'}; nothing was sent, fix --models")
    return None


def code_sha256():
    return record.file_sha256(os.path.abspath(__file__))


@functools.cache  # parsing the package's metadata costs milliseconds; it never changes
def sdk_version():
    import importlib.metadata  # 0.1 s of imports that only a record's head needs

    try:
        return importlib.metadata.version("perplexityai")
    except importlib.metadata.PackageNotFoundError:
        return None


def read_file(path, what, limit):
    """The bytes of a small regular file, or UserError with a one-line reason."""
    if os.path.isdir(path):  # a folder opens for reading, then fails to read
        raise UserError(f"{what} {path} is a folder; give a file")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO must not hang us
        with os.fdopen(fd, "rb") as handle:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
                raise UserError(f"{what} {path} must be a regular file of at most "
                                 f"{limit >> 10:,} KiB")
            return handle.read(limit + 1)
    except OSError as exc:
        raise UserError(f"cannot read {what} {path}: {exc.strerror or exc}") from None


def load_cases(path):
    """Cases from a .json or .toml file; UserError with the reason."""
    data = read_file(path, "--cases", record.MAX_RECORD_BYTES)
    try:
        if path.endswith(".toml"):
            parsed = tomllib.loads(data.decode("utf-8"))
        elif path.endswith(".json"):
            parsed = json.loads(data)
        else:
            raise UserError(f"{path}: name it .json or .toml")
    except (UnicodeDecodeError, tomllib.TOMLDecodeError, json.JSONDecodeError,
            RecursionError) as exc:
        raise UserError(f"{path}: cannot parse it ({exc})") from None
    return record.validate_cases(parsed, path)


def load_instructions(path):
    """The advisor's instructions from a UTF-8 text file, exactly as they will be sent."""
    data = read_file(path, "--instructions", MAX_INSTRUCTIONS_BYTES)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise UserError(f"--instructions {path} is not UTF-8 text") from None
    if not text.strip():
        raise UserError(f"--instructions {path} is empty")
    return text


def write_reports(run, rows, result):
    """The JUnit, Markdown and HTML views of the record; the names of those written."""
    ordered = [rows[index] for index in sorted(rows)]
    views = []
    if run.reports["junit"] is not None:
        views.append(("junit", reports.write_replacing, run.reports["junit"],
                      reports.junit_xml(rows, run.entries, run.models, result, run.dropped,
                                        run.cases_source())))
    if run.reports["summary_md"] is not None:
        views.append(("summary_md", reports.append, run.reports["summary_md"], reports.run_markdown(
            run.title(), result, ordered, run.cases, verdict_line(result))))
    if run.reports["html"] is not None:
        import evidence_page  # only a run that asks for the page pays for it

        # Made from the record just saved, read a row at a time: rows the page
        # shows whole are read whole, the rest as brief lines.
        held = {(row["model"], row["case_id"], row["repeat"]): row for row in ordered}
        try:
            saved = record.load(run.out, evidence_page.Shown(held))
        except UserError as exc:  # another process changed the record under us
            warn(f"regression.py: error: cannot read {run.out} back for the page ({exc}); "
                 "the record is saved: --regrade it with --html to make the page")
        else:
            page = evidence_page.run_page({**saved, "summary": result}, run.title())
            views.append(("html", reports.write_replacing, run.reports["html"], page))
    written = set()
    for name, write, path, text in views:
        try:
            write(path, text)
            written.add(name)
        except OSError as exc:
            warn(f"regression.py: error: cannot write the report {path}: "
                 f"{exc.strerror or exc}; the record {run.out} is saved; fix it, then "
                 f"write the reports again with: {command_hint('--resume', run.out)}")
    return written


# --------------------------------------------------------------------------
# Part 4: the command line.
# --------------------------------------------------------------------------


def fail(message):
    """One line on stderr and exit code 2."""
    warn(f"regression.py: error: {message}")
    return 2


def money(text):
    """argparse type for --max-cost: a positive, finite number of USD."""
    try:
        value = Decimal(text)
    except InvalidOperation:
        raise argparse.ArgumentTypeError(f"not a number of USD: {text!r}") from None
    if not value.is_finite():
        raise argparse.ArgumentTypeError(f"must be a finite number of USD, got {text}")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 USD, got {text}")
    if value.adjusted() > MAX_BUDGET_DIGITS:
        raise argparse.ArgumentTypeError(f"must be at most a trillion USD, got {text}")
    if value.adjusted() < -MAX_BUDGET_DIGITS:
        raise argparse.ArgumentTypeError(f"must be at least a trillionth of a USD, got {text}")
    return value


def number_in(text, accepts, wanted):
    """A number that accepts(value) takes, or argparse's one-line reason why not."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not accepts(value):  # NaN is accepted by no range
        raise argparse.ArgumentTypeError(f"must be {wanted}, got {text}")
    return value


def rate(text):
    """argparse type for --prove: a pass rate above 0 and below 1."""
    return number_in(text, lambda value: 0 < value < 1,
                     "a pass rate above 0 and below 1, e.g. 0.9")


def confidence(text):
    """argparse type for --confidence: a probability from 0.5 to 0.999."""
    return number_in(text, lambda value: 0.5 <= value <= 0.999, "from 0.5 to 0.999")


OPTIONS = [  # flag, argparse keywords; help says what it does and its default
    ("--models", dict(nargs="+", metavar="M",
                      help=f"models to test (default: {' '.join(MODELS)})")),
    ("--repeats", dict(type=int, metavar="N", help=f"times to run every case on every "
                       f"model, 1..{MAX_REPEATS} (default: 1)")),
    ("--out", dict(metavar="PATH", help="new file for the record; an existing file is "
                   "never overwritten (default: results.json)")),
    ("--suite", dict(metavar="FILE", help="a suite file (TOML) that declares a whole domain: "
                     "instructions, answer fields, approved sources, search budget and cases "
                     "(docs/suites.md; default: the built-in http-failures suite)")),
    ("--cases", dict(metavar="FILE", help="a .json or .toml file of cases (id, expected, "
                     "rfc, action, question) of the built-in domain to run instead of its "
                     "own")),
    ("--instructions", dict(metavar="FILE", help="the advisor's instructions from a text "
                            "file instead of the built-in ones; recorded as sent")),
    ("--jobs", dict(type=int, metavar="N", help=f"requests in flight at once, "
                    f"1..{MAX_JOBS}; the saved order is the same for any N (default: 1, "
                    "or the resumed run's)")),
    ("--retries", dict(type=int, metavar="N", help="extra attempts when the API "
                       f"answers 429 or 503, 0..{MAX_RETRIES}; nothing else is retried "
                       f"(default: {DEFAULT_RETRIES}, or the resumed run's)")),
    ("--confidence", dict(type=confidence, metavar="C", help="one-sided confidence of every "
                          "stated pass-rate bound, 0.5..0.999 (default: 0.95, or the resumed "
                          "run's)")),
    ("--prove", dict(type=rate, metavar="RATE", help="run each (model, case) one request at "
                     "a time as an acceptance plan: qualified once n - K passes prove a pass "
                     "rate of at least RATE at --confidence, not qualified at K + 1 failures "
                     "(K: --allow-failures). At 0.9 and 95 %%: K=0 needs 29 passes in a row, "
                     "K=1 45 of at most 46, K=2 59 of at most 61 (docs/results.md)")),
    # %% : argparse formats help
    ("--allow-failures", dict(type=int, metavar="K", help="with --prove, failures a pair may "
                              "have and still qualify: a good model qualifies more often, for "
                              "more requests (default: 0, stop at the first failure)")),
    ("--plan", dict(action="store_const", const=True, help="print what the run would send "
                    "(requests per pair and in all, the chance to qualify, costs with "
                    "--baseline) and send nothing; needs no key")),
    ("--baseline", dict(metavar="RECORD", help="with --plan, a saved record whose mean reported "
                        "cost per request prices the plan")),
    ("--force-search", dict(action="store_const", const=True, help="make every agent use "
                            "web_search (tool_choice {\"type\": \"web_search\"}); recorded in "
                            "config.tool_choice, so a forced run compares only with forced "
                            "runs (default: the model decides; an answer without a search "
                            "fails search_not_observed)")),
    ("--check-models", dict(action="store_const", const=True, help="before the first paid "
                            "request, read the API's model list once and stop (exit 2, "
                            "nothing sent) if a model is not in it (default: off)")),
    ("--foreground", dict(action="store_const", const=True, help="send each request plainly "
                          "and wait for its answer, instead of in background mode with its id "
                          "saved first: for an organization whose requests the API refuses in "
                          "background mode (an answer lost to an interruption is then paid "
                          "again)")),
    ("--batch", dict(action="store_const", const=True, help="send every row through the "
                     "Batch API, one batch per part of up to 50,000 rows (answers within 24 h, "
                     "outside the request rate limit), and wait for them; a stopped wait is "
                     "collected with --resume, which never submits again")),
    ("--max-cost", dict(type=money, metavar="USD", help="start no new request once the "
                        "run's reported cost reaches USD (the run is then incomplete: exit 2)")),
    ("--junit", dict(metavar="FILE", help="also write a JUnit XML report (replaces an "
                     "earlier report of ours there, never another file)")),
    ("--summary-md", dict(metavar="FILE", help="append a Markdown summary, e.g. to "
                          "$GITHUB_STEP_SUMMARY")),
    ("--html", dict(metavar="FILE", help="also write the evidence page: one self-contained "
                    "HTML file (replaces an earlier page of ours, never another file)")),
    ("--resume", dict(metavar="FILE", help="finish an interrupted or failed run in place: "
                      "keep its good rows, send only the missing and failed requests")),
    ("--regrade", dict(metavar="RECORD", help="re-check every saved response of RECORD with "
                       "this checker into a new --out record (default: regraded.json); "
                       "sends nothing, needs no key")),
    ("--demo", dict(metavar="NEW_DIR", help="run offline against a simulated API and write "
                    "NEW_DIR/results.json (no key needed, data is synthetic)")),
]
FROM_RECORD = ("--models", "--repeats", "--suite", "--cases", "--instructions", "--demo",
               "--force-search", "--prove", "--allow-failures", "--plan", "--baseline")


def parse_args(argv):
    parser = Parser(
        prog="regression.py",
        description="Check that approved advisor decisions still hold for each model.",
        epilog="Exit codes: 0 all passed, 1 a check failed, 2 no verdict, "
               "130/143 interrupted (the record is saved; --resume finishes it).",
    )
    for flag, options in OPTIONS:
        parser.add_argument(flag, **options)
    given = sys.argv[1:] if argv is None else argv
    if any(arg == "--max-repeats" or arg.startswith("--max-repeats=") for arg in given):
        parser.error("--max-repeats is gone: it never changed a proof, whose plan decides "
                     "when a pair stops; to let a pair fail K times and still qualify, give "
                     "--allow-failures K")
    args = parser.parse_args(argv)
    if args.models is not None and len(set(args.models)) != len(args.models):
        duplicates = sorted({m for m in args.models if args.models.count(m) > 1})
        parser.error(f"duplicate model in --models: {', '.join(duplicates)}")
    for model in args.models or ():
        if "," in model:
            parser.error(f"--models: {model!r} holds a comma; separate models with spaces: "
                         f"--models {' '.join(part for part in model.split(',') if part)}")
        if (not model.isprintable() or not 0 < len(model) <= record.MAX_NAME
                or model == CHAT_PREFIX or model.strip() != model):
            parser.error(f"--models: {model!r} is not a model name (printable, 1..."
                         f"{record.MAX_NAME} characters, e.g. openai/gpt-5.6-sol)")
    if args.suite is not None and args.cases is not None:
        parser.error("--suite declares its own cases; drop --cases (or put the cases "
                     "in the suite file)")
    if args.repeats is not None and not 1 <= args.repeats <= MAX_REPEATS:
        parser.error(f"--repeats must be 1..{MAX_REPEATS}, got {args.repeats}")
    if args.allow_failures is not None and args.allow_failures < 0:
        parser.error(f"--allow-failures must be 0 or more, got {args.allow_failures}")
    if args.prove is not None:
        if args.repeats is not None:
            parser.error("--prove repeats each case until its plan decides it; drop "
                         "--repeats")
        try:
            plans.plan_of(args.prove, args.allow_failures or 0, args.confidence or CONFIDENCE)
        except ValueError as exc:
            parser.error(f"--prove {args.prove}: {exc}")
    if args.allow_failures is not None and args.prove is None:
        parser.error("--allow-failures is a proof's plan; give --prove RATE too")
    if args.baseline is not None and not args.plan:
        parser.error("--baseline prices a plan; give --plan too (a comparison with a baseline "
                     "is compare_runs.py BASELINE RECORD)")
    if args.batch:
        chat = sorted(model for model in args.models or () if model.startswith(CHAT_PREFIX))
        for clash, why in ((chat and chat[0], "the Batch API runs Agent API requests only"),
                           (args.foreground and "--foreground", "a batch is never sent "
                            "plainly; drop --foreground"),
                           (args.prove and "--prove", "proof sends one repeat at a time; "
                            "drop --batch"),
                           (args.max_cost and "--max-cost", "a batch runs all its rows once "
                            "submitted, so no budget can stop it; drop --max-cost")):
            if clash:
                parser.error(f"--batch cannot be used with {clash}: {why}")
    if args.jobs is not None and not 1 <= args.jobs <= MAX_JOBS:
        parser.error(f"--jobs must be 1..{MAX_JOBS}, got {args.jobs}")
    if args.retries is not None and not 0 <= args.retries <= MAX_RETRIES:
        parser.error(f"--retries must be 0..{MAX_RETRIES}, got {args.retries}")
    given = {flag for flag, _ in OPTIONS
             if getattr(args, flag[2:].replace("-", "_")) is not None}
    for mode, refused, why in (
            ("--resume", {"--out", "--regrade", "--batch", *FROM_RECORD},
             "finishes the record in place with its own models, cases, instructions and repeats"),
            ("--regrade", {"--demo", "--batch", *FROM_RECORD},
             "re-checks the record's own models, cases, instructions and repeats"),
            ("--demo", {"--models", "--out"},
             "uses its own fictional models and writes NEW_DIR/results.json")):
        clash = sorted(given & refused)
        if mode in given and clash:
            parser.error(f"{mode} {why}; drop {' '.join(clash)}")
    if args.demo is not None and os.path.lexists(args.demo):
        parser.error(f"--demo folder {args.demo} already exists; name a new one")
    if args.plan and (args.demo or args.resume or args.regrade):
        parser.error("--plan prints a new run's plan; drop --demo, --resume and --regrade")
    if (args.demo is None and args.regrade is None and not args.plan
            and not os.environ.get("PERPLEXITY_API_KEY")):
        parser.error("PERPLEXITY_API_KEY is not set; export your API key, "
                     f"or try the offline demo: {command_hint('--demo', 'demo-run')}")
    return args


@dataclasses.dataclass
class Run:
    """What one invocation runs and records, and the rows it has so far."""

    models: list
    cases: list
    repeats: int
    instructions: str
    out: str
    head: dict  # the record's fields before its runs
    execution: dict  # settings that cannot change an answer
    reports: dict  # "junit", "summary_md", "html" -> path or None
    rows: dict  # plan index -> row: kept from a resumed record, then each finished one
    secrets: list
    replace: bool = False  # resume: the record at out is rewritten in place
    demo: str = None
    regrade: bool = False  # re-checks saved responses: sends nothing
    lock: tuple = None  # a resume's lock on the record, taken before reading it
    started: bool = False  # the record exists on disk
    output_error: str = None  # why standard output failed mid-run
    warned_cost: bool = False  # a row without a reported cost was mentioned once
    notes: list = dataclasses.field(default_factory=list)  # how far verdicts rest on receipts
    saved_execution: dict = None  # a regrade: the regraded record's own execution
    # plan index -> {"id", "model", "case_id", "repeat"}: a request sent, its row not
    # yet saved; "id" is the response's id once it came back, null before that.
    pending: dict = dataclasses.field(default_factory=dict)
    record: object = None  # the open RecordFile, while the run may save into it
    copied: object = None  # () -> (index, whole row) the new record starts with
    # --batch: {"parts": [{"start", "stop", "input_file_id", "batch_id", "status",
    # "collected", ...}]}, each step saved before the next (see batching.py).
    batch: dict = None
    cases_file: str = None  # the --cases or --suite file of a new run
    suite: dict = None  # what the run asks and how it judges: checker.BUILTIN_SUITE or a file's
    sent: int = 0  # requests this invocation sent (each attempt of a row counts)
    sent_errors: int = 0  # rows of this invocation that ended in an execution error

    def __post_init__(self):
        self.saving = threading.Lock()  # one save at a time: rows and receipts
        self.entries = run_order(self.models, self.cases, self.repeats)
        self.places = places(self.entries)
        self.prove = self.head["config"].get("prove")
        self.tally = Tally(self.models, self.repeats, self.cases,
                           (self.prove or {}).get("confidence", self.execution["confidence"]),
                           self.prove)
        for row in self.rows.values():
            self.tally.add(row)
        self.dropped = {index for row in self.rows.values() for index in self.stopped_pair(row)}
        self.summary = self.tally.summary(brief=True)  # changes only when a row is kept

    def todo(self):
        return [(index, entry) for index, entry in enumerate(self.entries)
                if index not in self.rows and index not in self.dropped]

    def direct(self):
        """What is still to do and sent request by request: all but a batch's rows."""
        return [(index, entry) for index, entry in self.todo() if not self.in_batch(index)]

    def blocked(self, index):
        """A proving pair's repeat waits until the pair's previous repeat is in."""
        repeat, case, model = self.entries[index]
        return repeat > 0 and self.places[(model, case["id"], repeat - 1)] not in self.rows

    def stopped_pair(self, row):
        """Once a proving pair's plan has decided it (qualified, or not): the
        places of its repeats never sent."""
        pair = self.tally.pairs.get((row["model"], row["case_id"])) if self.prove else None
        if pair is None or self.tally.state(pair) == "running":
            return []
        return [self.places[(row["model"], row["case_id"], repeat)]
                for repeat in range(pair["last"] + 1, self.repeats)]

    def tail(self, final=False):
        """The record's members after its rows: O(jobs) until the last save,
        which adds the per-case rates and bounds (final)."""
        receipts = {"pending": {str(index): entry for index, entry in sorted(
            self.pending.items())}} if self.pending else {}
        batch = {"batch": self.batch} if self.batch is not None else {}
        summary = self.tally.summary() if final else self.summary
        return {**receipts, **batch, "execution": self.execution, "summary": summary}

    def in_batch(self, index):
        """Whether a batch answers this row: nothing of it is sent directly."""
        if self.batch is None:
            return False
        if not self.batch["parts"]:  # planned from what is still to do, on its first run
            return True
        return any(part["start"] <= index < part["stop"] and not part["collected"]
                   for part in self.batch["parts"])

    def checkpoint(self):
        """Save the record's tail now (a batch step, before the next one)."""
        with self.saving:
            self.record.save(self.tail())

    def saved_id(self, index):
        """The response id an earlier process saved for this row, or None."""
        return self.pending.get(index, {}).get("id")

    def sending(self, index, entry):
        """Save that this row's request is about to leave (no id yet)."""
        repeat, case, model = entry
        self.keep(index, {"id": None, "model": model, "case_id": case["id"], "repeat": repeat})

    def received(self, index, response_id):
        """Save the id of this row's response the moment it arrives: its receipt.
        UserError for an id that cannot be one, or that holds the key: nothing
        of it is saved, so the row is sent again."""
        if not record.saved_id(response_id):
            raise UserError("the API gave a response id that is not an id (a '/', a "
                             f"control character or over {record.MAX_ID_CHARS} characters)")
        if redact(response_id, self.secrets) != response_id:
            raise UserError("the API gave a response id that holds the API key; it is not "
                             "kept, and the row will be sent again (it may be paid twice)")
        self.keep(index, {**self.pending.get(index, {}), "id": response_id})

    def keep(self, index, entry):
        with self.saving:
            if self.record is None:
                return  # the run has ended: the record is closed
            self.pending[index] = entry
            self.record.save(self.tail(), durable=False)  # the page cache suffices

    def title(self):
        return f"Regression run {self.out}" + (" (synthetic demo)" if self.demo else "")

    def cases_source(self):
        """The file that holds this run's cases, which each JUnit testcase names:
        the --cases file, regression.py for the built-in cases, else the record
        itself (a resume or a regrade: the record keeps them in config.cases)."""
        if self.cases_file is not None:
            return self.cases_file
        return "regression.py" if self.cases == CASES else self.out

def execution_of(args, previous=None):
    """Settings that cannot change an answer; a resume keeps the record's jobs,
    retries, budget and report paths unless new ones are given. UserError for
    a tampered budget."""
    previous = previous if isinstance(previous, dict) else {}
    given = {"max_cost": None if args.max_cost is None else str(args.max_cost),
             **{name: getattr(args, name) for name in REPORTS}}
    execution = {}
    for name, default, low, high in (("jobs", 1, 1, MAX_JOBS),
                                     ("retries", DEFAULT_RETRIES, 0, MAX_RETRIES)):
        kept = previous.get(name)
        execution[name] = (getattr(args, name) if getattr(args, name) is not None else
                           kept if type(kept) is int and low <= kept <= high else default)
    execution["foreground"] = args.foreground or previous.get("foreground") is True
    execution["batch"] = args.batch or previous.get("batch") is True
    kept = previous.get("confidence")
    execution["confidence"] = args.confidence or (
        kept if type(kept) is float and 0.5 <= kept <= 0.999 else CONFIDENCE)
    for name, value in given.items():
        # A Markdown summary is appended to, so a path read from a file is never
        # reused (and $GITHUB_STEP_SUMMARY is another file in every step).
        kept = previous.get(name) if name != "summary_md" else None
        execution[name] = value if value is not None else (
            kept if isinstance(kept, str) else None)
    if execution["max_cost"] is not None:
        try:
            money(execution["max_cost"])
        except argparse.ArgumentTypeError:
            raise UserError("its execution.max_cost is not a budget; give --max-cost USD")
    return execution


def check_outputs(out, paths):
    """UserError unless every report path can be written without harm, before any request."""
    kinds = {"junit": "junit", "summary_md": "markdown", "html": "html"}
    flags = {"junit": "--junit", "summary_md": "--summary-md", "html": "--html"}
    seen = {os.path.realpath(out): "the record itself"}
    for name, path in paths.items():
        if path is None:
            continue
        if os.path.realpath(path) in seen:
            raise UserError(f"{flags[name]} {path} is {seen[os.path.realpath(path)]}; "
                             "name another file")
        problem = reports.output_problem(path, kinds[name])
        if problem:
            raise UserError(f"{flags[name]} {path}: {problem}")
        seen[os.path.realpath(path)] = f"also the file of {flags[name]}"


def chosen_suite(args):
    """The suite a new run asks: --suite's, the built-in one with --cases, or
    the built-in one; UserError naming the file at fault."""
    if args.suite is not None:
        return suites.read_suite(args.suite)
    if args.cases is not None:
        return suites.with_cases(checker.BUILTIN_SUITE, load_cases(args.cases))
    return checker.BUILTIN_SUITE


def baseline_costs(path):
    """{model: mean reported USD per request} of a saved record, for --plan."""
    saved = record.load(path)
    costs = {}
    for (model, _, _), row in saved.rows.items():
        if row["cost_usd"] is not None:
            costs.setdefault(model, []).append(Decimal(row["cost_usd"]))
    if not costs:
        raise UserError(f"--baseline {path} has no reported cost to price the plan with")
    every = [cost for model_costs in costs.values() for cost in model_costs]
    mean = sum(every) / len(every)
    return collections.defaultdict(lambda: mean, {model: sum(found) / len(found)
                                                  for model, found in costs.items()})


def print_plan(args):
    """--plan: what the run would send, and what its verdicts could prove."""
    suite = chosen_suite(args)
    models = args.models or suite.get("models") or MODELS
    costs = baseline_costs(args.baseline) if args.baseline else None
    for line in plans.plan_lines(models, [case["id"] for case in suite["cases"]], args.prove,
                                 args.allow_failures or 0, args.repeats or 1,
                                 args.confidence or CONFIDENCE, costs):
        print(line)
    print("Nothing was sent.")
    return 0


def new_run(args, secrets):
    """A fresh run (or the demo): suite, models, cases and instructions from the flags."""
    suite = chosen_suite(args)
    cases = suites.record_cases(suite)
    instructions = (suite.get("instructions") if args.instructions is None
                    else load_instructions(args.instructions))
    if instructions is None:
        raise UserError(f"{args.suite} has no instructions; add instructions = \"\"\"...\"\"\" "
                         "to it, or give --instructions FILE")
    models, out = args.models or suite.get("models") or MODELS, args.out or "results.json"
    if args.demo is not None:
        models, out = DEMO_MODELS, os.path.join(args.demo, "results.json")
    elif os.path.lexists(out):
        raise UserError(f"{out} already exists; choose a new --out path "
                         "(nothing was sent, the file is untouched)")
    elif not os.path.isdir(os.path.dirname(os.path.abspath(out))):
        raise UserError(f"the folder of --out {out} does not exist; create it or "
                         "choose another path")
    repeats, prove = args.repeats or 1, None
    if args.prove is not None:
        level, allowed = args.confidence or CONFIDENCE, args.allow_failures or 0
        repeats = plans.plan_size(args.prove, level, allowed)
        prove = {"rate": args.prove, "confidence": level, "repeats": repeats,
                 "allow_failures": allowed}
    head = {"created_at": datetime.now(timezone.utc).isoformat(),
            "config": run_config(models, cases, repeats, instructions, prove, suite,
                                 FORCED_SEARCH if args.force_search else None),
            "sdk_version": sdk_version(), "code_sha256": code_sha256(),
            "checker_sha256": record.checker_sha256(),
            # Outside config: the suite as read, and the hash of what judges.
            "suite": suite, "suite_sha256": suites.suite_sha256(suite)}
    if args.demo is not None:
        head["evidence"] = "synthetic"
    return Run(models, cases, repeats, instructions, out, head, execution_of(args),
               {name: getattr(args, name) for name in REPORTS}, {}, secrets,
               demo=args.demo, batch={"parts": []} if args.batch else None,
               cases_file=args.suite or args.cases, suite=suite)


def read_saved(path):
    """(record, its rows by key, its cases, its instructions, its suite) from a
    saved record, read a row at a time: the rows are judged again and kept light
    (record.light); record.full_rows reads them whole again when they are copied."""
    saved = record.load(path)
    rows = saved.check(complete=False, errors=True)
    suite = record.suite_of(saved)
    instructions = saved["config"].get("instructions")
    if not isinstance(instructions, str):
        raise UserError("config.instructions is not text")
    return saved, rows, saved["config"]["cases"], instructions, suite


def resume_run(args, path, secrets):
    """The run of a saved record, to finish in place with its own config."""
    saved, rows, cases, instructions, suite = read_saved(path)
    models, repeats = saved["config"]["models"], saved["config"]["repeats"]
    problem = resume_problem(saved, run_config(models, cases, repeats, instructions,
                                               saved["config"].get("prove"), suite,
                                               FORCED_SEARCH if "tool_choice" in saved["config"]
                                               else None),
                             code_sha256(), sdk_version())
    if problem:
        raise UserError(problem)
    # Every kept verdict was derived again from its response when it was read;
    # rows with an execution error are sent again.
    where = places(run_order(models, cases, repeats))
    kept = {where[key]: row for key, row in rows.items() if not row["error"]}
    wanted = {key for key, row in rows.items() if not row["error"]}
    pending = record.validate_pending(saved, run_order(models, cases, repeats), kept)
    batch = record.validate_batch(saved, len(where))
    previous = saved.get("execution")
    execution = execution_of(args, previous)
    times = previous.get("resumed", 0) if isinstance(previous, dict) else 0
    execution["resumed"] = (times if type(times) is int else 0) + 1
    head = {k: v for k, v in saved.items()
            if k not in ("runs", "pending", "batch", "execution", "summary")}
    # Every kept row was judged again by this checker: the record says so from now on.
    head["checker_sha256"] = record.checker_sha256()
    head.update(suite=suite, suite_sha256=suites.suite_sha256(suite))
    run = Run(models, cases, repeats, instructions, path, head, execution,
              {name: execution[name] for name in REPORTS}, kept, secrets, replace=True,
              pending=pending, batch=batch, suite=suite)
    if batch is not None and args.max_cost is not None and any(
            part["batch_id"] is None for part in batch["parts"] or [{"batch_id": None}]):
        raise UserError("parts of its batch are not submitted yet, and a batch runs all its "
                         "rows once submitted, so no budget can stop it; drop --max-cost")
    run.copied = functools.partial(copied_rows, path, where, wanted, saved.whole)
    run.notes = record.evidence_notes(saved, rows, path)
    return run


def regrade_run(args, path, secrets):
    """A new record of a saved one's responses, each checked again by this checker."""
    saved, rows, cases, instructions, suite = read_saved(path)
    models, repeats = saved["config"]["models"], saved["config"]["repeats"]
    where = places(run_order(models, cases, repeats))
    head = {"created_at": datetime.now(timezone.utc).isoformat(), "config": saved["config"],
            "suite": suite, "suite_sha256": suites.suite_sha256(suite),
            # The responses came through the saved run's SDK; the verdicts from this code.
            "sdk_version": saved.get("sdk_version"), "code_sha256": code_sha256(),
            "checker_sha256": record.checker_sha256(),
            "regraded_from": {"path": path, "code_sha256": saved.get("code_sha256"),
                              "checker_sha256": saved.get("checker_sha256"),
                              "created_at": saved.get("created_at")}}
    if "evidence" in saved:
        head["evidence"] = saved["evidence"]
    run = Run(models, cases, repeats, instructions, args.out or "regraded.json", head,
              execution_of(args), {name: getattr(args, name) for name in REPORTS},
              {where[key]: row for key, row in rows.items()}, secrets, regrade=True, suite=suite)
    run.copied = functools.partial(copied_rows, path, where, set(rows), saved.whole)
    run.notes = record.evidence_notes(saved, rows, path)
    run.saved_execution = saved.get("execution")
    return run


def copied_rows(path, where, wanted, whole):
    """(plan index, whole row) of the saved rows a new record copies, read again."""
    return ((where[key], row) for key, row in record.full_rows(path, wanted, whole))


def prepare(args):
    """The Run of this invocation; UserError with a readable reason.

    Reads the --cases, --instructions, --resume and --regrade files and checks
    every output path: it sends nothing and creates nothing.
    """
    secrets = [os.environ.get("PERPLEXITY_API_KEY", "")] if args.demo is None else []
    if args.resume is None and args.regrade is None:
        run = new_run(args, secrets)
    else:
        verb, source = ("resume", args.resume) if args.resume else ("regrade", args.regrade)
        lock = None
        try:
            if args.resume:  # before the read: no other writer may change it after
                lock = record.take_lock(source)
            run = (resume_run if args.resume else regrade_run)(args, source, secrets)
        except (UserError, record.RecordBusy) as exc:
            if lock is not None:
                record.release_lock(lock)
            raise UserError(f"cannot {verb} {source}: {exc}") from None
        run.lock = lock
        if args.regrade is not None and os.path.lexists(run.out):
            raise UserError(f"{run.out} already exists; choose a new --out path "
                             "(nothing was written)")
    try:
        check_outputs(run.out, run.reports)
    except UserError:
        if run.lock is not None:
            record.release_lock(run.lock)
        raise
    return run


@contextlib.contextmanager
def api_client(run):
    """The SDK client of this run; for the demo, over a simulated API on loopback.

    UserError when the client cannot be set up (a malformed PERPLEXITY_BASE_URL).
    """
    if run.regrade:
        yield None  # a regrade sends nothing: no client, no key
        return
    load_sdk()
    server = None
    if run.demo is not None:
        import simulated_api  # only the demo needs the offline server

        server = simulated_api.start(run.suite)
    try:
        try:
            if server is None:
                client = Perplexity(max_retries=0, timeout=TIMEOUT_SECONDS)
            else:  # trust_env=False: a proxy from the environment must never see loopback
                client = Perplexity(api_key=DEMO_KEY, base_url=server.url, max_retries=0,
                                    timeout=TIMEOUT_SECONDS,
                                    http_client=httpx.Client(trust_env=False))
        except httpx.InvalidURL as exc:
            raise UserError(f"cannot set up the API client: {exc}; nothing was sent, "
                             "fix PERPLEXITY_BASE_URL and run again") from None
        yield client
    finally:
        if server is not None:
            server.stop()


@contextlib.contextmanager
def saved_record(run):
    """The record on disk for the length of the run, saved once more on the way out."""
    if run.demo is not None:
        os.makedirs(run.demo)
    try:
        saved = record.RecordFile.create(run.out, run.head, run.tail(),
                                         rows=run.copied() if run.copied else (),
                                         replace=run.replace, lock=run.lock,
                                         skipped=sorted(run.dropped))
    except BaseException:
        if run.demo is not None:
            shutil.rmtree(run.demo, ignore_errors=True)  # ours alone: a failed demo leaves nothing
        raise
    run.started, run.record = True, saved
    try:
        yield saved
    finally:
        with run.saving:
            run.record = None  # a receipt that arrives later cannot be saved any more
            try:
                saved.save(run.tail(final=True), final=True)
            finally:
                saved.close()


def take_row(run, plan, saved, index, row, started, save=True):
    """Keep one finished row: save it (save=False: with a later row), print its
    line, decide whether to go on."""
    if row["cost_usd"] is None and not row["error"] and not run.warned_cost:
        run.warned_cost = True
        warn("warning: a row has no reported cost; --max-cost and the running "
             "total count only reported costs")
    with run.saving:  # worker threads save receipts into the same record
        # The row itself is the evidence now; but a receipt of an answer that never
        # came (a deadline, a broken stream) stays, so a resume fetches it.
        if not row["error"] or run.pending.get(index, {}).get("id") is None:
            run.pending.pop(index, None)
        run.tally.add(row)
        saved.add(index, row)
        # Once saved, a row's response is read again only from the record (the
        # evidence page): a run holds its verdicts, not its answers.
        run.rows[index] = record.light(row)
        for place in run.stopped_pair(row):  # a proving pair failed: nothing more for it
            run.dropped.add(place)
            plan.drop(place)
            saved.skip(place)
        if save:
            run.summary = run.tally.summary(brief=True)
            saved.save(run.tail())
    total, known = run.tally.spent()
    say(run, plan, f"[{saved.saved}/{len(run.entries)}] {row_line(row)} | "
                   f"{time.monotonic() - started:.1f}s elapsed, "
                   f"{'' if known else 'at least '}${total} so far")
    if "batch" in row:  # it ran already, paid for: its size, error or cost stops nothing
        return
    run.sent += row.get("attempts") or 1
    run.sent_errors += bool(row["error"])
    if saved.size > record.FULL_RECORD_BYTES and plan.stop("size"):
        warn(f"Stopped: {run.out} passed {record.FULL_RECORD_BYTES >> 20} MiB, about the "
             "most a reader takes in one piece; no new request starts. Run the rest as a "
             "new run with fewer repeats or models.")
    if row["error"] and plan.stop("error"):
        warn(f"Stopped after an execution error; the record is in {run.out}. "
             f"{next_step(row, run.out)}")
    within_budget(run, plan)


def say(run, plan, line):
    """Print a row's line. If standard output is gone (a closed pipe, a full disk)
    start nothing new, but keep saving the answers in flight: they are paid for."""
    try:
        print(line, flush=True)
    except OSError as exc:
        silence(sys.stdout)
        run.output_error = exc.strerror or str(exc)
        plan.stop("output")


def silence(stream):
    """Point a standard stream at /dev/null, so no later write or flush fails."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, stream.fileno())
        os.close(null)


def within_budget(run, plan):
    """False, and a stop said once, when the reported cost reached --max-cost."""
    total, _ = run.tally.spent()
    limit = run.execution["max_cost"]
    if limit is None or total < Decimal(limit):
        return True
    if plan.stop("budget"):
        run.execution["stopped_for_budget"] = True
        warn(f"Stopped: the reported cost ${total} reached --max-cost ${limit}; no new "
             f"request starts; {plan.in_flight} in flight finish and are saved.")
    return False


def resume_command(out, execution, rows, planned):
    """The command that finishes a record; after a budget stop it raises the
    budget enough to finish it (record.raised_budget), so it sends again."""
    costs = [Decimal(row["cost_usd"]) for row in rows if row["cost_usd"] is not None]
    budget = record.raised_budget(execution, costs, planned - len(rows))
    return command_hint("--resume", out, *(["--max-cost", budget] if budget else []))


def finish(run, interrupted):
    """The last lines: pass rates, the summary, the verdict, and where the record is.

    True when every report asked for was written.
    """
    result = run.tally.summary()
    written = write_reports(run, run.rows, result)
    wanted = {name for name in REPORTS if run.reports[name] is not None}
    if interrupted and not result["complete"]:
        hint = ("run the demo again" if run.demo else
                f"finish it with: {command_hint('--resume', run.out)}")
        warn(f"Interrupted: {len(run.rows)} of {len(run.entries)} rows are saved in "
             f"{run.out}; {hint}")
        return written == wanted
    if interrupted:  # the last row came in before the signal took effect
        warn(f"Interrupted, but every row is saved: {run.out} is complete.")
    if run.execution.get("stopped_for_budget"):  # said now: in-flight rows are counted
        warn(f"To go on with a larger budget: "
             f"{resume_command(run.out, run.execution, run.rows.values(), len(run.entries))}")
    if run.repeats > 1:
        print("\n".join(pass_rate_lines(result)))
    print(json.dumps(result))  # one line, so the verdict below stays in view
    if run.prove and not run.regrade:
        most = run.repeats * len(run.models) * len(run.cases)
        print(f"Sent {run.sent} request{'s' if run.sent != 1 else ''} in this run"
              + (f" ({run.sent_errors} ended in an execution error and {'is' if run.sent_errors == 1 else 'are'} sent again "
                 "on top of the plan)" if run.sent_errors else "")
              + f"; {sum(1 for row in run.rows.values() if not row['error'])} verdict rows of "
              f"at most {most} the plan allows.")
    print(verdict_line(result))
    if run.regrade and not result["complete"]:
        source = run.head["regraded_from"]["path"]
        if run.head["regraded_from"]["code_sha256"] != code_sha256():
            print(f"{source} is not complete, and it was made by another regression.py, "
                  "which --resume refuses: start a new run to get the rest")
        else:
            print(f"{source} is not complete; regrade it again once it is finished with: "
                  f"{resume_command(source, run.saved_execution, run.rows.values(), len(run.entries))}")
    print(f"Record: {run.out}")
    for name, label in (("junit", "JUnit report"), ("summary_md", "Markdown summary"),
                        ("html", "Evidence page")):
        if name in written:
            print(f"{label}: {run.reports[name]}")
    return written == wanted


def main(argv=None):
    mend_standard_streams()
    args = parse_args(argv)
    try:
        if args.plan:
            return print_plan(args)
        run = prepare(args)
    except UserError as exc:
        return fail(str(exc))
    CRASH_FOLDER[:] = [os.path.dirname(os.path.abspath(run.out))]
    pause = Pause()
    try:
        with api_client(run) as client:
            problem = args.check_models and checked_models(run, client)
            if problem:
                return fail(problem)
            with saved_record(run) as saved:
                send = functools.partial(send_one, client, execution=run.execution,
                                         pause=pause, secrets=run.secrets,
                                         instructions=run.instructions, receipts=run,
                                         suite=run.suite,
                                         tool_choice=run.head["config"].get("tool_choice"))
                plan = Plan(run.direct(), run.execution["jobs"], send, pause,
                            run.blocked if run.prove else None)
                with Interrupts(plan) as stops:
                    run_plan(run, args, client, plan, saved)
                    stops.raise_if_interrupted()
    except KeyboardInterrupt:
        if run.started:  # saved on the way out; say how to finish it
            finish(run, interrupted=True)
        raise
    except (UserError, record.RecordBusy) as exc:
        return fail(redact(str(exc), run.secrets))
    except FileExistsError:
        return fail(f"{run.out} already exists; choose a new --out path "
                    "(nothing was sent, the file is untouched)")
    except BrokenPipeError:  # e.g. piped into `head` while the record is opened
        silence(sys.stdout)
        run.output_error = "the pipe was closed"
    except OSError as exc:
        if run.started:
            raise  # a save failed mid-run: the last complete checkpoint is kept
        return fail(f"cannot write {run.out}: {exc.strerror or exc}; nothing was sent, "
                    "choose a writable --out path")
    finally:
        if run.lock is not None and not run.started:
            record.release_lock(run.lock)  # refused before the record was opened
    if run.output_error is not None:
        return fail(f"standard output failed ({run.output_error}), so the run stopped; "
                    f"{len(run.rows)} of {len(run.entries)} rows are saved in {run.out}; "
                    f"finish it with: {command_hint('--resume', run.out)}")
    if not finish(run, interrupted=False):
        return 2
    return run.tally.summary()["exit_code"]


def run_plan(run, args, client, plan, saved):
    """Send what is still to send, keeping each row as it finishes."""
    start_lines(run, args)
    started = time.monotonic()
    if run.batch is not None and not run.regrade and any(map(run.in_batch, range(len(run.entries)))):
        run_batch(run, client, plan, saved, started)
        if plan.stopped:
            return
    if args.regrade is None and plan.todo and within_budget(run, plan):
        for index, row in plan.finished():
            take_row(run, plan, saved, index, row, started)


def start_lines(run, args):
    if run.demo:
        print("DEMO: a simulated API on 127.0.0.1 answers for two fictional "
              "models; every answer below is synthetic.")
    if not run.regrade:  # what will be sent, before the first request (a live one takes ~1 min)
        limit = run.execution["max_cost"]
        prove = run.prove or {}
        line = plans.headline(run.models, [case["id"] for case in run.cases], prove.get("rate"),
                              prove.get("allow_failures", 0), run.repeats,
                              prove.get("confidence", run.execution["confidence"]))
        jobs = run.execution["jobs"]
        line += (" One request of a pair at a time;" if run.prove else
                 f" {jobs} request{'s' if jobs != 1 else ''} at a time;")
        print(f"{line} {len(run.todo())} still to send; record: {run.out}"
              + (f"; --max-cost ${limit}." if limit else "."), flush=True)
    if run.regrade:
        print(f"Re-checked {len(run.rows)} saved rows of {args.regrade} with this checker; "
              "nothing is sent.")
        for note in run.notes:
            print(reports.visible(f"CAUTION: {note}"))
    elif run.replace:  # a resume, even of a record with no row kept
        for note in run.notes:
            print(reports.visible(f"CAUTION: {note}"))
        fetch = sum(1 for entry in run.pending.values() if entry["id"] is not None)
        unknown = len(run.pending) - fetch
        batched = sum(1 for index, _ in run.todo() if run.in_batch(index))
        print(f"Resuming {run.out}: {len(run.rows)} of {len(run.entries)} rows kept, "
              + (f"{batched} to collect from the Batch API (or to submit, where their part "
                 "was not), " if batched else "")
              + f"{fetch} to fetch by their saved ids (paid for, never sent again), "
              f"{len(run.entries) - len(run.rows) - fetch - batched} to send.")
        if unknown:
            print(f"{unknown} of those to send may have been paid for already: the run "
                  "stopped after sending them, before their id came back.")


def crash_exit(exc):
    """Exit 2, never 1, for a failure nobody planned for: the traceback, key
    redacted, goes into a 0600 file beside the record, and the last line names it."""
    secrets = [os.environ.get("PERPLEXITY_API_KEY", "")]
    where = crash_report("regression", CRASH_FOLDER[0] if CRASH_FOLDER else None,
                         redact(traceback.format_exc(), secrets))
    return fail(f"internal error: {type(exc).__name__}: {redact(str(exc), secrets)[:300]}; "
                "no verdict. The record, if one was started, is saved; "
                + (f"the traceback is in {where}: please report it" if where else
                   "please report this"))


if __name__ == "__main__":
    try:
        exit_code = main()
    except Terminated:  # main already saved the record and said how to resume
        exit_code = 128 + signal.SIGTERM
    except KeyboardInterrupt:
        exit_code = 128 + signal.SIGINT
    except BrokenPipeError:  # e.g. piped into `head`: the record is saved
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        exit_code = 2
    except OSError as exc:  # the disk filled up or vanished while saving
        exit_code = fail(f"cannot save the record: {exc.strerror or exc}; the last "
                         "complete checkpoint is kept, free space and use --resume")
    except Exception as exc:  # noqa: BLE001 - exit 1 must only ever mean "a check failed"
        exit_code = crash_exit(exc)
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:  # None: started with that descriptor closed
                stream.flush()
        except OSError:  # a last flush into a full or closed stream must not change the code
            silence(stream)
    raise SystemExit(exit_code)
