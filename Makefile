# courier — `make help` lists the targets.
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c
export GOTOOLCHAIN ?= local

# Integration tests use this PostgreSQL; without one they are skipped (outside CI) and listed.
COURIER_TEST_POSTGRES_URL ?= postgres://postgres@127.0.0.1:5432/test?sslmode=disable
export COURIER_TEST_POSTGRES_URL

STATICCHECK_VERSION   := v0.8.2
WORKFLOWCHECK_VERSION := v0.6.0
GOBIN_DIR             := $(CURDIR)/bin/tools
TEST_TIMEOUT          ?= 45m

.PHONY: help run cluster build test test-short lint api-check bench record-histories clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-18s %s\n", $$1, $$2}'

run: ## run everything in one process: Temporal + UI (:8233), NATS, SQLite, gateway (:8080), worker
	go build -o bin/courier ./cmd/courier
	exec ./bin/courier dev $(ARGS)

cluster: ## the production topology on this machine: Temporal as 4 services on PostgreSQL, UI (:8233), NATS, 2 workers, 2 gateways (:8080, :8081)
	go build -o bin/courier-cluster ./cmd/courier-cluster
	exec ./bin/courier-cluster $(ARGS)

build: ## build bin/courier
	go build -o bin/courier ./cmd/courier

image-binary: ## build bin/courier-slim as the Dockerfile does: -tags slim, no embedded Temporal, UI or NATS (no courier dev, no courier bench)
	CGO_ENABLED=0 go build -tags slim -trimpath -ldflags="-s -w" -o bin/courier-slim ./cmd/courier

test: ## run every test (unit, replay, store conformance, integration); prints skipped tests and why
	go test -count=1 -timeout $(TEST_TIMEOUT) -json ./... | go run ./internal/tools/testreport

test-short: ## run the fast tests only (no Temporal server)
	go test -count=1 -short ./...

lint: ## gofmt, go vet, staticcheck, workflowcheck
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	go vet ./...
	GOBIN=$(GOBIN_DIR) go install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	GOBIN=$(GOBIN_DIR) go install go.temporal.io/sdk/contrib/tools/workflowcheck@$(WORKFLOWCHECK_VERSION)
	$(GOBIN_DIR)/staticcheck ./...
	$(GOBIN_DIR)/workflowcheck ./workflows/...

api-check: ## lint gateway/openapi.yaml with @redocly/cli (no warnings) and type-check a TypeScript producer against openapi-typescript's types (Node + npm)
	cd internal/tools/apicheck && npm ci --no-audit --no-fund --loglevel=error && npm run --silent lint && npm run --silent types && npm run --silent check

bench: ## courier bench outbox, timers and tasks on the embedded stack (add BENCH_ARGS="--postgres-url …")
	go build -o bin/courier ./cmd/courier
	./bin/courier bench outbox $(BENCH_ARGS)
	./bin/courier bench timers
	./bin/courier bench tasks $(BENCH_ARGS)

record-histories: ## re-record the replay histories under workflows/testdata from real runs
	COURIER_RECORD_HISTORIES=1 go test -count=1 -run TestRecord ./integration/

clean: ## remove build output and the default dev data dir
	rm -rf bin .courier .courier-cluster
