# gpulet front door. `make demo` and `make test` install what is missing (Debian 12
# packages, via scripts/deps.sh), configure, build and run.
BUILD ?= build
ASAN_BUILD ?= build-asan
GENERATOR := -G Ninja
JOBS ?= $(shell nproc)
# Warnings are errors in CI (CI=true); locally they stay warnings.
WERROR := $(if $(filter true 1 yes,$(CI)),ON,OFF)
CMAKE_FLAGS ?=

.PHONY: all deps tools build build-gpulet build-plain demo check test unit-test plain-test asan-configure asan-build asan-test fuzz-build fuzz-smoke lint format bench fuzz image image-test e2e clean help explain-eval

all: build

help:
	@echo "make demo   - build and run gpulet on a simulated homelab node"
	@echo "make check  - build and run the in-process tests (ctest label fast), in about a minute"
	@echo "make test   - lint, every test under ASan+UBSan (clang), the optimised build's own tests, fuzz smoke"
	@echo "make bench  - run the benchmarks (GPULET_BENCH_SOAK_S=600: seconds of the memory soak)"
	@echo "make fuzz   - run the parser fuzzers for longer"
	@echo "make explain-eval - score gpulet explain on its evaluation set, by area"
	@echo "make lint   - format check and clang-tidy with thread-safety analysis (part of make test)"
	@echo "make format - reformat the C++ sources with clang-format"
	@echo "make image  - build the gpulet container image with podman (root or rootless, no registry) and save it as an OCI archive"
	@echo "make e2e    - gpulet on a real single-node cluster, two Kubernetes versions (as root; docs/e2e.md)"
	@echo "make image-test - run the image and check it"
	@echo "make clean  - remove build directories"

deps:
	@scripts/deps.sh test

# The real tools the tests compare against, built from their Go modules into a cache outside
# the clone (scripts/e2e/build.sh; a second run builds nothing): kustomize, helm, a Talos
# configuration validator per release, the Talos API stand-in, and the Prometheus Operator's
# AlertmanagerConfig conversion (tests/monitoring/amconfig.go).
tools: deps
	@scripts/e2e/build.sh --tools

$(BUILD)/build.ninja: CMakeLists.txt | deps
	cmake -S . -B $(BUILD) $(GENERATOR) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGPULET_WERROR=$(WERROR) $(CMAKE_FLAGS)

build: deps $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)

# Only what the demo runs: gpulet, its NVML worker, the simulator and its fixtures.
build-gpulet: deps $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS) --target gpulet

demo: build-gpulet
	$(BUILD)/gpulet --simulate homelab list
	@echo
	@echo "Next: the daemon against a kubelet directory of your choice (Ctrl-C stops it):"
	@echo "  $(BUILD)/gpulet --simulate homelab serve --kubelet-dir /tmp/gpulet-demo-kubelet --metrics-address 127.0.0.1:9400"

# The in-process tier (scripts/test_tiers.py): no child process, no sleep.
check: deps $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS) --target gpulet_tests gpulet_explain_eval
	cd $(BUILD) && ctest -L fast --output-on-failure -j $(JOBS)

# The plain build's suite waits more than it computes (about a fifth of two cores at -j 2),
# so it runs two tests a core; the sanitizer build's keeps one a core (it computes).
TEST_JOBS ?= $(shell echo $$(( $(JOBS) * 2 )))
unit-test: build tools
	cd $(BUILD) && ctest --output-on-failure -j $(TEST_JOBS)

# What make test builds in the plain build: the binaries and the suites that only it can run
# (tests/CMakeLists.txt, gpulet_plain_tests); the whole suite runs in the sanitizer build.
build-plain: deps $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS) --target gpulet gpulet_plain_tests

plain-test: build-plain
	cd $(BUILD) && ctest -L plain --output-on-failure -j $(TEST_JOBS)

# The sanitizer build is clang's: at -O0 with the sanitizers it compiles gpulet in under half
# g++'s time, its tests run faster, and it applies clang's thread-safety analysis to every
# file as it compiles (CMakeLists.txt). The product is g++'s (the plain build, the image).
SAN_CC ?= /usr/bin/clang-14
SAN_CXX ?= /usr/bin/clang++-14

asan-configure: deps
	cmake -S . -B $(ASAN_BUILD) $(GENERATOR) -DCMAKE_C_COMPILER=$(SAN_CC) -DCMAKE_CXX_COMPILER=$(SAN_CXX) \
		-DCMAKE_BUILD_TYPE=Debug -DGPULET_SANITIZE=ON -DGPULET_UNITY=ON -DGPULET_WERROR=$(WERROR) \
		$(CMAKE_FLAGS)

# Everything, the fuzz targets included (CMakeLists.txt: GPULET_FUZZ).
asan-build: asan-configure
	cmake --build $(ASAN_BUILD) -j $(JOBS)

# Three tests a core: the suite waits more than it computes (the integration tier sleeps and
# waits on child processes), so more at once cut its time until they starve each other of
# CPU (two cores, 2026-12-06: -j 4 139 s, -j 6 113 s, -j 8 133 s).
ASAN_TEST_JOBS ?= $(shell echo $$(( $(JOBS) * 3 )))
asan-test: asan-build tools
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
		ctest --output-on-failure -j $(ASAN_TEST_JOBS)

# The fuzz targets are built in the sanitizer build, against the modules its tests use
# (compiled once for both: the separate -O1 build they had took 287 s of CPU, an eighth of make
# test's first phase, two cores, 2026-12-08). The target gpulet_fuzz builds only them and the
# modules: `make fuzz-build` needs no test built.
FUZZ_ENV := FUZZ_BIN=$(ASAN_BUILD)/fuzz
fuzz-build: asan-configure
	cmake --build $(ASAN_BUILD) -j $(JOBS) --target gpulet_fuzz
	$(FUZZ_ENV) scripts/fuzz.sh --build

# Five seconds a target: each replays its seeds (every bundled fixture, example and message
# it reads) and then fuzzes; `make fuzz` (300 s a target) is the long run. At 10 s
# a target this step took 112 s of make test's 20 minutes on two cores (2026-12-06).
fuzz-smoke: fuzz-build
	$(FUZZ_ENV) scripts/fuzz.sh 5

# Static checks: the format of every C++ file, and clang-tidy (.clang-tidy's bug-finding
# checks and clang's thread-safety analysis) over the product's sources with the sanitizer
# build's compile_commands.json, generated headers and clang precompiled header, each
# folder's sources read as one unit (scripts/clang_lint.py: 74 s against 241 s at -j 2 on two
# cores, 2026-12-07).
lint: asan-build
	scripts/check_format.sh
	scripts/clang_lint.py $(ASAN_BUILD) -j $(JOBS)

format:
	scripts/check_format.sh --fix

# The tools (Go) are built beside the C++ builds and lint, two jobs at once; only the
# sanitizer build's tests need them. The two cores stay busy throughout (vmstat: no idle
# time but the last minute): this first phase took 1018 s in a clean clone and the whole of
# make test 1230 s, 286 s warm (two cores, 2026-12-08), so what shortens it is less work, not
# another order. The whole suite runs once, in the sanitizer build (the
# tests are half of a build's compile time); the plain build runs what only it can show
# (plain-test).
test:
	$(MAKE) -j2 tools plain-test lint asan-build
	$(MAKE) asan-test fuzz-smoke
	@echo "make test: all test suites passed"

bench: build
	@scripts/deps.sh bench
	GPULET_BENCH_IMAGE=$(IMAGE) $(BUILD)/bench/gpulet_bench

# The long run, from targets of their own build: the sanitizer build's are -O0, which makes
# them about three times slower per input (pod_identity_fuzz, 5 s from its seeds and an empty
# corpus, 2026-12-08: 69,555 inputs at -O0, 222,517 at -O1), no matter for five seconds but
# not for five minutes. The same CMake targets, at -O1, without the tests (build-fuzz/opt).
FUZZ_OPT_BUILD ?= build-fuzz/opt
fuzz: deps
	cmake -S . -B $(FUZZ_OPT_BUILD) $(GENERATOR) -DCMAKE_C_COMPILER=$(SAN_CC) -DCMAKE_CXX_COMPILER=$(SAN_CXX) \
		-DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS=-O1 -DCMAKE_CXX_FLAGS=-O1 -DGPULET_SANITIZE=ON \
		-DGPULET_BUILD_TESTS=OFF -DGPULET_BUILD_BENCH=OFF $(CMAKE_FLAGS)
	cmake --build $(FUZZ_OPT_BUILD) -j $(JOBS) --target gpulet_fuzz
	FUZZ_BIN=$(FUZZ_OPT_BUILD)/fuzz scripts/fuzz.sh 300

# gpulet explain against tests/explain_eval/ (real messages, each with its expected cause):
# recognised and right-cause rates by area, and every miss.
explain-eval: deps $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS) --target gpulet_explain_eval
	$(BUILD)/gpulet-explain-eval tests/explain_eval/*.yaml

# The container image: gpulet:<version>, built from a local debootstrap base, and saved as
# an OCI archive with its digest, $(BUILD)/image/gpulet-<version>.oci.tar[.digest], for nodes
# with no registry (docs/no-registry.md).
VERSION := $(shell sed -n '/^project/s/.* VERSION \([0-9.]*\) .*/\1/p' CMakeLists.txt)
IMAGE ?= gpulet:$(VERSION)
BASE_IMAGE ?= localhost/gpulet-debian:bookworm
PODMAN_BUILD := podman --runtime runc --cgroup-manager cgroupfs build --network host

image:
	@scripts/deps.sh image
	scripts/image-base.sh $(BASE_IMAGE)
	$(PODMAN_BUILD) --build-arg BASE_IMAGE=$(BASE_IMAGE) \
		--build-arg GPULET_GIT_REV=$$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown) \
		-f Containerfile -t $(IMAGE) .
	@podman image inspect --format '$(IMAGE): {{.Size}} bytes' $(IMAGE) | \
		awk '{ printf "%s %.1f MB\n", $$1, $$2 / 1000000 }'
	scripts/image-save.sh $(IMAGE) $(BUILD)/image

# A real cluster (etcd, kube-apiserver, scheduler, controller-manager, kube-proxy, kubelet,
# containerd with CDI) on this machine for each tested Kubernetes version, gpulet installed from
# deploy/ with `kubectl apply -k` and the image above, and the scenarios of docs/e2e.md. Not
# part of `make test` (it needs root); .ci/run runs it after `make test` (docs/e2e.md has the
# times).
e2e: build-gpulet
	cmake --build $(BUILD) -j $(JOBS) --target vram_app vram_standin_cuda vram_standin_nvml
	@scripts/deps.sh e2e
	tests/e2e/e2e.py

image-test: build
	@scripts/deps.sh image
	scripts/image-test.sh $(IMAGE) $(BUILD)/gpulet $(BUILD)/image/gpulet-$(VERSION).oci.tar

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
