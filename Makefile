# kvd — one vocabulary for humans and CI (.ci/run calls these targets).
GO        ?= go
BIN       ?= bin/kvd
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -s -w -X github.com/kvd-project/kvd/internal/version.Version=$(VERSION)
STATICCHECK_VERSION ?= v0.8.2
FUZZTIME  ?= 20s

.PHONY: all build run cluster test test-short test-race lint fuzz bench clean

all: build

build: ## static kvd binary in bin/
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/kvd

run: ## one node on ./kvd-data, memcache 127.0.0.1:11211, http 127.0.0.1:11280
	$(GO) run ./cmd/kvd serve

cluster: build ## three local nodes: memcache on 127.0.0.1:11211-11213
	scripts/local-cluster.sh

test: ## every test: unit, real-process end-to-end, compatibility suites
	$(GO) test -count=1 ./...
	$(GO) test -count=1 -tags failpoints ./internal/failpoint/

test-short: ## skips the slower end-to-end tests
	$(GO) test -count=1 -short ./...

test-race: ## the race detector over everything (short mode keeps it bounded)
	$(GO) test -count=1 -race -short ./...

# gofmt's own failure (a file it cannot parse) fails lint too; and an empty
# file list (no git checkout) would leave gofmt reading stdin.
lint: ## gofmt, go vet, staticcheck
	@files=$$(git ls-files '*.go') && [ -n "$$files" ] || { echo "lint: git ls-files found no Go files" >&2; exit 1; }; \
	out=$$(gofmt -l $$files) || { echo "lint: gofmt failed" >&2; exit 1; }; \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags failpoints,e2e ./internal/failpoint/ ./deploy/compose/
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...

# Every fuzz target, as package:Target under internal/ (the lint test in
# internal/testing/lint checks that the list and the tree agree).
FUZZ_TARGETS = auth:FuzzParse mcproto/ascii:FuzzReader mcproto/ascii:FuzzMeta mcproto/binary:FuzzDecode command:FuzzDecode transport:FuzzDecode transport:FuzzReadSnapshotStream \
	httpapi:FuzzParseKey httpapi:FuzzParseETags raftlog:FuzzDecodeEntry snapfile:FuzzRead failpoint:FuzzParse fsm:FuzzDecodeItem \
	config:FuzzParseSize bench:FuzzParseSizeDist bench:FuzzParseRatio bench:FuzzParseConcurrency \
	migrate:FuzzParseDumpLine migrate:FuzzExportReader

fuzz: ## every fuzz target for FUZZTIME each (seed corpora in each package's testdata/fuzz)
	@set -e; for t in $(FUZZ_TARGETS); do \
		echo "$(GO) test -run '^$$' -fuzz '^$${t#*:}$$' -fuzztime $(FUZZTIME) ./internal/$${t%%:*}/"; \
		$(GO) test -run '^$$' -fuzz "^$${t#*:}\$$" -fuzztime $(FUZZTIME) ./internal/$${t%%:*}/; \
	done

bench: ## Go micro-benchmarks (server comparisons: bench/compare.sh)
	$(GO) test -run '^$$' -bench . -benchmem ./internal/...

clean:
	rm -rf bin

# Container image and the container end-to-end test (deploy/). The build
# context is a staging directory holding only the binary and an empty data/,
# so nothing else of the tree is sent to the daemon.
IMAGE         ?= kvd:dev
IMAGE_CONTEXT ?= bin/image-context

.PHONY: image e2e

image: build ## container image $(IMAGE): FROM scratch + bin/kvd (deploy/Dockerfile)
	rm -rf $(IMAGE_CONTEXT) && mkdir -p $(IMAGE_CONTEXT)/data
	cp $(BIN) $(IMAGE_CONTEXT)/kvd
	timeout 10m docker build -t $(IMAGE) -f deploy/Dockerfile $(IMAGE_CONTEXT)

e2e: image ## docker-compose clusters under faults: failover, partition, restart; the secured cluster refusing clients without TLS or credentials (needs docker, docker-compose)
	KVD_IMAGE=$(IMAGE) $(GO) test -count=1 -tags e2e -timeout 15m -v ./deploy/...

# Faulted real-process runs checked for linearizability, lost writes and
# replica divergence (docs/robustness.md). COUNT runs of DURATION traffic,
# one fault each, cycling through FAULTS (default: all) from SEED (0: clock),
# on TOPOLOGY (1n, 3n, 2n+1w: two data members and a witness; default:
# chosen per run from its seed). SECURE=1: TLS on the client ports, mutual
# TLS between members and authenticated clients, certificates made per run.
COUNT     ?= 10
DURATION  ?= 5s
SEED      ?= 0
FAULTS    ?=
TOPOLOGY  ?=
SECURE    ?= 0
ROBUSTNESS_TIMEOUT ?= 30m
.PHONY: robustness
robustness: ## faulted cluster runs checked with porcupine (COUNT, DURATION, SEED, FAULTS, TOPOLOGY, SECURE)
	$(GO) test ./internal/testing/robustness -run TestRobustness -count=1 -v -timeout $(ROBUSTNESS_TIMEOUT) \
		-args -runs=$(COUNT) -duration=$(DURATION) -seed=$(SEED) -faults=$(FAULTS) -topology=$(TOPOLOGY) -secure=$(SECURE)
