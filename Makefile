# fencecheck: `make test` runs the main job (a fault-injected run, checked);
# `make check` runs the project's own tests.

TARGET  ?= memory
TIME    ?= 30s
NEMESIS ?= all
SEED    ?= $(shell date +%s)
STORE   ?= store
CONCURRENCY ?= 5
KEYS    ?= 3
VERSION ?=
MEMBERS ?=
ARGS    ?=

GO      ?= go
BIN     := bin/fencecheck
export CGO_ENABLED ?= 0

.PHONY: all build test check vet fmt-check unit images deps deps-docker bench perf serve clean help shrink-demo releases s3-check

all: build

help:
	@echo "make test   [TARGET=memory|etcd|redis|postgres|mysql|...|spec:FILE] [TIME=30s] [NEMESIS=all|pause,restart,...] [SEED=N] [VERSION=3.5] [MEMBERS=1|3|5] [STORE=store] [ARGS='--bug accept-equal']"
	@echo "make check  run the project's own tests (vet, gofmt, go test incl. Docker-backed tests)"
	@echo "make images build the container images (etcd, adapter, redis, postgres, mariadb, seaweedfs, the fault helpers; compiling seaweedfs takes about 11 min the first time)"
	@echo "make matrix the detection matrix (every bug x seeds) -> docs/detection.md (long); SHARD=I/N: part I of N -> RESULTS (docs/scaling.md)"
	@echo "make track-record [ROWS=a,b] [SEEDS=3] [TIME=20s]  real systems at real releases re-finding published bugs -> docs/track-record.md; fails when a row changes"
	@echo "make matrix-merge RESULTS='matrix-shard-*.json'  the N parts' results -> docs/detection.md"
	@echo "make shrink-demo  a failing run of a reference bug [BUG=counter-in-memory] shrunk to the faults it needs"
	@echo "make guided-vs-random [COMPARE_SEEDS=10]  the bugs under all, --nemesis-mode guided and random side by side -> docs/guided-vs-random.md (long)"
	@echo "make guided-vs-random-user-path [COMPARE_SEEDS=10]  the same for the example spec's bugs (examples/python-fence, an external server) -> docs/guided-vs-random-user-path.md (long)"
	@echo "make situations-per-minute [SITUATION_SEEDS=3]  each target (memory, etcd, redis, postgres, zookeeper) under all, guided and random: every failure situation per minute -> docs/situations-per-minute.md (long, Docker)"
	@echo "make shrink-matrix  every bug's failing run shrunk -> docs/detection.md's shrinking table (long)"
	@echo "make releases  etcd at another release (3.5, built from the module proxy: minutes the first time) at 1 and 3 members, valid under restart"
	@echo "make s3-check  the S3 target against real SeaweedFS (built from source: about 11 minutes the first time)"
	@echo "make bench  checker and clock-injector benchmarks; make perf -> docs/performance.md"
	@echo "make serve  browse the run store; make clean  remove leftovers and bin/"

# bin/fencehost is the host agent fencecheck copies to ssh nodes' hosts
# (docs/ssh.md): static, and found beside bin/fencecheck for linux/amd64 hosts
# (other hosts get one cross-built from the sources, or $FENCECHECK_HOST_HELPER).
build:
	$(GO) build -trimpath -o $(BIN) ./cmd/fencecheck
	CGO_ENABLED=0 GOOS=linux GOARCH=amd64 $(GO) build -trimpath -o bin/fencehost ./cmd/fencehost

# The main job. The exit code is the verdict: 0 valid, 1 invalid, 2 unknown,
# 3 could not run, 64 usage error. It first installs the host packages that
# TARGET alone needs (scripts/deps.sh: none for memory and spec:FILE).
test: build
	@./scripts/deps.sh $(TARGET)
	@./$(BIN) test --target $(TARGET) --time $(TIME) --nemesis $(NEMESIS) --seed $(SEED) \
		--store $(STORE) --concurrency $(CONCURRENCY) --keys $(KEYS) $(if $(VERSION),--version $(VERSION)) $(if $(MEMBERS),--members $(MEMBERS)) $(ARGS); \
	code=$$?; echo "fencecheck exit code: $$code (0 valid, 1 invalid, 2 unknown, 3 could not run, 64 usage; make itself exits 2 on any of 1-64)"; exit $$code

check: vet fmt-check deps unit

vet:
	$(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

unit:
	$(GO) test -count=1 -timeout 25m ./...

# Host packages (scripts/deps.sh says which and why): every target's and the
# browser test's for make check; every Docker target's for make images.
deps:
	@./scripts/deps.sh all

deps-docker:
	@./scripts/deps.sh docker

images: build deps-docker
	./$(BIN) images

# A failing 30 s run of a reference bug, then `fencecheck shrink` on it: the
# smallest fault schedule that still fails, in store/shrink-demo/latest/shrink/.
# The test's exit code 1 (invalid) is what the demo wants.
BUG ?= counter-in-memory
shrink-demo: build
	./$(BIN) test --target memory --bug $(BUG) --nemesis all --time $(TIME) --seed 1 --store $(STORE)/shrink-demo --quiet; \
		code=$$?; if [ $$code -ne 1 ]; then echo "shrink-demo: the run was not invalid (exit $$code): nothing to shrink"; exit 1; fi
	./$(BIN) shrink --force $(STORE)/shrink-demo/latest; code=$$?; [ $$code -eq 1 ] || exit $$code
	@cat $(STORE)/shrink-demo/latest/shrink/summary.txt

# Runs whose first build takes minutes on a fresh machine: kept out of
# make check (which stays near 15 minutes on 2 cores), run before a release.
releases:
	$(GO) test -count=1 -tags releases -run TestRunAtOtherReleases -timeout 30m ./targets/etcd/

# The S3 target against real SeaweedFS (compiled from the module proxy the
# first time: about 11 minutes on two cores, then cached): the gateway's
# conditional writes, and s3-unconditional found invalid where s3 is valid.
s3-check:
	$(GO) test -count=1 -tags seaweedfs -timeout 40m ./targets/s3/

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./checkers/... ./analysis/ ./nemesis/timewarp

perf:
	$(GO) run ./cmd/perfdoc > docs/performance.md

serve: build
	./$(BIN) serve --store $(STORE)

clean:
	-./$(BIN) clean 2>/dev/null
	rm -rf bin

include scripts/matrix.mk
