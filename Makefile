# Allot's build. The two commands the README promises are `make demo` and
# `make test`; both work on a fresh machine with only Go installed (make
# test installs nginx and Caddy from Debian for its gateway tests).

GO          ?= go
PKGS        := ./...
# staticcheck, pinned; `go run` fetches it through the module proxy.
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
BENCHTIME   ?= 1s
FUZZTIME    ?= 30s
# Code generation, pinned. protoc comes from Debian's protobuf-compiler
# (3.21 on this machine); the plugins from the Go module proxy.
PROTOC_GEN_GO      := google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
PROTOC_GEN_GO_GRPC := google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
BIN                := $(CURDIR)/bin

.PHONY: all build install test test-bins test-repeat gateways-deps bench bench-peers bench-sink lint fuzz demo chaos chaos-short soak soak-short accuracy accuracy-short fleet fleet-sweep fleet-short proto clean

all: build test

build:
	$(GO) build $(PKGS)

# Puts the allot binary in $(go env GOBIN), else $(go env GOPATH)/bin: the
# docs' `allot …` commands.
install:
	$(GO) install ./cmd/allot

# The race detector is on for every test. This includes the short chaos
# run (tools/chaos TestChaosShort, about 90 s: real allot processes, built
# without the race detector, under a leader kill, a pause, an outage and
# hostile input, exporting the ledger to a real PostgreSQL that is
# stopped, frozen and has the exporting leader killed mid-transaction)
# and the short accuracy check (tools/accuracy
# TestAccuracyShort, about 60 s: steady quotas through real processes)
# and the fleet harness's own accounting (tools/fleetload TestFleetShort,
# about 30 s: 10 agents against real coordinators); -short skips them. Then the demo runs as `make demo` does,
# without the race detector (which slows each check tenfold), and every
# one of its checks must pass (TestDemoChecks, about 35 s). The real
# nginx and Caddy in front of a sidecar (cmd/allot TestGatewayForwardAuth)
# must run too: gateways-deps installs them, and ALLOT_GATEWAY_TESTS=1
# makes a missing one a failure rather than a skip. So must the tests
# against a real PostgreSQL (internal/pgserver, coordinator/ledgersink):
# gateways-deps installs it, and ALLOT_PG_TESTS=1 makes it required.
#
# The allot binary the real-process tests run is built once, before the
# tests, and handed to every package as ALLOT_BIN (each built its own,
# two at once on two cores); so is grpcurl, which docs/api.md's examples
# run (the version TestAPIDocExamples names). tools/testreport
# prints what go test would, then each package's time, the slowest tests
# and the steps' times; the events of the run are kept in TEST_JSON.
# On this 2-core machine, shared with other work, the race run took 710 s
# and the whole of make test 808 s with the packages already installed
# (go's caches warm); tools/chaos's three short runs set its pace, side by
# side (t.Parallel), the four-minute soak the longest of them.
TEST_BIN  := $(BIN)/test
TEST_JSON ?= $(TEST_BIN)/events.json
GRPCURL   := github.com/fullstorydev/grpcurl/cmd/grpcurl@v1.9.3
TEST_ENV  := PATH=$(TEST_BIN):$$PATH ALLOT_BIN=$(TEST_BIN)/allot ALLOT_GATEWAY_TESTS=1 ALLOT_PG_TESTS=1 ALLOT_PEER_TESTS=1
TEST_REPORT := $(GO) run ./tools/testreport

test:
	@t0=$$(date +%s); $(MAKE) --no-print-directory gateways-deps || exit 1; \
	t1=$$(date +%s); $(MAKE) --no-print-directory test-bins || exit 1; t2=$$(date +%s); \
	$(TEST_ENV) $(TEST_REPORT) -json $(TEST_JSON) \
		-step "Debian packages (make gateways-deps)=$$((t1-t0))" -step "go build ./cmd/allot, go install grpcurl (make test-bins)=$$((t2-t1))" \
		-run "$(GO) test -race -count=1 -json $(PKGS)" \
		-run "$(GO) test -count=1 -json -run ^TestDemoChecks$$ ./cmd/allot"

test-bins:
	@mkdir -p $(TEST_BIN)
	$(GO) build -o $(TEST_BIN)/allot ./cmd/allot
	GOBIN=$(TEST_BIN) $(GO) install $(GRPCURL)

# The tests that run real processes or measure time, REPEAT times each
# (go test -count), side by side as make test runs them: a table of how
# many runs of each failed, and every failure's whole output (its seed,
# the logs it printed) as it happens. REPEAT_TESTS narrows or widens the
# set (a go test -run pattern over REPEAT_PKGS); the demo's checks run
# REPEAT times after, without the race detector, unless REPEAT_DEMO=0.
REPEAT       ?= 10
REPEAT_TESTS ?= ^(TestAccuracyShort|TestRegionsProcess|TestShardsProcess|TestRegionsDemo|TestTierClustersReportEarly|TestClusterRestartCatchesUp|TestStripedConcurrentExact|TestSettleBillsTheSettledCost|TestResetRestoresQuota|TestImportBounds)$$
REPEAT_PKGS  ?= ./tools/accuracy ./cmd/allot ./coordinator ./agent ./algo ./rules/envoyconf
REPEAT_DEMO  ?= $(REPEAT)
test-repeat: test-bins
	@if [ "$(REPEAT_DEMO)" -gt 0 ]; then demo="$(GO) test -count=$(REPEAT_DEMO) -json -run ^TestDemoChecks$$ ./cmd/allot"; else demo=; fi; \
	$(TEST_ENV) $(TEST_REPORT) -repeat -json $(TEST_BIN)/repeat-events.json \
		-run "$(GO) test -race -count=$(REPEAT) -json -run $(REPEAT_TESTS) $(REPEAT_PKGS)" \
		$${demo:+-run "$$demo"}

# nginx, Caddy and Redis from Debian, for TestGatewayForwardAuth and
# bench-peers, redis-tools and python3-redis (agent/resp's TestRealClients:
# redis-cli, redis-benchmark and Python's redis talk to the sidecar's
# Redis protocol), Prometheus (TestPrometheusAlerts, TestMetricsLint,
# TestGrafanaDashboard), headless Chromium and the fonts the full browser
# brings (TestStatusPage, which measures text against the page's width)
# and PostgreSQL (internal/pgserver and the tests that use it; its
# programs live in /usr/lib/postgresql/NN/bin, off PATH), when missing: as
# root, or through sudo. Without the packages each recommends (Chromium's
# alone are 250 more). Debian may start the system's on their usual
# ports; they are stopped (the tests run their own on free loopback
# ports, with their own pid files and directories, so they never touch
# them).
gateways-deps:
	@missing=; \
	command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || missing="$$missing nginx"; \
	command -v caddy >/dev/null 2>&1 || [ -x /usr/bin/caddy ] || missing="$$missing caddy"; \
	command -v redis-server >/dev/null 2>&1 || [ -x /usr/bin/redis-server ] || missing="$$missing redis-server"; \
	[ -x /usr/bin/redis-benchmark ] || missing="$$missing redis-tools"; \
	/usr/bin/python3 -c 'import redis' >/dev/null 2>&1 || missing="$$missing python3-redis"; \
	command -v promtool >/dev/null 2>&1 || [ -x /usr/bin/promtool ] || missing="$$missing prometheus"; \
	command -v chromium-headless-shell >/dev/null 2>&1 || command -v chromium >/dev/null 2>&1 || missing="$$missing chromium-headless-shell"; \
	[ -d /usr/share/fonts/truetype/liberation ] || missing="$$missing fonts-liberation"; \
	[ -x /usr/lib/postgresql/15/bin/initdb ] || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing="$$missing postgresql"; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" -eq 0 ]; then sudo=; else sudo=sudo; fi; \
		echo "installing$$missing from Debian"; \
		$$sudo apt-get update -qq && \
		$$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing && \
		for s in $$missing; do $$sudo service $$s stop >/dev/null 2>&1 || true; done; \
	fi

bench:
	$(GO) test -run '^$$' -bench . -benchtime $(BENCHTIME) $(PKGS)

# Allot against its peers in one run, one table (tools/benchpeers): the
# sidecar against Redis with a Lua token bucket, the library against
# x/time/rate. Installs Debian's redis-server when missing (gateways-deps)
# and runs its own on a loopback port. About a minute.
bench-peers: gateways-deps
	$(GO) run ./tools/benchpeers $(BENCH_PEERS_FLAGS)

# The ledger sink as an operator sizes it (tools/sinkbench): a real
# coordinator fed 100,000 usage lines a second over gRPC, first without a
# sink, then exporting to a real PostgreSQL (installed by gateways-deps),
# until 20 million lines are exported; prints both intakes, the export
# rate and the coordinator's memory as the lines add up. About 8 minutes.
# SINK_BENCH_FLAGS passes flags through, e.g. -lines 2000000.
bench-sink: gateways-deps
	$(GO) run ./tools/sinkbench $(SINK_BENCH_FLAGS)

lint:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed on:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) run $(STATICCHECK) $(PKGS)

# Coverage-guided fuzzing of every fuzz target, FUZZTIME each.
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzLimiter$$' -fuzztime $(FUZZTIME) ./algo
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) ./rules
	$(GO) test -run '^$$' -fuzz '^FuzzWire$$' -fuzztime $(FUZZTIME) ./proto/rulespb
	$(GO) test -run '^$$' -fuzz '^FuzzParseRetryAfter$$' -fuzztime $(FUZZTIME) ./client/retry
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeCheck$$' -fuzztime $(FUZZTIME) ./agent/sidecar
	$(GO) test -run '^$$' -fuzz '^FuzzMap$$' -fuzztime $(FUZZTIME) ./internal/shard
	$(GO) test -run '^$$' -fuzz '^FuzzParseRange$$' -fuzztime $(FUZZTIME) ./internal/shard
	$(GO) test -run '^$$' -fuzz '^FuzzCheckResponseJSON$$' -fuzztime $(FUZZTIME) ./agent/sidecar
	$(GO) test -run '^$$' -fuzz '^FuzzForwardAuth$$' -fuzztime $(FUZZTIME) ./agent/forwardauth
	$(GO) test -run '^$$' -fuzz '^FuzzOpenDamaged$$' -fuzztime $(FUZZTIME) ./coordinator/datadir

# Regenerate proto/*.pb.go and the coordinators' log and snapshot schema,
# coordinator/internal/fsm/fsmpb (which imports proto/'s messages). The
# generated files are committed, so only changing a .proto file needs this.
proto:
	@command -v protoc >/dev/null || { apt-get update -qq && apt-get install -y -qq protobuf-compiler; }
	GOBIN=$(BIN) $(GO) install $(PROTOC_GEN_GO)
	GOBIN=$(BIN) $(GO) install $(PROTOC_GEN_GO_GRPC)
	cd proto && PATH=$(BIN):$$PATH protoc -I . \
		--go_out=. --go_opt=paths=source_relative \
		--go-grpc_out=. --go-grpc_opt=paths=source_relative \
		*.proto
	cd coordinator/internal/fsm/fsmpb && PATH=$(BIN):$$PATH protoc -I . -I ../../../../proto \
		--go_out=. --go_opt=paths=source_relative \
		fsm.proto

# The main job: a 3-member Raft cluster of coordinator processes and 8
# in-process gateways on loopback, ~30 s of traffic, the leader SIGKILLed
# halfway and restarted from its data directory, checks at the end.
# DEMO_FLAGS passes flags through, e.g. make demo DEMO_FLAGS=--no-tty.
demo:
	$(GO) run ./cmd/allot demo $(DEMO_FLAGS)

# Real crashes with real processes: 3 coordinators and 3 sidecars on
# loopback under load, the leader SIGKILLed and SIGSTOPped, the whole
# cluster down and back, new tenants and hostile input, what disks do
# (a damaged and a truncated raft.db, a damaged snapshot, a member's disk
# lost while the others are stopped, a full disk when run as root, a
# quorum lost for good and recovered), and the ledger exported to a real
# PostgreSQL (when installed; -sink=false leaves it out) that is stopped,
# frozen and has the exporting leader killed mid-transaction; fails
# unless the ledger, as allot usage reads it and as PostgreSQL holds it
# plus what the cluster keeps in memory, equals, unit for unit, what the
# sidecars answered. About seven minutes. Then a region split into three
# shard groups of three members with slots moved back and forth under
# load, 24 times, the source's, the target's or the mover's leader
# SIGKILLed during each move (TestShardsProcess; make test runs three
# moves on groups of one): about a minute.
# CHAOS_FLAGS passes flags through, e.g.
# make chaos CHAOS_FLAGS='-outage 20s -hostile=false' (docs/chaos.md).
SHARD_MOVES ?= 24
chaos:
	$(GO) run ./tools/chaos $(CHAOS_FLAGS)
	ALLOT_SHARD_MOVES=$(SHARD_MOVES) ALLOT_SHARD_MEMBERS=3 $(GO) test -count=1 -v -run '^TestShardsProcess$$' ./cmd/allot

# The short versions alone, as make test runs them.
chaos-short:
	$(GO) test -count=1 -v -run '^(TestChaosShort|TestChaosStorageShort)$$' ./tools/chaos

# 30 minutes of steady traffic through 3 coordinators and 3 sidecars, the
# leader SIGKILLed every 5 minutes, every process's memory, goroutines,
# open files and Raft files sampled every 10 s; fails on growth that does
# not level off, or a ledger that is not exact (docs/operations.md,
# "Soak"). Not in make test, which runs TestSoakShort (two minutes).
# SOAK_FLAGS passes flags through, e.g. SOAK_FLAGS='-soak 2h'.
soak:
	$(GO) run ./tools/chaos -soak 30m $(SOAK_FLAGS)

soak-short:
	$(GO) test -count=1 -v -run '^TestSoakShort$$' ./tools/chaos

# What real processes admit against their limits: 3 coordinators and 3,
# then 10, sidecars on loopback, an open-loop load generator counting per
# tenant per second (per window for fixed windows), steady quotas of every
# algorithm, capacity, abuse, new tenants, a leader kill and a rolling
# deploy; next to allot sim on the same traffic. Prints a table with
# PASS/MISS per target and exits 0 on misses (several targets are known
# misses) unless ACCURACY_FLAGS has -strict. About 10 minutes
# (docs/accuracy.md, "Real processes").
accuracy:
	$(GO) run ./tools/accuracy $(ACCURACY_FLAGS)

# The short version alone, as make test runs it (TestAccuracyShort).
accuracy-short:
	$(GO) test -count=1 -v -run '^TestAccuracyShort$$' ./tools/accuracy

# The coordinators at the design's fleet size (issue 41; docs/coordinator.md,
# "Measuring a fleet"): 3 coordinator processes and FLEET_N simulated
# gateways, each a real agent in the harness's process reporting over
# gRPC every second, FLEET_T tenants Zipf-spread over them, 4 rules,
# FLEET_RATE checks/s per gateway, for FLEET_DURATION. A line every 10 s
# (reports answered in time, report latency, shed reports, the leader's
# CPU, memory, goroutines and rounds, lease expiries at the agents,
# checks by rule), then a summary against the targets. Reports only:
# exits 0 on misses unless FLEET_FLAGS has -strict. FLEET_FLAGS passes
# flags through, e.g. FLEET_FLAGS='-overload 3' (3× the gateways for two
# minutes, then back, and how soon reports are answered in time again).
FLEET_N        ?= 100
FLEET_T        ?= 2000
FLEET_RATE     ?= 1000
FLEET_DURATION ?= 30m
fleet:
	$(GO) run ./tools/fleetload -gateways $(FLEET_N) -tenants $(FLEET_T) -rate $(FLEET_RATE) -duration $(FLEET_DURATION) $(FLEET_FLAGS)

# One line per (N, T), N in 20, 50, 100, 200 and T in 500, 2,000,
# 10,000, a fresh cluster each, 90 s per point of which the first 30 s
# are left out: about 25 minutes. FLEET_FLAGS as for fleet, e.g.
# FLEET_FLAGS='-sweep-gateways 20,50 -sweep-duration 60s'.
fleet-sweep:
	$(GO) run ./tools/fleetload -sweep $(FLEET_FLAGS)

# The short version alone, as make test runs it (TestFleetShort: 10
# gateways × 200 tenants for 20 s, checking the harness's accounting).
fleet-short:
	$(GO) test -count=1 -v -run '^TestFleetShort$$' ./tools/fleetload

clean:
	$(GO) clean -testcache
