# The two commands a new machine needs: `make demo` and `make test`.
# Everything is installed into .venv; the test apiserver binary is cached in
# ~/.cache/resourceslice/ (built once per machine, several minutes the first time).

# The declared Python versions, newest first (pyproject.toml's classifiers).
PYTHON_VERSIONS := 3.13 3.12 3.11 3.10 3.9
PYTHON_OLDEST_VERSION := $(lastword $(PYTHON_VERSIONS))
PYENV_ROOT ?= $(HOME)/.pyenv
# $(call python_of,3.13): an installed CPython 3.13 (pyenv's newest patch release, else one
# on PATH), or nothing.
python_of = $(firstword $(shell ls -d $(PYENV_ROOT)/versions/$(1).*/bin/python$(1) 2>/dev/null \
	| sort -rV) $(shell command -v python$(1) 2>/dev/null))
# .venv: the newest declared Python the machine has. .venv-oldest: the oldest declared one.
ifeq ($(origin PYTHON),undefined)
PYTHON := $(or $(foreach v,$(PYTHON_VERSIONS),$(call python_of,$(v))),python3)
PYTHON := $(firstword $(PYTHON))
endif
ifeq ($(origin PYTHON_OLDEST),undefined)
PYTHON_OLDEST := $(call python_of,$(PYTHON_OLDEST_VERSION))
endif

VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Names the interpreter .venv was made with: another one (a newer Python) makes it anew.
VENV_MADE := $(VENV)/.made-with-$(notdir $(PYTHON))

# The lower bound of every runtime dependency in pyproject.toml, exactly: pip would resolve
# the newest, so these are what .venv-oldest proves. prometheus-client: the metrics extra's.
OLDEST_DEPS := kubernetes==34.1.0 urllib3==2.3.0 PyYAML==6.0 prometheus-client==0.17.0
OLDEST_VENV := .venv-oldest
OLDEST_PY := $(OLDEST_VENV)/bin/python
OLDEST_STAMP := $(OLDEST_VENV)/.installed
# The whole suite but the wheel's own tests (they install it with the newest Python) and the
# API reference's build, the pages rendered by its Markdown engine and mypy on drivers (their
# tools are in the dev extra, which .venv-oldest has not).
OLDEST_TESTS := --ignore=tests/packaging --ignore=tests/docs/test_api_reference.py \
	--ignore=tests/docs/test_rendering.py \
	--ignore=tests/kubeletplugin/test_typing.py

# The release wheel, as users get it: abi3, linked against glibc 2.17 through zig (its own
# target directory, so that it does not evict the development build from target/).
WHEEL_DIR := target/wheels
WHEEL_TARGET := target/wheel

.PHONY: test test-oldest demo bench bench-check lint fmt dev server wheel clean

$(VENV_MADE):
	rm -rf $(VENV)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip "maturin>=1.7,<2"
	touch $@

# The package in development mode (python/ on the path), the Rust core built in release
# mode into it, and the runtime + test + dev dependencies of pyproject.toml.
dev: $(STAMP)
$(STAMP): $(VENV_MADE) pyproject.toml Cargo.toml $(shell find rust/src -name '*.rs' 2>/dev/null)
	VIRTUAL_ENV=$(abspath $(VENV)) $(VENV)/bin/maturin develop --release --extras test,dev,metrics,kubelet --quiet
	touch $@

# Build (or find cached) the real kube-apiserver + etcd used by the integration tests.
server: dev
	$(PY) -c "from resourceslice.testing import build_server, releases; [print(build_server(release=r)) for r in releases()]"

# Cargo keeps it cached: seconds when nothing changed.
wheel: dev
	rm -rf $(WHEEL_DIR)
	PATH=$(abspath $(VENV))/bin:$$PATH CARGO_TARGET_DIR=$(WHEEL_TARGET) $(VENV)/bin/maturin build \
		--release --zig --compatibility manylinux2014 --out $(WHEEL_DIR) --quiet

lint: dev
	$(VENV)/bin/ruff check python tests benches examples tools
	$(VENV)/bin/ruff format --check python tests benches examples tools
	$(VENV)/bin/mypy
	$(VENV)/bin/mypy examples
	$(VENV)/bin/mypy tools
	cargo fmt --check
	cargo clippy --quiet --all-targets -- -D warnings

fmt: dev
	$(VENV)/bin/ruff format python tests benches examples tools
	$(VENV)/bin/ruff check --fix python tests benches examples tools
	cargo fmt

# The oldest declared Python, the wheel with its test and metrics extras, and the oldest
# declared dependencies: pip fails here if they are outside what the wheel declares. (Made after
# `wheel`: see test-oldest.)
$(OLDEST_STAMP): pyproject.toml Makefile
	@test -n "$(PYTHON_OLDEST)" || { echo "no Python $(PYTHON_OLDEST_VERSION) found (pyenv or" \
		"PATH): pyproject.toml declares it, so make test runs on it; set PYTHON_OLDEST" >&2; exit 1; }
	$(PYTHON_OLDEST) -m venv --clear $(OLDEST_VENV)
	$(OLDEST_PY) -m pip install --quiet --upgrade pip
	$(OLDEST_PY) -m pip install --quiet "$$(ls $(WHEEL_DIR)/*.whl)[test,metrics,kubelet]" $(OLDEST_DEPS) \
		$(KUBELET_OLDEST_DEPS)
	touch $@

# The release wheel installed into .venv-oldest (its declared dependencies must hold with
# OLDEST_DEPS: pip check), then the suite from that installation.
test-oldest: wheel server kubelet-harness dra-cluster device-attrs helm device-metadata runtime \
		api-fields $(OLDEST_STAMP)
	$(OLDEST_PY) -m pip install --quiet --no-deps --force-reinstall $(WHEEL_DIR)/*.whl
	$(OLDEST_PY) -m pip check
	$(OLDEST_PY) -c "import sys, kubernetes; print('oldest: Python', sys.version.split()[0], \
		'kubernetes', kubernetes.__version__)"
	$(OLDEST_PY) -m pytest $(OLDEST_TESTS)

# The tests that run a second time with the library on its own Connection instead of a
# kubernetes ApiClient (RESOURCESLICE_TEST_CLIENT; tests/support/controller_env.py): the
# controller, leader election and shards, the kubelet plugin.
CONNECTION_TESTS = tests/integration/test_controller.py tests/integration/test_controller_races.py \
	tests/integration/test_leaderelection.py tests/integration/test_sharding.py \
	tests/kubeletplugin/test_kubelet.py tests/kubeletplugin/test_checkpoint.py \
	tests/kubeletplugin/test_example.py

# Lint first (seconds), then the Rust unit tests, then the whole pytest suite on the real
# server with the newest Python and dependencies (and CONNECTION_TESTS again on the
# library's own connection), every bench once (small), then the suite again on the oldest.
test: lint server kubelet-harness dra-cluster device-attrs helm device-metadata runtime api-fields \
		wheel
	PYO3_PYTHON=$(abspath $(PY)) cargo test --quiet --lib
	$(PY) -c "import sys, kubernetes; print('newest: Python', sys.version.split()[0], \
		'kubernetes', kubernetes.__version__)"
	RESOURCESLICE_WHEEL="$$(ls $(abspath $(WHEEL_DIR))/*.whl)" $(PY) -m pytest
	RESOURCESLICE_TEST_CLIENT=connection $(PY) -m pytest -p no:cacheprovider $(CONNECTION_TESTS)
	$(MAKE) --no-print-directory bench-check
	$(MAKE) --no-print-directory test-oldest

# Every bench once, at a small size and with timing off (benches/benchsize.py): a bench whose
# setup or assertions went stale fails here, not when someone next wants its figures.
bench-check: dev server kubelet-harness dra-cluster
	RESOURCESLICE_BENCH_SMALL=1 $(PY) -m pytest benches -p no:cacheprovider

bench: dev server
	mkdir -p .benchmarks
	$(PY) -m pytest benches --benchmark-enable --benchmark-json=.benchmarks/latest.json

# Only what the demo uses: the default release's apiserver and DRA cluster (built by the
# demo's first step when missing).
demo: dev
	$(PY) examples/demo.py

clean:
	rm -rf $(VENV) $(OLDEST_VENV) $(PROTOC_VENV) target site .pytest_cache .mypy_cache .ruff_cache .benchmarks
	find python -name '*.so' -delete

# --- resourceslice.kubeletplugin (the [kubelet] extra) ---
# Its gRPC + protobuf modules (committed in python/resourceslice/kubeletplugin/_pb/), generated
# from the .proto files of the k8s.io/kubelet module that the kubelet harness's go.mod pins
# (the release of the test apiserver). Generated code needs a protobuf runtime at least as new
# as the generator's, and grpcio at least as new as grpcio-tools: the generator is therefore
# the [kubelet] extra's lower bound (KUBELET_OLDEST_DEPS), in a venv of its own.
KUBELET_HARNESS := python/resourceslice/testing/kubeletharness
KUBELET_PB := python/resourceslice/kubeletplugin/_pb
KUBELET_OLDEST_DEPS := grpcio==1.66.2 protobuf==5.27.2
PROTOC_VENV := .venv-protoc
# <api dir in k8s.io/kubelet/pkg/apis>:<name of the copy>
KUBELET_PROTOS := dra/v1:dra_v1 dra/v1beta1:dra_v1beta1 dra-health/v1:health_v1 \
	dra-health/v1alpha1:health_v1alpha1 pluginregistration/v1:pluginregistration_v1

.PHONY: protos kubelet-harness dra-cluster device-attrs helm device-metadata runtime api-fields
# Build (or find cached) the kubelet harness the kubeletplugin tests register plugins with.
kubelet-harness: dev
	$(PY) -c "from resourceslice.testing.kubelet import build_kubelet_harness; print(build_kubelet_harness())"

# Build (or find cached) the DRA cluster (kube-scheduler, the resourceclaim controller,
# kubelet's DRA manager) of each release, which tests/e2e runs pods on.
dra-cluster: dev
	$(PY) -c "from resourceslice.testing import build_dra_cluster, releases; \
		[print(build_dra_cluster(release=r)) for r in releases()]"

# Build (or find cached) Go's deviceattribute as a command (resourceslice.testing.sysfs), the
# oracle tests/deviceattribute checks resourceslice.deviceattribute against.
device-attrs: dev
	$(PY) -c "from resourceslice.testing.sysfs import build_deviceattrs; print(build_deviceattrs())"

# Build (or find cached) Helm's own command line, v4.3.2 (resourceslice.testing.helm), which
# lints and renders the chart in deploy/chart for tests/chart and tests/security/test_deploy.py.
helm: dev
	$(PY) -c "from resourceslice.testing.helm import build_helm; print(build_helm())"

# Build (or find cached) Go's device metadata decoder and helper as a command
# (resourceslice.testing.devicemetadata), the oracle the metadata files are checked against.
device-metadata: dev
	$(PY) -c "from resourceslice.testing.devicemetadata import build_metadata_oracle; \
		print(build_metadata_oracle())"

# Build (or find cached) runc v1.5.3 and the static reporter it runs as a container's process
# (resourceslice.testing.runtime), for tests/testing/test_runtime.py.
runtime: dev
	$(PY) -c "from resourceslice.testing.runtime import build_reporter, build_runc; \
		print(build_runc()); print(build_reporter())"

# Download the k8s.io/api module of each supported release and build (or find cached) the
# reader of its ResourceSlice fields (tests/support/api_fields.py), which tests/core checks
# the field table python/resourceslice/_fields.txt against.
api-fields: dev
	PYTHONPATH=tests $(PY) -m support.api_fields

protos:
	test -x $(PROTOC_VENV)/bin/python || $(PYTHON) -m venv $(PROTOC_VENV)
	$(PROTOC_VENV)/bin/python -m pip install --quiet grpcio-tools==$(word 2,$(subst ==, ,$(firstword $(KUBELET_OLDEST_DEPS))))
	apis="$$(cd $(KUBELET_HARNESS) && GOFLAGS=-mod=readonly go list -m -f '{{.Dir}}' k8s.io/kubelet)/pkg/apis" && \
	for entry in $(KUBELET_PROTOS); do \
		install -m 644 "$$apis/$${entry%%:*}/api.proto" $(KUBELET_PB)/$${entry##*:}.proto || exit 1; \
	done
	$(PROTOC_VENV)/bin/python -m grpc_tools.protoc -Ipython --python_out=python --pyi_out=python \
		--grpc_python_out=python $(KUBELET_PB)/*.proto

# --- documentation ---
# The site with the API reference, generated from the docstrings into site/; --strict makes a
# warning (a broken link or anchor, an unparsable docstring) fail the build.
.PHONY: docs
docs: dev
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

# --- distributions ---
# dist/: the abi3 wheel (`make wheel`), the sdist (builds the Rust core with cargo where it is
# installed), and the pure-Python wheel: the same package without _core, for platforms that
# have no binary wheel (tools/pure_wheel.py derives it from the binary one).
# tests/packaging/test_dists.py installs each into a clean virtualenv.
DIST_DIR := dist
.PHONY: dist
dist: wheel
	rm -rf $(DIST_DIR)
	mkdir -p $(DIST_DIR)
	cp $(WHEEL_DIR)/*.whl $(DIST_DIR)/
	$(VENV)/bin/maturin sdist --out $(DIST_DIR)
	$(PY) tools/pure_wheel.py $(DIST_DIR)/*-abi3-*.whl $(DIST_DIR)
