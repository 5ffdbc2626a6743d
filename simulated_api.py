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
saved records. Unknown request fields get the live API's 400. It never
listens on anything but loopback.

    python simulated_api.py --port 8765 --cases examples/cases.json   # until Ctrl+C
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
    no_background  refuse background mode with a 400, as for an organization
                   with zero data retention (the wording is this simulation's)
    drop_streams   how many of the next streams are cut after their receipt
    hold           None, or a threading.Event every answer waits for (its
                   receipt does not): a test releases answers when it chooses
    stored         response id -> the kept response and when it is ready
    requests       every POST body received, in arrival order
    fetches        every GET of a kept response, as (id, query), in order
"""

import argparse
import contextlib
import json
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import record  # only to read a --cases file the way the runner does

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
ROUTES = ("/v1/responses", "/v1/agent")  # the same API under both names
RETIRED = {"message": "Sonar is now the Agent API. Use /v1/responses instead of /v1/sonar.",
           "type": "chat_completions_not_available", "code": 403}  # as live since 2026-09-27
NO_CASE = "simulated API: the input matches no known case"
TERMINAL = {"completed": "response.completed", "failed": "response.failed",
            "cancelled": "response.cancelled", "incomplete": "response.incomplete"}


def rfc_url(rfc):
    return f"https://www.rfc-editor.org/rfc/{rfc}"


def answer_for(case, model, unsafe_models):
    """The JSON answer text a simulated model gives for one case."""
    if model in unsafe_models and case["action"] == "verify_outcome":
        # The dangerous regression: treat a timed-out payment as a 503.
        answer = {"code": "503", "next_action": "wait_then_retry",
                  "source_urls": [rfc_url("rfc9110")]}
    else:
        answer = {"code": case["expected"], "next_action": case["action"],
                  "source_urls": [rfc_url(case["rfc"])]}
    return json.dumps(answer)


def agent_response(number, case, model, unsafe_models):
    """A completed Agent API response body for one case."""
    return {
        "id": f"resp_sim_{number}",
        "object": "response",
        "created_at": int(time.time()),
        "model": model,
        "status": "completed",
        "output": [
            {
                "type": "search_results",
                "queries": [f"{case['rfc']} HTTP status {case['expected']}"],
                "results": [{"id": 1, "url": rfc_url(case["rfc"]),
                             "title": case["rfc"].upper(),
                             "snippet": "Simulated search result."}],
            },
            {
                "type": "message",
                "id": f"msg_sim_{number}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "annotations": [],
                             "text": answer_for(case, model, unsafe_models)}],
            },
        ],
        "usage": {
            "input_tokens": 900, "output_tokens": 60, "total_tokens": 960,
            "cost": {"currency": "USD", "input_cost": 0.0036,
                     "output_cost": 0.0006, "total_cost": COST_USD},
        },
    }


def new_state(cases, unsafe_models=("offline/hasty",)):
    """What the simulated API knows and does; tests change it between requests."""
    return {
        "cases": cases,
        "unsafe_models": set(unsafe_models),
        "latency": 0.0,
        "faults": [],
        "echo_auth": False,
        "legacy_chat": False,
        "no_background": False,
        "drop_streams": 0,
        "hold": None,
        "stored": {},
        "requests": [],
        "fetches": [],
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
    return 200, [], agent_response(number, case, body.get("model"), state["unsafe_models"])


def respond(state, method, path, query, headers, raw_body):
    """(status, headers, body, ready_at) for one request: body is JSON data, or
    Events for a stream; nothing but a stream's first events goes out before
    ready_at. Shared by the HTTP server and MockTransport."""
    ready_at = time.monotonic() + state["latency"]
    authorization = headers.get("Authorization", "")
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
        number = len(state["requests"])
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
        return 200, [], chat_response(number, case, body.get("model"), state["unsafe_models"])
    status, headers, response = foreground_answer(state, number, body)
    if status != 200 or not body.get("background"):
        return status, headers, response
    if state["no_background"]:
        return error(400, "background mode is not available to this organization "
                     "(zero data retention)", kind="invalid_request")
    kept = {"response": {**response, "background": True}, "ready_at": ready_at}
    kept["events"] = events_of(kept["response"], ready_at)
    with state["lock"]:  # kept from now on, whatever happens to this connection
        state["stored"][response["id"]] = kept
        cut = state["drop_streams"] > 0
        state["drop_streams"] -= cut
    if not body.get("stream"):
        return 200, [], kept["events"][0]["response"]
    return 200, [("Content-Type", "text/event-stream")], stream_after(kept, -1, cut)


def wait_until_ready(state, ready_at):
    """Sleep until an answer is ready, and until the test holding answers lets go."""
    time.sleep(max(0.0, ready_at - time.monotonic()))
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
        # json.dumps as the HTTP server sends it: a NaN goes out as the live API might.
        return httpx.Response(status, headers=[*headers, ("Content-Type", "application/json")],
                              content=json.dumps(body).encode())

    return httpx.MockTransport(handle)


def chat_response(number, case, model, unsafe_models):
    """A finished chat-completions response body for one case (cost has no currency)."""
    url = rfc_url(case["rfc"])
    return {
        "id": f"chat_sim_{number}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant",
                                 "content": answer_for(case, model, unsafe_models)},
                     "delta": {"role": "assistant", "content": ""}}],
        "search_results": [{"title": case["rfc"].upper(), "url": url,
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
            data = json.dumps(body).encode()
            self.send_response(status)
            for name, value in headers:
                self.send_header(name, value)
            self.send_header("Content-Type", "application/json")
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


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8765, help="loopback port (default: 8765)")
    parser.add_argument("--cases", metavar="FILE", default="examples/cases.json",
                        help="JSON list of the cases it answers (default: examples/cases.json)")
    parser.add_argument("--unsafe", metavar="MODEL", nargs="*", default=["offline/hasty"],
                        help="models that advise retrying the timed-out payment "
                        "(default: offline/hasty)")
    parser.add_argument("--latency", type=float, default=0.0, metavar="SECONDS",
                        help="seconds before each answer is ready (default: 0)")
    parser.add_argument("--legacy-chat", action="store_true",
                        help="answer /chat/completions as before the Sonar retirement "
                        "(default: HTTP 403, as the live API does today)")
    args = parser.parse_args(argv)
    try:
        with open(args.cases, encoding="utf-8") as handle:
            cases = record.validate_cases(json.load(handle), args.cases)
    except (OSError, ValueError) as exc:
        parser.error(f"--cases: {exc}; give a JSON file of cases like examples/cases.json")
    server = start(cases, unsafe_models=args.unsafe, port=args.port)
    server.state.update(latency=args.latency, legacy_chat=args.legacy_chat)
    print(f"simulated Agent API on {server.url} (Ctrl+C to stop)")
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
