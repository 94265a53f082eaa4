# Every target sets itself up: a fresh clone needs only python3 (>= 3.10) and a C compiler.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
PYTEST_ARGS ?=
# the suite runs on this many processes (pytest-xdist), a test file to a process so that module fixtures
# (several launch TensorFlow subprocesses) run once; 0 runs it in this process
TEST_WORKERS ?= 2

.PHONY: demo demo-dist test bench ext clean

demo: ext
	$(PY) -m mxrec_ref train

# The same job on 2 MPI ranks (spec/sharding.md): Open MPI from the mpi extra's wheel; the two variables
# let it run as root, --oversubscribe lets 2 ranks share fewer cores.
demo-dist: ext
	OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 $(VENV)/bin/mpirun --oversubscribe -np 2 $(PY) -m mxrec_ref train

test: ext
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

bench: ext
	mkdir -p .benchmarks
	$(PY) -m pytest bench -q -p no:randomly --benchmark-only --benchmark-columns=min,median,rounds --benchmark-json=.benchmarks/latest.json $(PYTEST_ARGS)
	$(PY) bench/ratios.py .benchmarks/latest.json

# The Cython fast path, rebuilt in place whenever a .pyx, .pxi or .pxd changes (cythonize is incremental
# and follows the includes).
ext: $(STAMP)
	$(PY) setup.py -q build_ext --inplace

# pip >= 21.3 installs this pyproject project editable (PEP 660): an older one (a distribution's venv) is
# upgraded, a newer one kept (the upgrade's download is a good part of a clean clone's install time).
$(STAMP): setup.py pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -c 'import sys, pip; sys.exit(tuple(map(int, pip.__version__.split(".")[:2])) < (21, 3))' \
		|| $(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "setuptools>=77" wheel "Cython>=3,<4" "numpy>=2,<3"
	$(PY) -m pip install -q --no-build-isolation -e ".[test]"
	# tf-keras (TF-27) without its `tensorflow` requirement: tensorflow-cpu is the same modules (pyproject.toml)
	$(PY) -m pip install -q --no-deps "tf-keras>=2.20,<2.22"
	touch $@

clean:
	rm -rf build mxrec_ref/*.so cext/*.c .pytest_cache .hypothesis .benchmarks

# TFRA's CPU build works only with TF 2.16.2 + numpy 1.26: it gets its own environment
# (bench/peers/requirements.txt). bench-peers compares the store workload and the 26-table model
# (bench/criteo26.py) in interleaved processes, PEERS_ROUNDS rounds each (bench/README.md, "Peers").
PEERS_VENV := .venv-peers
PEERS_ROUNDS ?= 3
$(PEERS_VENV)/.installed-stamp: bench/peers/requirements.txt
	test -x $(PEERS_VENV)/bin/python || $(PYTHON) -m venv $(PEERS_VENV)
	$(PEERS_VENV)/bin/pip install -q -r bench/peers/requirements.txt
	touch $@

.PHONY: bench-peers
bench-peers: ext $(PEERS_VENV)/.installed-stamp
	$(PY) bench/peers/run.py $(PEERS_VENV)/bin/python $(PY) $(PEERS_ROUNDS)

# The conformance suite against TFRA's dynamic_embedding (issue 20; spec/contract.md CON-11, spec/backends.md
# BE-3): TFRA runs in .venv-peers behind mxrec_ref.peers.tfra; the per-rule report (pass, FAIL, n/a and why)
# is bench/peers/conformance-tfra.txt. Failing rules are TFRA's answer, not a failed build (--failures-ok);
# a dead TFRA process still fails it (exit 3).
.PHONY: conformance-peers
conformance-peers: ext $(PEERS_VENV)/.installed-stamp
	MXREC_TFRA_PYTHON=$(abspath $(PEERS_VENV))/bin/python $(PY) -m mxrec_ref conformance \
		--backend mxrec_ref.peers.tfra:open_tfra_store --report bench/peers/conformance-tfra.txt --failures-ok
