"""The wire: one row's request sent, streamed and fetched by its receipt.

A row's request goes out through RetryingClient (sending.py); its answer comes
back as a background stream whose first event carries the response id, saved
as the row's receipt before the answer is read. A stream that breaks is read on
by that id; a run that was stopped fetches it by that id (--resume), so no
answer is paid for twice. The caller judges the answer: send_one takes the
runner's run_one, which checks it with the runner's own check().

    row = send_one(client, index, entry, run_one=run_one, execution=..., ...)
    names, why_not = listed_models(client, secrets)   # --check-models

The SDK is imported on first use (sdk()), so what sends nothing never pays for it.
"""

import difflib
import functools
import json
import os
import shlex
import sys
import types

import checker
import record
import sending
from checker import CHAT_PREFIX, answer_text, answered_model, same_model
from sending import (MESSAGE_LIMIT, RetryingClient, clean, receive, redact, secret_patterns,
                     warn)

CLOSEST_MODELS = 3  # listed names offered when --check-models does not find a model
MAX_RESPONSE_CHARS = 16 << 20  # one saved response; a JSON answer with receipts is ~20 KB
RESPONSE_HEAD_CHARS = 4096  # of a response too large to keep, what the record keeps
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


@functools.cache
def sdk():
    """The SDK's names (httpx, APIError, Perplexity, Stream), imported the first
    time a request needs them (about a second). A missing package is one line
    and exit 2, with the commands that set it up."""
    try:
        import httpx
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
    return types.SimpleNamespace(httpx=httpx, APIError=perplexity.APIError,
                                 Perplexity=perplexity.Perplexity, Stream=perplexity.Stream)

# --------------------------------------------------------------------------
# Pure: what an answer's status, size and model list say.
# --------------------------------------------------------------------------


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


def still_running(response):
    """Whether a response's status says its agent run is still going."""
    status = response.get("status") if isinstance(response, dict) else None
    return isinstance(status, str) and status not in FINAL_STATUSES


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


def retired(row, sender, model):
    """Whether a chat request met the retired Sonar chat API (HTTP 403)."""
    return (model.startswith(CHAT_PREFIX) and row["error_status"] == 403
            and (sender.error_kind in SONAR_RETIRED_KINDS
                 or "Sonar is now the Agent API" in (sender.error_message or "")))


def model_problem(models, names):
    """Why a model is not among the listed names (a dated snapshot counts as its
    model; chat: models are not listed there), or None."""
    for model in models:
        if model.startswith(CHAT_PREFIX) or any(same_model(model, name) for name in names):
            continue
        closest = difflib.get_close_matches(model, names, CLOSEST_MODELS, 0.3)
        return (f"--check-models: {model} is not in the API's model list; closest listed: "
                f"{', '.join(closest) or 'none'}; nothing was sent, fix the name (in --models, "
                "or the suite's models)")
    return None


def api_failure(exc, secrets):
    """One redacted line for an error of the files or batches endpoints."""
    status = getattr(exc, "status_code", None)
    text = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    return redact(f"{'HTTP ' + str(status) + ': ' if status else ''}{text}",
                  secrets)[:MESSAGE_LIMIT]


def without_nulls(value):
    """JSON data without null members, as the SDK's dump of a response leaves it."""
    if isinstance(value, dict):
        return {key: without_nulls(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [without_nulls(item) for item in value]
    return value

# --------------------------------------------------------------------------
# I/O: one row sent, streamed, fetched by its receipt and made.
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


def finished(client, result, on_receipt=None):
    """The finished response of a create call: a background stream read to its
    answer (its id goes to on_receipt first), or the response itself, waited
    for by its id while it is still queued or in progress."""
    if isinstance(result, sdk().Stream):
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


def send_one(client, index, entry, *, run_one, deadline, execution, secrets, instructions,
             pause, receipts, suite=None, tool_choice=None):
    """The whole row of one planned request: sent (or fetched by the id an
    earlier process saved), checked by the caller's run_one, counted and
    redacted (settled); each attempt within deadline seconds.
    """
    repeat, case, model = entry
    saved_id = receipts.saved_id(index)
    background = not execution["foreground"] and not model.startswith(CHAT_PREFIX)
    on_receipt = functools.partial(receipts.received, index)
    sender = RetryingClient(client, execution["retries"], pause, secrets,
                            f"{model} {case['id']} repeat {repeat}", deadline,
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


def listed_models(client, secrets):
    """The model names the API lists (GET /v1/models), or (None, why not)."""
    try:
        listed = client.models.list()
    except (sdk().APIError, sdk().httpx.HTTPError) as exc:
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
