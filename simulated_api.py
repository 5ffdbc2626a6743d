"""A small simulated Perplexity Agent API on 127.0.0.1, for the demo and tests.

It answers POST /v1/responses like the live Agent API (a `search_results`
output item holding the case's RFC, an assistant message holding the JSON
answer, `usage.cost` in USD) and POST /chat/completions like the legacy Sonar
API (`choices`, top-level `search_results` and `citations`, `usage.cost`
without a currency). Unknown request fields get the live API's 400. It never
listens on anything but loopback.

    python simulated_api.py --port 8765 --cases examples/cases.json   # until Ctrl+C
    PERPLEXITY_BASE_URL=http://127.0.0.1:8765 PERPLEXITY_API_KEY=x python regression.py

It never imports the runner: whoever starts it passes the cases it
recognises (examples/cases.json holds the built-in four).

Behaviour lives in a state dict (server.state, or the one given to
mock_transport() for in-process tests):
    cases          the cases it recognises (by their question text)
    unsafe_models  models that answer an uncertain payment with 503 / retry
    latency        seconds to wait before each answer
    faults         a list of (status, headers, body) answered, in turn, before
                   normal answers resume (e.g. a 429 with Retry-After)
    echo_auth      answer 400 with the request's Authorization header in the body
    requests       every request body received, in arrival order
"""

import argparse
import contextlib
import json
import threading
import time
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
        "requests": [],
        "lock": threading.Lock(),
    }


def error(status, message, headers=()):
    return status, list(headers), {"error": {"message": message}}


def respond(state, path, headers, raw_body):
    """(status, headers, JSON body) for one POST; shared by HTTP and MockTransport."""
    try:
        body = json.loads(raw_body or b"null")
    except ValueError:
        body = None
    with state["lock"]:
        state["requests"].append(body)
        number = len(state["requests"])
        fault = state["faults"].pop(0) if state["faults"] else None
    if state["latency"]:
        time.sleep(state["latency"])
    authorization = headers.get("Authorization", "")
    if not authorization.startswith("Bearer ") or len(authorization) <= 7:
        return error(401, "missing or invalid API key")
    if state["echo_auth"]:
        return error(400, f"invalid request; received headers: Authorization: {authorization}")
    if fault:
        return fault
    route = path.rstrip("/")
    if route not in ("/v1/responses", "/chat/completions") or not isinstance(body, dict):
        return error(404, f"no route for POST {path}")
    chat = route == "/chat/completions"
    unknown = sorted(set(body) - (CHAT_FIELDS if chat else RESPONSE_FIELDS))
    if unknown:
        return error(400, f'invalid request body: json: unknown field "{unknown[0]}"')
    if chat:
        messages = body.get("messages") if isinstance(body.get("messages"), list) else []
        question = next((m.get("content") for m in messages
                         if isinstance(m, dict) and m.get("role") == "user"), None)
    else:
        question = body.get("input")
    case = next((c for c in state["cases"] if c["question"] == question), None)
    if case is None:
        return error(400, "simulated API: the input matches no known case")
    build = chat_response if chat else agent_response
    return 200, [], build(number, case, body.get("model"), state["unsafe_models"])


def mock_transport(state):
    """An httpx.MockTransport that answers exactly like the HTTP server."""
    import httpx

    def handle(request):
        status, headers, body = respond(state, request.url.path, request.headers,
                                        request.content)
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
        status, headers, body = respond(self.server.state, self.path, self.headers,
                                        self.rfile.read(length))
        data = json.dumps(body).encode()
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        with contextlib.suppress(ConnectionError):  # the client was killed: fine
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
    args = parser.parse_args(argv)
    try:
        with open(args.cases, encoding="utf-8") as handle:
            cases = record.validate_cases(json.load(handle), args.cases)
    except (OSError, ValueError) as exc:
        parser.error(f"--cases: {exc}; give a JSON file of cases like examples/cases.json")
    server = start(cases, unsafe_models=args.unsafe, port=args.port)
    print(f"simulated Agent API on {server.url} (Ctrl+C to stop)")
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
