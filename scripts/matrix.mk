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

# Guided and random faults side by side (issue 37): the rows run under
# --nemesis all (every reference bug there, the answers-before-fsync bug and
# the correct reference), over COMPARE_SEEDS seeds, once with
# --nemesis-mode guided and once with random; writes
# docs/guided-vs-random.md (detection rate and median time to the first
# violation of each). About 70 minutes on 2 cores at 10 seeds.
# `make guided-vs-random-user-path` does the same for the example spec's
# bugs (examples/python-fence), each server an external process as a user
# runs one: docs/guided-vs-random-user-path.md.
COMPARE_SEEDS ?= 10
COMPARE_OUT ?= docs/guided-vs-random.md
COMPARE_NAME ?= guided-vs-random
COMPARE_ROWS ?= counter-in-memory,wallclock-tokens,accept-equal,missing-as-zero,forget-highwater,split-issuers,accept-forged,no-fencing,forget-idle,forget-idle-since-start,ack-before-fsync,reference,reference-sealed

.PHONY: guided-vs-random
guided-vs-random:
	go build -o bin/fencecheck ./cmd/fencecheck
	for mode in guided random; do \
		go run ./cmd/matrix --fencecheck bin/fencecheck --seeds $(COMPARE_SEEDS) --time $(TIME) --parallel $(PARALLEL) --rows $(COMPARE_ROWS) \
			--nemesis-mode $$mode --results matrix-$$mode.json --out matrix-$$mode.md \
			--command "make $(COMPARE_NAME) COMPARE_SEEDS=$(COMPARE_SEEDS) TIME=$(TIME) PARALLEL=$(PARALLEL) ($$mode)"; \
		code=$$?; [ $$code -le 1 ] || exit $$code; \
	done
	go run ./cmd/matrix --compare matrix-guided.json matrix-random.json --out $(COMPARE_OUT) \
		--command "make $(COMPARE_NAME) COMPARE_SEEDS=$(COMPARE_SEEDS) TIME=$(TIME) PARALLEL=$(PARALLEL)"

.PHONY: guided-vs-random-user-path
guided-vs-random-user-path:
	$(MAKE) guided-vs-random COMPARE_NAME=guided-vs-random-user-path COMPARE_OUT=docs/guided-vs-random-user-path.md \
		COMPARE_ROWS=python-counter-in-memory,python-wallclock-tokens,python-accept-equal,python-missing-as-zero,python-forget-highwater,python-forget-idle,python-forget-free-lock,python-fence

# Situations per minute (issue 37): each target (memory, etcd with 3
# members, redis, postgres, zookeeper) correct under --nemesis all over
# SITUATION_SEEDS seeds, guided and random; writes
# docs/situations-per-minute.md (each failure situation per minute of main
# phase and the fewest one run created). About 40 minutes on 2 cores at 3
# seeds; needs Docker and `make images`.
SITUATION_SEEDS ?= 3

.PHONY: situations-per-minute
situations-per-minute:
	go build -o bin/fencecheck ./cmd/fencecheck
	for mode in guided random; do \
		go run ./cmd/matrix --fencecheck bin/fencecheck --seeds $(SITUATION_SEEDS) --time $(TIME) --parallel 1 --rows situations \
			--nemesis-mode $$mode --results situations-$$mode.json --out situations-$$mode.md \
			--command "make situations-per-minute SITUATION_SEEDS=$(SITUATION_SEEDS) TIME=$(TIME) ($$mode)"; \
		code=$$?; [ $$code -le 1 ] || exit $$code; \
	done
	go run ./cmd/matrix --compare situations-guided.json situations-random.json --out docs/situations-per-minute.md \
		--command "make situations-per-minute SITUATION_SEEDS=$(SITUATION_SEEDS) TIME=$(TIME)"
