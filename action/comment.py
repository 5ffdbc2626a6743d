"""The action's comment step: one pull-request comment with the gate's verdict,
kept up to date in place run after run.

    GATE_FOLDER=/tmp/agent-regression-x GITHUB_TOKEN=... GITHUB_REPOSITORY=o/r \
        GITHUB_EVENT_PATH=event.json python action/comment.py

It reads what the gate step said (gate.json in GATE_FOLDER), finds this
action's comment on the pull request by the hidden mark it begins with, and
edits it; without one it adds one. It uses the GitHub REST API at
GITHUB_API_URL with GITHUB_TOKEN, and links the run's evidence: RECORD_URL
(the record, JUnit and pages), RUN_PAGE_URL and COMPARISON_PAGE_URL (the pages
alone), else the run itself (GITHUB_SERVER_URL, GITHUB_REPOSITORY,
GITHUB_RUN_ID). A token that may not write comments (HTTP 403, as on a pull
request from a fork) means no comment and a notice; any other failure, a
warning. It needs no package: the standard library (urllib) and the runner's
own Markdown escaping (reports.py).

Exit code: always 0; a comment never changes the gate's verdict.
"""

import json
import os
import re
import sys
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from reports import cell  # noqa: E402 - the runner's Markdown escaping, from its folder

MARKER = "<!-- agent-regression-runner -->"  # GitHub shows no comment; finds ours
AUTHOR = "github-actions[bot]"  # who writes with the GITHUB_TOKEN a job is given
PER_PAGE = 100  # the most comments the API lists at once
MAX_PAGES = 50  # 5,000 comments: a pull request with more gets a new comment
MAX_ROWS = 50  # rows listed in a comment; the comparison page has them all
TIMEOUT = 30  # seconds for one API request
URL = re.compile(r"https?://[^\s()<>\[\]]+")  # a link that cannot break out of Markdown
NO_WRITE = ("the job's token may not write pull-request comments (HTTP 403; on a pull request "
            "from a fork it never may); give the job permissions: pull-requests: write, or "
            "set the action's input comment: false")

# --------------------------------------------------------------------------
# Pure: what the comment says, which comment is ours.
# --------------------------------------------------------------------------


def link(text, url):
    return f"[{text}]({url})" if url and URL.fullmatch(url) else None


def history_parts(said):
    """The comment's history: the (model, case) pairs that are not STABLE across
    the earlier records and this run, or why there is none."""
    if said.get("history_note"):
        return [cell(said["history_note"])]
    pairs = said.get("history") or []
    if "history" not in said:
        return []
    if not pairs:
        return ["History: every (model, case) held in every earlier record (STABLE)."]
    table = ["History, the pairs that did not always hold (oldest record first):", "",
             "| label | model | case | runs |", "|---|---|---|---|"]
    table += [f"| {cell(pair.get('label'))} | {cell(pair.get('model'))} | "
              f"{cell(pair.get('case'))} | `{cell(pair.get('sequence'))}` |"
              for pair in pairs[:MAX_ROWS]]
    if len(pairs) > MAX_ROWS:
        table.append(f"| ... | {len(pairs) - MAX_ROWS} more in the history page | | |")
    return ["\n".join(table)]


def comment_body(said, links):
    """The comment's Markdown: the verdict, the changed (model, case) rows, the links.

    said: what the gate step wrote in gate.json; links: {"record", "run_page",
    "comparison_page", "run"} -> URL or None.
    """
    code = said["exit_code"]
    parts = [MARKER, f"### Agent regression gate: {said['verdict'].upper()} (exit {code})"]
    parts += [cell(line) for line in said["lines"] if not line.startswith("**Gate: ")]
    if said.get("run_verdict"):
        parts.append(f"Run: {cell(said['run_verdict'])}")
    if said.get("compared"):
        parts.append(f"Against {cell(said['baseline'])}: {cell(said['compared'])}")
        parts += [f"**{cell(line)}**" for line in said.get("cautions", [])]
        rows = said["changed"]
        if rows:
            table = ["| label | model | case | before | after |", "|---|---|---|---|---|"]
            table += [f"| {cell(row['label'])} | {cell(row['model'])} | {cell(row['case'])} "
                      f"| {cell(row['before'])} | {cell(row['after'])} |"
                      for row in rows[:MAX_ROWS]]
            if len(rows) > MAX_ROWS:
                table.append(f"| ... | {len(rows) - MAX_ROWS} more on the comparison page "
                             "| | | |")
            parts.append("\n".join(table))
        else:
            parts.append("No (model, case) changed its pass rate against the baseline.")
    parts += history_parts(said)
    evidence = [link(text, links.get(key)) for key, text in (
        ("record", "record, JUnit and pages"), ("run_page", "run page"),
        ("comparison_page", "comparison page"), ("run", "this run"))]
    evidence = [item for item in evidence if item]
    if evidence:
        parts.append("Evidence: " + " · ".join(evidence))
    return "\n\n".join(parts) + "\n"


def marked(comments):
    """The id of the first comment this action wrote: one that begins with its
    mark and whose author is the job's token (anyone may post the mark, which
    GitHub does not show, to have the verdict written where they can edit it)."""
    for comment in comments:
        if (isinstance(comment, dict) and str(comment.get("body") or "").startswith(MARKER)
                and isinstance(comment.get("user"), dict)
                and comment["user"].get("login") == AUTHOR):
            return comment.get("id")
    return None


def command_data(text):
    """text fit for a workflow command (::notice::): one line, % escaped."""
    return str(text).replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


# --------------------------------------------------------------------------
# I/O: the comments API.
# --------------------------------------------------------------------------


class Comments:
    """The issue comments of one pull request, through the REST API."""

    def __init__(self, api, repository, number, token):
        self.api, self.repository, self.number, self.token = (
            api.rstrip("/"), repository, number, token)

    def call(self, method, path, body=None):
        request = urllib.request.Request(
            f"{self.api}/repos/{self.repository}{path}", method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {self.token}",
                     "Accept": "application/vnd.github+json",
                     "X-GitHub-Api-Version": "2022-11-28",
                     "User-Agent": "agent-regression-runner",
                     **({} if body is None else {"Content-Type": "application/json"})})
        with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
            return json.load(response)

    def ours(self):
        """The id of this action's comment on the pull request, or None."""
        for page in range(1, MAX_PAGES + 1):
            comments = self.call("GET", f"/issues/{self.number}/comments"
                                        f"?per_page={PER_PAGE}&page={page}")
            found = marked(comments)
            if found is not None or len(comments) < PER_PAGE:
                return found
        return None

    def put(self, body):
        """"updated" or "created": the one comment of this action now says body."""
        found = self.ours()
        if found is not None:
            self.call("PATCH", f"/issues/comments/{found}", {"body": body})
            return "updated"
        self.call("POST", f"/issues/{self.number}/comments", {"body": body})
        return "created"


def read_json(path):
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def main():
    env = os.environ
    try:
        said = read_json(os.path.join(env.get("GATE_FOLDER", ""), "gate.json"))
        event = read_json(env.get("GITHUB_EVENT_PATH", ""))
    except (OSError, ValueError) as exc:
        print(f"::warning title=No pull-request comment::{command_data(exc)}")
        return 0
    number = (event.get("pull_request") or {}).get("number") or event.get("number")
    if not number:
        print("::notice title=No pull-request comment::this event is not a pull request")
        return 0
    run = "/".join([env.get("GITHUB_SERVER_URL", "https://github.com"),
                    env.get("GITHUB_REPOSITORY", ""), "actions", "runs",
                    env.get("GITHUB_RUN_ID", "")])
    body = comment_body(said, {"record": env.get("RECORD_URL"),
                               "run_page": env.get("RUN_PAGE_URL"),
                               "comparison_page": env.get("COMPARISON_PAGE_URL"),
                               "run": run if env.get("GITHUB_RUN_ID") else None})
    comments = Comments(env.get("GITHUB_API_URL", "https://api.github.com"),
                        env.get("GITHUB_REPOSITORY", ""), number, env.get("GITHUB_TOKEN", ""))
    try:
        print(f"Pull-request comment {comments.put(body)}.")
    except urllib.error.HTTPError as exc:
        if exc.code == 403:
            print(f"::notice title=No pull-request comment::{NO_WRITE}")
        else:
            print(f"::warning title=No pull-request comment::the GitHub API answered "
                  f"HTTP {exc.code} {command_data(exc.reason)}")
    except (OSError, ValueError) as exc:  # URLError, a timeout, a body that is not JSON
        print(f"::warning title=No pull-request comment::{command_data(exc)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
