# Everything runs in .venv, created from requirements.txt when missing or stale.
# With TORCH=2.X.Y (make test TORCH=2.6.0), in .venv-torch-2.X.Y instead: requirements.txt
# with that release of torch, and the packages tools/torch-releases.txt changes for it.
PYTHON ?= python3
# make test and make releases for a centre whose environment gives another release than
# the pin (CENTRE=profiles/x.toml with [environment] torch = "2.4.1") run on that release:
# TORCH defaults to it (TORCH= on the command line still wins; TORCH= alone, the pin).
PIN := $(shell sed -n 's/^torch==\([0-9.]*\).*/\1/p' requirements.txt)
ON_CENTRE_RELEASE := $(and $(CENTRE),$(filter test releases,$(MAKECMDGOALS)))
CENTRE_TORCH := $(if $(ON_CENTRE_RELEASE),$(shell $(PYTHON) -m harness.profile $(CENTRE) --torch 2>/dev/null))
TORCH ?= $(filter-out $(PIN),$(CENTRE_TORCH))
VENV := $(if $(TORCH),.venv-torch-$(TORCH),.venv)
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SPHINX := $(BIN)/sphinx-build
SPHINXOPTS ?= -W --keep-going -n
DOCS := docs
BUILD := $(DOCS)/_build
PYTEST_ARGS ?=
# Test files run in parallel, JOBS at a time (pytest-xdist; conftest.py groups the tests
# that share runs); JOBS=0 runs them one by one.
JOBS ?= 3
PARALLEL = -n $(JOBS) --dist loadscope
# make outputs and make releases rerun every test (15 minutes) only when asked to.
NEEDS_SELECTION = $(if $(strip $(PYTEST_ARGS)),,$(error make $@ needs PYTEST_ARGS=tests/<chapter>/test_<name>.py (PYTEST_ARGS=tests: every test; one snippet: make check SNIPPET=<chapter>/<name>.py)))
# What make outputs records: 1, each output and its command; commands, only the commands
# (each output must still compare as in make test).
OUTPUTS ?= 1
# The centre profile the site is built and tested for (profiles/*.toml; empty: the
# default, profiles/default.toml). Sphinx and pytest read it from the environment.
CENTRE ?=
export CENTRE
CHECK_CENTRE = $(BIN)/python -m harness.profile $(CENTRE)

.PHONY: venv help html livehtml spelling linkcheck test releases test-gpu rehearse test-extras test-browser outputs bench clean new-lesson check

help:
	@echo "make new-lesson CHAPTER=c NAME=n  write a page, a snippet and a test that pass every check"
	@echo "make check SNIPPET=c/n.py  after editing a snippet: its tests, its output, its release,"
	@echo "                the site and the page checks (CONTRIBUTING.md lists every rule)"
	@echo "make html       build the site into $(BUILD)/html"
	@echo "                (CENTRE=profiles/x.toml: for that centre's cluster, also for make test)"
	@echo "make test       run every test this machine can run"
	@echo "make test TORCH=2.X.Y  the same with another release of torch (in .venv-torch-2.X.Y)"
	@echo "make test CENTRE=profiles/x.toml  with the release its environment gives, only the"
	@echo "                tests of the scripts it can run (python -m harness.software lists the others)"
	@echo "make releases PYTEST_ARGS=tests/c/test_n.py  record the release those tests pass on"
	@echo "make test-gpu   run the multi-GPU tests (inside a GPU allocation); report in gpu-report/"
	@echo "                (PYTHON=python3: in that Python as it is, installing nothing)"
	@echo "make rehearse   run the tests' one-GPU cases on the CPU (tools/gpu-check runs them on a GPU)"
	@echo "make outputs PYTEST_ARGS=tests/c/test_n.py  recapture the outputs of those tests' snippets"
	@echo "make outputs OUTPUTS=commands  rewrite only the command above each output"
	@echo "make spelling   spell-check the pages (en_GB)"
	@echo "make linkcheck  check internal links"
	@echo "make livehtml   rebuild and reload the site while you edit"
	@echo "make bench      measure build and test times"

ifeq ($(TORCH),)
$(STAMP): requirements.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -r requirements.txt
	# DeepSpeed compiles its CPU communication operator on first use (about a minute of
	# CPU, cached in ~/.cache/torch_extensions): once here, not inside the first test, and
	# with the venv's ninja, which the tests' runs and jobs find first on their PATH.
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -c "from deepspeed.comm.torch import build_shm_op; build_shm_op()" >/dev/null
	touch $@
else
# Releases other than the pin come from the registry as CUDA builds (with their nvidia-*
# libraries, without which torch does not import); they run on the CPU too.
$(STAMP): requirements.txt tools/torch-releases.txt tools/torch_requirements.py
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	echo '*' > $(VENV)/.gitignore
	$(PYTHON) tools/torch_requirements.py $(TORCH) > $(VENV)/requirements.txt
	$(BIN)/pip install --quiet --disable-pip-version-check -r $(VENV)/requirements.txt \
	    || { echo "make: pip cannot install PyTorch $(TORCH) here (Python $$($(BIN)/python -c 'import platform; print(platform.python_version())')): see pip's lines above$(if $(filter $(TORCH),$(CENTRE_TORCH)), (the release of $(CENTRE)'s [environment] torch))" >&2; exit 1; }
	touch $@
endif

venv: $(STAMP)

html: $(STAMP)
	@$(CHECK_CENTRE)
	$(SPHINX) $(SPHINXOPTS) -b html $(DOCS) $(BUILD)/html
	@echo "The site is in $(BUILD)/html/index.html"

livehtml: $(STAMP)
	$(BIN)/sphinx-autobuild $(SPHINXOPTS) $(DOCS) $(BUILD)/html

spelling: $(STAMP)
	$(BIN)/python -c "import enchant" 2>/dev/null || { echo "spelling needs the enchant library (Debian: apt-get install libenchant-2-2 hunspell-en-gb)"; exit 1; }
	$(SPHINX) $(SPHINXOPTS) -b spelling $(DOCS) $(BUILD)/spelling

linkcheck: $(STAMP)
	$(SPHINX) $(SPHINXOPTS) -b linkcheck $(DOCS) $(BUILD)/linkcheck

test: $(STAMP)
	@$(CHECK_CENTRE)
	$(BIN)/pytest -m "not extras" $(PARALLEL) $(PYTEST_ARGS)

# The same tests, recording which release of torch each snippet's tests passed on in
# docs/_data/torch_versions.json (harness/releases.py): a plain test run never writes it.
releases: $(STAMP)
	$(NEEDS_SELECTION)
	@$(CHECK_CENTRE)
	$(BIN)/pytest -m "not extras" --record-releases $(PARALLEL) $(PYTEST_ARGS)

# The report of the run (harness/gpu_report.py): GPU_REPORT/report.md and report.json.
# With PYTHON given (make test-gpu PYTHON=python3), in that Python as it is (a centre's
# PyTorch module or container), installing nothing: a test whose package is missing
# there is skipped with the reason. Without it, in .venv.
GPU_REPORT ?= gpu-report
# pytest runs unbuffered (python -u), so that a job's log shows each test as it ends; the
# snippets it runs do not inherit that (a reader's job does not have it).
ifeq ($(origin PYTHON),command line)
GPU_PYTEST := $(PYTHON) -u -m pytest
GPU_NEEDS :=
else
GPU_PYTEST := $(BIN)/python -u -m pytest
GPU_NEEDS := $(STAMP)
endif
test-gpu: $(GPU_NEEDS)
	$(GPU_PYTEST) -m multigpu --gpu-report=$(GPU_REPORT) $(PYTEST_ARGS)

# The one-GPU cases of the tests (tests/devices.py, tools/gpu-check) on the CPU, at world
# size 1 with gloo: their logic runs before a GPU runs them.
rehearse: $(STAMP)
	SNIPPET_HARNESS_REHEARSE=1 $(BIN)/pytest -m one_gpu $(PARALLEL) $(PYTEST_ARGS)

test-browser: $(STAMP)
	$(BIN)/pytest -m browser $(PYTEST_ARGS)

outputs: $(STAMP)
	$(NEEDS_SELECTION)
	UPDATE_OUTPUTS=$(OUTPUTS) $(BIN)/pytest -m "not multigpu" $(PARALLEL) $(PYTEST_ARGS)

# One snippet after an edit (SNIPPET=chapter/name.py): recapture its outputs, rerun its
# whole test file to record its release (a recapturing run records nothing), then build
# the site and run the page checks.
SNIPPET_TEST = tests/$(dir $(SNIPPET))test_$(basename $(notdir $(SNIPPET))).py
check: $(STAMP)
	$(if $(and $(SNIPPET),$(wildcard snippets/$(SNIPPET))),,$(error make check needs SNIPPET=<chapter>/<name>.py: a file in snippets/ (make new-lesson writes one)))
	$(if $(wildcard $(SNIPPET_TEST)),,$(error make check needs $(SNIPPET_TEST): the test of snippets/$(SNIPPET)))
	@$(CHECK_CENTRE)
	UPDATE_OUTPUTS=1 $(BIN)/pytest -m "not multigpu" -q $(SNIPPET_TEST)
	$(BIN)/pytest --record-releases -q $(SNIPPET_TEST)
	$(SPHINX) $(SPHINXOPTS) -b html $(DOCS) $(BUILD)/html
	$(BIN)/pytest -q tests/site

new-lesson: $(STAMP)
	$(BIN)/python tools/new_lesson.py "$(CHAPTER)" "$(NAME)"

bench: $(STAMP)
	$(BIN)/python tools/bench.py $(ARGS)

clean:
	rm -rf $(BUILD)

# The "Beyond plain PyTorch" chapter's tests. Accelerate and Horovod go into .venv beside
# torch (Horovod built from source by the script the chapter shows; its wheel is kept in
# ~/.cache/horovod-wheels), TensorFlow into a venv of its own.
EXTRAS_STAMP := $(VENV)/.installed-extras
TF_VENV := .venv-tf
TF_STAMP := $(TF_VENV)/.installed
# On a machine with NVIDIA GPUs, TensorFlow with its CUDA libraries (the GPU tests need it).
TF_BUILD := $(if $(shell command -v nvidia-smi),tensorflow[and-cuda],tensorflow-cpu)
TF_PACKAGES := '$(TF_BUILD)==2.21.0' tf-keras==2.21.0

$(EXTRAS_STAMP): $(STAMP) requirements-extras.txt snippets/frameworks/build_horovod.sh
	$(BIN)/pip install --quiet --disable-pip-version-check -r requirements-extras.txt
	PYTHON=$(CURDIR)/$(BIN)/python bash snippets/frameworks/build_horovod.sh
	touch $@

$(TF_STAMP): Makefile
	test -x $(TF_VENV)/bin/python || $(PYTHON) -m venv $(TF_VENV)
	echo '*' > $(TF_VENV)/.gitignore  # as Python 3.13's venv does: git ignores the venv
	$(TF_VENV)/bin/pip install --quiet --disable-pip-version-check $(TF_PACKAGES)
	touch $@

test-extras: $(EXTRAS_STAMP) $(TF_STAMP)
	$(BIN)/pytest -m extras $(PYTEST_ARGS)
