# make test: the offline suite; make test-fast: its in-process tier (seconds);
# make demo: the runner and the comparison, offline, with their evidence pages.
# Each creates .venv from requirements.txt when it is missing or out of date.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PROCESS_TESTS := test_hardening  # in a process of its own, beside the rest
FAST := test_regression test_record test_compare_runs test_reports test_evidence_page test_sending

.PHONY: test test-fast demo bench clean

$(STAMP): requirements.txt requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt -r requirements-dev.txt
	@# Byte-compiled once: where PYTHONDONTWRITEBYTECODE is set, every start would
	@# otherwise compile the SDK again (about 1.5 s of each test run and each CLI call).
	$(PY) -m compileall -q $(VENV)/lib >/dev/null
	touch $(STAMP)

# Two processes, one a core: the fresh-interpreter tests spend most of their time
# starting Python and importing the SDK, which the other tier's tests need not wait for.
test: $(STAMP)
	@($(PY) -W error -m unittest -v $(PROCESS_TESTS) > .test-process.log 2>&1; \
	  echo $$? > .test-process.rc) & \
	$(PY) -W error -m unittest -v $(FAST) test_signals; rc=$$?; wait; \
	cat .test-process.log; process=$$(cat .test-process.rc); rm -f .test-process.*; \
	[ $$rc -eq 0 ] && [ $$process -eq 0 ]

test-fast: $(STAMP)
	TEST_TIER=fast $(PY) -W error -m unittest $(FAST)

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

bench: $(STAMP)
	$(PY) bench.py

clean:
	rm -rf $(VENV) __pycache__ demo-*
