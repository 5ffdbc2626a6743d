"""The documentation does what it says: README.md and every page of docs/.

- Every ```sh block runs as written, with bash -e, in order, in a new folder
  per page that holds the project's files and .venv, against one simulated
  API on 127.0.0.1 (a fake key; proxies point at a closed local port, so no
  other address can answer). A block passes with exit 0, or with exit 1 when
  its last command is regression.py or compare_runs.py reaching a verdict
  (a demo's unsafe model, caught). Files a page takes as given are made first
  (GIVEN). A block that cannot run here has `<!-- doc-test: skip (why) -->`
  right before it, and the reason is required.
- Shell is written ```sh (never bash, console or shell); output ```text.
- Every regression.py and compare_runs.py command line anywhere (any block,
  skipped or not, and inline code) is parsed by the script's own parser.
- Relative links resolve (files and #headings); the README links every page,
  every page links back; the README stays a front page of at most 250 lines.
"""

import atexit
import contextlib
import dataclasses
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

import compare_runs
import regression
from testing import HERE, KEY, in_process, loopback_env, read_json, read_text, slow, temp_dir

README = "README.md"
PAGES = [README] + sorted(os.path.join("docs", name) for name in os.listdir(
    os.path.join(HERE, "docs")) if name.endswith(".md"))
README_LINES = 250
SKIP = re.compile(r"<!-- doc-test: skip \((?P<reason>.*)\) -->")
SHELL = "sh"
NOT_SHELL = {"bash", "shell", "console", "zsh", "shell-session", "terminal", "shellsession"}
LOOKS_TYPED = re.compile(r"^(\$ |\.venv/bin/|make |cp |export )")  # a command in an unlabelled block
FENCE = re.compile(r"^(?P<indent> *)(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")
PARSERS = {"regression": regression.parse_args, "compare_runs": compare_runs.parse_args}
SCRIPT = re.compile(r"(?<![\w.-])(?:[\w.-]*/)*(?P<name>regression|compare_runs)\.py(?![\w.:/-])")
INVOKED = re.compile(r"python[\d.]*\s[^|;&]*$|python[\d.]*\s*$")  # the script is run, not named
# "README: A heading" or "docs/page.md: A heading" or a bare "docs/page.md" in a script.
POINTER = re.compile(r"\b(?P<page>README|docs/[\w-]+\.md)(?:\.md)?(?:: (?P<heading>[A-Z][^).;:\n\"]*))?")
LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)|<img [^>]*src=\"(?P<src>[^\"]+)\"")
LINKED = ("examples", "action", "testdata", "tools", "Makefile", "requirements.txt",
          "requirements-dev.txt", "action.yml")  # beside the *.py files, in a page's folder
PROXY = "http://127.0.0.1:9"  # closed: any request that is not to the simulated API fails
BLOCK_SECONDS = 300


@dataclasses.dataclass
class Block:
    page: str  # path from the project root
    line: int  # of the opening fence, from 1
    lang: str
    text: str
    skip: str = None  # the reason, for a skipped block


@dataclasses.dataclass
class Page:
    path: str
    lines: list
    blocks: list
    prose: list  # (line number, text) of every line outside a fenced block
    markers: list  # (line number, text) of every line that mentions doc-test:


def read_page(path):
    lines = read_text(os.path.join(HERE, path)).splitlines()
    blocks, prose, markers, fence = [], [], [], None
    for number, line in enumerate(lines, 1):
        if line.lstrip().startswith("<!--") and "doc-test" in line and fence is None:
            markers.append((number, line))
        found = FENCE.match(line)
        if fence is None:
            if found:
                before = lines[number - 2] if number > 1 else ""
                skip = SKIP.fullmatch(before.strip())
                fence = (found["fence"], len(found["indent"]))
                info = found["info"].strip()
                blocks.append(Block(path, number, info.split()[0] if info else "", "",
                                    skip["reason"] if skip else None))
                body = []
            else:
                prose.append((number, line))
        elif (found and found["fence"][0] == fence[0][0] and len(found["fence"]) >= len(fence[0])
              and not found["info"].strip()):
            blocks[-1].text = "\n".join(body) + "\n"
            fence = None
        else:
            body.append(line[min(fence[1], len(line) - len(line.lstrip(" "))):])
    return Page(path, lines, blocks, prose, markers)


def logical_lines(text, shell):
    """(line within the text from 1, logical line): continuations joined, shell
    comments dropped."""
    joined, start = [], None
    for number, line in enumerate(text.splitlines(), 1):
        start = number if start is None else start
        if line.endswith("\\"):
            joined.append(line[:-1])
            continue
        joined.append(line)
        logical = " ".join(joined)
        joined, first = [], start
        start = None
        if shell:
            logical = without_comment(logical)
        if logical.strip():
            yield first, logical


def without_comment(line):
    """A shell line without its # comment (a # that starts a word, outside quotes)."""
    quote = None
    for i, char in enumerate(line):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def arguments(rest, shell):
    """The words after a script's name, up to the first shell operator; None
    when its quoting cannot be read."""
    lexer = shlex.shlex(rest, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#" if shell else ""
    words = []
    try:
        for token in lexer:
            if set(token) <= set("();<>|&"):
                if words and words[-1].isdigit() and token[0] in "<>":
                    words.pop()  # 2> : a redirection, not an argument
                break
            words.append(token)
    except ValueError:
        return None
    return words


def commands(text, first_line, shell, invoked_only=False):
    """(line, script, arguments or None) of every regression.py and
    compare_runs.py command line in a text. A bare mention is no command, and
    where invoked_only (output, YAML), neither is a name that python does not
    run: "compare_runs.py of a record" in a table's title."""
    for number, logical in logical_lines(text, shell):
        for found in SCRIPT.finditer(logical):
            words = arguments(logical[found.end():], shell)
            invoked = INVOKED.search(logical[:found.start()])
            if not invoked and (invoked_only or words == []):
                continue
            yield first_line + number - 1, found["name"], words


def inline_code(page):
    """(line, text) of every inline code span in a page's prose."""
    paragraph, start = [], None
    for number, line in page.prose + [(None, "")]:
        if line.strip():
            start = number if start is None else start
            paragraph.append(line)
            continue
        text = "\n".join(paragraph)
        for found in re.finditer(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", text, re.S):
            yield start + text.count("\n", 0, found.start()), found[2].replace("\n", " ")
        paragraph, start = [], None


def every_command(page):
    for block in page.blocks:
        shell = block.lang == SHELL
        yield from commands(block.text, block.line + 1, shell, invoked_only=not shell)
    for number, span in inline_code(page):
        yield from commands(span, number, False)


def parse_problem(script, words):
    """None when the script's own parser takes the words, else its message."""
    folder = tempfile.mkdtemp()
    try:
        summary = os.path.join(folder, "step-summary.md")
        expanded = [re.sub(r"\$\{?(\w+)\}?", lambda m: summary if m[1] == "GITHUB_STEP_SUMMARY"
                           else "1", word) for word in words]
        for word in expanded:  # the folders a path names: the page's own folder has them
            path = word.split("=", 1)[-1]
            if "/" in path and not os.path.isabs(path) and not path.startswith("-"):
                os.makedirs(os.path.join(folder, os.path.dirname(path)), exist_ok=True)
        errors = io.StringIO()
        env = {"PERPLEXITY_API_KEY": KEY, "GITHUB_STEP_SUMMARY": summary}
        with contextlib.chdir(folder), mock.patch.dict(os.environ, env), \
                contextlib.redirect_stderr(errors), contextlib.redirect_stdout(io.StringIO()):
            try:
                PARSERS[script](expanded)
            except SystemExit as stop:
                if stop.code not in (0, None):
                    return errors.getvalue().strip() or f"exit {stop.code}"
        return None
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def slug(heading):
    """GitHub's anchor for a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page):
    seen, found = {}, set()
    for _, line in page.prose:
        heading = re.match(r"^#{1,6} +(.*?)(?: +#+)?$", line)
        if heading:
            name = slug(heading[1])
            found.add(name if name not in seen else f"{name}-{seen[name]}")
            seen[name] = seen.get(name, 0) + 1
    return found


class DocsTest(unittest.TestCase):
    """What can be checked without running anything."""

    @classmethod
    def setUpClass(cls):
        cls.pages = {path: read_page(path) for path in PAGES}

    def test_the_readme_is_a_front_page(self):
        self.assertLessEqual(len(self.pages[README].lines), README_LINES)

    def test_every_command_line_parses(self):
        for page in self.pages.values():
            for number, script, words in every_command(page):
                with self.subTest(page=page.path, line=number):
                    self.assertIsNotNone(words, f"{page.path}:{number}: unbalanced quotes")
                    problem = parse_problem(script, words)
                    self.assertIsNone(problem, f"{page.path}:{number}: {script}.py "
                                      f"{shlex.join(words)}: {problem}")

    def test_every_skip_has_a_reason_and_a_block(self):
        for page in self.pages.values():
            fences = {block.line for block in page.blocks}
            for number, line in page.markers:
                with self.subTest(page=page.path, line=number):
                    found = SKIP.fullmatch(line.strip())
                    self.assertTrue(found and found["reason"].strip(),
                                    f"{page.path}:{number}: write <!-- doc-test: skip (why) -->")
                    self.assertIn(number + 1, fences, f"{page.path}:{number}: a skip marker "
                                  "goes on the line right before a block")

    def test_shell_is_sh_and_output_is_text(self):
        for page in self.pages.values():
            for block in page.blocks:
                with self.subTest(page=page.path, line=block.line):
                    self.assertNotIn(block.lang, NOT_SHELL, f"{page.path}:{block.line}: "
                                     "write shell blocks as ```sh")
                    if not block.lang:
                        typed = [line for line in block.text.splitlines()
                                 if LOOKS_TYPED.match(line)]
                        self.assertEqual(typed, [], f"{page.path}:{block.line}: a command "
                                         "in an unlabelled block: ```sh to run it, ```text "
                                         "for output")

    def test_links_resolve_and_go_both_ways(self):
        for page in self.pages.values():
            folder = os.path.dirname(page.path)
            for number, line in page.prose:
                for found in LINK.finditer(line):
                    target = found["target"] or found["src"]
                    if re.match(r"[a-z]+:", target):
                        continue  # an address, not a file of this repository
                    with self.subTest(page=page.path, line=number, target=target):
                        path, _, fragment = target.partition("#")
                        path = os.path.normpath(os.path.join(folder, path)) if path else page.path
                        self.assertTrue(os.path.exists(os.path.join(HERE, path)),
                                        f"{page.path}:{number}: no file {path}")
                        if fragment:
                            self.assertIn(fragment, anchors(self.pages.get(path)
                                                            or read_page(path)),
                                          f"{page.path}:{number}: no heading #{fragment} "
                                          f"in {path}")
        readme = "\n".join(self.pages[README].lines)
        for path in PAGES[1:]:
            with self.subTest(page=path):
                self.assertTrue(f"]({path})" in readme, f"the README's map lacks {path}")
                self.assertTrue("](../README.md" in "\n".join(self.pages[path].lines),
                              f"{path} does not link back to the README")

    def test_what_the_scripts_point_to_exists(self):
        """A message or --help that sends the reader to a page (docs/x.md), or to a
        section of one (README: Heading, docs/x.md: Heading), must find it."""
        sources = [name for name in os.listdir(HERE)
                   if name.endswith(".py") and not name.startswith("test")]
        sources += [os.path.join("action", name) for name in os.listdir(
            os.path.join(HERE, "action")) if name.endswith(".py")]
        for source in sorted(sources):
            text = read_text(os.path.join(HERE, source))
            for found in POINTER.finditer(text):
                page = README if found["page"] == "README" else found["page"]
                with self.subTest(source=source, pointer=found[0]):
                    self.assertIn(page, PAGES, f"{source} points to {page}, which is not "
                                  "a page of the documentation")
                    if found["heading"]:
                        self.assertIn(slug(found["heading"]), anchors(self.pages[page]),
                                      f"{source} points to the section {found['heading']!r} "
                                      f"of {page}, which has no such heading")


# --------------------------------------------------------------------------
# Running the shell blocks.
# --------------------------------------------------------------------------

_SERVER = []  # one simulated API per worker process, started on first use


def shared_server():
    if not _SERVER:
        import simulated_api

        server = simulated_api.start(regression.CASES)
        atexit.register(server.stop)
        _SERVER.append(server)
    return _SERVER[0]


def record(*args):
    """GIVEN: a complete record of a run with these flags."""
    def make(test, folder, name):
        test.run_here(folder, "--out", name, *args)
    return make


def interrupted(*args):
    """GIVEN: a record of a run with these flags that stopped after 5 rows."""
    def make(test, folder, name):
        test.run_here(folder, "--out", name, *args)
        path = os.path.join(folder, name)
        saved = read_json(path)
        saved["runs"] = saved["runs"][:5]
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(saved, handle)
    return make


def sonar(test, folder, name):
    """GIVEN: a record of chat:sonar-pro made before the chat API was retired."""
    server = shared_server()
    server.state["legacy_chat"] = True
    try:
        test.run_here(folder, "--models", "chat:sonar-pro", "--repeats", "3", "--out", name)
    finally:
        server.state["legacy_chat"] = False


def copy(source):
    def make(test, folder, name):
        shutil.copy(os.path.join(HERE, source), os.path.join(folder, name))
    return make


def empty_folder(test, folder, name):
    os.mkdir(os.path.join(folder, name))


# What a page's blocks take as given, made in its folder before they run.
GIVEN = {
    "docs/pages.md": {"results.json": record()},
    "docs/results.md": {"before.json": record("--repeats", "3")},
    "docs/ci.md": {"results.json": interrupted("--repeats", "3")},
    "docs/troubleshooting.md": {"results.json": interrupted("--repeats", "3"),
                                "sonar.json": sonar},
    "docs/batch.md": {"suite.json": copy("examples/cases.json")},
    "docs/speed.md": {"before.json": record("--repeats", "3"),
                      "after.json": record("--repeats", "3")},
    "docs/history.md": {"history": empty_folder},  # the prune step runs in it
}


def last_command(text):
    """(line within the block, logical line) of a block's last command."""
    lines = list(logical_lines(text, shell=True))
    return lines[-1] if lines else (0, "")


@slow("runs every shell block of the docs with bash, each script in a new interpreter")
class ShellBlocksTest(unittest.TestCase):
    """One test per page (made below), so that the workers share them."""

    def run_here(self, folder, *args):
        """A record a page takes as given, made in this interpreter."""
        result = in_process("regression.py", *args, env=self.env, cwd=folder)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)

    def run_page(self, path):
        page = read_page(path)
        server = shared_server()
        self.env = {key: value for key, value in loopback_env(server).items()
                    if key not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES",
                                   "GITHUB_STEP_SUMMARY", "TEST_TIER")}
        self.env.update(HTTPS_PROXY=PROXY, HTTP_PROXY=PROXY, https_proxy=PROXY,
                        http_proxy=PROXY, ALL_PROXY=PROXY, all_proxy=PROXY)
        folder = temp_dir(self)
        venv = os.path.join(HERE, ".venv")
        os.symlink(venv if os.path.isdir(venv) else sys.prefix, os.path.join(folder, ".venv"))
        for name in os.listdir(HERE):
            if name.endswith(".py") or name in LINKED:
                os.symlink(os.path.join(HERE, name), os.path.join(folder, name))
        text = "\n".join(page.lines)
        for name, make in GIVEN.get(path, {}).items():
            self.assertIn(name, text, f"GIVEN names {name}, which {path} no longer uses")
            make(self, folder, name)
        for block in page.blocks:
            if block.lang == SHELL and block.skip is None:
                with self.subTest(line=block.line):
                    self.run_block(block, folder)

    def run_block(self, block, folder):
        failed_at = os.path.join(folder, ".doc-test-failed-line")
        with contextlib.suppress(FileNotFoundError):
            os.remove(failed_at)
        script = f"trap 'echo $LINENO > {shlex.quote(failed_at)}' ERR\n{block.text}"
        result = subprocess.run(["bash", "-e", "-c", script], cwd=folder, env=self.env,
                                capture_output=True, text=True, timeout=BLOCK_SECONDS)
        if result.returncode == 0:
            return
        try:
            at = int(read_text(failed_at)) - 1  # the trap's own line comes first
        except (OSError, ValueError):
            at = None
        number, last = last_command(block.text)
        verdict = (result.returncode == 1 and at == number
                   and any(True for _ in commands(last, 1, True)))
        if not verdict:
            where = f"{block.page}:{block.line + (at or 0)}"
            self.fail(f"{where}: the block exited {result.returncode}\n"
                      f"--- stdout\n{result.stdout[-3000:]}\n--- stderr\n{result.stderr[-3000:]}")


def page_test(path):
    return lambda self: self.run_page(path)


for _path in PAGES:
    setattr(ShellBlocksTest, "test_" + re.sub(r"\W", "_", _path.removesuffix(".md")).lower(),
            page_test(_path))


if __name__ == "__main__":
    unittest.main()
