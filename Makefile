# heartbeatd developer tasks. `make` alone lists them.

GO    ?= go
PKG   ?= ./...

# Debian installs mosquitto in /usr/sbin, which is not on an ordinary user's PATH.
export PATH := $(PATH):/usr/local/sbin:/usr/sbin:/sbin

.DEFAULT_GOAL := help
.PHONY: help dev deps test bench bench-go lint chaos soak

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-10s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

dev: ## run heartbeatd with in-process Redis, MQTT and Kafka and a simulated fleet
	$(GO) run ./cmd/heartbeatd dev

# command → Debian package, for every server and tool the tests start.
TEST_TOOLS := redis-server:redis-server mosquitto:mosquitto mosquitto_sub:mosquitto-clients \
	promtool:prometheus prometheus-alertmanager:prometheus-alertmanager chromium:chromium \
	faketime:faketime systemd-analyze:systemd aiosmtpd:python3-aiosmtpd

deps: ## install the servers and tools the tests start (apt-get) when they are missing
	@missing=""; \
	for pair in $(TEST_TOOLS); do \
		command -v "$${pair%%:*}" >/dev/null 2>&1 || missing="$$missing $${pair#*:}"; \
	done; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	echo "deps: missing$$missing"; \
	if ! command -v apt-get >/dev/null 2>&1; then \
		echo "deps: no apt-get here; install$$missing with your package manager" >&2; exit 1; \
	fi; \
	sudo=""; \
	if [ "$$(id -u)" != 0 ]; then \
		if command -v sudo >/dev/null 2>&1; then sudo=sudo; \
		else echo "deps: not root and no sudo; install$$missing as root" >&2; exit 1; fi; \
	fi; \
	$$sudo apt-get update && $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $$missing

# The process-level suites (test/chaos, test/scaleout) time takeovers and hold-backs of real daemons:
# run side by side on two cores, each starves the other's processes into stalls. So the scale-out
# suite runs after the rest, alone. The chaos suite, the longest (about ten minutes), is listed first so
# it runs beside the others rather than after them: go test starts packages in the order given.
SOLO := ./test/scaleout/...
FIRST := ./test/chaos

# The chaos suite alone runs for about ten minutes, go test's default limit for a package: on a slower
# or busier machine it would be killed while passing.
TEST_TIMEOUT := 25m

# The packages with benchmarks: the once-over of the benchmarks builds only their test binaries (13 of
# about 50), not every package's again without the race detector.
BENCH_PKGS = $$(grep -rl --include='*_test.go' '^func Benchmark' . | xargs -n1 dirname | sort -u)

test: deps ## race-enabled tests, then every benchmark once so they keep working (PKG=./internal/x/... to narrow)
	@if [ "$(PKG)" = "./..." ]; then \
		$(GO) test -race -timeout $(TEST_TIMEOUT) $(FIRST) $$($(GO) list ./... | grep -v -e '/test/scaleout' -e '/test/chaos$$') && \
		$(GO) test -race -timeout $(TEST_TIMEOUT) $(SOLO) && \
		$(GO) test -run '^$$' -bench . -benchtime=1x $(BENCH_PKGS); \
	else $(GO) test -race -timeout $(TEST_TIMEOUT) $(PKG) && $(GO) test -run '^$$' -bench . -benchtime=1x $(PKG); fi

bench: ## the hbbench load benchmark (see cmd/hbbench)
	$(GO) run ./cmd/hbbench

bench-go: ## the Go benchmarks with allocations
	$(GO) test -run '^$$' -bench . -benchmem $(PKG)

lint: ## gofmt (fails on any unformatted file) and go vet
	@out="$$(gofmt -l .)"; \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKG)

# make chaos runs 10000 devices and keeps Kafka down 4 minutes in kafka_outage_long, longer than 10
# publish attempts 1–30 s apart take (≈ 3 min), and the notify receiver as long in notify_receiver_down;
# `make test` runs the same scenarios small (200 devices, a 15 s Kafka outage, a 25 s receiver outage).
chaos: deps ## fault-injection tests (servers killed and restarted under load)
	HB_CHAOS_DEVICES=$${HB_CHAOS_DEVICES:-10000} HB_CHAOS_LONG_OUTAGE=$${HB_CHAOS_LONG_OUTAGE:-4m} \
		$(GO) test -race -v -timeout 60m -run Chaos ./test/chaos/...

# make soak runs the randomized soak (test/chaos TestChaosSoak) for 30 minutes at 2000 devices; `make test`
# runs it for 30 s at 200. HB_SOAK_SEED replays a run; its line prints the seed.
soak: deps ## random faults and operator acts over a mixed fleet, checked by the incident checker
	HB_SOAK_DEVICES=$${HB_SOAK_DEVICES:-2000} HB_SOAK_DURATION=$${HB_SOAK_DURATION:-30m} \
		$(GO) test -race -v -timeout 90m -run TestChaosSoak ./test/chaos/...
