# make test: the offline suite; make test-fast: its in-process tier (seconds);
# make demo: the runner and the comparison, offline, with their evidence pages;
# make screenshots: the README's pictures of those pages (needs chromium).
# The first use creates .venv: make demo installs requirements.txt alone (what
# the runner needs), make test adds requirements-dev.txt (what the suite runs).
# Each stamp is remade when its requirements file changes.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEV_STAMP := $(VENV)/.installed-dev
PIP := $(PY) -m pip install --quiet --disable-pip-version-check
# Both run every module in one interpreter that loads them (and the SDK) once,
# then forks workers that take tests one at a time (run_tests.py). test-fast is
# the in-process tier: TEST_TIER=fast skips every test marked @slow. make test
# runs a third worker: its tests spend much of their time waiting on a child
# process or a real-time delay, and the third fills those waits (2 cores).
TESTS := test_hardening test_action test_record test_signals test_compare_runs test_batch test_suites test_receipts test_plans test_history \
	test_regression test_proof test_reports test_evidence_page test_simulated_api test_sending test_docs

.PHONY: test test-fast demo bench screenshots mutate clean

# Before anything is installed (the stamp is missing or older than
# requirements.txt): a Python older than 3.11 gets one line, not a pip error.
ifneq ($(filter-out clean,$(or $(MAKECMDGOALS),install)),)
ifneq ($(shell [ $(STAMP) -nt requirements.txt ] || echo stale),)
FOUND := $(shell $(PYTHON) -c 'import sys; print("ok" if sys.version_info >= (3, 11) else "Python %d.%d.%d" % sys.version_info[:3])' 2>/dev/null)
ifneq ($(FOUND),ok)
$(error this project needs Python 3.11 or later, and $(PYTHON) is $(or $(FOUND),not installed); install Python 3.11 or later, then run: make $(MAKECMDGOALS) PYTHON=python3.11)
endif
endif
endif

$(STAMP): requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(PIP) -r requirements.txt
	@# Byte-compiled once: where PYTHONDONTWRITEBYTECODE is set, every start would
	@# otherwise compile the SDK again (about 1.5 s of each test run and each CLI call).
	$(PY) -m compileall -q $(VENV)/lib >/dev/null
	touch $(STAMP)

$(DEV_STAMP): $(STAMP) requirements-dev.txt
	$(PIP) -r requirements.txt -r requirements-dev.txt
	$(PY) -m compileall -q $(VENV)/lib >/dev/null
	touch $(DEV_STAMP)

# The project's own files are byte-compiled before each run, for the same reason
# as the SDK: only what changed is compiled again (0.3 s for all of them).
test: $(DEV_STAMP)
	@$(PY) -m compileall -q -l . action
	$(PY) -W error run_tests.py --workers 3 -v $(TESTS)

test-fast: $(DEV_STAMP)
	@$(PY) -m compileall -q -l . action
	TEST_TIER=fast $(PY) -W error run_tests.py $(TESTS)

demo: $(STAMP)
	@dir=$$(mktemp -d demo-XXXXXX); \
	$(PY) regression.py --demo $$dir/run --html $$dir/run.html; rc=$$?; \
	if [ $$rc -ne 1 ] || [ ! -s $$dir/run/results.json ] || [ ! -s $$dir/run.html ]; then \
	  echo "make demo: FAILED: regression.py --demo should exit 1 (unsafe answer caught) and write its record and page, got exit $$rc"; exit 1; fi; \
	echo; \
	$(PY) compare_runs.py --demo $$dir/compare --html $$dir/comparison.html; rc=$$?; \
	if [ $$rc -ne 1 ] || [ ! -s $$dir/compare/after.json ] || [ ! -s $$dir/comparison.html ]; then \
	  echo "make demo: FAILED: compare_runs.py --demo should exit 1 (new failure named) and write its pair and page, got exit $$rc"; exit 1; fi; \
	echo; \
	echo "make demo: OK. Both scripts caught the planted unsafe payment advice (exit 1, as designed)."; \
	echo "Evidence: $$dir/run/results.json, $$dir/compare/before.json, $$dir/compare/after.json"; \
	echo "Pages (open in a browser): $$dir/run.html, $$dir/comparison.html"

# Mutation testing, dev only: killed/total per module and the survivors; never gates
# (about 5 minutes a module). MUTATE_ARGS=--head tests the last commit.
MUTATE_MODULES ?= checker.py suites.py reports.py batching.py evidence_page.py
mutate: $(DEV_STAMP)
	$(PY) tools/mutate.py $(MUTATE_MODULES) --sample 40 --seed 1 --jobs 2 --list-survivors \
		--equivalent tools/equivalent.txt $(addprefix --tests ,$(TESTS)) $(MUTATE_ARGS)

bench: $(STAMP)
	$(PY) bench.py

# The run page and the comparison page of the demo, at 1280 and 390 px wide,
# into docs/*.png; the same bytes every time for the same code (see the script).
screenshots: $(STAMP)
	@$(PY) tools/screenshots.py

clean:
	rm -rf $(VENV) __pycache__ demo-*
