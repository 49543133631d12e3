VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench bench-smoke clean

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	# Bytecode for the package, which an editable install does not compile: where
	# PYTHONDONTWRITEBYTECODE is set (CI), every process Spark starts would compile it anew.
	$(PY) -m compileall -q src
	# The Spark driver's class archive: every pipeline, demo and Spark test starts sooner.
	$(VENV)/bin/changestream pipeline prepare
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/changestream demo
	$(VENV)/bin/changestream demo --pipeline

test: $(STAMP)
	$(PY) -m pytest -q -m "not bench_smoke"
	$(MAKE) bench-smoke

# Every benchmark `make bench` runs, at a tiny size, checking its own counts; and each shown to
# fail its checks on a build that drops every tenth record (tests/test_benchmarks.py).
bench-smoke: $(STAMP)
	$(PY) -m pytest -q -m bench_smoke tests/test_benchmarks.py

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/ruff format --check src tests benchmarks
	$(VENV)/bin/mypy src

bench: $(STAMP)
	$(PY) benchmarks/write_path.py
	$(PY) benchmarks/read_path.py
	$(PY) benchmarks/tail_latency.py
	$(PY) benchmarks/partition_scale.py
	$(PY) benchmarks/stream_client.py
	$(PY) benchmarks/watch.py
	$(PY) benchmarks/server.py
	$(PY) benchmarks/spark_read.py
	$(PY) benchmarks/pipeline.py
	$(PY) benchmarks/sources.py
	$(PY) benchmarks/sources.py --source mysql
	$(PY) benchmarks/schema_change.py
	$(PY) benchmarks/console.py

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info
