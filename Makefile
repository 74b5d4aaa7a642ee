# m2n: plan, simulate and run M-to-N tensor resharding.
# `make help` lists the targets.

GO       ?= go
# go-nvml's header warns about deprecated calls m2n does not make.
export CGO_CFLAGS ?= -O2 -g -Wno-deprecated-declarations
BIN      := bin/m2n
PURE     := ./model/... ./ir/... ./program/... ./hostexec/... ./plan/... ./sim/... ./evaluate/... ./reports/... ./calibrate
FUZZTIME ?= 30s

.DEFAULT_GOAL := help
.PHONY: help build run report test lint purity bench fuzz clean gpu-test python python-install python-test python-pip-test

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t 14

build: ## build the m2n binary at bin/m2n
	$(GO) build -o $(BIN) ./cmd/m2n

run: build ## report on the paper scenario: Markdown, CSV and charts in out/paper-ffn-moe
	./$(BIN) report paper-ffn-moe -o out/paper-ffn-moe
	@echo "the report is in out/paper-ffn-moe/: start with report.md and latency.png"

FIGURES := docs/figures
report: build ## regenerate the README's headline chart and table (docs/figures) from the paper scenario
	./$(BIN) report paper-ffn-moe -o out/figures
	mkdir -p $(FIGURES)
	cp out/figures/latency.png $(FIGURES)/paper-latency.png
	cp out/figures/latency.svg $(FIGURES)/paper-latency.svg
	cp out/figures/results.csv $(FIGURES)/paper-results.csv
	cp out/figures/report.md $(FIGURES)/paper-report.md
	@# The README's results table: the block between the m2n:results markers.
	@awk -v src=out/figures/report.md ' \
	  BEGIN { while ((getline l < src) > 0) { if (l ~ /m2n:results:begin/) on = 1; if (on) block = block l "\n"; if (l ~ /m2n:results:end/) on = 0 } } \
	  /m2n:results:begin/ { printf "%s", block; skip = 1; found = 1; next } \
	  /m2n:results:end/ { skip = 0; next } \
	  !skip { print } \
	  END { if (!found) { print "README.md has no <!-- m2n:results:begin --> marker" > "/dev/stderr"; exit 1 } }' \
	  README.md > out/README.md.tmp && mv out/README.md.tmp README.md
	@echo "updated $(FIGURES) and the README's results table"

test: lint purity ## lint, check the pure core has no cgo, run every test (Go, then the Python package's, then its pip install)
	$(GO) test -shuffle=on ./...
	$(MAKE) python-test
	$(MAKE) python-pip-test

python: ## build libm2n.so (the C ABI) into python/m2n, for the Python package (docs/python.md)
	$(GO) build -tags m2n_nonvml -buildmode=c-shared -o python/m2n/libm2n.so ./cmd/libm2n
	rm -f python/m2n/libm2n.h

python-install: python ## copy the m2n package into the running python3's site-packages (a venv's when one is active): no download, no build tool
	python3 -c 'import shutil, sysconfig; d = sysconfig.get_paths()["purelib"] + "/m2n"; shutil.copytree("python/m2n", d, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__")); print("installed m2n into", d)'

python-test: python build ## the Python package's tests, without a GPU
	cd python && M2N_BIN=$(CURDIR)/$(BIN) python3 -m unittest discover -s tests -v

# The README's install on a fresh machine: a venv over the system Python
# (its setuptools and wheel; .ci/run installs them with apt where absent),
# pip install --no-build-isolation with no package index, then the refit
# example's CPU half from outside the repository, on the installed package.
PYSYS ?= /usr/bin/python3
python-pip-test: python ## pip-install the package into a fresh venv offline and run the example's CPU half with it
	rm -rf $(CURDIR)/.pipvenv && $(PYSYS) -m venv --system-site-packages $(CURDIR)/.pipvenv
	tmp=$$(mktemp -d) && cp -r python/m2n python/pyproject.toml $$tmp/ && rm -rf $$tmp/m2n/__pycache__ \
		&& PIP_NO_INDEX=1 $(CURDIR)/.pipvenv/bin/pip install -q --no-build-isolation $$tmp && rm -rf $$tmp
	cd / && $(CURDIR)/.pipvenv/bin/python -c 'import m2n, sys; assert "/.pipvenv/" in m2n.__file__, m2n.__file__' \
		&& $(CURDIR)/.pipvenv/bin/python $(CURDIR)/python/examples/refit.py --plan-only
	rm -rf $(CURDIR)/.pipvenv

lint: ## gofmt, go vet, and the import rules of docs/architecture.md
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) test -count=1 ./internal/importrules

purity: ## the planner, simulator, evaluation, models and reports build without cgo
	@deps=$$($(GO) list -deps -f '{{if and .CgoFiles (not .Standard)}}{{.ImportPath}}{{end}}' $(PURE)); \
	if [ -n "$$deps" ]; then echo "cgo reached the pure packages through: $$deps"; exit 1; fi
	CGO_ENABLED=0 $(GO) build $(PURE)

bench: ## run the Go benchmarks
	$(GO) test -run '^$$' -bench . -benchmem ./...

fuzz: ## run every fuzz target for FUZZTIME each (default 30s); a failure does not stop the others, and all failures are named at the end
	@failed=""; \
	for pkg in $$($(GO) list ./...); do \
	  if ! fs=$$($(GO) test -list '^Fuzz' $$pkg 2>&1); then \
	    echo "$$fs"; echo "== $$pkg: cannot list its fuzz targets"; failed="$$failed $$pkg"; continue; \
	  fi; \
	  for f in $$(echo "$$fs" | grep '^Fuzz' || true); do \
	    echo "== $$pkg $$f"; \
	    $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || failed="$$failed $$pkg.$$f"; \
	  done; \
	done; \
	if [ -n "$$failed" ]; then echo "make fuzz: failed:$$failed"; exit 1; fi; \
	echo "make fuzz: every target passed"

clean: ## remove build outputs
	rm -rf bin out

gpu-test: build ## build bin/native.test: the GPU tests, to run on a GPU machine without Go
	$(GO) test -c -o bin/native.test ./native
	@echo "on the GPU machine: bin/native.test -test.v -test.run GPU; bin/native.test -test.run '^$$' -test.bench GPU"
