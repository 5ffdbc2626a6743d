"""Measure the runner's local overhead, its concurrency and its receipts, offline.

    .venv/bin/python bench.py                # about 17 minutes; prints eight tables
    .venv/bin/python bench.py --kills 5      # fewer kill -9 trials, a few minutes
    .venv/bin/python bench.py --only memory  # the --batch and memory tables alone
    .venv/bin/python bench.py --only rows    # the CPU per row alone (table 1)

1. The runner's own CPU per row after its first request, as users run it: the
   CLI with --jobs 8 and 2 models against the loopback simulated API in its own
   process, ~10 KB responses, at 24, 300, 2,400 and 10,000 rows (the CPU of a
   2-row run subtracted). Flat means a long run costs no more per row. Beside
   it at 24 and 300 rows, in a git clone: the published design's runner.
2. Wall time of 24 requests against the loopback simulated API at a fixed
   latency, for --jobs 1, 4, 8 and 16, next to the ideal ceil(24/J) x latency.
3. The same 24 requests at --jobs 1, in background mode (streamed, the id
   saved first) against --foreground: what receipts cost in wall time.
4. kill -9 at random instants of a --jobs 8 run against a server with 3 s
   latency, each followed by --resume: POSTs the server received against the
   planned rows (every extra one is a kill that fell between a POST and its
   receipt), and rows missing at the end.
5. GitHub Actions' cancellation on the example workflow's own run step (SIGINT
   to its shell, SIGTERM 7.5 s later, SIGKILL 2.5 s after that), then --resume:
   requests paid twice.
6. The run page of a 10,000-row record: its size, the time to make it, and the
   time headless Chromium takes to open it (where Chromium is installed).
7. --batch against a simulated API in its own process at 8 and 10,000 rows of
   ~10 KB responses, then --regrade (with and without --html) and
   compare_runs.py --html of those records: wall time and peak memory, each
   measured in the command's own process.
8. Peak memory of direct runs of ~1 MB responses (median of 3): 80 rows against 24.
"""

import argparse
import contextlib
import io
import json
import math
import os
import random
import resource
import signal
import shutil
import subprocess
import sys
import tempfile
import time
from unittest import mock

import httpx
from perplexity import Perplexity

import regression
import simulated_api
from testing import workflow_step

LATENCY = 0.5  # seconds per simulated request in the concurrency table
KILL_LATENCY = 3.0  # seconds per request in the kill -9 trials: many in flight at a kill
HERE = os.path.dirname(os.path.abspath(__file__))
PADDING = 10_000  # bytes of search snippet, so each saved response is ~10 KB
# The published design's runner as first ported here (Part A alone), measured
# beside this one. It has no --cases, so PUBLISHED_LAUNCHER sets its CASES.
PUBLISHED = "3108a39"
PUBLISHED_LAUNCHER = """import json, sys
sys.path.insert(0, sys.argv[1])
import regression
with open(sys.argv[2], encoding="utf-8") as handle:
    regression.CASES = json.load(handle)
raise SystemExit(regression.main(sys.argv[3:]))
"""


def run(args, client_factory):
    folder = tempfile.mkdtemp()
    try:
        with mock.patch.dict(os.environ, {"PERPLEXITY_API_KEY": "bench-key"}), \
                mock.patch.object(regression, "Perplexity", client_factory), \
                contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()):
            code = regression.main([*args, "--out", os.path.join(folder, "r.json")])
        size = os.path.getsize(os.path.join(folder, "r.json"))
    finally:
        shutil.rmtree(folder)
    assert code == 0, f"bench run failed with exit {code}"
    return size


def concurrent_wall_time(jobs, extra=()):
    server = simulated_api.start(regression.CASES, unsafe_models=())
    server.state["latency"] = LATENCY
    try:
        def factory(**kwargs):
            return Perplexity(api_key="bench-key", base_url=server.url,
                              http_client=httpx.Client(trust_env=False), **kwargs)

        started = time.perf_counter()
        run(["--models", "bench/a", "bench/b", "--repeats", "3", "--jobs", str(jobs), *extra],
            factory)
        return time.perf_counter() - started
    finally:
        server.stop()


def cli_env(server):
    """The environment of a CLI run against server (anything with a .url)."""
    return {**{k: v for k, v in os.environ.items() if not k.startswith("PERPLEXITY_")},
            "PERPLEXITY_API_KEY": "pplx-bench-key-0123456789", "PERPLEXITY_BASE_URL": server.url,
            "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"}


@contextlib.contextmanager
def simulated_process(*args):
    """A simulated API in a process of its own (its memory is not the runner's),
    as the object whose .url a CLI run is pointed at."""
    server = subprocess.Popen([sys.executable, os.path.join(HERE, "simulated_api.py"),
                               "--port", "0", *args], stdout=subprocess.PIPE, text=True)
    try:
        server.url = server.stdout.readline().split(" on ", 1)[1].split()[0]
        yield server
    finally:
        server.terminate()
        server.wait()
        server.stdout.close()


def record_of(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def kill_trial(server, folder, number, rng):
    """One run killed at a random instant and resumed: (POSTs, planned, unreceipted, missing)."""
    out = os.path.join(folder, f"kill{number}.json")
    server.state["requests"].clear()
    env = cli_env(server)
    process = subprocess.Popen([sys.executable, os.path.join(HERE, "regression.py"), "--out", out,
                                "--repeats", "3", "--jobs", "8"], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while record_of(out) is None:  # the run has started: its record exists
        time.sleep(0.01)
    time.sleep(rng.uniform(0, 3 * KILL_LATENCY))
    process.kill()
    process.wait()
    saved = record_of(out) or {}
    unreceipted = sum(1 for entry in saved.get("pending", {}).values() if entry["id"] is None)
    resumed = subprocess.run([sys.executable, os.path.join(HERE, "regression.py"), "--resume",
                              out], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             text=True, check=False)
    if resumed.returncode != 0:  # say why: a figure without its cause is no use
        print(f"  trial {number}: --resume exit {resumed.returncode}: "
              f"{resumed.stderr.strip().splitlines()[-1:]}")
    final = record_of(out) or {"runs": []}
    return len(server.state["requests"]), 24, unreceipted, 24 - len(final["runs"])


def kill_table(kills):
    server = simulated_api.start(regression.CASES, unsafe_models=())
    server.state["latency"] = KILL_LATENCY
    folder = tempfile.mkdtemp()
    rng = random.Random(20261201)
    try:
        trials = [kill_trial(server, folder, number, rng) for number in range(kills)]
    finally:
        server.stop()
        shutil.rmtree(folder)
    posts = sum(t[0] for t in trials)
    planned = sum(t[1] for t in trials)
    unreceipted = sum(t[2] for t in trials)
    missing = sum(t[3] for t in trials)
    print(f"{kills} kill -9 at random instants of a --jobs 8 run (24 rows, {KILL_LATENCY} s "
          "latency), each then --resume")
    print(f"  POSTs received {posts} for {planned} planned rows: {posts - planned} paid twice "
          f"({sum(1 for t in trials if t[0] > t[1])} of {kills} kills fell between a POST "
          f"and its receipt; {unreceipted} requests were saved without an id)")
    print(f"  rows missing after the resumes: {missing}")


def cancellation_table():
    server = simulated_api.start(regression.CASES, unsafe_models=())
    server.state["latency"] = 20.0  # an agent run of 20 s: in flight at every signal
    folder = tempfile.mkdtemp()
    try:
        for name in os.listdir(HERE):
            if name.endswith(".py"):
                os.symlink(os.path.join(HERE, name), os.path.join(folder, name))
        os.symlink(os.path.dirname(os.path.dirname(sys.executable)), os.path.join(folder, ".venv"))
        env = {**cli_env(server), "GITHUB_STEP_SUMMARY": os.path.join(folder, "summary.md"),
               "MODELS": "bench/a bench/b", "REPEATS": "3", "MAX_COST": "5"}
        shell = subprocess.Popen(["bash", "-e", "-c", workflow_step("Run the regression cases")],
                                 cwd=folder, env=env, start_new_session=True,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                 preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        out = os.path.join(folder, "results.json")
        while len((record_of(out) or {}).get("pending", {})) < 4:
            time.sleep(0.05)
        shell.send_signal(signal.SIGINT)
        time.sleep(7.5)
        shell.send_signal(signal.SIGTERM)
        time.sleep(2.5)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(shell.pid, signal.SIGKILL)
        shell.wait()
        saved = record_of(out)
        server.state["latency"] = 0
        subprocess.run([sys.executable, os.path.join(HERE, "regression.py"), "--resume", out],
                       env=cli_env(server), stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, check=False)
        final = record_of(out)
        print("GitHub Actions' cancellation (SIGINT, SIGTERM 7.5 s later, SIGKILL 2.5 s after) "
              "on the example workflow's run step, 20 s agent runs, then --resume")
        print(f"  receipts saved at the kill {len(saved.get('pending', {}))}, rows "
              f"{len(final['runs'])} of 24, POSTs {len(server.state['requests'])}: "
              f"{len(server.state['requests']) - 24} paid twice")
    finally:
        server.stop()
        shutil.rmtree(folder)


def page_table():
    import checker
    import evidence_page
    from testing import CHROMIUM, dump_dom

    models = [f"bench/model-{n}" for n in range(25)]
    rows = []
    for repeat in range(100):
        for case in regression.CASES:
            for model in models:
                response = simulated_api.agent_response(len(rows), case, model, ())
                response["output"][0]["results"][0]["snippet"] = "x" * 2000
                rows.append(checker.derived(case, {
                    "repeat": repeat, "case_id": case["id"], "model": model, "error": None,
                    "error_status": None, "cost_usd": None, "response": response,
                    "answer_text": None, "reasons": [], "seconds": 0.5, "passed": True}))
    record = {"created_at": "bench", "runs": rows,
              "config": regression.run_config(models, regression.CASES, 100),
              "summary": regression.summary(rows, models, 100)}
    started = time.perf_counter()
    page = evidence_page.run_page(record)
    made = time.perf_counter() - started
    print(f"Run page of {len(rows):,} rows (25 models, 4 cases, 100 repeats, ~2 KB snippets)")
    print(f"  {len(page.encode()) / 1e6:.1f} MB, made in {made:.2f} s", end="")
    if not CHROMIUM:
        print("; Chromium is not installed")
        return
    folder = tempfile.mkdtemp()
    try:
        path = os.path.join(folder, "page.html")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(page)
        started = time.perf_counter()
        dump_dom(path, os.path.join(folder, "profile"))
        print(f", opened by headless Chromium in {time.perf_counter() - started:.1f} s")
    finally:
        shutil.rmtree(folder)


# A child forked from this process would count this process's memory in its own
# peak (Linux folds the pre-exec high-water mark into ru_maxrss): so a small
# launcher, itself small, forks the command and reports the command's own peak.
PEAK_LAUNCHER = """import os, sys
pid = os.fork()
if pid == 0:
    os.execv(sys.argv[1], sys.argv[1:])
_, status, usage = os.wait4(pid, 0)
print(f"PEAK_KIB {usage.ru_maxrss}", file=sys.stderr)
sys.exit(os.waitstatus_to_exitcode(status))
"""


def measured(command, env):
    """(exit code, wall seconds, peak resident MiB, stderr) of one command."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", PEAK_LAUNCHER, *command], env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - started
    error, _, peak = done.stderr.rpartition("PEAK_KIB ")
    return done.returncode, wall, int(peak) / 1024, error


def rows_in(path):
    """The rows of a saved record, counted a row at a time (this process stays small)."""
    import record

    with record.open_rows(path) as (_, runs, _digest):
        return sum(1 for _ in runs)


def without_first(source, target):
    """A copy of a saved record without its first row, written a row at a time."""
    import record

    with record.open_rows(source) as (fields, runs, _):
        head = {k: v for k, v in fields.items()
                if k not in ("pending", "batch", "execution", "summary")}
        tail = {k: fields[k] for k in ("execution", "summary") if k in fields}
        rows = ((index, row) for index, row in enumerate(runs) if index)
        with record.RecordFile.create(target, head, tail, rows=rows) as saved:
            saved.save(tail, final=True)


def many_cases(count):
    """count cases like the built-in ones, each with its own id and question."""
    return [{**case, "id": f"{case['id']}-{number}",
             "question": f"{case['question']}\n(incident {number})"}
            for number in range(count // len(regression.CASES))
            for case in regression.CASES]


def child_cpu(command, env):
    """(exit code, CPU seconds, user and system) of one command in its own process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    code = subprocess.run(command, env=env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL).returncode
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return code, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def cpu_per_row(rows, folder, server, cases_path, runner):
    """The runner's own CPU per row after its first request, 2 models: the CPU
    of a run of `rows` rows less that of a 2-row run (start-up and first
    request), over the rows between, median of 3 (the loopback API is its own
    process). runner(cases, out) is the command that runs the first cases."""
    def cpu(count):
        cases = os.path.join(folder, f"cases-{count}.json")
        with open(cases_path, encoding="utf-8") as handle:
            every = json.load(handle)
        with open(cases, "w", encoding="utf-8") as handle:
            json.dump(every[:count // 2], handle)
        out = os.path.join(folder, f"run-{count}-{time.monotonic_ns()}.json")
        code, seconds = child_cpu(runner(cases, out), cli_env(server))
        assert code == 0, f"a bench run of {count} rows failed with exit {code}"
        os.unlink(out)
        return seconds

    samples = sorted((cpu(rows) - cpu(2)) / (rows - 2) for _ in range(3))
    return samples[1]


def this_runner(cases, out):
    """The command line of this runner as users run it: --jobs 8, 2 models."""
    return [sys.executable, os.path.join(HERE, "regression.py"), "--cases", cases,
            "--models", "bench/a", "bench/b", "--jobs", "8", "--out", out]


def published_runner(folder):
    """The command line of the published design's runner (its own regression.py
    at PUBLISHED, one request at a time) on the same cases and 2 models, or None
    where this is not a git clone with that commit."""
    source = subprocess.run(["git", "-C", HERE, "show", f"{PUBLISHED}:regression.py"],
                            capture_output=True, text=True)
    if source.returncode != 0:
        return None
    home = os.path.join(folder, "published")
    os.mkdir(home)
    with open(os.path.join(home, "regression.py"), "w", encoding="utf-8") as handle:
        handle.write(source.stdout)
    return lambda cases, out: [sys.executable, "-c", PUBLISHED_LAUNCHER, home, cases,
                               "--models", "bench/a", "bench/b", "--out", out]


def row_cost_table(sizes=(24, 300, 2400, 10000), published_sizes=(24, 300)):
    """Table 1: the runner's CPU per row at each size, as users run it, beside the
    published design's runner where it finishes in minutes (its cost per row grows
    with the run: it rewrites the whole record after every row)."""
    folder = tempfile.mkdtemp()
    try:
        cases_path = os.path.join(folder, "cases.json")
        with open(cases_path, "w", encoding="utf-8") as handle:
            json.dump(many_cases(max(sizes) // 2), handle)
        published = published_runner(folder)
        with simulated_process("--cases", cases_path, "--unsafe",
                               "--snippet-bytes", str(PADDING)) as server:
            print("The runner's own CPU per row after its first request (--jobs 8, 2 models, "
                  f"~{PADDING // 1000} KB responses, loopback API in its own process; median "
                  f"of 3), and the published runner's (commit {PUBLISHED}, one request at a "
                  "time)" if published else "of 3); the published runner needs a git clone")
            print(f"{'rows':>6} {'ms/row':>8} {'vs 300 rows':>12} {'published':>10} "
                  f"{'faster':>7}")
            found = {rows: cpu_per_row(rows, folder, server, cases_path, this_runner)
                     for rows in sizes}
            for rows, seconds in found.items():
                line = (f"{rows:>6} {seconds * 1000:>8.2f} "
                        f"{seconds / found.get(300, seconds):>11.2f}x")
                if published and rows in published_sizes:
                    theirs = cpu_per_row(rows, folder, server, cases_path, published)
                    line += f" {theirs * 1000:>10.2f} {theirs / seconds:>6.1f}x"
                print(line)
    finally:
        shutil.rmtree(folder)


def batch_table():
    """A --batch run against a simulated API in its own process, small and 10,000
    rows, then a regrade of each record, with and without --html."""
    from testing import CHROMIUM, dump_dom

    folder = tempfile.mkdtemp()
    try:
        cases_path = os.path.join(folder, "cases.json")
        with open(cases_path, "w", encoding="utf-8") as handle:
            json.dump(many_cases(500), handle)
        with simulated_process("--cases", cases_path, "--unsafe",
                               "--snippet-bytes", str(PADDING)) as server:
            env = cli_env(server)
            runner = [sys.executable, os.path.join(HERE, "regression.py"), "--batch",
                      "--models", "bench/a", "bench/b"]
            small_cases = os.path.join(folder, "small-cases.json")
            with open(small_cases, "w", encoding="utf-8") as handle:
                json.dump(many_cases(4), handle)
            print("--batch against a simulated API in another process, ~10 KB responses "
                  "(peak: the runner's resident memory)")
            print(f"{'rows':>7} {'wall s':>7} {'peak MiB':>9} {'record MB':>10}")
            rows = {}
            for name, cases, repeats in (("small", small_cases, 1), ("large", cases_path, 10)):
                out = os.path.join(folder, f"{name}.json")
                command = [*runner, "--cases", cases, "--repeats", str(repeats), "--out", out]
                code, wall, peak, error = measured(command, env)
                assert code == 0, f"the {name} batch run exited {code}: {error[-500:]}"
                rows[name] = peak
                count = rows_in(out)
                print(f"{count:>7,} {wall:>7.1f} {peak:>9.0f} {os.path.getsize(out) / 1e6:>10.1f}")
            print(f"  peak at 10,000 rows / peak at 8 rows: {rows['large'] / rows['small']:.2f}x")
            resumed = {}
            for name in ("small", "large"):  # the first row lost: every kept row waits for it
                gap = os.path.join(folder, f"{name}-gap.json")
                without_first(os.path.join(folder, f"{name}.json"), gap)
                code, wall, peak, error = measured(
                    [sys.executable, os.path.join(HERE, "regression.py"), "--resume", gap], env)
                assert code == 0, f"the resume exited {code}: {error[-500:]}"
                resumed[name] = peak
                print(f"--resume of the {rows_in(gap):,}-row record without its first row: "
                      f"{wall:.1f} s, peak {peak:.0f} MiB")
            print(f"  peak at 10,000 rows / at 8 rows: {resumed['large'] / resumed['small']:.2f}x")
        print("--regrade of those records (peak: resident memory)")
        print(f"{'rows':>7} {'flags':>7} {'wall s':>7} {'peak MiB':>9} {'page MB':>8}")
        peaks = {}
        for name in ("small", "large"):
            for flags in ((), ("--html",)):
                page = os.path.join(folder, f"{name}-{len(flags)}.html")
                out = os.path.join(folder, f"{name}-{len(flags)}-regraded.json")
                command = [sys.executable, os.path.join(HERE, "regression.py"), "--regrade",
                           os.path.join(folder, f"{name}.json"), "--out", out,
                           *([flags[0], page] if flags else [])]
                code, wall, peak, error = measured(command, env)
                assert code == 0, f"the regrade exited {code}: {error[-500:]}"
                peaks[name, flags] = peak
                size = f"{os.path.getsize(page) / 1e6:>8.1f}" if flags else f"{'':>8}"
                print(f"{rows_in(out):>7,} {' '.join(flags) or '-':>7} "
                      f"{wall:>7.1f} {peak:>9.0f} {size}")
        for flags in ((), ("--html",)):
            print(f"  {' '.join(flags) or 'no page'}: peak at 10,000 rows / at 8 rows: "
                  f"{peaks['large', flags] / peaks['small', flags]:.2f}x")
        print("compare_runs.py of a record and its regrade, with --html")
        compared = {}
        for name in ("small", "large"):
            page = os.path.join(folder, f"{name}-comparison.html")
            code, wall, peak, error = measured(
                [sys.executable, os.path.join(HERE, "compare_runs.py"),
                 os.path.join(folder, f"{name}.json"),
                 os.path.join(folder, f"{name}-0-regraded.json"), "--html", page], env)
            assert code == 0, f"the comparison exited {code}: {error[-500:]}"
            compared[name] = peak
            print(f"{rows_in(os.path.join(folder, f'{name}.json')):>7,} rows a side: "
                  f"{wall:.1f} s, peak {peak:.0f} MiB, page {os.path.getsize(page) / 1e6:.1f} MB")
        print(f"  peak at 10,000 rows / at 8 rows: {compared['large'] / compared['small']:.2f}x")
        if CHROMIUM:
            started = time.perf_counter()
            dump_dom(os.path.join(folder, "large-1.html"), os.path.join(folder, "profile"))
            print(f"  the 10,000-row page opened in headless Chromium in "
                  f"{time.perf_counter() - started:.1f} s")
    finally:
        shutil.rmtree(folder)


def large_answers_table():
    """Peak memory of direct runs whose every response is about 1 MB: 80 rows
    against 24, one at a time and 8 in flight."""
    folder = tempfile.mkdtemp()
    try:
        with simulated_process("--cases", os.path.join(HERE, "examples", "cases.json"),
                               "--unsafe", "--snippet-bytes", "1000000") as server:
            print("Direct runs of ~1 MB responses, median peak of 3 (the runner's resident "
                  "memory)")
            print(f"{'rows':>5} {'jobs':>5} {'wall s':>7} {'peak MiB':>9} {'record MB':>10}")
            peaks = {}
            for rows, models, repeats in ((24, ["bench/a", "bench/b", "bench/c"], 2),
                                          (80, ["bench/a", "bench/b"], 10)):
                for jobs in (1, 8):
                    trials = []  # the peak depends on how many answers are in flight at once
                    for trial in range(3):
                        out = os.path.join(folder, f"{rows}-{jobs}-{trial}.json")
                        code, wall, peak, error = measured(
                            [sys.executable, os.path.join(HERE, "regression.py"), "--models",
                             *models, "--repeats", str(repeats), "--jobs", str(jobs),
                             "--out", out], cli_env(server))
                        assert code == 0, f"the run exited {code}: {error[-500:]}"
                        trials.append((peak, wall))
                    peak, wall = sorted(trials)[1]
                    peaks[rows, jobs] = peak
                    print(f"{rows:>5} {jobs:>5} {wall:>7.1f} {peak:>9.0f} "
                          f"{os.path.getsize(out) / 1e6:>10.1f}")
        for jobs in (1, 8):
            print(f"  --jobs {jobs}: 80 rows peak {peaks[80, jobs] - peaks[24, jobs]:+.0f} MiB "
                  "against 24 rows")
    finally:
        shutil.rmtree(folder)


def readers_of_large_answers_table():
    """Peak memory of every reader of a record of 80 rows of ~1 MB: --regrade,
    --regrade --html, --resume of a record missing rows in the middle (it sends
    them again) and compare_runs.py --html, each in its own process."""
    folder = tempfile.mkdtemp()
    try:
        with simulated_process("--cases", os.path.join(HERE, "examples", "cases.json"),
                               "--unsafe", "--snippet-bytes", "1000000") as server:
            env = cli_env(server)
            runner = [sys.executable, os.path.join(HERE, "regression.py")]
            first = os.path.join(folder, "first.json")
            code, _, _, error = measured([*runner, "--models", "bench/a", "bench/b", "--repeats",
                                          "10", "--jobs", "8", "--out", first], env)
            assert code == 0, f"the run exited {code}: {error[-500:]}"
            gap = os.path.join(folder, "gap.json")
            with open(first, "rb") as source, open(gap, "wb") as target:
                rows = 0  # ten rows missing in the middle, the file in the runner's layout
                for line in source:
                    if line.startswith(b'{"case_id"') or line.startswith(b'{"repeat"'):
                        rows += 1
                        if 31 <= rows <= 40:
                            continue
                    target.write(line)
            commands = [
                ("--regrade", [*runner, "--regrade", first, "--out",
                               os.path.join(folder, "re.json")]),
                ("--regrade --html", [*runner, "--regrade", first, "--out",
                                      os.path.join(folder, "re2.json"), "--html",
                                      os.path.join(folder, "re2.html")]),
                ("--resume (10 missing)", [*runner, "--resume", gap]),
                ("compare_runs.py --html", [sys.executable, os.path.join(HERE, "compare_runs.py"),
                                            first, os.path.join(folder, "re.json"), "--html",
                                            os.path.join(folder, "cmp.html")]),
            ]
            print("Readers of a record of 80 rows of ~1 MB (80 MB), peak resident memory")
            print(f"{'command':>24} {'wall s':>7} {'peak MiB':>9}")
            for name, command in commands:
                code, wall, peak, error = measured(command, env)
                assert code in (0, 1), f"{name} exited {code}: {error[-500:]}"
                print(f"{name:>24} {wall:>7.1f} {peak:>9.0f}")
    finally:
        shutil.rmtree(folder)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=50, metavar="N",
                        help="kill -9 trials in table 4 (default: 50)")
    parser.add_argument("--only", choices=["memory", "rows"], help="print only the --batch "
                        "and memory tables (about a minute and a half), or only the CPU per "
                        "row (a few minutes)")
    args = parser.parse_args(argv)
    if args.only == "rows":
        row_cost_table()
        return 0
    if args.only == "memory":
        batch_table()
        print()
        large_answers_table()
        print()
        readers_of_large_answers_table()
        return 0
    row_cost_table()
    print()
    print(f"24 requests at {LATENCY} s simulated latency")
    print(f"{'jobs':>5} {'wall s':>7} {'ideal s':>8} {'of ideal speed-up':>18}")
    serial = None
    for jobs in (1, 4, 8, 16):
        wall = concurrent_wall_time(jobs)
        serial = serial or wall
        ideal = math.ceil(24 / jobs) * LATENCY
        efficiency = (serial / wall) / (24 * LATENCY / ideal)
        print(f"{jobs:>5} {wall:>7.2f} {ideal:>8.2f} {efficiency:>17.0%}")
    print()
    print(f"24 requests at {LATENCY} s simulated latency, --jobs 1, median of 3")
    walls = {}
    for mode, extra in (("background", []), ("foreground", ["--foreground"])):
        walls[mode] = sorted(concurrent_wall_time(1, extra) for _ in range(3))[1]
        print(f"  {mode:>10} {walls[mode]:>7.2f} s")
    print(f"  background / foreground {walls['background'] / walls['foreground']:.3f}")
    print()
    kill_table(args.kills)
    print()
    cancellation_table()
    print()
    page_table()
    print()
    batch_table()
    print()
    large_answers_table()
    print()
    readers_of_large_answers_table()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
