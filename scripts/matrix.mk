# The detection matrix (issue 4): every seeded bug of the memory reference ×
# --nemesis all over SEEDS seeds of TIME each, PARALLEL runs at a time, the
# correct reference over the same seeds, and the container targets that are
# broken by configuration (postgres-async) beside their durable twins, each
# under the fault that exposes it; writes docs/detection.md.
# The defaults take about 70 minutes on 2 cores (the container rows about 20
# of them). Included from the Makefile.
# Past one machine (docs/scaling.md): SHARD=I/N runs only the I-th of N
# parts of the runs and writes their results to RESULTS (default
# matrix-shard-I-of-N.json) instead of the table; `make matrix-merge
# RESULTS='matrix-shard-*.json'` checks the N files are one matrix and
# writes docs/detection.md from them. RESULTS without SHARD: the whole
# matrix also writes its results file.
SEEDS ?= 20
TIME ?= 30s
PARALLEL ?= 2
ROWS ?=
SHARD ?=
RESULTS ?=

.PHONY: matrix
matrix:
	go build -o bin/fencecheck ./cmd/fencecheck
	go run ./cmd/matrix --fencecheck bin/fencecheck --seeds $(SEEDS) --time $(TIME) --parallel $(PARALLEL) \
		$(if $(ROWS),--rows $(ROWS)) $(if $(SHARD),--shard $(SHARD),--out docs/detection.md) $(if $(RESULTS),--results $(RESULTS)) \
		--command "make matrix SEEDS=$(SEEDS) TIME=$(TIME) PARALLEL=$(PARALLEL)$(if $(ROWS), ROWS=$(ROWS))$(if $(SHARD), SHARD=$(SHARD))"

.PHONY: matrix-merge
matrix-merge:
	go run ./cmd/matrix --merge --out docs/detection.md --command "make matrix-merge RESULTS='$(RESULTS)'" $(RESULTS)

# The shrink bar (issue 17): for every bug and SHRINK_SEEDS seeds, a failing
# TIME run of --nemesis all shrunk with `fencecheck shrink`; writes the
# shrinking section of docs/detection.md. About 10 minutes per seed on 2
# cores.
BUDGET ?= 10m
SHRINK_SEEDS ?= 3

.PHONY: shrink-matrix
shrink-matrix:
	go build -o bin/fencecheck ./cmd/fencecheck
	go run ./cmd/matrix --shrink --fencecheck bin/fencecheck --seeds $(SHRINK_SEEDS) --time $(TIME) --budget $(BUDGET) \
		$(if $(ROWS),--rows $(ROWS)) --out docs/detection.md \
		--command "make shrink-matrix SHRINK_SEEDS=$(SHRINK_SEEDS) TIME=$(TIME) BUDGET=$(BUDGET)$(if $(ROWS), ROWS=$(ROWS))"

# The track record (issue 28): real systems at real releases, each row a
# published issue or analysis re-found black-box beside its correct
# counterpart (cmd/matrix/track.go); writes docs/track-record.md and fails
# when a row's verdict changed. SEEDS and TIME given on the command line
# override its own defaults, 3 seeds of 20s, one run at a time (about 15
# minutes on 2 cores, the first etcd 3.5 build aside).
TRACK_SEEDS := $(if $(filter command line environment,$(origin SEEDS)),$(SEEDS),3)
TRACK_TIME := $(if $(filter command line environment,$(origin TIME)),$(TIME),20s)

.PHONY: track-record
track-record:
	go build -o bin/fencecheck ./cmd/fencecheck
	go run ./cmd/matrix --track-record --fencecheck bin/fencecheck --seeds $(TRACK_SEEDS) --time $(TRACK_TIME) --parallel 1 \
		$(if $(ROWS),--rows $(ROWS)) --out docs/track-record.md \
		--command "make track-record SEEDS=$(TRACK_SEEDS) TIME=$(TRACK_TIME)$(if $(ROWS), ROWS=$(ROWS))"
