# reservoir — `make help` lists the targets.

GO ?= go

.PHONY: help
help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

.PHONY: test
test: ## run every test (starts MariaDB, Redis and a Redis Cluster itself)
	scripts/test

.PHONY: services
services: ## start the throwaway servers; eval "$$(scripts/services env)" to use them
	scripts/services start mysql redis cluster

.PHONY: services-stop
services-stop: ## stop the throwaway servers
	scripts/services stop all

.PHONY: build
build: ## build bin/reservoir
	$(GO) build -o bin/reservoir ./cmd/reservoir

.PHONY: vet
vet: ## gofmt check and go vet
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); exit 1)
	$(GO) vet ./...

.PHONY: migrate
migrate: build services ## apply migrations to the local server's "reservoir" database
	eval "$$(scripts/services env)"; bin/reservoir migrate --dsn "$${RESERVOIR_MYSQL_DSN}reservoir" --create up
