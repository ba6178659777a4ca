# The two commands a new machine needs: `make demo` and `make test`.
# Everything is installed into .venv; the test apiserver binary is cached in
# ~/.cache/resourceslice/ (built once per machine, several minutes the first time).

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: test demo bench lint fmt dev server clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip "maturin>=1.7,<2"

# The package in development mode (python/ on the path), the Rust core built in release
# mode into it, and the runtime + dev dependencies of pyproject.toml.
dev: $(STAMP)
$(STAMP): $(PY) pyproject.toml Cargo.toml $(shell find rust/src -name '*.rs' 2>/dev/null)
	VIRTUAL_ENV=$(abspath $(VENV)) $(VENV)/bin/maturin develop --release --extras dev --quiet
	touch $@

# Build (or find cached) the real kube-apiserver + etcd used by the integration tests.
server: dev
	$(PY) -c "from resourceslice.testing import build_server; print(build_server())"

lint: dev
	$(VENV)/bin/ruff check python tests benches
	$(VENV)/bin/ruff format --check python tests benches
	$(VENV)/bin/mypy
	cargo fmt --check
	cargo clippy --quiet --all-targets -- -D warnings

fmt: dev
	$(VENV)/bin/ruff format python tests benches
	$(VENV)/bin/ruff check --fix python tests benches
	cargo fmt

# Lint first (seconds), then the Rust unit tests, then the whole pytest suite on the real server.
test: lint server
	PYO3_PYTHON=$(abspath $(PY)) cargo test --quiet --lib
	$(PY) -m pytest

bench: dev server
	mkdir -p .benchmarks
	$(PY) -m pytest benches --benchmark-enable --benchmark-json=.benchmarks/latest.json

demo: dev server
	$(PY) -m resourceslice.demo

clean:
	rm -rf $(VENV) target .pytest_cache .mypy_cache .ruff_cache .benchmarks
	find python -name '*.so' -delete
