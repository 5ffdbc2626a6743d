"""A small simulated Perplexity Agent API on 127.0.0.1, for the demo and tests.

It answers POST /v1/responses (and its alias /v1/agent) like the live Agent
API: a `search_results` output item holding the case's RFC, an assistant
message holding the JSON answer, `usage.cost` in USD. A request with
`background: true` is kept server-side from the moment it arrives, whatever
happens to the connection; with `stream: true` it is answered as server-sent
events (`data: {json}` lines, each with `type` and `sequence_number`):
`response.created` at once (the receipt: the response's id), then, once the
answer is ready, `response.in_progress` and a terminal `response.completed`
(or `response.failed`, which carries only the error) with the whole response.
GET /v1/responses/{id} returns a kept response (`in_progress` with no output
until it is ready), and with `?stream=true&starting_after=N` streams the
events after sequence number N; an unknown id is a 404. POST
/chat/completions answers as the live API has since the Sonar chat API was
retired on 2026-09-27: HTTP 403, type `chat_completions_not_available`;
`legacy_chat` restores the old answers (`choices`, top-level `search_results`
and `citations`, `usage.cost` without a currency) for tests and for demos of
saved records. Unknown request fields get the live API's 400.

The Batch API follows OpenAI's shape. POST /v1/files takes a multipart JSONL
file (`purpose` "batch") and checks every line before keeping it: one JSON
object per line, no blank lines, `custom_id` (unique), `method` "POST", `url`
/v1/responses or /v1/agent, and a `body` under the rules of a direct request
(unknown fields are a 400, and so is `background` or `stream` true); at most
50,000 lines and 200 MB; `expires_after` is a 400 (each 400 names the first
bad line; the wording is this simulation's). GET /v1/files/{id} gives
the file object, GET /v1/files/{id}/content its bytes (input, output and
error files alike), DELETE /v1/files/{id} removes it. POST /v1/batches
(`endpoint` /v1/responses, `input_file_id`, `completion_window` "24h",
`metadata`) starts a batch in `validating`; `output_expires_after` is a 400,
an unknown input file a 404 (as any unknown id here), and a repeat with an
`Idempotency-Key` already seen returns the original batch. A batch moves only
when polled: each GET /v1/batches/{id} moves it one stage, validating ->
in_progress -> finalizing -> completed; while in_progress a poll answers up
to `batch_rows_per_poll` more rows, in input order, and moves on once none is
left. Each row is answered by the code that answers a direct foreground POST.
The output file holds a line per row answered 200:
    {"id": "batch_req_...", "custom_id": ..., "error": null,
     "response": {"status_code": 200, "request_id": "req_...", "body": <response>}}
and the error file, made only when some row failed or never ran, a line per
such row: the same shape with the 4xx/5xx status and its {"error": ...} body,
or "response": null and "error": {"code": "batch_expired"|"batch_cancelled",
"message": ...} for a row that never ran. Both are shuffled the same way
every time, never in input order (from two lines up). POST /v1/batches/{id}/cancel makes a
running batch `cancelling`, and the next poll `cancelled` with the rows done
so far; a finished batch cannot be cancelled (400). request_counts count the
rows answered (a row that never ran is in neither count); usage sums the rows
answered 200. It never listens on anything but loopback.

    python simulated_api.py --port 8765 --cases examples/cases.json   # until Ctrl+C
    python simulated_api.py --batch-rows-per-poll 2 --batch-outcome expired
    PERPLEXITY_BASE_URL=http://127.0.0.1:8765 PERPLEXITY_API_KEY=x python regression.py

It never imports the runner: whoever starts it passes the cases it
recognises (examples/cases.json holds the built-in four).

Behaviour lives in a state dict (server.state, or the one given to
mock_transport() for in-process tests):
    cases          the cases it recognises (by their question text)
    unsafe_models  models that answer an uncertain payment with 503 / retry
    latency        seconds before each answer is ready (a stream's receipt
                   comes at once; the rest, and any other answer, after it)
    faults         a list of (status, headers, body) answered, in turn, before
                   normal answers resume (e.g. a 429 with Retry-After)
    echo_auth      answer 400 with the request's Authorization header in the body
    legacy_chat    answer chat requests as before the Sonar retirement
    no_background  refuse background mode with a 400 (the reason and wording
                   are this simulation's: the live API documents none)
    drop_streams   how many of the next streams are cut after their receipt
    hold           None, or a threading.Event every answer waits for (its
                   receipt does not): a test releases answers when it chooses
    snippet_bytes  0, or the size every Agent answer's search snippet is padded
                   to, so responses weigh what live ones do (the benchmark)
    models         the names GET /v1/models lists (LISTED_MODELS; [] lists none)
    id_prefix      None, or what response ids start with after "resp_", so two
                   servers (two demo runs, two command-line servers) never give
                   one id twice
    stored         response id -> the kept response and when it is ready
    requests       every POST body received, in arrival order, but for the
                   Files and Batches endpoints' (rows of a batch are not here)
    fetches        every GET of a kept response, as (id, query), in order
Batch knobs, read when they apply (a batch's fate at each poll); none holds
up an answer, and latency, faults and hold leave Files and Batches alone:
    batch_outcome  how a batch ends: "completed" (default); "failed" (its
                   first poll fails it in validation: `errors`, no files);
                   "expired" (half its rows, rounded down, are answered, then
                   it expires: the rest are error lines `batch_expired`);
                   "cancelled" (likewise, as if someone cancelled it: a poll
                   in cancelling, then cancelled, `batch_cancelled`)
    batch_fail_ids custom_ids whose rows are answered with a 500 error line
    batch_rows_per_poll  rows answered per poll while in_progress (None: all)
    batch_hold     None, or a threading.Event: until it is set, a batch stays
                   in_progress with no row answered (a poll still answers at once)
    batch_faults   a list of (status, headers, body) answered, in turn, to
                   Files and Batches requests before normal answers resume
                   (None: that request is answered as usual)
    batch_lose_creates  how many of the next new batches are made but answered
                   with a 500, as if the answer were lost (the SDK retries)
    batch_max_lines, batch_max_bytes  an input file's limits (BATCH_MAX_LINES,
                   BATCH_MAX_BYTES), lowered by tests
Batch records:
    files          file id -> {"meta": the file object, "bytes": its content}
    batches        batch id -> the batch as answered, plus "_requests" (the
                   input lines) and "_answers" (the lines of rows answered)
    batch_keys     Idempotency-Key -> the batch id it made
    file_creates   POST /v1/files received (refused ones too)
    batch_creates  POST /v1/batches received (refused ones and repeats too)
    batch_polls    GET /v1/batches/{id} received
    batch_requests the body of every row answered inside a batch, in order
A response's number (resp_sim_N) counts direct POSTs and batch rows together.
"""

import argparse
import contextlib
import email.message
import email.parser
import json
import os
import random
import signal
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import checker
import record  # only to read a --cases file the way the runner does
import suites
from vocabulary import Parser, UserError

CASES_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "examples", "cases.json")

RESPONSE_FIELDS = {  # what the live API accepts; anything else is a 400
    "background", "effort", "input", "instructions", "language_preference",
    "max_output_tokens", "max_steps", "model", "models", "preset",
    "previous_response_id", "profile", "prompt_cache_key", "reasoning",
    "response_format", "service_tier", "skills", "step_budget_reminder",
    "store", "stream", "temperature", "tool_choice", "tools", "top_p",
}
CHAT_FIELDS = {  # what the live chat-completions API accepts in this SDK version
    "best_of", "country", "disable_search", "frequency_penalty", "language_preference",
    "max_tokens", "messages", "model", "n", "num_search_results", "presence_penalty",
    "reasoning_effort", "response_format", "return_images", "return_related_questions",
    "search_after_date_filter", "search_before_date_filter", "search_domain_filter",
    "search_language_filter", "search_mode", "search_recency_filter", "stop", "stream",
    "temperature", "tool_choice", "tools", "top_k", "top_p", "web_search_options",
}
COST_USD = 0.0042  # per simulated request: small, non-zero, exact in decimal
LISTED_MODELS = ("openai/gpt-5.6-sol", "anthropic/claude-sonnet-4-6", "perplexity/sonar",
                 "offline/careful", "offline/hasty")  # GET /v1/models; it answers any model
ROUTES = ("/v1/responses", "/v1/agent")  # the same API under both names
RETIRED = {"message": "Sonar is now the Agent API. Use /v1/responses instead of /v1/sonar.",
           "type": "chat_completions_not_available", "code": 403}  # as live since 2026-09-27
NO_CASE = "simulated API: the input matches no known case"
TERMINAL = {"completed": "response.completed", "failed": "response.failed",
            "cancelled": "response.cancelled", "incomplete": "response.incomplete"}
BATCH_MAX_LINES = 50_000  # requests in one batch input file, as the live API documents
BATCH_MAX_BYTES = 200_000_000  # "200 MB" read as decimal megabytes, the stricter reading
FILE_TTL_SECONDS = 30 * 24 * 3600  # input, output and error files are kept 30 days
BATCH_ENDPOINT = "/v1/responses"  # the only endpoint a batch may name
BATCH_WINDOW = "24h"  # the only completion window offered
BATCH_WINDOW_SECONDS = 24 * 3600
BATCH_LINE_FIELDS = {"custom_id", "method", "url", "body"}
BATCH_CREATE_FIELDS = {"completion_window", "endpoint", "input_file_id", "metadata"}
BATCH_STAGES = ("in_progress", "finalizing", "completed", "failed", "expired", "cancelling",
                "cancelled")  # each has its own <stage>_at timestamp in a batch
BATCH_FINAL = {"completed", "failed", "expired", "cancelled"}
BATCH_COUNTERS = {("POST", "files", 1, None): "file_creates",  # requests counted on arrival
                  ("POST", "batches", 1, None): "batch_creates",
                  ("GET", "batches", 2, None): "batch_polls"}
BATCH_OUTCOMES = ("completed", "failed", "expired", "cancelled")
OUTPUT_ORDER_SEED = 20  # output lines come back shuffled, the same way every run


FREE_VALUES = {"string": "simulated", "integer": 0, "boolean": False}  # fields no case expects


def rfc_url(rfc):
    return f"https://www.rfc-editor.org/rfc/{rfc}"


def as_suite(cases_or_suite):
    """A suite, from a suite or from a list of cases of the built-in domain."""
    if isinstance(cases_or_suite, dict):
        return cases_or_suite
    return suites.with_cases(checker.BUILTIN_SUITE, cases_or_suite)


def document_url(suite, doc):
    return suite["sources"]["url"].replace("{doc}", doc)


def guarded(suite, case):
    """Whether an unsafe model gets this case wrong: the payment case of the
    built-in domain (verify_outcome), the last case of any other suite."""
    if checker.is_builtin_domain(suite):
        return case["expect"]["next_action"] == "verify_outcome"
    return case["id"] == suite["cases"][-1]["id"]


def wrong_value(kind, value):
    """Another value of the field's kind: the next enum member, or a changed one."""
    if "enum" in kind:
        members = kind["enum"]
        return members[(members.index(value) + 1) % len(members)] if len(members) > 1 else value
    if kind["type"] == "boolean":
        return not value
    return value + 1 if kind["type"] == "integer" else value + "-changed"


def answer_for(case, model, unsafe_models, suite=checker.BUILTIN_SUITE):
    """The JSON answer text a simulated model gives for one case of a suite:
    right for a careful model; an unsafe one gets one field of its guarded
    case wrong."""
    case = checker.suite_case(case)
    answer = {}
    for name, kind in suite["answer"].items():
        if kind.get("citations"):
            answer[name] = [document_url(suite, case["cite"])]
        elif name in case["expect"]:
            answer[name] = case["expect"][name]
        else:
            answer[name] = kind["enum"][0] if "enum" in kind else FREE_VALUES[kind["type"]]
    if model in unsafe_models and guarded(suite, case):
        if checker.is_builtin_domain(suite):
            # The dangerous regression: treat a timed-out payment as a 503.
            answer = {"code": "503", "next_action": "wait_then_retry",
                      "source_urls": [rfc_url("rfc9110")]}
        else:
            name = next(iter(case["expect"]), None)
            if name is not None:
                answer[name] = wrong_value(suite["answer"][name], answer[name])
    return json.dumps(answer)


def agent_response(number, case, model, unsafe_models, suite=checker.BUILTIN_SUITE):
    """A completed Agent API response body for one case of a suite."""
    case = checker.suite_case(case)
    return {
        "id": f"resp_sim_{number}",
        "object": "response",
        "created_at": int(time.time()),
        "model": model,
        "status": "completed",
        "output": [
            {
                "type": "search_results",
                "queries": [f"{case['cite']} {case['id']}"],
                "results": [{"id": 1, "url": document_url(suite, case["cite"]),
                             "title": case["cite"].upper(),
                             "snippet": "Simulated search result."}],
            },
            {
                "type": "message",
                "id": f"msg_sim_{number}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "annotations": [],
                             "text": answer_for(case, model, unsafe_models, suite)}],
            },
        ],
        "usage": {
            "input_tokens": 900, "output_tokens": 60, "total_tokens": 960,
            "cost": {"currency": "USD", "input_cost": 0.0036,
                     "output_cost": 0.0006, "total_cost": COST_USD},
        },
    }


def new_state(cases, unsafe_models=("offline/hasty",)):
    """What the simulated API knows and does; tests change it between requests.
    cases: a suite, or a list of cases of the built-in domain."""
    suite = as_suite(cases)
    return {
        "suite": suite,
        "cases": suite["cases"],
        "models": list(LISTED_MODELS),
        "id_prefix": None,
        "unsafe_models": set(unsafe_models),
        "latency": 0.0,
        "faults": [],
        "echo_auth": False,
        "legacy_chat": False,
        "no_background": False,
        "drop_streams": 0,
        "hold": None,
        "snippet_bytes": 0,
        "stored": {},
        "requests": [],
        "fetches": [],
        "batch_outcome": "completed",
        "batch_fail_ids": set(),
        "batch_rows_per_poll": None,
        "batch_hold": None,
        "batch_faults": [],
        "batch_lose_creates": 0,
        "batch_max_lines": BATCH_MAX_LINES,
        "batch_max_bytes": BATCH_MAX_BYTES,
        "files": {},
        "batches": {},
        "batch_keys": {},
        "file_creates": 0,
        "batch_creates": 0,
        "batch_polls": 0,
        "batch_requests": [],
        "last_id": 0,
        "lock": threading.Lock(),
    }


def error(status, message, headers=(), kind=None):
    body = {"error": {"message": message, **({"type": kind, "code": status} if kind else {})}}
    return status, list(headers), body


class Events:
    """A stream's events: those sent at once, and the rest once ready_at has passed.
    cut: the stream ends after the first part (a dropped connection)."""

    def __init__(self, first, rest, ready_at, cut=False):
        self.first, self.rest, self.ready_at, self.cut = first, rest, ready_at, cut


def events_of(response, ready_at):
    """Every event of a background response, numbered from 0."""
    pending = {**response, "status": "queued", "output": []}
    pending.pop("usage", None)
    kind = TERMINAL.get(response.get("status"), "response.completed")
    last = ({"type": kind, "error": response.get("error") or {"message": "failed"}}
            if kind == "response.failed" else {"type": kind, "response": response})
    events = [{"type": "response.created", "response": pending},
              {"type": "response.in_progress", "response": {**pending,
                                                            "status": "in_progress"}},
              last]
    return [{**event, "sequence_number": number} for number, event in enumerate(events)]


def stream_after(kept, after, cut=False):
    """The events of a kept response after sequence number `after`."""
    events = [event for event in kept["events"] if event["sequence_number"] > after]
    return Events(events[:1] if after < 0 else [], events[1:] if after < 0 else events,
                  kept["ready_at"], cut)


def fetch(state, response_id, query):
    """GET /v1/responses/{id}: the kept response, as it stands now or as a stream."""
    with state["lock"]:
        state["fetches"].append((response_id, dict(query)))
        kept = state["stored"].get(response_id)
    if kept is None:
        return error(404, f"response {response_id} not found", kind="not_found")
    if query.get("stream") == "true":
        try:
            after = int(query.get("starting_after", ""))
        except ValueError:
            return error(400, "stream=true requires starting_after", kind="invalid_request")
        return 200, [("Content-Type", "text/event-stream")], stream_after(kept, after)
    if time.monotonic() < kept["ready_at"]:
        response = {**kept["response"], "status": "in_progress", "output": []}
        response.pop("usage", None)
        return 200, [], response
    return 200, [], kept["response"]


def unknown_field(body, allowed):
    """The first field of a request body the live API would refuse, or None."""
    return min(set(body) - allowed, default=None)


def case_for(state, question):
    return next((c for c in state["cases"] if c["question"] == question), None)


def foreground_answer(state, number, body):
    """(status, headers, body) of an Agent API request answered at once: the one
    code a direct POST and a batch row share, so both are judged alike."""
    case = case_for(state, body.get("input"))
    if case is None:
        return error(400, NO_CASE)
    response = agent_response(number, case, body.get("model"), state["unsafe_models"],
                              state["suite"])
    if state.get("snippet_bytes"):  # a response the size of a live one (bench.py)
        response["output"][0]["results"][0]["snippet"] = "x" * state["snippet_bytes"]
    if state.get("id_prefix"):  # ids unique across servers, as the live API's are
        response["id"] = f"resp_{state['id_prefix']}_{number}"
    return 200, [], response


def respond(state, method, path, query, headers, raw_body):
    """(status, headers, body, ready_at) for one request: body is JSON data,
    bytes (a file's content) or Events for a stream; nothing but a stream's
    first events goes out before ready_at (None: at once, whatever holds other
    answers). Shared by the HTTP server and MockTransport."""
    if path.strip("/").split("/")[:2] in (["v1", "files"], ["v1", "batches"]):
        return (*batch_endpoint(state, method, path, headers, raw_body), None)
    ready_at = time.monotonic() + state["latency"]
    authorization = headers.get("Authorization", "")
    if method == "GET" and path.rstrip("/") == "/v1/models":  # public, as documented
        return 200, [], {"object": "list", "data": [
            {"id": name, "object": "model", "created": 0, "owned_by": name.split("/")[0]}
            for name in state["models"]]}, None  # a list, never held like an answer
    if method == "GET":
        prefix = next((route + "/" for route in ROUTES if path.startswith(route + "/")), None)
        if not authorization.startswith("Bearer ") or len(authorization) <= 7:
            return (*error(401, "missing or invalid API key"), time.monotonic())
        if prefix is None:
            return (*error(404, f"no route for GET {path}"), time.monotonic())
        return (*fetch(state, path[len(prefix):], query), time.monotonic())
    try:
        body = json.loads(raw_body or b"null")
    except ValueError:
        body = None
    with state["lock"]:
        state["requests"].append(body)
        number = len(state["requests"]) + len(state["batch_requests"])  # a response's number
        fault = state["faults"].pop(0) if state["faults"] else None
    return (*answer(state, number, fault, path, headers, body, ready_at), ready_at)


def answer(state, number, fault, path, headers, body, ready_at):
    """(status, headers, body) of one POST."""
    authorization = headers.get("Authorization", "")
    if not authorization.startswith("Bearer ") or len(authorization) <= 7:
        return error(401, "missing or invalid API key")
    if state["echo_auth"]:
        return error(400, f"invalid request; received headers: Authorization: {authorization}")
    if fault:
        return fault
    route = path.rstrip("/")
    if route not in (*ROUTES, "/chat/completions") or not isinstance(body, dict):
        return error(404, f"no route for POST {path}")
    chat = route == "/chat/completions"
    if chat and not state["legacy_chat"]:
        return 403, [], {"error": dict(RETIRED)}
    unknown = unknown_field(body, CHAT_FIELDS if chat else RESPONSE_FIELDS)
    if unknown:
        return error(400, f'invalid request body: json: unknown field "{unknown}"')
    if chat:
        messages = body.get("messages") if isinstance(body.get("messages"), list) else []
        question = next((m.get("content") for m in messages
                         if isinstance(m, dict) and m.get("role") == "user"), None)
        case = case_for(state, question)
        if case is None:
            return error(400, NO_CASE)
        return 200, [], chat_response(number, case, body.get("model"), state["unsafe_models"],
                                      state["suite"])
    status, headers, response = foreground_answer(state, number, body)
    if status != 200 or not body.get("background"):
        return status, headers, response
    if state["no_background"]:
        return error(400, "background mode is not available to this organization",
                     kind="invalid_request")
    kept = {"response": {**response, "background": True}, "ready_at": ready_at}
    kept["events"] = events_of(kept["response"], ready_at)
    with state["lock"]:  # kept from now on, whatever happens to this connection
        state["stored"][response["id"]] = kept
        cut = state["drop_streams"] > 0
        state["drop_streams"] -= cut
    if not body.get("stream"):
        return 200, [], kept["events"][0]["response"]
    return 200, [("Content-Type", "text/event-stream")], stream_after(kept, -1, cut)


def batch_endpoint(state, method, path, headers, raw_body):
    """(status, headers, body) of a Files or Batches request; body is bytes for
    a file's content. Everything happens under the state's lock, at once: a
    batch moves only when it is polled."""
    parts = path.strip("/").split("/")[1:]  # after "v1": files|batches, [id, [action]]
    route = (method, parts[0], len(parts), parts[2] if len(parts) == 3 else None)
    authorization = headers.get("Authorization", "")
    with state["lock"]:
        counter = BATCH_COUNTERS.get(route)
        if counter:
            state[counter] += 1
        if not authorization.startswith("Bearer ") or len(authorization) <= 7:
            return error(401, "missing or invalid API key")
        fault = state["batch_faults"].pop(0) if state["batch_faults"] else None
        if fault is not None:  # None in the list: that request is answered as usual
            return fault
        if route == ("POST", "files", 1, None):
            return upload_file(state, headers.get("Content-Type", ""), raw_body)
        if route in {("GET", "files", 2, None), ("DELETE", "files", 2, None),
                     ("GET", "files", 3, "content")}:
            return file_request(state, method, parts)
        if route == ("POST", "batches", 1, None):
            return create_batch(state, headers.get("Idempotency-Key"), raw_body)
        if route == ("GET", "batches", 2, None):
            batch = state["batches"].get(parts[1])
            if batch is None:
                return error(404, f"batch {parts[1]} not found", kind="not_found")
            advance(state, batch)
            return 200, [], public(batch)
        if route == ("POST", "batches", 3, "cancel"):
            return cancel_batch(state, parts[1])
    return error(404, f"no route for {method} {path}")


def new_id(state, prefix):
    state["last_id"] += 1
    return f"{prefix}_sim_{state['last_id']}"


def store_file(state, filename, purpose, data):
    """Keep a file and return its FileObject."""
    created = int(time.time())
    meta = {"id": new_id(state, "file"), "object": "file", "bytes": len(data),
            "created_at": created, "filename": filename, "purpose": purpose,
            "expires_at": created + FILE_TTL_SECONDS}
    state["files"][meta["id"]] = {"meta": meta, "bytes": data}
    return meta


def form_fields(content_type, raw):
    """name -> (filename or None, bytes) of a multipart/form-data body."""
    message = email.message.Message()
    message["Content-Type"] = content_type
    boundary = message.get_param("boundary")
    if message.get_content_type() != "multipart/form-data" or not boundary:
        raise ValueError("send the file as multipart/form-data")
    fields = {}
    for piece in raw.split(b"--" + str(boundary).encode("latin-1"))[1:]:
        if piece.startswith(b"--"):  # the closing delimiter
            return fields
        head, found, content = piece.partition(b"\r\n\r\n")
        if not found or not head.startswith(b"\r\n") or not content.endswith(b"\r\n"):
            raise ValueError("the multipart body is malformed")
        part = email.parser.BytesHeaderParser().parsebytes(head[2:] + b"\r\n\r\n")
        name = part.get_param("name", header="Content-Disposition")
        fields[str(name)] = (part.get_filename(), content[:-2])
    raise ValueError("the multipart body has no closing boundary")


def line_problem(line, seen):
    """What is wrong with one line of a batch input file, or None."""
    if not line.strip():
        return "is blank; a batch file holds one JSON object per line and no blank lines"
    try:
        request = json.loads(line)
    except ValueError:
        return "is not valid JSON"
    if not isinstance(request, dict):
        return "is not a JSON object"
    unknown = unknown_field(request, BATCH_LINE_FIELDS)
    if unknown:
        return f'has an unknown field "{unknown}"'
    custom_id, body = request.get("custom_id"), request.get("body")
    if not isinstance(custom_id, str) or not custom_id:
        return "needs custom_id, a non-empty string"
    if custom_id in seen:
        return f'repeats custom_id "{custom_id}"; each request needs its own'
    seen.add(custom_id)
    if request.get("method") != "POST":
        return 'needs "method": "POST"'
    if request.get("url") not in ROUTES:
        return f"needs url {' or '.join(ROUTES)}"
    if not isinstance(body, dict):
        return "needs body, a JSON object"
    unknown = unknown_field(body, RESPONSE_FIELDS)
    if unknown:
        return f'body: json: unknown field "{unknown}"'
    for mode in ("background", "stream"):
        if body.get(mode):
            return f"body: {mode} is not supported in a batch"
    return None


def batch_requests(state, data):
    """The requests of a batch input file, every line checked; ValueError names
    the first bad line."""
    if len(data) > state["batch_max_bytes"]:
        raise ValueError(f"the file is {len(data)} bytes; at most "
                         f"{state['batch_max_bytes']} are allowed; split it")
    try:
        lines = data.decode("utf-8").split("\n")
    except UnicodeDecodeError:
        raise ValueError("the file is not UTF-8 text") from None
    if lines[-1] == "":  # the last line's own newline
        lines.pop()
    if not lines:
        raise ValueError("the file holds no requests")
    if len(lines) > state["batch_max_lines"]:
        raise ValueError(f"the file has {len(lines)} lines; at most "
                         f"{state['batch_max_lines']} are allowed; split it")
    seen = set()
    for number, line in enumerate(lines, 1):
        problem = line_problem(line, seen)
        if problem:
            raise ValueError(f"line {number} {problem}")
    return [json.loads(line) for line in lines]


def upload_file(state, content_type, raw):
    """POST /v1/files: a batch input file, kept only if every line is valid."""
    try:
        fields = form_fields(content_type, raw)
    except ValueError as exc:
        return error(400, str(exc), kind="invalid_request")
    if any(name.startswith("expires_after") for name in fields):
        return error(400, "expires_after is not supported: batch files expire after 30 days",
                     kind="invalid_request")
    unknown = unknown_field(fields, {"file", "purpose"})
    if unknown:
        return error(400, f'unknown form field "{unknown}"', kind="invalid_request")
    purpose = fields.get("purpose", (None, b""))[1]
    if purpose != b"batch":
        return error(400, 'purpose must be "batch"', kind="invalid_request")
    if "file" not in fields:
        return error(400, "no file given", kind="invalid_request")
    filename, data = fields["file"]
    try:
        batch_requests(state, data)
    except ValueError as exc:
        return error(400, f"invalid batch file: {exc}", kind="invalid_request")
    return 200, [], store_file(state, filename or "upload", "batch", data)


def file_request(state, method, parts):
    """GET /v1/files/{id}, GET /v1/files/{id}/content, DELETE /v1/files/{id}."""
    kept = state["files"].get(parts[1])
    if kept is None:
        return error(404, f"file {parts[1]} not found", kind="not_found")
    if method == "DELETE":
        del state["files"][parts[1]]
        return 200, [], {"id": parts[1], "object": "file", "deleted": True}
    if len(parts) == 3:
        return 200, [("Content-Type", "application/octet-stream")], kept["bytes"]
    return 200, [], kept["meta"]


def create_batch(state, idempotency_key, raw):
    """POST /v1/batches. An unknown input file is a 404, as for any unknown id;
    a repeat with an Idempotency-Key already seen returns that batch as it is now."""
    if idempotency_key and idempotency_key in state["batch_keys"]:
        return 200, [], public(state["batches"][state["batch_keys"][idempotency_key]])
    try:
        body = json.loads(raw or b"null")
    except ValueError:
        body = None
    if not isinstance(body, dict):
        return error(400, "the request body must be a JSON object", kind="invalid_request")
    if "output_expires_after" in body:
        return error(400, "output_expires_after is not supported: output and error files "
                     "are kept 30 days", kind="invalid_request")
    unknown = unknown_field(body, BATCH_CREATE_FIELDS)
    if unknown:
        return error(400, f'invalid request body: json: unknown field "{unknown}"',
                     kind="invalid_request")
    if body.get("endpoint") != BATCH_ENDPOINT:
        return error(400, f'endpoint must be "{BATCH_ENDPOINT}"', kind="invalid_request")
    if body.get("completion_window", BATCH_WINDOW) != BATCH_WINDOW:
        return error(400, f'completion_window must be "{BATCH_WINDOW}"', kind="invalid_request")
    metadata = body.get("metadata")
    if metadata is not None and not (isinstance(metadata, dict) and all(
            isinstance(value, str) for value in metadata.values())):
        return error(400, "metadata must map names to strings", kind="invalid_request")
    kept = state["files"].get(body.get("input_file_id"))
    if kept is None:
        return error(404, f"file {body.get('input_file_id')} not found", kind="not_found")
    if kept["meta"]["purpose"] != "batch":
        return error(400, f"file {kept['meta']['id']} is not a batch input file",
                     kind="invalid_request")
    created = int(time.time())
    batch = {"id": new_id(state, "batch"), "object": "batch", "endpoint": BATCH_ENDPOINT,
             "input_file_id": kept["meta"]["id"], "completion_window": BATCH_WINDOW,
             "created_at": created, "status": "validating",
             "request_counts": {"total": 0, "completed": 0, "failed": 0},
             "usage": {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0,
                       "input_tokens_details": {"cached_tokens": 0},
                       "output_tokens_details": {"reasoning_tokens": 0}},
             "output_file_id": None, "error_file_id": None, "errors": None,
             "metadata": metadata, "expires_at": created + BATCH_WINDOW_SECONDS,
             **{f"{stage}_at": None for stage in BATCH_STAGES},
             "_requests": batch_requests(state, kept["bytes"]), "_answers": []}
    state["batches"][batch["id"]] = batch
    if idempotency_key:
        state["batch_keys"][idempotency_key] = batch["id"]
    if state["batch_lose_creates"] > 0:  # made, but the answer never reaches the client
        state["batch_lose_creates"] -= 1
        return error(500, "simulated: the batch was created but this answer was lost",
                     kind="server_error")
    return 200, [], public(batch)


def public(batch):
    """A batch as the API returns it: without the simulation's own fields."""
    return {key: value for key, value in batch.items() if not key.startswith("_")}


def advance(state, batch):
    """One poll's progress: validating -> in_progress -> finalizing -> completed
    (or failed, expired, cancelling -> cancelled, by batch_outcome); rows run
    while in_progress, up to batch_rows_per_poll each poll."""
    now, outcome, requests = int(time.time()), state["batch_outcome"], batch["_requests"]
    status = batch["status"]
    if status == "validating" and outcome == "failed":
        batch.update(status="failed", failed_at=now, errors={"object": "list", "data": [
            {"code": "invalid_batch", "line": None,
             "message": "simulated: the batch failed validation (batch_outcome=failed)"}]})
    elif status == "validating":
        batch.update(status="in_progress", in_progress_at=now)
        batch["request_counts"]["total"] = len(requests)
    elif status == "in_progress":
        hold = state["batch_hold"]
        if hold is not None and not hold.is_set():
            return
        # An expired or cancelled outcome stops with half the rows answered.
        stop = len(requests) // 2 if outcome in ("expired", "cancelled") else len(requests)
        step = state["batch_rows_per_poll"]
        end = stop if step is None else min(stop, len(batch["_answers"]) + step)
        for request in requests[len(batch["_answers"]):end]:
            batch["_answers"].append(run_row(state, batch, request))
        if len(batch["_answers"]) < stop:
            return
        if outcome == "expired":
            finish(state, batch, "expired", now)
        elif outcome == "cancelled":
            batch.update(status="cancelling", cancelling_at=now)
        else:
            batch.update(status="finalizing", finalizing_at=now)
    elif status == "finalizing":
        finish(state, batch, "completed", now)
    elif status == "cancelling":
        finish(state, batch, "cancelled", now)


def run_row(state, batch, request):
    """Answer one batch request as a direct POST would be; its output line."""
    body = request["body"]
    state["batch_requests"].append(body)
    number = len(state["requests"]) + len(state["batch_requests"])  # ids unique across both
    if request["custom_id"] in state["batch_fail_ids"]:
        status, _, answer_body = error(500, "simulated: this request failed inside the batch",
                                       kind="server_error")
    else:
        status, _, answer_body = foreground_answer(state, number, body)
    counts = batch["request_counts"]
    counts["completed" if status == 200 else "failed"] += 1
    if status == 200:
        add_usage(batch["usage"], answer_body["usage"])
    return {"id": new_id(state, "batch_req"), "custom_id": request["custom_id"],
            "response": {"status_code": status, "request_id": new_id(state, "req"),
                         "body": answer_body},
            "error": None}


def add_usage(total, usage):
    for name in ("input_tokens", "output_tokens", "total_tokens"):
        total[name] += usage.get(name, 0)
    total["input_tokens_details"]["cached_tokens"] += (
        usage.get("input_tokens_details") or {}).get("cached_tokens", 0)
    total["output_tokens_details"]["reasoning_tokens"] += (
        usage.get("output_tokens_details") or {}).get("reasoning_tokens", 0)


def finish(state, batch, status, now):
    """End a batch: its output file (rows answered 200) and, when any row
    failed or never ran, its error file; lines in another order than the input's."""
    answers = batch["_answers"]
    never_ran = [{"id": new_id(state, "batch_req"), "custom_id": request["custom_id"],
                  "response": None,
                  "error": {"code": f"batch_{status}",
                            "message": f"the batch was {status} before this request ran"}}
                 for request in batch["_requests"][len(answers):]]
    output = [line for line in answers if line["response"]["status_code"] == 200]
    errors = [line for line in answers if line["response"]["status_code"] != 200] + never_ran
    for kind, lines in (("output", output), ("error", errors)):
        if lines:
            data = b"".join(json.dumps(line).encode() + b"\n" for line in shuffled(lines))
            batch[f"{kind}_file_id"] = store_file(
                state, f"{batch['id']}_{kind}.jsonl", "batch_output", data)["id"]
    batch["request_counts"]["total"] = len(batch["_requests"])
    batch.update({"status": status, f"{status}_at": now})


def shuffled(lines):
    """The same lines in a fixed order that is never the given one (from two lines up)."""
    order = list(lines)
    random.Random(OUTPUT_ORDER_SEED).shuffle(order)
    return order[::-1] if order == lines else order


def cancel_batch(state, batch_id):
    """POST /v1/batches/{id}/cancel: cancelling now, cancelled at the next poll."""
    batch = state["batches"].get(batch_id)
    if batch is None:
        return error(404, f"batch {batch_id} not found", kind="not_found")
    if batch["status"] in BATCH_FINAL:
        return error(400, f"batch {batch_id} is already {batch['status']}; only a batch "
                     "still running can be cancelled", kind="invalid_request")
    if batch["status"] != "cancelling":
        batch.update(status="cancelling", cancelling_at=int(time.time()))
    return 200, [], public(batch)


def wait_until_ready(state, ready_at):
    """Sleep until an answer is ready, and until the test holding answers lets go."""
    if ready_at is None:
        return
    left = ready_at - time.monotonic()
    if left > 0:  # a sleep(0) would still give up the GIL, for a switch interval (5 ms)
        time.sleep(left)
    if state["hold"] is not None:
        state["hold"].wait(60)


def sse(events):
    """Server-sent events as the live API writes them: one data line each, no event line."""
    return b"".join(b"data: " + json.dumps(event).encode() + b"\n\n" for event in events)


def mock_transport(state):
    """An httpx.MockTransport that answers exactly like the HTTP server."""
    import httpx

    def handle(request):
        status, headers, body, ready_at = respond(
            state, request.method, request.url.path, dict(request.url.params),
            request.headers, request.content)
        if not (isinstance(body, Events) and body.cut):
            wait_until_ready(state, ready_at)
        if isinstance(body, Events):
            return httpx.Response(status, headers=headers, content=sse(
                body.first + ([] if body.cut else body.rest)))
        if isinstance(body, bytes):  # a file's content, its type among the headers
            return httpx.Response(status, headers=headers, content=body)
        # json.dumps as the HTTP server sends it: a NaN goes out as the live API might.
        return httpx.Response(status, headers=[*headers, ("Content-Type", "application/json")],
                              content=json.dumps(body).encode())

    return httpx.MockTransport(handle)


def chat_response(number, case, model, unsafe_models, suite=checker.BUILTIN_SUITE):
    """A finished chat-completions response body for one case (cost has no currency)."""
    case = checker.suite_case(case)
    url = document_url(suite, case["cite"])
    return {
        "id": f"chat_sim_{number}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant",
                                 "content": answer_for(case, model, unsafe_models, suite)},
                     "delta": {"role": "assistant", "content": ""}}],
        "search_results": [{"title": case["cite"].upper(), "url": url,
                            "snippet": "Simulated search result."}],
        "citations": [url],
        "usage": {"prompt_tokens": 900, "completion_tokens": 60, "total_tokens": 960,
                  "cost": {"input_tokens_cost": 0.0036, "output_tokens_cost": 0.0006,
                           "total_cost": COST_USD}},
    }


def sdk_client(state, before_request=None, api_key="test-key-0123", **options):
    """A real Perplexity client whose HTTP is answered in-process by respond().

    before_request(request) runs first for every request; a test uses it to
    record, delay or fail requests. options go to Perplexity (max_retries...).
    """
    import httpx
    from perplexity import Perplexity

    transport = mock_transport(state)

    def handle(request):
        if before_request is not None:
            before_request(request)
        return transport.handle_request(request)

    return Perplexity(api_key=api_key, http_client=httpx.Client(
        transport=httpx.MockTransport(handle)), **options)


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):  # keep test and demo output clean
        pass

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        self.answer(self.rfile.read(length))

    def do_GET(self):
        self.answer(b"")

    do_DELETE = do_POST

    def answer(self, raw_body):
        url = urllib.parse.urlsplit(self.path)
        status, headers, body, ready_at = respond(
            self.server.state, self.command, url.path, dict(urllib.parse.parse_qsl(url.query)),
            self.headers, raw_body)
        with contextlib.suppress(ConnectionError):  # the client was killed: fine
            if isinstance(body, Events):  # a receipt now, the answer when it is ready
                self.send_response(status)
                for name, value in headers:
                    self.send_header(name, value)
                self.end_headers()  # no length: the stream ends when the connection closes
                self.wfile.write(sse(body.first))
                self.wfile.flush()
                if body.cut:
                    return
                wait_until_ready(self.server.state, ready_at)
                self.wfile.write(sse(body.rest))
                return
            wait_until_ready(self.server.state, ready_at)
            if isinstance(body, bytes):  # a file's content, its type among the headers
                data = body
            else:
                data = json.dumps(body).encode()
                headers = [*headers, ("Content-Type", "application/json")]
            self.send_response(status)
            for name, value in headers:
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)


def start(cases, unsafe_models=("offline/hasty",), port=0):
    """Serve on 127.0.0.1 in a background thread; call .stop() when done."""
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    server.state = new_state(cases, unsafe_models)
    server.url = f"http://127.0.0.1:{server.server_address[1]}"
    # A short poll: stop() waits for the loop to notice, and the demo stops it every run.
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02},
                              daemon=True)
    thread.start()

    def stop():
        server.shutdown()
        server.server_close()
        thread.join()

    server.stop = stop
    return server


def bounded(parse, fits, wanted):
    """An argparse type: text read by parse (int, float) and kept when fits it."""
    def value_of(text):
        try:
            value = parse(text)
        except ValueError:
            value = None
        if value is None or not fits(value):
            raise argparse.ArgumentTypeError(f"expected {wanted}, got {text!r}")
        return value
    return value_of


port_number = bounded(int, lambda n: 0 <= n <= 65535, "a port from 0 to 65535")  # 0: any free
seconds = bounded(float, lambda s: 0 <= s < float("inf"), "seconds, 0 or more")
positive_int = bounded(int, lambda n: n >= 1, "a whole number from 1 up")


def main(argv=None):
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=port_number, default=8765,
                        help="loopback port, 0 for any free one (default: 8765)")
    parser.add_argument("--cases", metavar="FILE",
                        help="JSON list of the cases it answers (default: examples/cases.json)")
    parser.add_argument("--suite", metavar="FILE", help="a suite file (TOML) whose cases it "
                        "answers instead of --cases")
    parser.add_argument("--unsafe", metavar="MODEL", nargs="*", default=["offline/hasty"],
                        help="models that get the guarded case wrong: the built-in cases' "
                        "timed-out payment (they advise a retry), or a suite's last case (its "
                        "first expected field) (default: offline/hasty)")
    parser.add_argument("--latency", type=seconds, default=0.0, metavar="SECONDS",
                        help="seconds before each answer is ready (default: 0)")
    parser.add_argument("--legacy-chat", action="store_true",
                        help="answer /chat/completions as before the Sonar retirement "
                        "(default: HTTP 403, as the live API does today)")
    parser.add_argument("--batch-rows-per-poll", type=positive_int, metavar="N",
                        help="rows a batch answers per poll while in progress "
                        "(default: all of them at the first)")
    parser.add_argument("--snippet-bytes", type=positive_int, metavar="N",
                        help="pad each answer's search snippet to N characters, so a "
                        "response is the size of a live one (default: a short snippet)")
    parser.add_argument("--batch-outcome", choices=BATCH_OUTCOMES, default="completed",
                        help="how every batch ends (default: completed)")
    args = parser.parse_args(argv)
    if args.suite is not None and args.cases is not None:
        parser.error("--suite declares its own cases; drop --cases")
    try:
        if args.suite is not None:
            cases = suites.read_suite(args.suite)
        else:
            path = args.cases or CASES_FILE
            with open(path, encoding="utf-8") as handle:
                text = handle.read()
            try:
                data = json.loads(text)
            except ValueError as exc:
                raise UserError(f"--cases {path} is not JSON ({exc}); give a JSON list of "
                                "cases like examples/cases.json, or a suite file with "
                                "--suite") from None
            cases = record.validate_cases(data, path)
    except OSError as exc:
        parser.error(f"cannot read --cases {exc.filename}: {exc.strerror}")
    except UserError as exc:
        parser.error(str(exc))
    # Ctrl+C stops it whatever the shell left: a job started in the background
    # by a non-interactive shell (a Makefile, a CI step) has SIGINT ignored.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        server = start(cases, unsafe_models=args.unsafe, port=args.port)
    except OSError as exc:
        parser.error(f"cannot listen on 127.0.0.1:{args.port}: {exc.strerror}; choose "
                     "another --port (0 takes any free one)")
    # Ids of this server alone, as the live API's are unique: the records of runs
    # against two servers are two histories' worth, never taken for copies.
    server.state.update(id_prefix=f"sim{random.randrange(16 ** 8):08x}")
    server.state.update(latency=args.latency, legacy_chat=args.legacy_chat,
                        batch_rows_per_poll=args.batch_rows_per_poll,
                        batch_outcome=args.batch_outcome, snippet_bytes=args.snippet_bytes)
    # Flushed: whoever started it may be waiting on this line through a pipe.
    print(f"simulated Agent API on {server.url} (Ctrl+C to stop)", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
