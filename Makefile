# make soak: the torture run against every local database before a release.
# Each database gets SOAK_DURATION of concurrent writers, real relay processes
# and a seeded schedule of every fault that applies, on an embedded NATS
# server (so broker restarts are in). The summary line of each run carries its
# seed; a failure leaves a JSON history in the temp directory.
#   make soak SOAK_DURATION=5m
#   make soak SOAK_FLAGS=--pg-restart   # restart PostgreSQL too (disturbs other users)
#   make soak SOAK_FLAGS=--seed=1234    # replay a schedule
SOAK_DURATION ?= 30m
SOAK_FLAGS ?=
SOAK_DBS ?= postgres://postgres@127.0.0.1:5432/test?sslmode=disable mysql://root@127.0.0.1:3306/test sqlite:/tmp/outbox-soak.db

.PHONY: soak
soak:
	bash scripts/services.sh
	set -f; dir=$$(mktemp -d); trap 'rm -rf "$$dir"' EXIT; go build -o $$dir/outbox ./cmd/outbox && \
	for db in $(SOAK_DBS); do $$dir/outbox torture --db "$$db" --duration $(SOAK_DURATION) $(SOAK_FLAGS) || exit 1; done
