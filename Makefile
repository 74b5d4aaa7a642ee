# m2n: plan, simulate and run M-to-N tensor resharding.
# `make help` lists the targets.

GO       ?= go
BIN      := bin/m2n
PURE     := ./model/... ./plan/... ./sim/... ./reports/...
FUZZTIME ?= 30s

.DEFAULT_GOAL := help
.PHONY: help build run test lint purity bench fuzz clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t 14

build: ## build the m2n binary at bin/m2n
	$(GO) build -o $(BIN) ./cmd/m2n

run: build ## run the main job on the built-in default scenario
	./$(BIN) plan

test: lint purity ## lint, check the pure core has no cgo, run every test
	$(GO) test -shuffle=on ./...

lint: ## gofmt and go vet
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

purity: ## the planner, simulator, models and reports build without cgo
	@deps=$$($(GO) list -deps -f '{{if and .CgoFiles (not .Standard)}}{{.ImportPath}}{{end}}' $(PURE)); \
	if [ -n "$$deps" ]; then echo "cgo reached the pure packages through: $$deps"; exit 1; fi
	CGO_ENABLED=0 $(GO) build $(PURE)

bench: ## run the Go benchmarks
	$(GO) test -run '^$$' -bench . -benchmem ./...

fuzz: ## run every fuzz target for FUZZTIME each (default 30s)
	@set -e; for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg 2>/dev/null | grep '^Fuzz' || true); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; \
	done

clean: ## remove build outputs
	rm -rf bin out
