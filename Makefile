# Makefile for outboxlab. `make help` lists the targets.
#
# Images are built locally from docker/ and never pulled: the base image is
# made with debootstrap when no debian:bookworm-slim image is present (as
# root with apt-get, docker/install-missing.sh installs debootstrap first;
# otherwise the one command that builds the base is printed). Each
# image has a stamp file under .build/stamps that depends on the image's
# inputs, so a second `make images` builds nothing; a stamp whose image is no
# longer in the engine (docker rmi) is dropped, so the image is built again.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help
.DELETE_ON_ERROR:

GO     ?= go
DOCKER ?= docker
# GOTESTFLAGS is added to every `go test` run, e.g. GOTESTFLAGS=-v.
GOTESTFLAGS ?=
# TEST_TIMEOUT bounds `make test` as a whole.
TEST_TIMEOUT ?= 60m

# The harness removes its own containers; Ryuk would need an image pull.
export TESTCONTAINERS_RYUK_DISABLED := true

BUILD  := .build
STAMPS := $(BUILD)/stamps
CTX    := $(BUILD)/context

# Image tags: testenv uses the same ones (a test checks they agree).
IMAGE_debian    := outboxlab/debian:bookworm
IMAGE_postgres  := outboxlab/postgres:15
IMAGE_rabbitmq  := outboxlab/rabbitmq:3.10
IMAGE_toxiproxy := outboxlab/toxiproxy:2.5.0
IMAGE_relay     := outboxlab/relay:dev
IMAGE_relay-mutants := outboxlab/relay-mutants:dev
# The relay of an earlier commit of this repository, RELAY_PREV: version N
# of the rolling-upgrade scenario, whose outbox lacks migration 004. It is
# built from `git archive RELAY_PREV`, so the clone must hold that commit
# (a shallow clone does not: git fetch --unshallow).
IMAGE_relay-prev := outboxlab/relay:prev
RELAY_PREV ?= d5d5bb84eb465e775a1a4e2c699b83d8638da7b8
# The example relay in Python (examples/pyrelay), on Debian's python3-psycopg2
# and python3-pika; its test in examples/pyrelay runs it under the catalogue.
IMAGE_pyrelay   := outboxlab/pyrelay:dev
# watermill's forwarder under the black-box contract (./cmd/watermill-relay,
# target/watermill): `outboxlab run --relay watermill` runs it.
IMAGE_watermill-relay := outboxlab/watermill-relay:dev

# The relay images are built once ./cmd/relay exists: relay from the
# binary as it is, relay-mutants from the binary built with -tags mutants
# (the relay-side mutants that only the harness runs).
HAVE_RELAY := $(if $(wildcard cmd/relay/*.go),yes)
IMAGES := debian postgres rabbitmq toxiproxy $(if $(HAVE_RELAY),relay relay-mutants relay-prev) pyrelay watermill-relay
ALL_IMAGES := debian postgres rabbitmq toxiproxy relay relay-mutants relay-prev pyrelay watermill-relay

# docker-build TAG ARGS... builds an image with no pull; its log is shown
# only when the build fails.
DOCKER_BUILD := docker/build-image.sh
GO_STATIC    := CGO_ENABLED=0 $(GO) build -trimpath -buildvcs=false -ldflags='-s -w'

# Forget the stamp of every image that is missing from the engine or was
# replaced behind make's back, so that it is built again. Only goals that
# talk to Docker pay for the look-up.
DOCKERLESS_GOALS := help test-short test-fast test-packages report demo clean build
ifneq ($(filter-out $(DOCKERLESS_GOALS),$(or $(MAKECMDGOALS),$(.DEFAULT_GOAL))),)
_present := $(shell $(DOCKER) image ls --no-trunc --filter reference='outboxlab/*' --format '{{.Repository}}:{{.Tag}}={{.ID}}' 2>/dev/null)
$(foreach i,$(ALL_IMAGES),$(if $(and $(wildcard $(STAMPS)/$(i)),$(filter $(IMAGE_$(i))=$(file <$(STAMPS)/$(i)),$(_present))),,$(shell rm -f $(STAMPS)/$(i))))
endif

## help: list the targets with one line each
.PHONY: help
help:
	@echo "outboxlab make targets:"
	@awk -F': ' '/^## /{sub(/^## /,""); split($$0,a,": "); printf "  %-18s %s\n", a[1], substr($$0, length(a[1])+3)}' $(MAKEFILE_LIST)

## images: build the Docker images that are missing or out of date (no registry; as root with apt-get it installs debootstrap if the base needs it, else prints the one command to run)
.PHONY: images
images:
	@$(MAKE) --no-print-directory -j3 image-stamps
	@$(if $(HAVE_RELAY),,echo "relay: ./cmd/relay does not exist yet; images $(IMAGE_relay) and $(IMAGE_relay-mutants) not built")

## image-NAME: build one image (debian, postgres, rabbitmq, toxiproxy, relay, relay-mutants, relay-prev, pyrelay, watermill-relay) and what it needs
.PHONY: $(addprefix image-,$(ALL_IMAGES))
$(addprefix image-,$(ALL_IMAGES)): image-%: $(STAMPS)/%
	@:

.PHONY: image-stamps
image-stamps: $(addprefix $(STAMPS)/,$(IMAGES))
	@:

$(STAMPS) $(CTX)/toxiproxy $(CTX)/relay $(CTX)/relay-mutants $(CTX)/relay-prev $(CTX)/watermill-relay:
	@mkdir -p $@

# write-stamp records the ID of image $(IMAGE_$1) in its stamp file.
write-stamp = $(DOCKER) image inspect --format '{{.Id}}' $(IMAGE_$1) >$(STAMPS)/$1

$(STAMPS)/debian: docker/debian/build.sh | $(STAMPS)
	@echo "image: building $(IMAGE_debian)"
	@docker/debian/build.sh $(IMAGE_debian)
	@$(call write-stamp,debian)

$(STAMPS)/postgres: docker/build-image.sh $(STAMPS)/debian $(wildcard docker/postgres/*)
	@echo "image: building $(IMAGE_postgres)"
	@$(DOCKER_BUILD) $(IMAGE_postgres) docker/postgres
	@$(call write-stamp,postgres)

$(STAMPS)/rabbitmq: docker/build-image.sh $(STAMPS)/debian $(wildcard docker/rabbitmq/*)
	@echo "image: building $(IMAGE_rabbitmq)"
	@$(DOCKER_BUILD) $(IMAGE_rabbitmq) docker/rabbitmq
	@$(call write-stamp,rabbitmq)

$(STAMPS)/toxiproxy: docker/build-image.sh $(STAMPS)/debian docker/toxiproxy/Dockerfile $(CTX)/toxiproxy/toxiproxy-server.sum
	@echo "image: building $(IMAGE_toxiproxy)"
	@$(DOCKER_BUILD) $(IMAGE_toxiproxy) -f docker/toxiproxy/Dockerfile $(CTX)/toxiproxy
	@$(call write-stamp,toxiproxy)

$(STAMPS)/relay: docker/build-image.sh $(STAMPS)/debian docker/relay/Dockerfile $(CTX)/relay/relay.sum
	@echo "image: building $(IMAGE_relay)"
	@$(DOCKER_BUILD) $(IMAGE_relay) -f docker/relay/Dockerfile $(CTX)/relay
	@$(call write-stamp,relay)

$(STAMPS)/relay-mutants: docker/build-image.sh $(STAMPS)/debian docker/relay-mutants/Dockerfile $(CTX)/relay-mutants/relay.sum
	@echo "image: building $(IMAGE_relay-mutants)"
	@$(DOCKER_BUILD) $(IMAGE_relay-mutants) -f docker/relay-mutants/Dockerfile $(CTX)/relay-mutants
	@$(call write-stamp,relay-mutants)

$(STAMPS)/relay-prev: docker/build-image.sh $(STAMPS)/debian docker/relay/Dockerfile $(CTX)/relay-prev/relay.sum
	@echo "image: building $(IMAGE_relay-prev) (the relay of commit $(RELAY_PREV))"
	@$(DOCKER_BUILD) $(IMAGE_relay-prev) -f docker/relay/Dockerfile $(CTX)/relay-prev
	@$(call write-stamp,relay-prev)

$(STAMPS)/watermill-relay: docker/build-image.sh $(STAMPS)/debian docker/watermill-relay/Dockerfile $(CTX)/watermill-relay/watermill-relay.sum
	@echo "image: building $(IMAGE_watermill-relay)"
	@$(DOCKER_BUILD) $(IMAGE_watermill-relay) -f docker/watermill-relay/Dockerfile $(CTX)/watermill-relay
	@$(call write-stamp,watermill-relay)

# The Python relay's build context is examples/pyrelay: the image copies
# relay.py alone.
$(STAMPS)/pyrelay: docker/build-image.sh $(STAMPS)/debian docker/pyrelay/Dockerfile examples/pyrelay/relay.py
	@echo "image: building $(IMAGE_pyrelay)"
	@$(DOCKER_BUILD) $(IMAGE_pyrelay) -f docker/pyrelay/Dockerfile examples/pyrelay
	@$(call write-stamp,pyrelay)

# The Go binaries are rebuilt when a Go source file or go.mod/go.sum is
# newer than they are. Each has a checksum file, rewritten only when the
# binary's bytes changed, and the image depends on that file: an image is
# rebuilt only for a real change.
GO_SOURCES := $(shell find . -name '*.go' -not -name '*_test.go' -not -path './.build/*' -not -path './examples/*' 2>/dev/null)

# go-static DIR/BINARY PACKAGE builds a static binary and updates its
# checksum file when its bytes changed; PACKAGE may be preceded by build
# flags (-tags mutants ./cmd/relay).
define go-static
	@$(GO_STATIC) -o $1 $2
	@sha256sum <$1 >$1.sum.new
	@if cmp -s $1.sum.new $1.sum; then rm -f $1.sum.new; else mv -f $1.sum.new $1.sum; echo "built $1"; fi
endef

$(CTX)/toxiproxy/toxiproxy-server: go.mod go.sum | $(CTX)/toxiproxy
	$(call go-static,$@,github.com/Shopify/toxiproxy/v2/cmd/server)

$(CTX)/relay/relay: go.mod go.sum $(GO_SOURCES) | $(CTX)/relay
	@test -d cmd/relay || { echo "relay: ./cmd/relay does not exist yet" >&2; exit 1; }
	$(call go-static,$@,./cmd/relay)

$(CTX)/relay-mutants/relay: go.mod go.sum $(GO_SOURCES) | $(CTX)/relay-mutants
	@test -d cmd/relay || { echo "relay: ./cmd/relay does not exist yet" >&2; exit 1; }
	$(call go-static,$@,-tags mutants ./cmd/relay)

# The previous relay is built from its commit's tree as that commit had it
# (go.mod and go.sum included); the commit file changes only with
# RELAY_PREV, so the binary is built again only then.
$(CTX)/relay-prev/commit: FORCE | $(CTX)/relay-prev
	@echo "$(RELAY_PREV)" >$@.new; if cmp -s $@.new $@; then rm -f $@.new; else mv -f $@.new $@; fi

$(CTX)/relay-prev/relay: $(CTX)/relay-prev/commit
	@git cat-file -e "$(RELAY_PREV)^{commit}" 2>/dev/null || { echo "relay-prev: commit $(RELAY_PREV) is not in this clone (a shallow clone? git fetch --unshallow), or set RELAY_PREV to one that is" >&2; exit 1; }
	@rm -rf $(CTX)/relay-prev/src && mkdir -p $(CTX)/relay-prev/src
	@git archive "$(RELAY_PREV)" | tar -x -C $(CTX)/relay-prev/src
	@cd $(CTX)/relay-prev/src && $(GO_STATIC) -o ../relay.new ./cmd/relay
	@mv -f $(CTX)/relay-prev/relay.new $@; rm -rf $(CTX)/relay-prev/src
	@sha256sum <$@ >$@.sum.new
	@if cmp -s $@.sum.new $@.sum; then rm -f $@.sum.new; else mv -f $@.sum.new $@.sum; echo "built $@ from $(RELAY_PREV)"; fi

.PHONY: FORCE
FORCE:

$(CTX)/watermill-relay/watermill-relay: go.mod go.sum $(GO_SOURCES) | $(CTX)/watermill-relay
	$(call go-static,$@,./cmd/watermill-relay)

# The checksum files are written by the binaries' recipes.
$(CTX)/%.sum: $(CTX)/%
	@:

## build: compile every package and command (go build ./...), and the row-lock example relay, oagudo/outbox's reader and River's relay into .build/bin
.PHONY: build
build:
	$(GO) build ./...
	$(GO) build -o .build/bin/rowlock-relay ./examples/rowlock
	$(GO) build -o .build/bin/oagudo-relay ./cmd/oagudo-relay
	$(GO) build -o .build/bin/river-relay ./cmd/river-relay

# The relay's mutant tests are compiled only with the mutants tag, which
# `go test ./...` does not set: both test targets run them on their own.
GO_TEST_MUTANTS = $(GO) test -tags mutants -run Mutant $(GOTESTFLAGS) ./cmd/relay/

# The packages whose test binary links testenv start containers, or may:
# `make test` runs them one package at a time, so that no package's chaos
# schedules and timings share the two cores with another package's
# containers. The others start none and run in parallel first.
# go list prints each package's test binary as PKG.test with its deps.
TEST_PKGS = $(GO) list -test -f '{{.ImportPath}}{{range .Deps}} {{.}}{{end}}' ./... | \
	awk -v want=$(1) '$$1 ~ /\.test$$/ { c = 0; for (i = 2; i <= NF; i++) if ($$i == "github.com/outboxlab/outboxlab/testenv") c = 1; \
	sub(/\.test$$/, "", $$1); if (c == want) print $$1 }'

# Tests in three of those packages start no container and are CPU-bound:
# the simulation and rapid over it, the generated mutants' fast tier and
# the SQL tier on Debian's PostgreSQL binaries. Where those binaries are
# installed (.ci/run installs them), `make test` runs them beside the
# one-at-a-time phase at the lowest priority (nice 19): they take the CPU
# the phase's waits leave idle, and the phase's chaos timings keep the
# cores first. The phase then runs only these packages' container tests.
BG_PKGS            := ./internal/sim/ ./property/ ./internal/mutant/generated/
BG_CONTAINER_TESTS := ^(TestBrokerSuiteRabbitMQ|TestDeliverySuiteRabbitMQ|TestInfraProperty|TestContainerTier)$$
HAVE_PG_BINARIES   := $(wildcard /usr/lib/postgresql/*/bin/initdb)
BG_LOG             := $(BUILD)/test-background.log
# The database's and the deployment's scenarios on containers: make
# test-database runs them, make test leaves them out.
DATABASE_TESTS     := ^(TestDatabaseCatalogue|TestDatabaseScenariosThroughTheSuite)$$
GO_TEST            = $(GO) test -count=1 -timeout $(TEST_TIMEOUT) $(GOTESTFLAGS)

## test: what CI runs: build what is missing (images, Go, debootstrap as for images), then every test with Docker: the packages that start no containers in parallel, those that do one at a time (their CPU-bound tests that start none beside them at nice 19, where PostgreSQL's binaries are installed), the relay's mutant tests (-tags mutants) and test-examples
.PHONY: test
test: export OUTBOXLAB_REQUIRE_DOCKER := 1
test: images build
	$(GO_TEST) $$($(call TEST_PKGS,0))
	@mkdir -p $(BUILD); status=0; bg=; \
	bgpkgs=$$($(GO) list $(BG_PKGS)); \
	if [ -n "$(HAVE_PG_BINARIES)" ]; then \
		echo "beside the next phase, at nice 19 (output in $(BG_LOG) until it ends): go test -skip '$(BG_CONTAINER_TESTS)' $(BG_PKGS)"; \
		nice -n 19 $(GO_TEST) -skip '$(BG_CONTAINER_TESTS)' $(BG_PKGS) >$(BG_LOG) 2>&1 & bg=$$!; \
		echo "$(GO) test -p 1 (one at a time): the other packages that start containers"; \
		$(GO_TEST) -p 1 -skip '$(DATABASE_TESTS)' $$($(call TEST_PKGS,1) | grep -vxF "$$bgpkgs") || status=1; \
		echo "$(GO) test -p 1 -run '$(BG_CONTAINER_TESTS)' $(BG_PKGS)"; \
		$(GO_TEST) -p 1 -run '$(BG_CONTAINER_TESTS)' $(BG_PKGS) || status=1; \
		echo "waiting for the tests beside it:"; wait $$bg || status=1; cat $(BG_LOG); \
	else \
		echo "$(GO) test -p 1 (one at a time): the packages that start containers"; \
		$(GO_TEST) -p 1 -skip '$(DATABASE_TESTS)' $$($(call TEST_PKGS,1)) || status=1; \
	fi; \
	exit $$status
	$(GO_TEST_MUTANTS) -count=1
	@$(MAKE) --no-print-directory test-examples

## test-database: the scenarios that change the database and the deployment under our relay (failover-async, failover-sync, restore, rolling-upgrade), and failover-sync through the public suite; about two minutes, which `make test` leaves out; its time printed
.PHONY: test-database
test-database: export OUTBOXLAB_REQUIRE_DOCKER := 1
test-database: images
	@start=$$(date +%s); status=0; \
	$(GO_TEST) -p 1 -run '$(DATABASE_TESTS)' ./scenarios/ ./suite/ || status=$$?; \
	echo "test-database: finished in $$(($$(date +%s) - start))s with status $$status"; exit $$status

## test-packages: list the packages `make test` runs one at a time (they start containers) and those it runs in parallel
.PHONY: test-packages
test-packages:
	@echo "one at a time (containers):"; $(call TEST_PKGS,1) | sed 's/^/  /'
	@echo "in parallel (no containers):"; $(call TEST_PKGS,0) | sed 's/^/  /'
	@echo "beside the one-at-a-time phase at nice 19, where PostgreSQL's binaries are installed: the tests of $(BG_PKGS) but $(BG_CONTAINER_TESTS)"

## test-short: the tests that need no Docker (go test -short ./..., and the relay's mutant tests with -tags mutants)
.PHONY: test-short
test-short:
	$(GO) test -short $(GOTESTFLAGS) ./...
	$(GO_TEST_MUTANTS) -short

## test-fast: the fast tier, under 3 minutes: unit tests and the simulation on the fakes (go test -short ./..., whose SQL-tier tests run when PostgreSQL's binaries are installed), then the SQL-faithful tier over SQL_SEEDS seeds (outboxlab sim --sql: the binaries, else the postgres container)
.PHONY: test-fast
SQL_SEEDS ?= 200
test-fast:
	$(GO) test -short $(GOTESTFLAGS) ./...
	$(GO) run ./cmd/outboxlab sim --sql --seeds $(SQL_SEEDS) --seed 1

## mutants-generated: the whole generated-mutant sweep (SQL and Go operator mutants) on the fast tier, its gaps on the container tier, its time printed; results in .build/generated
.PHONY: mutants-generated
mutants-generated:
	@start=$$(date +%s); status=0; \
	$(GO) run ./cmd/outboxlab mutants --generated --workers 2 --out $(BUILD)/generated || status=$$?; \
	echo "mutants-generated: finished in $$(($$(date +%s) - start))s with status $$status"; exit $$status

## test-examples: the separate module examples/external, which uses outboxlab from outside (needs Docker and the images)
.PHONY: test-examples
test-examples: export OUTBOXLAB_REQUIRE_DOCKER := 1
test-examples: images
	cd examples/external && $(GO) test -count=1 -timeout $(TEST_TIMEOUT) $(GOTESTFLAGS) ./...

## demo: run the main demonstration job (builds the missing images first, debootstrap as for images)
.PHONY: demo
demo:
	@$(MAKE) --no-print-directory images
	@$(GO) build -o $(BUILD)/outboxlab ./cmd/outboxlab
	$(BUILD)/outboxlab demo

## lessons: the tour of the guarantee table, each answer live against a contrast (LESSON=NAME for one; all of them take about three minutes on 2 cores)
.PHONY: lessons
LESSON ?= all
lessons:
	@$(MAKE) --no-print-directory images
	@$(GO) build -o $(BUILD)/outboxlab ./cmd/outboxlab
	$(BUILD)/outboxlab demo --lesson $(LESSON)

## bench: relay throughput and latency side by side with raw amqp091 and watermill (BENCHFLAGS=--json, --events N, ...)
.PHONY: bench
BENCHFLAGS ?=
bench:
	@$(MAKE) --no-print-directory images
	$(GO) run ./cmd/outboxlab bench $(BENCHFLAGS)

## soak: a million events through our relay's outbox, then watermill's, each aged with vacuum held back for a third of the run; prints the time each took; results in $(BUILD)/soak-ours and $(BUILD)/soak-watermill (SOAKFLAGS=--events N, ...)
.PHONY: soak
SOAKFLAGS ?=
soak:
	@$(MAKE) --no-print-directory images
	@for r in ours watermill; do \
		start=$$(date +%s); \
		$(GO) run ./cmd/outboxlab soak --relay $$r --out $(BUILD)/soak-$$r $(SOAKFLAGS) || exit $$?; \
		echo "soak: $$r took $$(( $$(date +%s) - start ))s"; \
	done

## report: rebuild REPORT.md from the bundles results/report.list names, in its order (no Docker); the HTML page, with every benchmark run, goes to .build/REPORT.html
.PHONY: report
report:
	$(GO) run ./cmd/outboxlab report --in-list results/report.list --allow-mixed-commits --bench-summary --md REPORT.md --html $(BUILD)/REPORT.html

## clean-containers: remove every container and network the harness left behind (label org.outboxlab.harness)
.PHONY: clean-containers
clean-containers:
	@ids=$$($(DOCKER) ps -aq --filter label=org.outboxlab.harness=true); \
	if [ -n "$$ids" ]; then $(DOCKER) rm -f -v $$ids >/dev/null; echo "removed $$(echo $$ids | wc -w) container(s)"; fi
	@ids=$$($(DOCKER) network ls -q --filter label=org.outboxlab.harness=true); \
	if [ -n "$$ids" ]; then $(DOCKER) network rm $$ids >/dev/null; echo "removed $$(echo $$ids | wc -w) network(s)"; fi

## clean-images: remove the outboxlab images and their stamps (the next `make images` builds all)
.PHONY: clean-images
clean-images: clean-containers
	@rm -f $(addprefix $(STAMPS)/,$(ALL_IMAGES))
	@for i in $(foreach i,$(ALL_IMAGES),$(IMAGE_$(i))); do \
		if $(DOCKER) image inspect $$i >/dev/null 2>&1; then $(DOCKER) rmi $$i >/dev/null && echo "removed $$i"; fi; \
	done

## clean: remove build outputs (.build)
.PHONY: clean
clean:
	rm -rf $(BUILD)
