# reservoir — `make help` lists the targets.

GO ?= go

.PHONY: help
help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

.PHONY: test
test: ## run every test (starts MariaDB, Redis and a Redis Cluster itself)
	scripts/test

.PHONY: check
check: vet ## the inner loop, no servers needed: gofmt, go vet, staticcheck and go test -short (under a minute warm; make test is the full suite)
	$(GO) tool staticcheck ./...
	$(GO) test -short ./...

.PHONY: services
services: ## start the throwaway servers; eval "$$(scripts/services env)" to use them
	scripts/services start mysql redis cluster redis-secure

.PHONY: services-stop
services-stop: ## stop the throwaway servers
	scripts/services stop all

.PHONY: build
build: ## build bin/reservoir (a first build compiles for a couple of minutes)
	@echo "building bin/reservoir: $(GO) build -o bin/reservoir ./cmd/reservoir (the first run compiles every dependency, a couple of minutes; later runs take seconds) ..."
	@(n=0; while sleep 20 </dev/null >/dev/null 2>&1; do n=$$((n + 20)); echo "  still compiling bin/reservoir ($${n}s) ..."; done) & ticker=$$!; \
	$(GO) build -o bin/reservoir ./cmd/reservoir; status=$$?; kill $$ticker 2>/dev/null; exit $$status

.PHONY: vet
vet: ## gofmt check and go vet
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); exit 1)
	$(GO) vet ./...

.PHONY: migrate
migrate: build services ## apply both migration sets to the local server's "reservoir" database (a pod's and the control database at once)
	eval "$$(scripts/services env)"; bin/reservoir migrate --dsn "$${RESERVOIR_MYSQL_DSN}reservoir" --set both --create up

DEMO_FLAGS ?=

.PHONY: demo
demo: build ## the one-command tour: three pods, traffic, a shadow rollout, the dashboard (Ctrl-C stops it)
	scripts/services start mysql redis >/dev/null
	eval "$$(scripts/services env)"; bin/reservoir demo $(DEMO_FLAGS)

.PHONY: serve
serve: build ## bin/reservoir serve on the topology file in RESERVOIR_TOPOLOGY (docs/api.md)
	bin/reservoir serve --topology "$${RESERVOIR_TOPOLOGY:?set RESERVOIR_TOPOLOGY to a topology file}"

.PHONY: screenshot
screenshot: ## retake docs/dashboard.png from a live demo in headless Chromium
	scripts/services start mysql redis >/dev/null
	eval "$$(scripts/services env)"; RESERVOIR_SCREENSHOT=$(CURDIR)/docs/dashboard.png $(GO) test -count=1 -run TestDemoNewcomerPath ./internal/cli/

MUTATE_PKGS ?= ./rollout ./rollout/authority ./rollout/flagdoc ./rollout/flagsource ./dualwrite ./redisstore ./mysqlstore
MUTATE_FLAGS ?=

.PHONY: mutate
mutate: ## mutation testing (gremlins v0.6.0) of MUTATE_PKGS; hours for all of them on 2 cores (docs/testing.md)
	scripts/services start mysql redis cluster redis-secure >/dev/null
	eval "$$(scripts/services env)"; for p in $(MUTATE_PKGS); do \
		echo "== gremlins $$p" >&2; \
		$(GO) run github.com/go-gremlins/gremlins/cmd/gremlins@v0.6.0 unleash --workers 1 --timeout-coefficient 30 $(MUTATE_FLAGS) $$p || exit 1; \
	done

MUTATE_SAMPLE ?= 50
MUTATE_SEED ?= 1
MUTATE_OUT ?= $(or $(TMPDIR),/tmp)/reservoir-mutants
MUTATE_SAMPLE_FLAGS ?= -timeout 100s

.PHONY: mutate-sample
mutate-sample: ## a seeded sample of MUTATE_SAMPLE mutants per package of MUTATE_PKGS and each kill ratio with its 95% interval (~1.5 h on 2 cores; resumable)
	scripts/services start mysql redis cluster redis-secure >/dev/null
	eval "$$(scripts/services env)"; $(GO) run ./internal/mutants/cmd/mutants -n $(MUTATE_SAMPLE) -seed $(MUTATE_SEED) -out $(MUTATE_OUT) $(MUTATE_SAMPLE_FLAGS) $(MUTATE_PKGS)

BENCH_FLAGS ?= --quick
BENCH_OUT ?= $(or $(TMPDIR),/tmp)/reservoir-bench

.PHONY: bench
bench: build ## benchmark (quick, ~2 min; BENCH_FLAGS= for the full ~10 min run); BENCHMARKS.md says more
	scripts/services start mysql redis >/dev/null
	eval "$$(scripts/services env)"; bin/reservoir bench $(BENCH_FLAGS) --out "$(BENCH_OUT)"
