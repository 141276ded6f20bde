# ovnhost build, run and test entry points. Everything a fresh Debian machine
# needs is installed here (as root), never by hand.
SHELL := /bin/bash
export PATH := /usr/local/go/bin:$(PATH)
GO ?= go
BIN := $(CURDIR)/bin
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X github.com/ovnhost/ovnhost/internal/version.Version=$(VERSION)
# Static binaries: they run on Talos, CentOS 7.9 and in a distroless image alike.
GOBUILD := CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)'

# Debian packages the daemons, the tests and the packaging checks need.
DEB_PKGS := openvswitch-switch openvswitch-common ovn-central ovn-host ovn-common \
	iproute2 iputils-ping ethtool iptables nftables rpm systemd curl openssl procps ca-certificates dbus-daemon skopeo \
	containerd runc busybox-static containernetworking-plugins iperf3 podman tcpdump \
	qemu-system-x86 kmod xz-utils dnsmasq-base
# A package is missing when dpkg does not report it installed.
MISSING_PKGS = $(shell for p in $(DEB_PKGS); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; done)

PROGRAMS := supervisor/cmd/ovnhost cni/cmd/ovnhost-cni controller/cmd/ovnhost-controller netctl/cmd/netctl

.PHONY: all deps build run test test-race test-unit bench bench-doc scale fuzz clean bundle image talos-extension rpm package

# Fuzz targets as package:Target; their seed corpora run in `make test` as
# unit tests. `make test` also fuzzes the ones without client-go in their
# build (FUZZ_QUICK: instrumenting client-go takes minutes) for FUZZ_SHORT
# each; `make fuzz` fuzzes all of them for FUZZ_LONG (or FUZZTIME) each.
# FUZZ_SHORT is a count of executions, not a duration: with a duration the Go
# fuzzing coordinator races its own deadline on a loaded machine and fails a
# clean run with a bare "context deadline exceeded" (golang/go#75804; it failed
# CI once with no failing input written).
FUZZ_QUICK := ./internal/ipam:FuzzAllocateRelease ./internal/ipam:FuzzParse \
	./cni/protocol:FuzzProtocolRoundTrip ./cni/protocol:FuzzResponse
FUZZ_TARGETS := $(FUZZ_QUICK) ./cni/podsource:FuzzPodAnnotations ./cni/podsource:FuzzAnnotationOwnership \
	./cni/server:FuzzCNIRequest ./internal/config:FuzzLoad
FUZZ_SHORT ?= 20000x
FUZZ_LONG ?= $(or $(FUZZTIME),5m)
define run_fuzz
	@for t in $(1); do \
		echo "fuzz $${t#*:} in $${t%%:*} for $(2)"; \
		$(GO) test -run '^$$' -fuzz "^$${t#*:}$$" -fuzztime $(2) $${t%%:*} || exit 1; \
	done
endef

all: build

deps:
	@if [ -n "$(strip $(MISSING_PKGS))" ]; then \
		echo "installing Debian packages: $(MISSING_PKGS)"; \
		[ "$$(id -u)" = 0 ] || { echo "need root to install: $(MISSING_PKGS)" >&2; exit 1; }; \
		apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $(MISSING_PKGS); \
	fi

build:
	@mkdir -p $(BIN)
	$(GOBUILD) -o $(BIN)/ $(addprefix ./,$(PROGRAMS))
	@# netctl is also the kubectl plugin (name-aware): kubectl netctl ...
	ln -sf netctl $(BIN)/kubectl-netctl
	ln -sf netctl $(BIN)/kubectl_complete-netctl

# All-in-one node in the foreground: local NB/SB, northd, ovsdb-server,
# ovs-vswitchd (userspace datapath when the kernel has none), ovn-controller.
run: deps build
	$(BIN)/ovnhost run $(RUN_ARGS)

# The whole suite: unit tests and the tests against real daemons, a real
# kube-apiserver and real network namespaces. Needs root.
test: deps build
	@[ "$$(id -u)" = 0 ] || { echo "make test needs root (real namespaces, OVS daemons)" >&2; exit 1; }
	@# Cold machine: the Kubernetes programs and helm that tests build on first
	@# use are built in the background at the lowest CPU priority, in the CPU
	@# the tests leave idle (tests/harness/prebuild); the packages are compiled
	@# in parallel first, since -p 1 would compile them one at a time. Then
	@# it compiles test-race's packages under -race (about 10 minutes cold),
	@# so that step below mostly links and runs.
	$(GO) build -o $(CURDIR)/_prebuild ./tests/harness/prebuild
	setsid nice -n 19 sh -c '$(CURDIR)/_prebuild; \
		$(GO) list -race -test -export -deps "$$@" > /dev/null && echo "prebuild: race packages compiled"' \
		prebuild $(RACE_PKGS) > $(CURDIR)/_prebuild.log 2>&1 & pre=$$!; \
	$(GO) list -test -export -deps ./... > /dev/null; \
	OVNHOST_TEST_STRICT=1 OVNHOST_BIN=$(BIN) $(GO) test -count=1 -timeout 40m -p 1 ./... 2>&1 | tee $(CURDIR)/_test.log; \
	rc=$${PIPESTATUS[0]}; \
	kill -- -$$pre 2>/dev/null; wait $$pre 2>/dev/null; grep '^prebuild:' $(CURDIR)/_prebuild.log; \
	echo "packages: $$(grep -c '^ok' $(CURDIR)/_test.log) passed, $$(grep -c '^FAIL' $(CURDIR)/_test.log) failed"; \
	exit $$rc
	$(MAKE) --no-print-directory test-race
	$(call run_fuzz,$(FUZZ_QUICK),$(FUZZ_SHORT))

# The packages whose tests need no root, again under the race detector
# (cni/podsource/race_test.go and the reconcilers' worker pools only catch
# a data race there). The tests/ packages and the ones that build
# namespaces or start daemons as root run once, in `make test` above.
RACE_EXCLUDE := /tests/ /cni/podnet$$ /cni/podwire$$ /cni/server$$ /internal/hostcheck$$ /netctl/pinger$$ /supervisor/hostnat$$ /supervisor/node$$
RACE_PKGS = $$($(GO) list ./... | grep -v $(foreach x,$(RACE_EXCLUDE),-e '$(x)'))
test-race:
	@pkgs=$(RACE_PKGS); \
	echo "race detector: $$(echo $$pkgs | wc -w) packages"; \
	OVNHOST_TEST_STRICT=1 OVNHOST_BIN=$(BIN) $(GO) test -race -count=1 -timeout 20m $$pkgs 2>&1 | grep -v '^?' ; exit $${PIPESTATUS[0]}

fuzz:
	$(call run_fuzz,$(FUZZ_TARGETS),$(FUZZ_LONG))

test-unit: build  # the packaging tests read the built programs
	$(GO) test -count=1 -short ./...

# Every benchmark prints one BENCHRESULT line per figure
# (tests/harness/benchresult); benchjson gathers them into _out/bench.json.
# bench-doc merges that into docs/bench-results.json and regenerates
# docs/benchmarks.md's tables from it (a unit test checks they agree).
BENCHJSON := $(GO) run ./tests/harness/benchresult/benchjson
bench: deps build
	@mkdir -p $(OUT)
	OVNHOST_TEST_STRICT=1 OVNHOST_BIN=$(BIN) $(BENCHJSON) run -out $(OUT)/bench.json -- \
		$(GO) test -run '^$$' -bench . -benchtime 1x -timeout 60m ./tests/...

bench-doc:
	$(BENCHJSON) merge -into docs/bench-results.json $(OUT)/bench.json
	$(BENCHJSON) doc -results docs/bench-results.json docs/benchmarks.md

# The control-plane simulation of a large cluster (issue 29, docs/scale.md):
# simulated nodes against the real apiserver, OVN central and controller,
# grown in SCALE_STEPS (nodes:pods:services:policies, cumulative). Not part
# of `make test` or `make bench` (build tag `scale`); everything it starts
# is stopped and removed at the end. Figures in _out/scale (scale.csv,
# scale.json, bench.json, heap profiles); the SVG curves are copied to
# docs/scale/. SCALE_PROFILE=N takes N s of controller CPU profile per step.
SCALE_STEPS ?= 50:5000:1000:500,100:10000:2000:1000,250:20000:5000:2000,500:30000:5000:2000
SCALE_PROFILE ?= 0
scale: deps build
	@mkdir -p $(OUT)/scale docs/scale
	@start=$$(date +%s); \
	OVNHOST_TEST_STRICT=1 OVNHOST_BIN=$(BIN) $(BENCHJSON) run -out $(OUT)/scale/bench.json -- \
		$(GO) test -tags scale -run '^$$' -bench '^BenchmarkScale$$' -benchtime 1x -timeout 120m -v ./tests/scale \
		-args -scale.steps=$(SCALE_STEPS) -scale.out=$(OUT)/scale -scale.profile=$(SCALE_PROFILE); \
	rc=$$?; echo "make scale: $$(( $$(date +%s) - start )) s, exit $$rc"; \
	[ $$rc = 0 ] && cp $(OUT)/scale/*.svg docs/scale/; exit $$rc

# Release artefacts (docs/install.md), built in Go by packaging/cmd/ovnhost-package.
OUT := $(CURDIR)/_out
PACKAGER := $(GO) run ./packaging/cmd/ovnhost-package

bundle: deps build
	$(PACKAGER) bundle --bin $(BIN) --out $(OUT)/bundle --version $(VERSION)

image: bundle
	$(PACKAGER) image --bin $(BIN) --bundle $(OUT)/bundle --out $(OUT)/ovnhost-image.tar --version $(VERSION)

talos-extension: bundle
	$(PACKAGER) talos-extension --bin $(BIN) --bundle $(OUT)/bundle --out $(OUT)/ovnhost-talos-extension.tar --version $(VERSION)

rpm: deps build
	$(PACKAGER) rpm --bin $(BIN) --out $(OUT) --version $(VERSION)

package: image talos-extension rpm

clean:
	rm -rf $(BIN) $(OUT) _test.log
