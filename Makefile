# One entry point for a fresh machine with Python >= 3.11 and a C compiler:
#   make lab    create .venv, build the kernels, open the course in JupyterLab
#   make test   create .venv, build the kernels, run the whole test suite
#   make hub    (optional) serve the course to a class: JupyterHub + nbgrader, see hub/launch.py
#   make hub-users  (root) a real class's accounts, passwords, course and assignments, see hub/users.py
# Variables: PORT=8888 (HUB_PORT=8000, ROSTER=hub/roster.csv, COURSE=dlsys, ASSIGNMENTS=all, DATA=$NEEDLE_DATA_DIR for the hub), PYTHON=python3, JOBS=2 (pytest workers), NK_NATIVE=1 (build with
# -march=native), TORCH=auto|1|0: PyTorch is an optional test reference; `auto` installs the
# small CPU build (torch==2.13.0+cpu) only where a package index or wheel folder offers it,
# `1` installs torch==2.13.0 from any index (large), `0` never.

PYTHON ?= python3
VENV   ?= .venv
PORT   ?= 8888
HUB_PORT ?= 8000
ROSTER ?= hub/roster.csv
COURSE ?= dlsys
ASSIGNMENTS ?= all
JOBS   ?= 2
TORCH  ?= auto
BIN    := $(VENV)/bin
KERNELSPEC := $(VENV)/share/jupyter/kernels/python3/kernel.json
# No browser is launched when there is no display to show it on.
OPEN_BROWSER := $(if $(or $(DISPLAY),$(WAYLAND_DISPLAY),$(filter Darwin,$(shell uname -s))),,--no-browser)
# Containers and cloud images often log in as root, which JupyterLab refuses without this flag.
ALLOW_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root,)

.PHONY: setup lab hub hub-users test test-fast bench book clean torch-reference labextension

setup: $(VENV)/.installed $(KERNELSPEC)
	@$(BIN)/python setup.py -q build_ext --inplace -j 2 >/dev/null
	@$(BIN)/python -c "import needle_kernels.backend_ndarray as nd; print('needle_kernels ready:', [str(d) + (' (enabled)' if d.enabled() else ' (disabled)') for d in nd.all_devices()])"

$(VENV)/.installed: pyproject.toml setup.py environment.yml scripts/install_system_deps.sh
	@bash scripts/install_system_deps.sh
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "setuptools>=77" wheel "Cython>=3.0" "numpy>=1.26"
	$(BIN)/python -m pip install -q --no-build-isolation -e ".[test,course,distributed,onnx,hub,book]"
	@# the term in JupyterLab's assignment list: pyproject.toml's data-files install these from a
	@# wheel, but setuptools' editable installs skip data-files, so they are put in place here
	@# (the bundle linked, as `jupyter labextension develop` does)
	@mkdir -p $(VENV)/etc/jupyter/jupyter_server_config.d $(VENV)/share/jupyter/labextensions
	cp grader/jupyter/jupyter_server_config.d/grader.lab_term.json $(VENV)/etc/jupyter/jupyter_server_config.d/
	rm -rf $(VENV)/share/jupyter/labextensions/grader-term
	ln -s $(abspath grader/jupyter/labextensions/grader-term) $(VENV)/share/jupyter/labextensions/grader-term
	@touch $@

# The course's kernel, which JupyterLab, the hub and the tests start. `%%cython` compiles with
# Python's own CFLAGS (-O3 among them), or with $CFLAGS in their place where it is set. Python's ask
# for debug information, which no notebook reads and which lengthens every compile
# (benchmarks/README.md): so the kernel's CFLAGS are Python's, then -g0, as in the grader's sandbox.
$(KERNELSPEC): $(VENV)/.installed Makefile
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (needle_kernels)" \
		--env CFLAGS "$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_config_var("CFLAGS") or "", "-g0")')" >/dev/null

lab: setup
	@$(if $(ALLOW_ROOT),echo "running as root: JupyterLab is started with --allow-root",true)
	cd course && $(abspath $(BIN))/jupyter lab --ip=127.0.0.1 --port=$(PORT) $(OPEN_BROWSER) $(ALLOW_ROOT)

# HUB_STATE, HUB_EXCHANGE: the hub's files and nbgrader's exchange, when not the defaults
# (/srv/nbgrader/hub and /srv/nbgrader/exchange with system accounts)
HUB_PATHS = $(if $(HUB_STATE),--state $(HUB_STATE)) $(if $(HUB_EXCHANGE),--exchange $(HUB_EXCHANGE))

hub: setup
	$(BIN)/python hub/launch.py --roster $(ROSTER) --course $(COURSE) --port $(HUB_PORT) $(HUB_PATHS)

hub-users: setup
	$(BIN)/python hub/users.py --roster $(ROSTER) --course $(COURSE) --assignments $(ASSIGNMENTS) \
		$(HUB_PATHS) $(if $(DATA),--data $(DATA))

test: setup
	@bash scripts/install_system_deps.sh
	@$(MAKE) --no-print-directory torch-reference
	@start=$$(date +%s); \
	$(BIN)/python -m pytest -n $(JOBS) -q -rsfE autotests && \
	NEEDLE_BACKEND=np $(BIN)/python -m pytest -n $(JOBS) -q autotests/library; \
	status=$$?; echo "whole test suite: $$(( $$(date +%s) - start )) s"; exit $$status

test-fast: setup
	$(BIN)/python -m pytest -n $(JOBS) -q -m "not slow" autotests

bench: setup
	$(BIN)/python benchmarks/bench_backend.py
	$(BIN)/python benchmarks/bench_models.py

# the course as a static site in book/build/html: every lecture executed (through myst-nb's cache, so an
# unchanged lecture is not executed again), a page per assignment, the API reference
book: setup
	$(BIN)/python book/build.py

# the lab extension's bundle (grader/jupyter/labextensions/grader-term), rebuilt from its
# TypeScript source with Node and npm; the bundle is committed, so set-up needs neither
labextension: setup
	$(BIN)/python grader/labextension/build.py

clean:
	rm -rf build $(VENV) needle_kernels/**/*.so
	find needle_kernels -name '*.c' -path '*backend*' -delete

torch-reference:
	@if [ "$(TORCH)" = "0" ] || $(BIN)/python -c "import torch" 2>/dev/null; then exit 0; fi; \
	if [ "$(TORCH)" = "1" ]; then $(BIN)/python -m pip install -q torch==2.13.0; \
	else $(BIN)/python -m pip install -q "torch==2.13.0+cpu" >/dev/null 2>&1 \
	  && echo "PyTorch (CPU) installed as a test reference" \
	  || echo "PyTorch not available locally: its cross-checks will be skipped (make test TORCH=1 to fetch it)"; fi
