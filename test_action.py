"""The GitHub Action (action.yml), offline: audited and validated against
GitHub's schema, its decisions in-process, and its own step scripts run as
Actions runs them (the environment Actions gives a step, the step's `env:`
from action.yml) against the simulated API and a stand-in of GitHub's
comments API. Nothing talks to any address but 127.0.0.1."""

import functools
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import unittest
from unittest import mock
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import checker
import simulated_api
from testing import HERE, KEY, Harness, quiet, clean_env, in_process, loopback_env, loopback_server, \
    read_json, read_text, slow, temp_dir, wait_until, write_text

sys.path.insert(0, os.path.join(HERE, "action"))
import comment  # noqa: E402 - the action's own scripts, from action/
import gate  # noqa: E402

ACTION = os.path.join(HERE, "action.yml")
WORKFLOW = os.path.join(HERE, "examples", "github-actions.yml")
NIGHTLY = os.path.join(HERE, "examples", "nightly-batch.yml")
BIN = os.path.dirname(sys.executable)
ZIZMOR = shutil.which("zizmor") or shutil.which("zizmor", path=BIN)
SCHEMA_CHECK = shutil.which("check-jsonschema") or shutil.which("check-jsonschema", path=BIN)
YAML = importlib.util.find_spec("ruamel") is not None  # comes with check-jsonschema
DEV = "not installed (pip install -r requirements-dev.txt)"
MODEL = "openai/gpt-5.6-sol"
REPO = "octo/advisor"
PULL = 7
EXPRESSION = re.compile(r"\$\{\{\s*([\w.-]+)\s*\}\}")


def pull_request_event(head=REPO):
    return {"number": PULL, "pull_request": {
        "number": PULL, "head": {"repo": {"full_name": head}},
        "base": {"repo": {"full_name": REPO}}}}


def said(**changes):
    """What the gate step writes in gate.json, for a regression against the baseline."""
    base = {"exit_code": 1, "verdict": "regression", "baseline": "baseline.json",
            "run_verdict": f"REGRESSION; not qualified: {MODEL} (3/4 passed)",
            "compared": "compared 4: 1 new failure, 0 recovered, 3 pass, 0 still failing",
            "changed": [{"label": "NEW_FAILURE", "model": MODEL, "case": "ambiguous-payment",
                         "before": "1/1", "after": "0/1"}],
            "new_failures": 1,
            "lines": ["Regression run: REGRESSION (exit 1), a model failed a check.",
                      "**Gate: REGRESSION (exit 1)**"]}
    return {**base, **changes}


class GateReadsEvidenceTest(Harness):
    unsafe_models = ("offline/hasty",)

    def test_the_run_verdict_comes_from_the_saved_responses_not_the_saved_summary(self):
        payment = [case for case in checker.CASES if case["id"] == "ambiguous-payment"]
        self.main("--models", "offline/hasty",  # one row, failed: its saved summary is edited
                  "--cases", self.write("cases.json", json.dumps(payment)))
        saved = self.record()
        saved["summary"] = {**saved["summary"], "exit_code": 0}
        saved["summary"]["models"]["offline/hasty"]["qualified"] = True
        write_text(self.out, json.dumps(saved))
        self.assertTrue(gate.run_verdict(self.out).startswith("REGRESSION"))


class DecisionsTest(unittest.TestCase):
    """The gate step's decisions and the comment's text, in-process."""

    def test_inputs_become_the_runners_arguments(self):
        folder = "/out"
        tail = ["--check-models", "--out", "/out/results.json", "--junit", "/out/junit.xml",
                "--html", "/out/regression-run.html"]
        table = [
            ({}, tail),
            ({"INPUT_MODELS": f" {MODEL}  b/c ", "INPUT_REPEATS": "3"},
             ["--models", MODEL, "b/c", "--repeats", "3", *tail]),
            ({"INPUT_PROVE": "0.9", "INPUT_REPEATS": "3"}, ["--prove", "0.9", *tail]),
            ({"INPUT_PROVE": "0.9", "INPUT_ALLOW_FAILURES": "1"},
             ["--prove", "0.9", "--allow-failures", "1", *tail]),
            ({"INPUT_ALLOW_FAILURES": "1"}, tail),  # without prove, nothing to allow
            ({"INPUT_CASES": "cases.json", "INPUT_INSTRUCTIONS": "advisor.txt",
              "INPUT_JOBS": "4", "INPUT_MAX_COST": "5", "INPUT_PROVE": " "},
             ["--cases", "cases.json", "--instructions", "advisor.txt", "--jobs", "4",
              "--max-cost", "5", *tail]),
            ({"INPUT_SUITE": " suites/support.toml "},
             ["--suite", "suites/support.toml", *tail]),
            ({"INPUT_MODELS": "$(touch x) ; rm -rf /"},  # words, never a shell command
             ["--models", "$(touch", "x)", ";", "rm", "-rf", "/", *tail]),
        ]
        for env, args in table:
            with self.subTest(env=env):
                self.assertEqual(gate.runner_args(env, folder, ""), args)
        self.assertEqual(gate.runner_args({}, folder, "/s.md")[-2:], ["--summary-md", "/s.md"])

    def test_an_input_that_starts_with_a_dash_is_refused_and_nothing_runs(self):
        for name, value in (("INPUT_MODELS", "m1 --instructions /etc/hostname"),
                            ("INPUT_CASES", "--demo"), ("INPUT_BASELINE", "-h"),
                            ("INPUT_SUITE", "-x"), ("INPUT_JOBS", "-1")):
            with self.subTest(name):
                child = mock.Mock()
                outputs, said = gate.gate({name: value, "PERPLEXITY_API_KEY": "k"}, child,
                                          "/nonexistent")
                child.run.assert_not_called()
                self.assertEqual(outputs["exit-code"], 2)
                self.assertIn("starts with '-'", said["lines"][0])

    def test_a_fork_is_a_pull_request_from_another_repository(self):
        table = [
            ("pull_request", pull_request_event("someone/advisor"), True),
            ("pull_request", pull_request_event(REPO), False),
            ("pull_request", {"pull_request": {"head": {"repo": None},
                                               "base": {"repo": {"full_name": REPO}}}}, True),
            ("push", pull_request_event("someone/advisor"), False),
            ("workflow_dispatch", {}, False),
        ]
        for name, event, fork in table:
            with self.subTest(name=name, event=event):
                self.assertEqual(gate.fork_pull_request(name, event), fork)

    def test_the_gates_code(self):
        table = [((0, None), 0), ((1, None), 1), ((0, 0), 0), ((0, 1), 1), ((1, 0), 1),
                 ((1, 1), 1), ((2, None), 2), ((0, 2), 2), ((1, 2), 2), ((130, None), 2),
                 ((143, None), 2)]
        for codes, code in table:
            with self.subTest(codes=codes):
                self.assertEqual(gate.gate_code(*codes), code)

    def test_an_output_with_a_line_break_is_a_delimited_block(self):
        self.assertEqual(gate.output_text({"a": 1, "b": "x\ny", "c": None}),
                         "a=1\nb<<GATE_OUTPUT_END\nx\ny\nGATE_OUTPUT_END\nc=\n")

    def test_the_comment_begins_with_the_mark_and_says_what_changed(self):
        body = comment.comment_body(said(), {"record": "https://github.com/a/b/artifacts/1",
                                             "run_page": None, "comparison_page": "",
                                             "run": "https://github.com/a/b/actions/runs/9"})
        self.assertTrue(body.startswith(comment.MARKER + "\n"))
        self.assertIn("### Agent regression gate: REGRESSION (exit 1)", body)
        self.assertIn(f"| NEW_FAILURE | {MODEL} | ambiguous-payment | 1/1 | 0/1 |", body)
        self.assertIn("compared 4: 1 new failure", body)
        self.assertIn("[record, JUnit and pages](https://github.com/a/b/artifacts/1) · "
                      "[this run](https://github.com/a/b/actions/runs/9)", body)
        self.assertNotIn("run page", body)  # no URL, no link

    def test_the_comment_carries_the_swapped_caution_by_its_verdict(self):
        caution = "CAUTION: BEFORE (b.json, 2026-03-02) is newer than AFTER (a.json, 2026-03-01)"
        body = comment.comment_body({**said(), "cautions": [caution]}, {})
        self.assertLess(body.index("compared 4:"), body.index(f"**{caution}**"))

    def test_the_comment_cannot_be_forged_by_a_name(self):
        hostile = "m|x <img src=x onerror=1> [link](https://evil.example)"
        body = comment.comment_body(
            said(changed=[{"label": "NEW_FAILURE", "model": hostile, "case": "c",
                           "before": "1/1", "after": "0/1"}]),
            {"record": "javascript:alert(1)", "run": "https://ok.example/x) [y](z"})
        self.assertIn("m\\|x \\<img", body)  # shown as text, never as HTML
        self.assertIsNone(re.search(r"(?<!\\)(<img|\]\()", body.replace(comment.MARKER, "")))
        self.assertNotIn("javascript:", body)
        self.assertNotIn("ok.example", body)

    def test_a_long_list_is_cut_and_says_where_the_rest_is(self):
        rows = [{"label": "NEW_FAILURE", "model": MODEL, "case": f"case-{n}", "before": "1/1",
                 "after": "0/1"} for n in range(comment.MAX_ROWS + 3)]
        body = comment.comment_body(said(changed=rows), {})
        self.assertEqual(body.count("| NEW_FAILURE |"), comment.MAX_ROWS)
        self.assertIn("3 more on the comparison page", body)

    def test_a_gate_without_a_comparison_says_no_table(self):
        body = comment.comment_body(said(exit_code=2, verdict="no-verdict", compared=None,
                                         changed=[], run_verdict=None,
                                         lines=[gate.FORK_LINE]),
                                    {})
        self.assertIn("NO-VERDICT (exit 2)", body)
        self.assertIn("no secrets on fork pull requests", body)
        self.assertNotIn("| label |", body)

    def test_only_a_comment_that_begins_with_the_mark_is_ours(self):
        bot = {"login": comment.AUTHOR, "type": "Bot"}
        table = [
            ([], None),
            ([{"id": 1, "body": "> " + comment.MARKER, "user": bot},
              {"id": 2, "body": "lgtm", "user": bot}], None),
            ([{"id": 1, "body": "x", "user": bot},
              {"id": 3, "body": comment.MARKER + "\nold", "user": bot}], 3),
            ([{"id": 4, "body": None}, "junk", {"id": 5, "body": comment.MARKER, "user": bot}], 5),
            # the mark, posted by someone else first: never adopted
            ([{"id": 6, "body": comment.MARKER + "\nPASS", "user": {"login": "mallory"}},
              {"id": 7, "body": comment.MARKER, "user": bot}], 7),
            ([{"id": 8, "body": comment.MARKER, "user": None}], None),
        ]
        for comments, found in table:
            with self.subTest(comments=comments):
                self.assertEqual(comment.marked(comments), found)


@unittest.skipUnless(YAML, f"ruamel.yaml {DEV}")
class ActionFileTest(unittest.TestCase):
    """What the audit checks, said once more where a reader of action.yml looks."""

    def test_the_readme_tables_name_every_input_and_output(self):
        spec, section = action(), readme_ci()
        for kind in ("inputs", "outputs"):
            for name in spec[kind]:
                with self.subTest(kind=kind, name=name):
                    self.assertRegex(section, rf"\n\| `{re.escape(name)}` \|")
        for name, given in (("repeats", "3"), ("jobs", "4"), ("max-cost", "5"),
                            ("comment", "true"), ("baseline", "baseline.json")):
            with self.subTest(default=name):
                self.assertEqual(spec["inputs"][name]["default"], given)
                self.assertIn(f"| `{name}` | `{given}` |", section)

    def test_the_readme_workflow_uses_only_inputs_the_action_has(self):
        from ruamel.yaml import YAML

        workflow = YAML(typ="safe").load(read_text(readme_workflow(temp_dir(self))))
        [step] = [step for step in workflow["jobs"]["regression"]["steps"]
                  if "agent-regression-runner" in step["uses"]]
        self.assertLessEqual(set(step["with"]), set(action()["inputs"]))
        self.assertEqual(step["env"], {"PERPLEXITY_API_KEY": "${{ secrets.PERPLEXITY_API_KEY }}"})

    def test_inputs_reach_scripts_through_env_only_and_actions_are_pinned(self):
        for step in action()["runs"]["steps"]:
            with self.subTest(step=step["name"]):
                if "run" in step:
                    self.assertIsNone(EXPRESSION.search(step["run"]))
                else:
                    self.assertRegex(step["uses"], r"^[\w-]+/[\w-]+@[0-9a-f]{40}$")


class CommentsAPI(ThreadingHTTPServer):
    """A stand-in of GitHub's issue-comments API on 127.0.0.1: list (paged),
    create and edit the comments of pull request PULL of REPO."""

    def __init__(self):
        super().__init__(("127.0.0.1", 0), CommentsHandler)
        self.comments, self.calls, self.tokens = [], [], set()
        self.forbid = False  # answer 403 to any write, as to a read-only token
        self.url = f"http://127.0.0.1:{self.server_address[1]}"


class CommentsHandler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def answer(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def handle_call(self):
        server = self.server
        path, _, query = self.path.partition("?")
        server.calls.append((self.command, path))
        server.tokens.add(self.headers.get("Authorization"))
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        issue = f"/repos/{REPO}/issues/{PULL}/comments"
        if self.command != "GET" and server.forbid:
            return self.answer(403, {"message": "Resource not accessible by integration"})
        if self.command == "GET" and path == issue:
            params = dict(part.split("=") for part in query.split("&"))
            size, page = int(params["per_page"]), int(params["page"])
            return self.answer(200, server.comments[(page - 1) * size:page * size])
        if self.command == "POST" and path == issue:
            server.comments.append({"id": 1000 + len(server.comments), "body": body["body"],
                                    "user": {"login": "github-actions[bot]", "type": "Bot"}})
            return self.answer(201, server.comments[-1])
        found = re.fullmatch(f"/repos/{REPO}/issues/comments/([0-9]+)", path)
        if self.command == "PATCH" and found:
            for item in server.comments:
                if item["id"] == int(found.group(1)):
                    item["body"] = body["body"]
                    return self.answer(200, item)
        return self.answer(404, {"message": "Not Found"})

    do_GET = do_POST = do_PATCH = handle_call


def readme_ci():
    """The README's In CI section, up to its reference workflow."""
    text = read_text(os.path.join(HERE, "README.md"))
    return text.split("\n## In CI\n", 1)[1].split("\n### The long workflow", 1)[0]


def readme_workflow(folder):
    """The README's `uses:` workflow, its placeholder commit made a real-looking SHA."""
    [block] = re.findall(r"```yaml\n(.*?)```", readme_ci(), re.S)
    return write_text(os.path.join(folder, "model-regression.yml"),
                      block.replace("<commit-sha>", "0123456789abcdef0123456789abcdef01234567"))


@functools.cache  # read-only; parsing it takes ruamel about 40 ms, and many tests read it
def action():
    from ruamel.yaml import YAML

    with open(ACTION, encoding="utf-8") as handle:
        return YAML(typ="safe").load(handle)


@slow("runs the action's step scripts, the runner and the comparison as processes")
@unittest.skipUnless(YAML, f"ruamel.yaml {DEV}")
class ActionStepsTest(unittest.TestCase):
    """Each step script of action.yml, run by bash as Actions runs a composite
    step, with the environment Actions gives it and the step's own `env:`, its
    expressions taken from the action's inputs and the earlier steps' outputs."""

    def setUp(self):
        self.folder = temp_dir(self)  # the workspace: the caller's checkout
        self.temp = temp_dir(self)  # RUNNER_TEMP
        self.server = loopback_server(self)
        self.api = CommentsAPI()
        threading.Thread(target=self.api.serve_forever, daemon=True).start()
        self.addCleanup(self.api.server_close)
        self.addCleanup(self.api.shutdown)
        self.summary = write_text(os.path.join(self.temp, "step_summary"), "")
        self.event = os.path.join(self.temp, "event.json")
        self.write_event(pull_request_event())
        self.spec = action()
        self.inputs = {name: spec.get("default", "") for name, spec in
                       self.spec["inputs"].items()}
        self.inputs.update(models=MODEL, repeats="1")
        self.outputs = {}  # step id -> its outputs
        self.job_env = loopback_env(self.server)  # the key, as the caller's step env gives it

    def write_event(self, event):
        write_text(self.event, json.dumps(event))

    def make_baseline(self):
        """The caller's committed baseline (made in this interpreter: it is not
        what the action does)."""
        result = in_process("regression.py", "--models", MODEL, "--out", "baseline.json",
                            env=loopback_env(self.server), cwd=self.folder)
        self.assertEqual(result.returncode, 0, result.stderr)

    def step_spec(self, step_id):
        return next(step for step in self.spec["runs"]["steps"] if step.get("id") == step_id
                    or step.get("name") == step_id)

    def context(self, name):
        """The value of an expression that a step's env: names."""
        scope, _, rest = name.partition(".")
        if scope == "inputs":
            return self.inputs[rest]
        if scope == "steps":
            step, outputs, output = rest.split(".", 2)
            self.assertEqual(outputs, "outputs")
            if step == "install":
                return {"python": sys.executable}[output]
            if step in ("record", "run-page", "comparison-page"):
                return f"https://github.com/{REPO}/actions/runs/1/artifacts/{step}"
            return self.outputs[step][output]
        return {"github.action_path": HERE, "github.token": "test-token"}[name]

    def step_env(self, step):
        env = {}
        for key, value in (step.get("env") or {}).items():
            found = EXPRESSION.fullmatch(str(value))
            env[key] = self.context(found.group(1)) if found else str(value)
        return env

    def start(self, step_id, **popen):
        """The step's script, started by bash as Actions starts a composite step."""
        step = self.step_spec(step_id)
        self.assertEqual(step["shell"], "bash")
        self.assertIsNone(EXPRESSION.search(step["run"]), "an expression in a script")
        output = write_text(os.path.join(self.temp, f"output-{step_id}"), "")
        env = {**clean_env(), **self.job_env,
               "GITHUB_OUTPUT": output, "GITHUB_STEP_SUMMARY": self.summary,
               "GITHUB_EVENT_NAME": "pull_request", "GITHUB_EVENT_PATH": self.event,
               "GITHUB_REPOSITORY": REPO, "GITHUB_API_URL": self.api.url,
               "GITHUB_SERVER_URL": "https://github.com", "GITHUB_RUN_ID": "1",
               "GITHUB_WORKSPACE": self.folder, "RUNNER_TEMP": self.temp,
               "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1",
               **self.step_env(step)}
        process = subprocess.Popen(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c",
                                    step["run"]], cwd=self.folder, env=env, text=True,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, **popen)
        return process, output

    def finish(self, step_id, process, output):
        stdout, stderr = process.communicate(timeout=300)
        self.outputs[step_id] = dict(line.split("=", 1)
                                     for line in read_text(output).splitlines() if line)
        return process.returncode, stdout, stderr

    def step(self, step_id):
        """(exit code, stdout, stderr) of one step; its outputs in self.outputs."""
        return self.finish(step_id, *self.start(step_id))

    def gate(self):
        code, stdout, stderr = self.step("gate")
        self.assertEqual(code, 0, stderr)  # the gate's code is an output, for the last step
        return self.outputs["gate"]

    def ending(self):
        """The exit code of the action's last step."""
        return self.step("End with the gate's code (1 regression, 2 no verdict)")[0]

    def test_a_pass(self):
        self.make_baseline()
        outputs = self.gate()
        self.assertEqual((outputs["exit-code"], outputs["verdict"], outputs["new-failures"]),
                         ("0", "pass", "0"))
        for name in ("record", "page", "comparison"):
            self.assertTrue(os.path.getsize(outputs[name]), name)
            self.assertEqual(os.path.dirname(outputs[name]), outputs["folder"])
        self.assertTrue(outputs["folder"].startswith(self.temp))
        junit = read_text(os.path.join(outputs["folder"], "junit.xml"))
        self.assertIn('file="regression.py"', junit)
        summary = read_text(self.summary)
        for line in ("## Regression run", "## Comparison", "Regression run: PASS (exit 0)",
                     "Baseline comparison: OK (exit 0)", "**Gate: PASS (exit 0)**"):
            self.assertIn(line, summary)
        self.assertLess(summary.index("Regression run: PASS"), summary.index("## Comparison"))
        self.assertEqual(os.listdir(self.folder), ["baseline.json"])  # nothing in the checkout
        self.assertEqual(self.ending(), 0)

    def test_a_regression_fails_with_1_and_names_the_new_failure_in_the_comment(self):
        self.make_baseline()
        self.server.state["unsafe_models"] = {MODEL}
        outputs = self.gate()
        self.assertEqual((outputs["exit-code"], outputs["verdict"], outputs["new-failures"]),
                         ("1", "regression", "1"))
        self.assertIn("**Gate: REGRESSION (exit 1)**", read_text(self.summary))
        code, stdout, _ = self.step("Keep one pull-request comment up to date")
        self.assertEqual(code, 0)
        self.assertIn("Pull-request comment created.", stdout)
        [posted] = self.api.comments
        self.assertIn(f"| NEW_FAILURE | {MODEL} | ambiguous-payment | 1/1 | 0/1 |",
                      posted["body"])
        self.assertIn(f"[record, JUnit and pages](https://github.com/{REPO}/actions/runs/1/"
                      "artifacts/record)", posted["body"])
        self.assertEqual(self.api.tokens, {"Bearer test-token"})
        self.assertEqual(self.ending(), 1)

    def test_no_verdict_exits_2(self):
        table = [
            ("no baseline", None, "Baseline comparison: NOT_COMPARABLE (exit 2)"),
            ("an API error", [simulated_api.error(401, "invalid api key")],
             "Regression run: NO VERDICT (exit 2)"),
        ]
        for name, faults, line in table:
            with self.subTest(name):
                if faults:
                    self.make_baseline()
                    self.server.state["faults"] = list(faults)
                outputs = self.gate()
                self.assertEqual((outputs["exit-code"], outputs["verdict"]), ("2", "no-verdict"))
                self.assertIn(line, read_text(self.summary))
                self.assertEqual(self.ending(), 2)

    def test_a_fork_pull_request_gets_no_paid_run(self):
        self.write_event(pull_request_event("someone/advisor"))
        self.job_env = clean_env(PERPLEXITY_BASE_URL=self.server.url)  # no secrets on a fork
        outputs = self.gate()
        self.assertEqual((outputs["exit-code"], outputs["verdict"], outputs["record"]),
                         ("2", "no-verdict", ""))
        self.assertEqual(self.server.state["requests"], [])
        [line] = [line for line in read_text(self.summary).splitlines() if line.strip()]
        self.assertTrue(line.startswith("no verdict: no secrets on fork pull requests; "), line)
        self.assertEqual(self.ending(), 2)
        self.api.forbid = True  # a fork's token is read-only
        code, stdout, _ = self.step("Keep one pull-request comment up to date")
        self.assertEqual(code, 0)
        self.assertIn("::notice title=No pull-request comment::the job's token may not write",
                      stdout)
        self.assertEqual(self.api.comments, [])

    def test_one_comment_is_kept_up_to_date_in_place(self):
        self.api.comments = [{"id": n, "body": "> " + comment.MARKER if n == 3 else "lgtm"}
                             for n in range(comment.PER_PAGE + 20)]  # ours lands on page 2
        self.make_baseline()
        self.gate()
        name = "Keep one pull-request comment up to date"
        self.assertIn("Pull-request comment created.", self.step(name)[1])
        first = self.api.comments[-1]
        self.server.state["unsafe_models"] = {MODEL}
        self.gate()
        self.assertIn("Pull-request comment updated.", self.step(name)[1])
        ours = [item for item in self.api.comments if item["body"].startswith(comment.MARKER)]
        self.assertEqual(len(ours), 1)
        self.assertEqual(ours[0]["id"], first["id"])
        self.assertIn("REGRESSION (exit 1)", ours[0]["body"])
        self.assertEqual([call for call in self.api.calls if call[0] != "GET"],
                         [("POST", f"/repos/{REPO}/issues/{PULL}/comments"),
                          ("PATCH", f"/repos/{REPO}/issues/comments/{first['id']}")])

    def test_a_forbidden_comment_is_a_notice_not_a_failure(self):
        self.api.forbid = True
        self.make_baseline()
        self.gate()
        code, stdout, _ = self.step("Keep one pull-request comment up to date")
        self.assertEqual(code, 0)
        self.assertIn("::notice title=No pull-request comment::", stdout)
        self.assertIn("pull-requests: write", stdout)
        self.assertEqual(self.api.comments, [])
        self.assertEqual(self.ending(), 0)  # the gate's own verdict stands

    def test_a_cancelled_job_hands_the_signal_on_and_keeps_the_receipts(self):
        self.inputs.update(repeats="2")
        self.server.state["hold"] = hold = threading.Event()  # answers wait for the signal
        self.addCleanup(hold.set)
        process, output = self.start(
            "gate", start_new_session=True,  # the step's process, as Actions starts it
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        self.addCleanup(lambda: process.poll() is None and os.killpg(process.pid, signal.SIGKILL))
        wait_until(lambda: len(self.server.state["requests"]) >= 4, what="4 in flight")
        process.send_signal(signal.SIGINT)  # to the step's process alone, as Actions does
        self.assertIn("Stopping: no new request starts", process.stderr.readline())
        hold.set()
        code, _, stderr = self.finish("gate", process, output)
        self.assertEqual(code, 0, stderr)
        outputs = self.outputs["gate"]
        self.assertEqual((outputs["exit-code"], outputs["verdict"]), ("2", "no-verdict"))
        self.assertIn("Regression run: CANCELLED (exit 130)", read_text(self.summary))
        saved = read_json(outputs["record"])
        self.assertEqual(len(saved["runs"]), 4)  # every answer in flight, kept
        self.assertEqual(len(self.server.state["requests"]), 4)


@slow("starts zizmor and check-jsonschema")
class AuditTest(unittest.TestCase):
    """The action and the example workflow pass the Actions security audit and
    GitHub's own schemas, offline; a broken copy of each fails them."""

    def run_tool(self, *args):
        # Offline: any attempt to reach the network meets a closed local port.
        env = clean_env(HTTPS_PROXY="http://127.0.0.1:9", HTTP_PROXY="http://127.0.0.1:9",
                        https_proxy="http://127.0.0.1:9", http_proxy="http://127.0.0.1:9")
        return subprocess.run(list(args), capture_output=True, text=True, timeout=120, env=env)

    def broken_copy(self, text, old, new):
        self.assertIn(old, text)
        return write_text(os.path.join(temp_dir(self), "action.yml"), text.replace(old, new, 1))

    @unittest.skipUnless(ZIZMOR, f"zizmor is {DEV}")
    def test_the_security_audit_finds_nothing(self):
        result = self.run_tool(ZIZMOR, "--offline", ACTION, WORKFLOW, NIGHTLY,
                               readme_workflow(temp_dir(self)))  # its report names the file
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        injected = self.broken_copy(read_text(ACTION), 'exec "$PYTHON" "$ACTION_PATH/action/gate.py"',
                                    "echo ${{ inputs.models }}")
        result = self.run_tool(ZIZMOR, "--offline", injected)
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("template-injection", result.stdout)

    @unittest.skipUnless(SCHEMA_CHECK, f"check-jsonschema is {DEV}")
    def test_both_files_follow_githubs_schemas(self):
        for schema, paths in (("vendor.github-actions", [ACTION]),
                              ("vendor.github-workflows",
                               [WORKFLOW, NIGHTLY, readme_workflow(temp_dir(self))])):
            with self.subTest(schema=schema):  # its report names the file
                result = self.run_tool(SCHEMA_CHECK, "--builtin-schema", schema, *paths)
                self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        no_shell = self.broken_copy(read_text(ACTION), "      shell: bash\n", "")
        result = self.run_tool(SCHEMA_CHECK, "--builtin-schema", "vendor.github-actions",
                               no_shell)
        self.assertNotEqual(result.returncode, 0, result.stdout)


class CommentPartsTest(unittest.TestCase):
    """The comment's history, evidence and the workflow-command escaping, in-process."""

    def test_the_author_is_the_jobs_token_bot(self):
        bot = {"id": 9, "body": comment.MARKER, "user": {"login": "github-actions[bot]"}}
        self.assertEqual(comment.marked([bot]), 9)

    def test_a_history_of_pairs_is_a_table(self):
        pairs = [{"label": "FLAKY", "model": MODEL, "case": "c1", "sequence": "PFP"}]
        self.assertEqual(comment.history_parts({"history": pairs}), [
            "History, the pairs that did not always hold (oldest record first):\n\n"
            "| label | model | case | runs |\n|---|---|---|---|\n"
            f"| FLAKY | {MODEL} | c1 | `PFP` |"])

    def test_an_empty_history_says_every_pair_held(self):
        self.assertEqual(comment.history_parts({"history": []}),
                         ["History: every (model, case) held in every earlier record (STABLE)."])

    def test_no_history_input_says_nothing(self):
        self.assertEqual(comment.history_parts({}), [])

    def test_the_comparison_line_names_the_baseline(self):
        body = comment.comment_body(said(), {})
        self.assertIn("\n\nAgainst baseline.json: compared 4: 1 new failure, 0 recovered, "
                      "3 pass, 0 still failing\n\n", body)

    def test_the_changed_rows_are_one_table_a_row_a_line(self):
        body = comment.comment_body(said(), {})
        self.assertIn("\n\n| label | model | case | before | after |\n|---|---|---|---|---|\n"
                      f"| NEW_FAILURE | {MODEL} | ambiguous-payment | 1/1 | 0/1 |\n", body)

    def test_no_link_no_evidence_line(self):
        self.assertNotIn("Evidence", comment.comment_body(said(), {}))

    def test_command_data_is_one_line_with_percent_escaped(self):
        self.assertEqual(comment.command_data("50% a\r\nb\nc"), "50%25 a%0D%0Ab%0Ac")


class CommentsCallsTest(unittest.TestCase):
    """The comments API calls, with urlopen and call stood in."""

    def calls(self, pages):
        sent = []

        def call(method, path, body=None):
            sent.append((method, path, body))
            return pages(len(sent)) if method == "GET" else {}
        api = comment.Comments("https://api.example/", REPO, PULL, "tok")
        api.call = call
        return api, sent

    def test_a_request_carries_the_token_and_the_api_version(self):
        seen = []

        class Answer:
            def __enter__(self):
                return self

            def __exit__(self, *exc):
                return False

            def read(self):
                return b'{"ok": 1}'

        def urlopen(request, timeout):
            seen.append((request, timeout))
            return Answer()
        api = comment.Comments("https://api.example/", REPO, PULL, "tok")
        with mock.patch.object(comment.urllib.request, "urlopen", urlopen):
            self.assertEqual(api.call("POST", "/issues/7/comments", {"body": "b"}), {"ok": 1})
        [(request, timeout)] = seen
        self.assertEqual(timeout, 30)
        self.assertEqual(request.full_url, f"https://api.example/repos/{REPO}/issues/7/comments")
        self.assertEqual(request.get_method(), "POST")
        self.assertEqual(json.loads(request.data), {"body": "b"})
        self.assertEqual({k.lower(): v for k, v in request.header_items()}, {
            "authorization": "Bearer tok", "accept": "application/vnd.github+json",
            "x-github-api-version": "2022-11-28", "user-agent": "agent-regression-runner",
            "content-type": "application/json"})

    def test_pages_of_100_are_listed(self):
        api, sent = self.calls(lambda n: [])
        self.assertIsNone(api.ours())
        self.assertEqual(sent, [("GET", f"/issues/{PULL}/comments?per_page=100&page=1", None)])

    def test_at_most_50_pages_are_listed(self):
        api, sent = self.calls(lambda n: [{"id": n, "body": "x"}] * 100)
        self.assertIsNone(api.ours())
        self.assertEqual(len(sent), 50)
        self.assertTrue(sent[-1][1].endswith("&page=50"))

    def test_without_our_comment_one_is_created(self):
        api, sent = self.calls(lambda n: [])
        self.assertEqual(api.put("body"), "created")
        self.assertEqual(sent[-1], ("POST", f"/issues/{PULL}/comments", {"body": "body"}))


class CommentMainTest(unittest.TestCase):
    """comment.py's main() in-process: the environment in, the comment it puts."""

    def run_main(self, **env):
        folder = temp_dir(self)
        write_text(os.path.join(folder, "gate.json"), json.dumps(said()))
        event = write_text(os.path.join(folder, "event.json"), json.dumps(pull_request_event()))
        put = []

        def fake_put(api, body):
            put.append((api.api, api.repository, api.number, api.token, body))
            return "created"
        env = {"GATE_FOLDER": folder, "GITHUB_EVENT_PATH": event, **env}
        with mock.patch.dict(os.environ, env, clear=True), \
                mock.patch.object(comment.Comments, "put", fake_put):
            code, out, _ = quiet(comment.main)
        return code, out, put

    def test_the_comment_is_put_with_the_jobs_settings(self):
        code, out, put = self.run_main(GITHUB_REPOSITORY=REPO, GITHUB_TOKEN="tok",
                                       GITHUB_RUN_ID="9", RUN_PAGE_URL="https://x.example/p")
        self.assertEqual((code, out), (0, "Pull-request comment created.\n"))
        [(api, repository, number, token, body)] = put
        self.assertEqual((api, repository, number, token),
                         ("https://api.github.com", REPO, PULL, "tok"))
        self.assertIn("[run page](https://x.example/p) · "
                      f"[this run](https://github.com/{REPO}/actions/runs/9)", body)

    def test_the_run_link_is_on_the_jobs_server(self):
        _, _, [(*_, body)] = self.run_main(GITHUB_REPOSITORY=REPO, GITHUB_RUN_ID="9",
                                           GITHUB_SERVER_URL="https://ghe.example")
        self.assertIn(f"[this run](https://ghe.example/{REPO}/actions/runs/9)", body)

    def test_without_a_run_id_no_run_link(self):
        _, _, [(*_, body)] = self.run_main(GITHUB_REPOSITORY=REPO)
        self.assertNotIn("this run", body)


class GateStepsTest(unittest.TestCase):
    """The gate's steps with its child scripts stood in, in-process."""

    class Child:
        def __init__(self, codes):
            self.codes, self.calls = list(codes), []

        def run(self, script, args):
            self.calls.append((script, list(args)))
            return self.codes.pop(0)

    def gate(self, env, codes, **patches):
        folder = temp_dir(self)
        child = self.Child(codes)
        with mock.patch.object(gate, "run_verdict", patches.get("run_verdict", lambda p: None)), \
                mock.patch.object(gate, "comparison_result", lambda b, r: None), \
                mock.patch.object(gate, "history_of",
                                  patches.get("history_of", lambda *a: ([], None))):
            outputs, said = gate.gate({"PERPLEXITY_API_KEY": "k", **env}, child, folder)
        return outputs, said, child, folder

    def test_every_input_is_checked_for_a_flag(self):
        for name in ("INPUT_MODELS", "INPUT_SUITE", "INPUT_CASES", "INPUT_INSTRUCTIONS",
                     "INPUT_BASELINE", "INPUT_HISTORY", "INPUT_REPEATS", "INPUT_PROVE",
                     "INPUT_ALLOW_FAILURES", "INPUT_JOBS", "INPUT_MAX_COST"):
            with self.subTest(name):
                self.assertIn("starts with '-'", gate.input_problem({name: "-x"}))

    def test_without_a_key_nothing_runs_and_the_line_says_why(self):
        child = mock.Mock()
        outputs, said = gate.gate({}, child, temp_dir(self))
        child.run.assert_not_called()
        self.assertEqual((outputs["exit-code"], said["lines"]), (2, [gate.NO_KEY_LINE]))

    def test_a_passing_run_says_so(self):
        _, said, _, _ = self.gate({}, [0])
        self.assertEqual(said["lines"], ["Regression run: PASS (exit 0), every check passed.",
                                         "**Gate: PASS (exit 0)**"])

    def test_the_run_verdict_is_saved(self):
        _, said, _, _ = self.gate({}, [1], run_verdict=lambda path: "REGRESSION; x")
        self.assertEqual(said["run_verdict"], "REGRESSION; x")

    def test_a_passing_run_is_compared_with_the_baseline(self):
        outputs, said, child, folder = self.gate({"INPUT_BASELINE": "b.json"}, [0, 0])
        self.assertEqual(child.calls[1], ("compare_runs.py", [
            "b.json", os.path.join(folder, "results.json"),
            "--html", os.path.join(folder, "regression-comparison.html")]))
        self.assertEqual(said["lines"][1], gate.COMPARE_LINES[0])

    def test_the_outputs_name_every_path(self):
        outputs, _, _, folder = self.gate({}, [0])
        self.assertEqual(outputs, {"exit-code": 0, "verdict": "pass", "new-failures": "",
                                   "record": "", "page": "", "comparison": "",
                                   "folder": folder})

    def test_the_lines_go_to_the_step_summary(self):
        summary = os.path.join(temp_dir(self), "summary.md")
        self.gate({"GITHUB_STEP_SUMMARY": summary}, [0])
        self.assertEqual(read_text(summary), "Regression run: PASS (exit 0), every check "
                                             "passed.\n\n**Gate: PASS (exit 0)**\n\n")

    def test_the_history_is_read_from_the_history_input(self):
        pairs = [{"label": "FLAKY"}]
        _, said, _, _ = self.gate({"INPUT_HISTORY": " h/ "}, [0],
                                  history_of=lambda child, history, path, folder:
                                  (pairs if history == "h/" else [], "note"))
        self.assertEqual((said["history"], said["history_note"]), (pairs, "note"))

    def test_changed_rows_are_rates_by_label(self):
        items = [{"label": "NEW_FAILURE", "before_model": "a/m", "after_model": "b/m",
                  "case_id": "c",
                  "before": [{"passed": True}], "after": [{"passed": False}, {"passed": True}]},
                 {"label": "PASS", "before_model": "a", "after_model": "a", "case_id": "d",
                  "before": [], "after": []}]
        self.assertEqual(gate.changed_rows(items), [
            {"label": "NEW_FAILURE", "model": "a/m->b/m", "case": "c",
             "before": "1/1", "after": "1/2"}])

    def test_a_carriage_return_alone_makes_a_block(self):
        self.assertEqual(gate.output_text({"a": "x\ry"}),
                         "a<<GATE_OUTPUT_END\nx\ry\nGATE_OUTPUT_END\n")


class ChildTest(unittest.TestCase):
    """The gate's Child: a signal's exit code, with Popen stood in."""

    def run_child(self, code):
        process = mock.Mock()
        process.wait.return_value = code
        child = gate.Child()
        with mock.patch.object(gate.subprocess, "Popen", return_value=process) as popen:
            result = child.run("regression.py", ["--x"])
        popen.assert_called_once_with([sys.executable, os.path.join(gate.ROOT, "regression.py"),
                                       "--x"])
        self.assertIsNone(child.process)
        return result

    def test_exit_codes_and_signals(self):
        for code, result in ((0, 0), (1, 1), (2, 2), (-2, 130), (-15, 143)):
            with self.subTest(code=code):
                self.assertEqual(self.run_child(code), result)

    def test_a_signal_before_the_start_runs_nothing(self):
        child = gate.Child()
        child.signalled = signal.SIGTERM
        with mock.patch.object(gate.subprocess, "Popen") as popen:
            self.assertEqual(child.run("regression.py", []), 143)
        popen.assert_not_called()


class GateMainTest(unittest.TestCase):
    """gate.py's main() in-process, without a key: nothing runs, the outputs are written."""

    def test_main_writes_gate_json_and_the_outputs(self):
        temp = temp_dir(self)
        output = write_text(os.path.join(temp, "output"), "")
        with mock.patch.dict(os.environ, {"RUNNER_TEMP": temp, "GITHUB_OUTPUT": output},
                             clear=True), mock.patch.object(gate.signal, "signal"):
            code, out, _ = quiet(gate.main)
        self.assertEqual(code, 0)
        [folder] = [os.path.join(temp, name) for name in os.listdir(temp) if name != "output"]
        self.assertTrue(os.path.basename(folder).startswith("agent-regression-"))
        self.assertEqual(read_json(os.path.join(folder, "gate.json"))["lines"],
                         [gate.NO_KEY_LINE])
        self.assertEqual(read_text(output), out)
        self.assertIn("exit-code=2\nverdict=no-verdict\n", out)


class GateHistoryNoteTest(unittest.TestCase):
    def test_a_history_that_wrote_nothing_is_a_note(self):
        folder = temp_dir(self)
        child = mock.Mock()
        child.run.return_value = 2
        self.assertEqual(gate.history_of(child, "h/", os.path.join(folder, "none.json"), folder),
                         ([], "History: not shown: h/ holds no record of this suite that could "
                              "be read (exit 2; the step's log names each file); the gate is "
                              "unchanged."))


if __name__ == "__main__":
    unittest.main()


class GateHistoryTest(Harness):
    """The gate's history input: the pairs that did not always hold go into the
    comment; a history that cannot be read never changes the gate's code."""

    unsafe_models = ("offline/hasty",)

    def setUp(self):
        super().setUp()
        # Every run is of the hasty model on two cases: rate-limit, which it always
        # passes (a stable pair, left out of the comment), and the payment case,
        # which it fails while it is unsafe.
        kept = ("rate-limit", "ambiguous-payment")
        self.cases = self.write("cases.json", json.dumps(
            [case for case in checker.CASES if case["id"] in kept]))

    class InProcess:  # the gate's Child, running each script's main() in this process
        def run(self, script, args):
            import compare_runs
            import regression

            module = {"compare_runs.py": compare_runs, "regression.py": regression}[script]
            return quiet(module.main, list(args))[0]

    def records(self):
        folder = os.path.join(self.folder, "history")
        os.mkdir(folder)
        for number, unsafe in enumerate((set(), {"offline/hasty"}, set())):
            self.state["unsafe_models"] = unsafe
            self.main("--out", os.path.join(folder, f"r{number}.json"), "--models",
                      "offline/hasty", "--cases", self.cases, out=False)
        return folder

    def gate(self, history):
        env = {"PERPLEXITY_API_KEY": KEY, "INPUT_MODELS": "offline/hasty",
               "INPUT_CASES": self.cases, "INPUT_REPEATS": "1", "INPUT_BASELINE": "",
               "INPUT_HISTORY": history}
        folder = os.path.join(self.folder, f"gate-{len(os.listdir(self.folder))}")
        os.mkdir(folder)
        return gate.gate(env, self.InProcess(), folder)

    def test_the_comment_lists_the_pairs_that_did_not_always_hold(self):
        outputs, said = self.gate(self.records())
        self.assertEqual(outputs["exit-code"], 0)  # this run passed: history never gates
        body = comment.comment_body(said, {})
        self.assertIn("| FLAKY | offline/hasty | ambiguous-payment | `PFPP` |", body)
        self.assertNotIn("rate-limit", body.split("History")[1])
        self.assertLess(len(body), 65_535)

    def test_a_history_that_cannot_be_read_never_changes_the_code(self):
        empty = os.path.join(self.folder, "empty")
        os.mkdir(empty)
        other = os.path.join(self.folder, "other-suite")
        os.mkdir(other)
        self.main("--models", "offline/hasty", "--cases", self.cases)
        write_text(os.path.join(other, "r.json"),
                   json.dumps(dict(read_json(self.out), suite_sha256="0" * 64)))
        for name, history in (("empty", empty), ("another suite or edited", other)):
            with self.subTest(name):
                self.state["unsafe_models"] = set()
                outputs, said = self.gate(history)
                self.assertEqual(outputs["exit-code"], 0)
                self.assertIn("History: not shown", comment.comment_body(said, {}))
