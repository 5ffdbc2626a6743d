"""The README's pictures of the demo's evidence pages, dev only.

    make screenshots                       # or: .venv/bin/python tools/screenshots.py

Makes the run page and the comparison page as `make demo` does
(regression.py --demo DIR --html FILE, compare_runs.py --demo DIR --html FILE,
in a new temp folder), then renders each with the system's headless Chromium
at 1280 and 390 px wide (900 px high: the first screen a reader sees) into

    docs/run-page-1280.png         docs/comparison-page-1280.png
    docs/run-page-390.png          docs/comparison-page-390.png

The same bytes every time, for the same code. A page shows when its record was
made (created_at) and how long each row took (seconds), and the demo cannot
fix its clock yet. So, once the scripts have written the pages, exactly those
values are replaced: each timestamp by FIXED_CLOCK plus its distance from the
page's first one (the comparison's BEFORE stays one minute before its AFTER),
and each row's seconds by 0.00. Nothing else of a page is touched. The pages
are made twice and must then be identical: a value that still changes from
run to run stops the script, named, before any picture is written.

Exit codes: 0 the four pictures written; 2 chromium missing, a demo that did
not catch its unsafe model (exit 1) or wrote no page, a page that is not the
same twice, or chromium failing.
"""

import datetime
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(HERE, "docs")
WIDTHS = (1280, 390)
HEIGHT = 900
FIXED_CLOCK = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
PAGES = (  # picture name, script, its --demo folder and page, inside the temp folder
    ("run-page", "regression.py", "demo/run", "demo/run.html"),
    ("comparison-page", "compare_runs.py", "demo/compare", "demo/comparison.html"),
)
TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,6})?\+00:00")
# A row's seconds: the cell after its cost, on the full row and in the brief lines.
SECONDS = re.compile(r"(<td>(?:[^<>]* USD|unknown)</td><td>)(?:[0-9]+\.[0-9]+|—)(</td>)")
BROWSER_SECONDS = 60


def fail(message):
    print(f"tools/screenshots.py: {message}", file=sys.stderr)
    return 2


def fixed_clock(page):
    """The page with its clock fixed: timestamps moved to FIXED_CLOCK, seconds 0.00."""
    stamps = [datetime.datetime.fromisoformat(found) for found in TIMESTAMP.findall(page)]
    first = min(stamps, default=FIXED_CLOCK)

    def moved(match):
        when = FIXED_CLOCK + (datetime.datetime.fromisoformat(match[0]) - first)
        return when.isoformat(timespec="seconds")

    return SECONDS.sub(r"\g<1>0.00\g<2>", TIMESTAMP.sub(moved, page))


def make_pages(folder):
    """{picture name: page text with its clock fixed}, made by the real scripts."""
    os.makedirs(os.path.join(folder, "demo"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PERPLEXITY_")}
    pages = {}
    for name, script, demo, page in PAGES:
        done = subprocess.run([sys.executable, os.path.join(HERE, script), "--demo", demo,
                               "--html", page], cwd=folder, env=env, capture_output=True,
                              text=True, timeout=120)
        path = os.path.join(folder, page)
        if done.returncode != 1 or not os.path.isfile(path):
            raise RuntimeError(f"{script} --demo should exit 1 (the unsafe model caught) and "
                               f"write {page}; it exited {done.returncode}: "
                               f"{(done.stderr or done.stdout).strip()[-500:]}")
        with open(path, encoding="utf-8") as handle:
            pages[name] = fixed_clock(handle.read())
    return pages


def first_difference(first, second):
    """Where two texts first differ, with a little of what is there."""
    at = len(os.path.commonprefix([first, second]))
    return f"at character {at}: {first[max(0, at - 60):at + 60]!r}"


def render(chromium, page_path, width, png_path, folder):
    """One headless Chromium screenshot, in a profile of its own; no name resolves."""
    profile = tempfile.mkdtemp(dir=folder)
    command = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
               "--no-first-run", "--disable-background-networking",
               "--disable-component-update", "--disable-sync",
               "--force-device-scale-factor=1", "--host-resolver-rules=MAP * ~NOTFOUND",
               f"--user-data-dir={profile}", f"--window-size={width},{HEIGHT}",
               f"--screenshot={png_path}", "file://" + page_path]
    done = subprocess.run(command, capture_output=True, text=True, timeout=BROWSER_SECONDS)
    if done.returncode != 0 or not os.path.isfile(png_path):
        raise RuntimeError(f"chromium exited {done.returncode} on {os.path.basename(page_path)}: "
                           f"{done.stderr.strip()[-500:]}")


def main():
    chromium = shutil.which("chromium")
    if chromium is None:
        return fail("chromium is not installed; install it (Debian/Ubuntu: "
                    "apt-get install chromium), then run make screenshots again")
    folder = tempfile.mkdtemp(prefix="screenshots-")
    try:
        first = make_pages(os.path.join(folder, "a"))
        second = make_pages(os.path.join(folder, "b"))
        for name in first:
            if first[name] != second[name]:
                return fail(f"the demo's {name} changes from run to run even with its clock "
                            f"fixed ({first_difference(first[name], second[name])}); fix that "
                            "value in fixed_clock(), then run it again")
        written = []
        for name, page in first.items():
            page_path = os.path.join(folder, f"{name}.html")
            with open(page_path, "w", encoding="utf-8") as handle:
                handle.write(page)
            for width in WIDTHS:
                png = f"{name}-{width}.png"
                render(chromium, page_path, width, os.path.join(folder, png), folder)
                written.append(png)
        os.makedirs(DOCS, exist_ok=True)
        for png in written:  # only once every picture is made: never half a set
            shutil.move(os.path.join(folder, png), os.path.join(DOCS, png))
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        return fail(f"{exc}; no picture was changed")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print("Wrote " + ", ".join(f"docs/{png}" for png in written))
    return 0


if __name__ == "__main__":
    sys.exit(main())
