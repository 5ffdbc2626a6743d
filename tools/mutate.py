"""Mutation testing, dev only: does the fast test tier notice a small change?

    .venv/bin/python tools/mutate.py checker.py --sample 40 --seed 1
    .venv/bin/python tools/mutate.py checker.py suites.py --sample 40 --seed 1 --jobs 2 \
        --list-survivors
    .venv/bin/python tools/mutate.py action/gate.py --equivalent equivalent.txt --min-score 90

A mutant is one change at one site of a product module, found with ast:
  compare   flip a comparison: < <=, > >=, == !=, in / not in, is / is not
  boolop    and <-> or
  constant  int n -> n + 1, True <-> False, a non-empty string -> ""
  delete    a simple statement in a function body -> pass
  return    return x -> return None
  negate    if/while condition c -> not (c)
Docstrings, annotations, f-strings and the `if __name__ == "__main__":` block
are left alone. Mutants are listed in source order; --sample N takes N of them
per module, at random with --seed (the same seed, the same mutants).

The working tree is never touched. The files git knows of (tracked, and
untracked ones not ignored, as they are on disk now; with --head, the last
commit's) are copied into one temp folder per job; each mutant is written into
its job's copy, the fast tier runs there (TEST_TIER=fast python -W error
run_tests.py, every test_*.py or each --tests), and the original is put back.
A failing run or a timeout kills the mutant; a clean pass lets it survive.
The score is killed / total per module.

--equivalent FILE names mutants that no test can kill; they leave the score and
are listed with their reason. One a line (`#` starts a comment line):
    checker.py:123 compare  the boundary value is rejected by both branches
or a JSON list of {"module": ..., "line": ..., "operator": ..., "reason": ...}.

Exit codes: 0 the report, whatever the scores; 1 a module scored under
--min-score; 2 bad usage, or the unmutated tests fail in the copy; 130 interrupted.
"""

import argparse
import ast
import compileall
import contextlib
import glob
import json
import os
import py_compile
import queue
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV_PYTHON = os.path.join(ROOT, ".venv", "bin", "python")
PYTHON = VENV_PYTHON if os.path.exists(VENV_PYTHON) else sys.executable
TIMEOUT_SECONDS = 60  # one mutant's test run; longer counts as killed (a hang)
CORES = os.cpu_count() or 1  # shared by the jobs: each run_tests.py gets CORES // jobs workers
LINE_CHARS = 120  # a mutated source line is shown up to this many characters
TAIL_CHARS = 3000  # of a failing baseline run's output, shown
FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
FLIPS = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt,
         ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In,
         ast.Is: ast.IsNot, ast.IsNot: ast.Is}
SIMPLE = (ast.Expr, ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Raise, ast.Assert,
          ast.Delete, ast.Import, ast.ImportFrom, ast.Break, ast.Continue)


class Usage(Exception):
    """Bad arguments or input files: exit 2 with the message."""


@dataclass
class Mutant:
    module: str
    line: int
    operator: str
    start: int  # byte offsets of the replaced span in the original source
    end: int
    text: bytes  # what replaces it
    outcome: str = ""  # killed, timeout or survived, once run

    def source(self, original):
        return original[:self.start] + self.text + original[self.end:]

    def shown(self, original):
        """The mutated line; for delete and return, what it was too."""
        lines = [text.decode("utf-8", "replace").splitlines()[self.line - 1].strip()
                 for text in (self.source(original), original)]
        was = f"  # was: {lines[1]}" if self.operator in ("delete", "return") else ""
        return (lines[0] + was)[:LINE_CHARS]


def left_alone(tree):
    """The ids of the nodes no mutant touches."""
    out = set()
    for node in ast.walk(tree):
        drop = []
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.ClassDef, *FUNCTIONS)) and body \
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            drop.append(body[0])  # the docstring
        if isinstance(node, FUNCTIONS):
            drop.append(node.returns)
        if isinstance(node, (ast.arg, ast.AnnAssign)):
            drop.append(node.annotation)
        if isinstance(node, (ast.JoinedStr, ast.match_case)):
            drop.append(node if isinstance(node, ast.JoinedStr) else node.pattern)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            drop.append(node)  # a bare string or `...`: changing it changes nothing
        if isinstance(node, ast.If) and ast.unparse(node.test) == "__name__ == '__main__'":
            drop.append(node)
        out.update(id(n) for d in drop if d is not None for n in ast.walk(d))
    return out


def swapped(value):
    """A constant's replacement source, or None where none applies."""
    if isinstance(value, bool):
        return repr(not value)
    if isinstance(value, int):
        return repr(value + 1)
    if isinstance(value, str) and value:
        return '""'
    return None


def sites(tree, segment):
    """(node, operator, replacement source) at every site of a module."""
    skip = left_alone(tree)
    in_function = {id(n) for f in ast.walk(tree) if isinstance(f, FUNCTIONS)
                   for n in ast.walk(f) if n is not f}
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Compare):
            for k, op in enumerate(node.ops):
                if type(op) in FLIPS:
                    ops = node.ops[:k] + [FLIPS[type(op)]()] + node.ops[k + 1:]
                    flipped = ast.Compare(node.left, ops, node.comparators)
                    yield node, "compare", f"({ast.unparse(flipped)})"
        elif isinstance(node, ast.BoolOp):
            other = ast.Or() if isinstance(node.op, ast.And) else ast.And()
            yield node, "boolop", f"({ast.unparse(ast.BoolOp(other, node.values))})"
        elif isinstance(node, ast.Constant) and swapped(node.value) is not None:
            yield node, "constant", swapped(node.value)
        elif isinstance(node, (ast.If, ast.While)):
            yield node.test, "negate", f"not ({segment(node.test)})"
        elif isinstance(node, ast.Return) and node.value is not None \
                and not (isinstance(node.value, ast.Constant) and node.value.value is None):
            yield node.value, "return", "None"
        if isinstance(node, SIMPLE) and id(node) in in_function:
            yield node, "delete", "pass"


def mutants_of(module, original):
    """Every mutant of a module's source (bytes), in source order."""
    starts = [0]
    for line in original.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))

    def span(node):
        return (starts[node.lineno - 1] + node.col_offset,
                starts[node.end_lineno - 1] + node.end_col_offset)

    def segment(node):
        begin, end = span(node)
        return original[begin:end].decode("utf-8")

    found = {}
    for node, operator, text in sites(ast.parse(original, module), segment):
        begin, end = span(node)
        found.setdefault((begin, end, text), Mutant(module, node.lineno, operator,
                                                    begin, end, text.encode("utf-8")))
    return [found[key] for key in sorted(found)]


def compiles(mutant, original):
    try:
        compile(mutant.source(original), mutant.module, "exec", dont_inherit=True)
        return True
    except (SyntaxError, ValueError):
        return False


def choose(mutants, original, sample, seed, excluded):
    """The mutants to run, in source order: all but the excluded, or `sample` of them
    picked with the seed (an excluded one is replaced by the next, the others stay)."""
    order = list(mutants)
    if sample is not None:
        random.Random(f"{seed}:{mutants[0].module if mutants else ''}").shuffle(order)
    chosen = []
    for mutant in order:
        if sample is not None and len(chosen) >= sample:
            break
        if (mutant.module, mutant.line, mutant.operator) not in excluded \
                and compiles(mutant, original):
            chosen.append(mutant)
    return sorted(chosen, key=lambda m: (m.start, m.end, m.text))


def load_equivalent(path):
    """{(module, line, operator): reason} from the --equivalent file."""
    try:
        with open(path, encoding="utf-8") as stream:
            text = stream.read()
    except OSError as error:
        raise Usage(f"--equivalent: {error}")
    try:
        rows = [(r["module"], int(r["line"]), r["operator"], r.get("reason", ""))
                for r in json.loads(text)]
    except ValueError:
        rows = []
        for number, raw in enumerate(text.splitlines(), 1):
            if not raw.strip() or raw.lstrip().startswith("#"):
                continue
            parts = raw.split(None, 2) + ["", ""]
            module, _, line = parts[0].rpartition(":")
            if not module or not line.isdigit() or not parts[1]:
                raise Usage(f"{path}:{number}: expected 'module:line operator reason'")
            rows.append((module, int(line), parts[1], parts[2].strip()))
    except (KeyError, TypeError) as error:
        raise Usage(f"{path}: each JSON entry needs module, line, operator: {error}")
    return {(m, line, op): reason for m, line, op, reason in rows}


def make_copies(jobs, head):
    """One temp copy of the project per job (the working tree, or the commit HEAD),
    byte-compiled once."""
    first = tempfile.mkdtemp(prefix="mutate-")
    if head:
        archive = subprocess.run(["git", "archive", "HEAD"], cwd=ROOT,
                                 capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", first], input=archive, check=True)
    listed = "" if head else subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, check=True).stdout.decode()
    for rel in filter(None, listed.split("\0")):
        if os.path.isfile(os.path.join(ROOT, rel)):
            os.makedirs(os.path.dirname(os.path.join(first, rel)), exist_ok=True)
            shutil.copy2(os.path.join(ROOT, rel), os.path.join(first, rel))
    compileall.compile_dir(first, quiet=2)
    copies = [first]
    for _ in range(jobs - 1):  # copied from the first: every job sees the same snapshot
        copies.append(tempfile.mkdtemp(prefix="mutate-"))
        shutil.copytree(first, copies[-1], dirs_exist_ok=True)
    return copies


def kill_all(processes):
    """Kill each test run with its process group (run_tests.py's forked workers)."""
    for process in list(processes):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)


def run_tests(folder, tests, workers, timeout, live):
    """Run the fast tier in a copy: (outcome, output)."""
    env = dict(os.environ, TEST_TIER="fast", PYTHONDONTWRITEBYTECODE="1")
    command = [PYTHON, "-W", "error", "run_tests.py", "--workers", str(workers), *tests]
    process = subprocess.Popen(command, cwd=folder, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, start_new_session=True)
    live.add(process)
    try:
        output, _ = process.communicate(timeout=timeout)
        return ("survived" if process.returncode == 0 else "killed"), output
    except subprocess.TimeoutExpired:
        kill_all([process])
        return "timeout", process.communicate()[0]
    finally:
        live.discard(process)


def try_mutant(folder, mutant, original, options, live):
    """Write the mutant into a copy, run the tests there, put the original back."""
    path = os.path.join(folder, mutant.module)
    stem = os.path.splitext(os.path.basename(mutant.module))[0]
    stale = glob.glob(os.path.join(os.path.dirname(path), "__pycache__", f"{stem}.*.pyc"))
    for cached in stale:
        os.remove(cached)
    with open(path, "wb") as stream:
        stream.write(mutant.source(original))
    try:
        return run_tests(folder, options.tests, options.workers, options.timeout, live)[0]
    finally:
        with open(path, "wb") as stream:
            stream.write(original)
        py_compile.compile(path)


def run_all(mutants, copies, originals, options, live):
    """Run every mutant, one per copy at a time; progress on stderr."""
    stop, todo = threading.Event(), queue.Queue()
    for number, mutant in enumerate(mutants, 1):
        todo.put((number, mutant))
    lock = threading.Lock()
    started = time.monotonic()

    def work(folder):
        while not stop.is_set():
            try:
                number, mutant = todo.get_nowait()
            except queue.Empty:
                return
            outcome = try_mutant(folder, mutant, originals[mutant.module], options, live)
            if stop.is_set():
                return
            mutant.outcome = outcome
            with lock:
                print(f"[{number:3}/{len(mutants)} {time.monotonic() - started:5.0f} s] "
                      f"{outcome:8} {mutant.module}:{mutant.line} {mutant.operator}",
                      file=sys.stderr, flush=True)

    threads = [threading.Thread(target=work, args=(folder,), daemon=True) for folder in copies]
    for thread in threads:
        thread.start()
    try:
        for thread in threads:
            while thread.is_alive():
                thread.join(0.5)
    finally:  # interrupted: stop the runs, let each thread put its original back
        stop.set()
        kill_all(live)
        for thread in threads:
            thread.join()


def report(module, mutants, original, equivalent, options):
    """Print a module's score (and survivors); return its percentage."""
    ran = [m for m in mutants if m.outcome]
    killed = sum(m.outcome != "survived" for m in ran)
    timeouts = sum(m.outcome == "timeout" for m in ran)
    percent = 100.0 * killed / len(ran) if ran else 100.0
    print(f"{module}: {killed} / {len(ran)} killed ({percent:.1f}%)"
          + (f", {timeouts} by timeout" if timeouts else ""))
    for (name, line, operator), reason in sorted(equivalent.items()):
        if name == module:
            print(f"  equivalent {module}:{line} {operator}: {reason}")
    if options.list_survivors:
        for m in ran:
            if m.outcome == "survived":
                print(f"  survived {module}:{m.line} {m.operator}: {m.shown(original)}")
    return percent


def parse(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("modules", nargs="+", metavar="MODULE", help="e.g. checker.py")
    parser.add_argument("--sample", type=int, help="mutants per module, seeded (default: all)")
    parser.add_argument("--seed", default="1", help="sampling seed (default 1)")
    parser.add_argument("--jobs", type=int, default=1, help="mutants run at once (default 1)")
    parser.add_argument("--timeout", type=float, default=TIMEOUT_SECONDS,
                        help=f"seconds per mutant's test run (default {TIMEOUT_SECONDS})")
    parser.add_argument("--tests", action="append", metavar="TEST_MODULE",
                        help="a test module to run (repeatable; default: every test_*.py)")
    parser.add_argument("--head", action="store_true",
                        help="mutate the last commit, not the working tree with its edits")
    parser.add_argument("--list-survivors", action="store_true", help="print each survivor's line")
    parser.add_argument("--equivalent", metavar="FILE", help="mutants known to be equivalent")
    parser.add_argument("--min-score", type=float, help="exit 1 under this percent")
    options = parser.parse_args(argv)
    if options.jobs < 1 or (options.sample is not None and options.sample < 1):
        parser.error("--jobs and --sample must be at least 1")
    options.workers = max(1, CORES // options.jobs)
    return options


def pick(module, folder, equivalent, options):
    """A module's source and the mutants to run, or (None, []) where it is missing."""
    path = os.path.join(folder, module)
    if not os.path.isfile(path):
        print(f"note: {module}: not in the project (yet), skipped", file=sys.stderr)
        return None, []
    with open(path, "rb") as stream:
        original = stream.read()
    every = mutants_of(module, original)
    known = {(module, m.line, m.operator) for m in every}
    for key in sorted(k for k in equivalent if k[0] == module and k not in known):
        print(f"note: --equivalent {key[0]}:{key[1]} {key[2]}: no such mutant now", file=sys.stderr)
    return original, choose(every, original, options.sample, options.seed, equivalent)


def main(argv=None):
    options = parse(argv)
    live, copies = set(), []
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        equivalent = load_equivalent(options.equivalent) if options.equivalent else {}
        copies = make_copies(options.jobs, options.head)
        options.tests = options.tests or sorted(
            os.path.basename(p)[:-3] for p in glob.glob(os.path.join(copies[0], "test_*.py")))
        originals, chosen = {}, {}
        for module in (m.removeprefix("./").removesuffix(".py") + ".py" for m in options.modules):
            original, mutants = pick(module, copies[0], equivalent, options)
            if original is not None:
                originals[module], chosen[module] = original, mutants
        started = time.monotonic()
        outcome, output = run_tests(copies[0], options.tests, CORES, options.timeout, live)
        if outcome != "survived":
            text = output.decode("utf-8", "replace")
            print(text[-TAIL_CHARS:], *(line for line in text.splitlines()
                                        if line.startswith(("FAIL:", "ERROR:"))),
                  sep="\n", file=sys.stderr)
            raise Usage(f"the unmutated fast tier does not pass in the copy ({outcome})")
        print(f"baseline passed in {time.monotonic() - started:.1f} s; "
              f"{sum(map(len, chosen.values()))} mutants, {options.jobs} at a time; "
              f"tests: {' '.join(options.tests)}", file=sys.stderr)
        run_all([m for ms in chosen.values() for m in ms], copies, originals, options, live)
        scores = [report(module, chosen[module], originals[module], equivalent, options)
                  for module in chosen]
        low = options.min_score is not None and any(s < options.min_score for s in scores)
        return 1 if low else 0
    except Usage as error:
        print(f"mutate.py: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("mutate.py: interrupted", file=sys.stderr)
        return 130
    finally:
        kill_all(live)
        for folder in copies:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
