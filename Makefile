# Allot's build. The two commands the README promises are `make demo` and
# `make test`; both work on a fresh machine with only Go installed.

GO          ?= go
PKGS        := ./...
# staticcheck, pinned; `go run` fetches it through the module proxy.
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
BENCHTIME   ?= 1s
FUZZTIME    ?= 30s

.PHONY: all build test bench lint fuzz demo clean

all: build test

build:
	$(GO) build $(PKGS)

# The race detector is on for every test.
test:
	$(GO) test -race -count=1 $(PKGS)

bench:
	$(GO) test -run '^$$' -bench . -benchtime $(BENCHTIME) $(PKGS)

lint:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed on:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) run $(STATICCHECK) $(PKGS)

# Coverage-guided fuzzing of every fuzz target, FUZZTIME each.
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzLimiter$$' -fuzztime $(FUZZTIME) ./algo

demo:
	@echo "allot demo: not yet; it arrives with the allot binary (issue 7)."

clean:
	$(GO) clean -testcache
