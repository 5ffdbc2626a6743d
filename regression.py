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

The file reads top to bottom: what is asked (the built-in suite's names from
checker.py, the request and the config); one request and its verdict
(run_one, judged by this module's check()); the command line; main. The
rest lives in the module whose name says it: the run's life (new, resume,
regrade, each row kept) in runs.py; the wire (sent, streamed, fetched by its
receipt) in wire.py; the Batch API in batching.py; retries and stops in
sending.py; the record on disk in record.py; suites in suites.py.

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
import contextlib
import functools
import hashlib
import json
import os
import signal
import time
import traceback
import types

import plans
import record
import reports
import runs
import suites
import wire
from batching import run_batch
# What is asked and how answers are judged live in checker.py (pure, no SDK),
# so every reader of a record judges with the same code; these names are the
# runner's interface too.
from checker import (ACTIONS, CASES, CHAT_PREFIX, CONFIDENCE, FORMAT, INSTRUCTIONS,  # noqa: F401
                     MODELS, TOOL, answer_seen, answer_text, approved_source, chat_answer_text,
                     check, is_builtin_domain, judge_answer, pass_rate_lines, receipt_reasons,
                     reported_cost, rfc_document, run_order, summary, verdict_line)
from record import MAX_REPEATS
from runs import DEFAULT_RETRIES, DEMO_MODELS, MAX_JOBS, MAX_RETRIES, REPORTS, command_hint, money
from sending import Interrupts, Pause, Plan, Terminated, redact, warn
from vocabulary import Parser, UserError, crash_report, mend_standard_streams
from wire import dump_response, finished  # noqa: F401 - run_one's, and the tests'

# --------------------------------------------------------------------------
# Part 1: what is asked. Every value that can change an answer is recorded in
# the run's `config`; the cases, instructions, tool and format are checker.py's.
# --------------------------------------------------------------------------

MAX_STEPS = 5  # agent steps per request: search, maybe a second search, answer
CHAT_SEARCH_CONTEXT = "medium"  # the chat API's own search fields: it has no token budget
CHAT_SEARCH_RESULTS = 5
MAX_OUTPUT_TOKENS = 4096  # the JSON answer is ~200 tokens; room for reasoning
TIMEOUT_SECONDS = 180  # per request, in total: a slow agent run takes about a minute
CRASH_FOLDER = []  # the record's folder once main knows it: where a crash report goes
# --force-search: the Agent API's documented tool_choice that makes the agent use
# web_search ("auto", the default, lets the model decide; "required" any tool).
FORCED_SEARCH = {"type": "web_search"}
DEMO_KEY = "offline-demo-key"  # the simulated API accepts any key
SDK_NAMES = ("Perplexity", "APIError", "Stream", "httpx")  # loaded on first use


def load_sdk():
    """Import the SDK (about a second) the first time a request needs it, so
    --help, usage errors, --plan and --regrade never pay for it. Sets the
    module's SDK names; one a test has replaced already (regression.Perplexity)
    is kept."""
    loaded = wire.sdk()
    for name in SDK_NAMES:
        globals().setdefault(name, getattr(loaded, name))


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


# --------------------------------------------------------------------------
# Part 3: I/O. One request and its whole row, the files a run reads, and the
# reports on disk.
# --------------------------------------------------------------------------


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
            if isinstance(response, Stream):  # noqa: F821 - load_sdk(): a stream to read
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
    if suite is None or is_builtin_domain(suite):
        reasons = check(case, seen, row["answer_text"])
    else:
        reasons = judge_answer(suite, case, seen, row["answer_text"])
    row["reasons"] = reasons + receipt_reasons(model, row["response"])


def code_sha256():
    return record.file_sha256(os.path.abspath(__file__))


# --------------------------------------------------------------------------
# Part 4: the command line.
# --------------------------------------------------------------------------


def fail(message):
    """One line on stderr and exit code 2."""
    warn(f"regression.py: error: {message}")
    return 2


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


def repeated_flag(argv):
    """The first flag given twice (the last would silently win), or None."""
    seen = set()
    for arg in argv:
        flag = arg.split("=", 1)[0]
        if flag.startswith("--") and flag in {name for name, _ in OPTIONS}:
            if flag in seen:
                return flag
            seen.add(flag)
    return None


def models_problem(models):
    """Why --models is not a list of distinct model names, or None."""
    if models is not None and len(set(models)) != len(models):
        duplicates = sorted({m for m in models if models.count(m) > 1})
        return f"duplicate model in --models: {', '.join(duplicates)}"
    for model in models or ():
        if "," in model:
            return (f"--models: {model!r} holds a comma; separate models with spaces: "
                    f"--models {' '.join(part for part in model.split(',') if part)}")
        if (not model.isprintable() or not 0 < len(model) <= record.MAX_NAME
                or model == CHAT_PREFIX or model.strip() != model):
            return (f"--models: {model!r} is not a model name (printable, 1..."
                    f"{record.MAX_NAME} characters, e.g. openai/gpt-5.6-sol)")
    return None


def numbers_problem(args):
    """Why --repeats, --jobs, --retries, --prove or --allow-failures is out of range."""
    if args.repeats is not None and not 1 <= args.repeats <= MAX_REPEATS:
        return f"--repeats must be 1..{MAX_REPEATS}, got {args.repeats}"
    if args.jobs is not None and not 1 <= args.jobs <= MAX_JOBS:
        return f"--jobs must be 1..{MAX_JOBS}, got {args.jobs}"
    if args.retries is not None and not 0 <= args.retries <= MAX_RETRIES:
        return f"--retries must be 0..{MAX_RETRIES}, got {args.retries}"
    if args.allow_failures is not None and args.allow_failures < 0:
        return f"--allow-failures must be 0 or more, got {args.allow_failures}"
    if args.prove is not None:
        if args.repeats is not None:
            return "--prove repeats each case until its plan decides it; drop --repeats"
        try:
            plans.plan_of(args.prove, args.allow_failures or 0, args.confidence or CONFIDENCE)
        except ValueError as exc:
            return f"--prove {args.prove}: {exc}"
    if args.allow_failures is not None and args.prove is None:
        return "--allow-failures is a proof's plan; give --prove RATE too"
    return None


def clash_problem(args):
    """Why two flags cannot be used together, or None."""
    if args.suite is not None and args.cases is not None:
        return "--suite declares its own cases; drop --cases (or put the cases in the suite file)"
    if args.baseline is not None and not args.plan:
        return ("--baseline prices a plan; give --plan too (a comparison with a baseline is "
                "compare_runs.py BASELINE RECORD)")
    chat = sorted(model for model in args.models or () if model.startswith(CHAT_PREFIX))
    for clash, why in ((chat and chat[0], "the Batch API runs Agent API requests only"),
                       (args.foreground and "--foreground", "a batch is never sent plainly; "
                        "drop --foreground"),
                       (args.prove and "--prove", "proof sends one repeat at a time; drop "
                        "--batch"),
                       (args.max_cost and "--max-cost", "a batch runs all its rows once "
                        "submitted, so no budget can stop it; drop --max-cost")):
        if args.batch and clash:
            return f"--batch cannot be used with {clash}: {why}"
    given = {flag for flag, _ in OPTIONS if getattr(args, flag[2:].replace("-", "_")) is not None}
    for mode, refused, why in (
            ("--resume", {"--out", "--regrade", "--batch", *FROM_RECORD},
             "finishes the record in place with its own models, cases, instructions and repeats"),
            ("--regrade", {"--demo", "--batch", *FROM_RECORD},
             "re-checks the record's own models, cases, instructions and repeats"),
            ("--demo", {"--models", "--out"},
             "uses its own fictional models and writes NEW_DIR/results.json")):
        clash = sorted(given & refused)
        if mode in given and clash:
            return f"{mode} {why}; drop {' '.join(clash)}"
    if args.plan and (args.demo or args.resume or args.regrade):
        return "--plan prints a new run's plan; drop --demo, --resume and --regrade"
    return None


def setting_problem(args):
    """Why the demo folder or the key will not do, or None."""
    if args.demo == "":
        return "--demo needs the name of a new folder, e.g. --demo demo-run"
    if args.demo is not None and os.path.lexists(args.demo):
        return f"--demo folder {args.demo} already exists; name a new one"
    if args.demo is not None or args.regrade is not None or args.plan:
        return None
    key = os.environ.get("PERPLEXITY_API_KEY")
    if key is not None and key and not key.strip():
        return "PERPLEXITY_API_KEY holds only whitespace; export your real API key"
    if not key:
        folder = next(name for name in (f"demo-run{n or ''}" for n in range(1000))
                      if not os.path.lexists(name))
        return ("PERPLEXITY_API_KEY is not set; export your API key, or try the offline "
                f"demo: {command_hint('--demo', folder)}")
    return None


@functools.cache
def command_line():
    """The parser, made once: parsing leaves it as it was, and making it costs
    more than a short run's own work (argparse looks up translations per flag)."""
    parser = Parser(
        prog="regression.py",
        description="Check that approved agent decisions still hold for each model.",
        epilog="Exit codes: 0 all passed, 1 a check failed, 2 no verdict, "
               "130/143 interrupted (the record is saved; --resume finishes it).",
    )
    for flag, options in OPTIONS:
        parser.add_argument(flag, **options)
    return parser


def parse_args(argv):
    parser = command_line()
    given = sys.argv[1:] if argv is None else argv
    if any(arg == "--max-repeats" or arg.startswith("--max-repeats=") for arg in given):
        parser.error("--max-repeats is gone: it never changed a proof, whose plan decides "
                     "when a pair stops; to let a pair fail K times and still qualify, give "
                     "--allow-failures K")
    twice = repeated_flag(given)
    if twice:
        parser.error(f"{twice} is given twice; give it once")
    args = parser.parse_args(argv)
    problem = (models_problem(args.models) or numbers_problem(args) or clash_problem(args)
               or setting_problem(args))
    if problem:
        parser.error(problem)
    return args


def print_plan(args):
    """--plan: what the run would send, and what its verdicts could prove. Every
    input is read and checked as the run itself would (its files, --out, the
    reports), so a plan that prints is a run that would start."""
    run = runs.prepare(args, asking())
    costs = runs.baseline_costs(args.baseline) if args.baseline else None
    for line in plans.plan_lines(run.models, [case["id"] for case in run.cases], args.prove,
                                 args.allow_failures or 0, args.repeats or 1,
                                 args.confidence or CONFIDENCE, costs):
        print(line)
    print("Nothing was sent.")
    return 0


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
        import ssl

        import simulated_api  # only the demo needs the offline server

        server = simulated_api.start(run.suite)
        # Ids of this demo run alone (its start time names them), so the records of
        # several demo runs make a history; the same under a fixed demo clock.
        server.state["id_prefix"] = hashlib.sha256(
            run.head["created_at"].encode()).hexdigest()[:8]
    try:
        try:
            if server is None:
                client = Perplexity(max_retries=0, timeout=TIMEOUT_SECONDS)  # noqa: F821
            else:
                # trust_env=False: a proxy from the environment must never see loopback.
                # The demo speaks plain HTTP, so its TLS context trusts no certificate
                # (anything else would fail closed) and loads none: the default loads
                # the whole CA bundle, about 35 ms of every demo's start.
                no_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
                client = Perplexity(api_key=DEMO_KEY, base_url=server.url,  # noqa: F821
                                    max_retries=0,
                                    timeout=TIMEOUT_SECONDS,
                                    http_client=httpx.Client(trust_env=False,  # noqa: F821
                                                             verify=no_tls))
        except httpx.InvalidURL as exc:  # noqa: F821
            raise UserError(f"cannot set up the API client: {exc}; nothing was sent, "
                             "fix PERPLEXITY_BASE_URL and run again") from None
        yield client
    finally:
        if server is not None:
            server.stop()


def proof_lines(run, result):
    """After a proof: the requests it sent (errors re-sent on top of the plan), and
    what its verdict holds for each pair and for all pairs together."""
    if not run.prove or run.regrade:
        return []
    pairs = len(run.models) * len(run.cases)
    sent = (f"Sent {plans.plural(run.sent, 'request')} in this run"
            + (f" ({run.sent_errors} ended in an execution error, sent again on top of the "
               "plan)" if run.sent_errors else "")
            + f"; {sum(1 for row in run.rows.values() if not row['error'])} verdict rows of "
            f"at most {run.repeats * pairs} the plan allows.")
    if not result["complete"] or result["exit_code"] == 2:
        return [sent]
    rate, allowed = run.prove["rate"], run.prove.get("allow_failures", 0)
    worst = plans.qualify_exact(rate, run.repeats, allowed)  # at most 1 - confidence
    return [sent, "What a qualified pair proves: "
            + plans.all_pairs_text(rate, worst, pairs) + "."]


def finish(run, interrupted):
    """The last lines: pass rates, the summary, the verdict, and where the record is.

    True when every report asked for was written.
    """
    result = run.tally.summary()
    written = runs.write_reports(run, run.rows, result)
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
             f"{runs.resume_command(run.out, run.execution, run.rows.values(), len(run.entries))}")
    if run.repeats > 1:
        print("\n".join(pass_rate_lines(result)))
    print(json.dumps(result))  # one line, so the verdict below stays in view
    for line in proof_lines(run, result):
        print(line)
    print(verdict_line(result))
    if run.regrade and not result["complete"]:
        source = run.head["regraded_from"]["path"]
        problem = runs.resume_problem({**run.head, **run.head["regraded_from"]})
        if problem:  # the one rule: never a command that --resume refuses
            print(f"{source} is not complete, and --resume refuses it: {problem}")
        else:
            print(f"{source} is not complete; regrade it again once it is finished with: "
                  f"{runs.resume_command(source, run.saved_execution, run.rows.values(), len(run.entries))}")
    print(f"Record: {run.out}")
    for name, label in (("junit", "JUnit report"), ("summary_md", "Markdown summary"),
                        ("html", "Evidence page")):
        if name in written:
            print(f"{label}: {run.reports[name]}")
    return written == wanted


def asking():
    """What a run asks with, for runs.py and batching.py, which never import this
    module: the config, the request, the judge (through this module's check())."""
    return types.SimpleNamespace(config=run_config, request=agent_request, judge=judge,
                                 forced_search=FORCED_SEARCH)


def main(argv=None):
    mend_standard_streams()
    args = parse_args(argv)
    try:
        if args.plan:
            return print_plan(args)
        run = runs.prepare(args, asking())
    except UserError as exc:
        return fail(str(exc))
    CRASH_FOLDER[:] = [os.path.dirname(os.path.abspath(run.out))]
    pause = Pause()
    try:
        with api_client(run) as client:
            problem = args.check_models and wire.checked_models(run, client)
            if problem:
                return fail(problem)
            with runs.saved_record(run) as saved:
                send = functools.partial(wire.send_one, client, run_one=run_one,
                                         deadline=TIMEOUT_SECONDS, execution=run.execution,
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
        runs.silence(sys.stdout)
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
    if args.regrade is None and plan.todo and runs.within_budget(run, plan):
        with runs.Progress(run, plan, sys.stderr):
            for index, row in plan.finished():
                runs.take_row(run, plan, saved, index, row, started)


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
        print(f"Re-checked {plans.plural(len(run.rows), 'saved row')} of {args.regrade} with "
              "this checker; nothing is sent.")
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
              + f"{fetch} to fetch by their saved ids (paid for already: sent again only if "
              "the API no longer has it, or its agent run ended without an answer), "
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
            runs.silence(stream)
    raise SystemExit(exit_code)
