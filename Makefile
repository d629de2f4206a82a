# gpuvisor root Makefile.
#
# One Makefile drives everything; each component describes itself in a small
# fragment (src/<component>/module.mk, tests/<component>/module.mk,
# bench/module.mk) using the templates below, so adding a component never
# means editing this file.  See docs/contributing.md ("Build system").
#
#   make                 build everything (libraries, programs, test binaries)
#   make test            run the whole test suite; ends with "N passed, N failed"
#   make bench           run benchmarks; results land in bench/results/*.txt
#   make bench-build     build the benchmark programs without running them (CI)
#   make fuzz            build libFuzzer targets with clang into build-fuzz/
#   make fuzz-run        run each fuzz target for FUZZ_SECONDS (default 30)
#   make SAN=address,undefined test   sanitizer build + test (build-san/)
#   make CC=clang        clang build (build-clang/)
#   make test-gpu        real-GPU suite (needs a GPU, nvcc, PyTorch)
#   make test-repeat N=5 run the suite N times; names every case that failed
#   make coverage        gcc --coverage build (build-cov/), suite, per-file
#                        line and branch report in build-cov/coverage.txt
#   make mutants         plant each tests/mutants/*.patch in a scratch copy;
#                        every one must make its tests fail
#   make images          OCI image archives of gpuvisor-node and
#                        gpuvisor-scheduler in build/images/ (root, apt)
#   make images-docker-check  build the Dockerfiles (podman), same files as
#                        make images' (root, apt)
#   make e2e             deploy/ on a real Kubernetes (the loopback 1.20 of
#                        ../shared/k8s, or $KUBECONFIG's), real pods (root)

CC      ?= cc
SAN     ?=
V       ?= 0

ifeq ($(origin CC),default)
CC := gcc
endif

# Separate output trees per toolchain so builds never mix objects.
BUILD ?= build$(if $(filter clang%,$(notdir $(CC))),-clang)$(if $(SAN),-san)

PKG_CONFIG ?= pkg-config

WARNINGS := -Wall -Wextra -Werror -Wshadow -Wformat=2 -Wstrict-prototypes \
            -Wmissing-prototypes -Wpointer-arith -Wvla -Wundef
CSTD     := -std=c11 -D_GNU_SOURCE
OPT      ?= -O2 -g
# -fdebug-prefix-map: the debug info names the checkout as ".", so the
# stripped binaries (whose build ID hashes that debug info) are the same
# bytes whichever directory builds them: make images here and a
# Dockerfile's build stage in /src give the same image.
CFLAGS_BASE := $(CSTD) $(OPT) $(WARNINGS) -fPIC -Isrc -MMD -MP \
               -fno-omit-frame-pointer -fdebug-prefix-map=$(CURDIR)=.
LDFLAGS_BASE :=

ifneq ($(SAN),)
CFLAGS_BASE  += -fsanitize=$(SAN) -fno-sanitize-recover=all
LDFLAGS_BASE += -fsanitize=$(SAN)
endif

CFLAGS  ?=
LDFLAGS ?=
ALL_CFLAGS  = $(CFLAGS_BASE) $(CFLAGS)
ALL_LDFLAGS = $(LDFLAGS_BASE) $(LDFLAGS)

ifeq ($(V),0)
Q := @
else
Q :=
endif

# Collected by module fragments.
LIBS        :=   # static component libraries:   build/lib/libgv<name>.a
PROGS       :=   # executables:                  build/bin/<name>
TEST_PROGS  :=   # test executables:             build/tests/<name>
TEST_SCRIPTS:=   # test scripts run by the runner (paths in the source tree)
BENCH_PROGS :=   # benchmark executables:        build/bench/<name>
BENCH_SCRIPTS:=  # benchmark scripts
FUZZ_TARGETS:=   # libFuzzer targets:            build-fuzz/<name>
EXTRA_ALL   :=   # other files `make` must produce (shared libraries, ...)

# --- templates -------------------------------------------------------------
# $(1)=name; <name>_SRCS, <name>_CFLAGS (optional)
define GV_LIB
$(1)_OBJS := $$(patsubst %.c,$$(BUILD)/obj/%.o,$$($(1)_SRCS))
$$(BUILD)/lib/libgv$(1).a: $$($(1)_OBJS)
	@mkdir -p $$(@D)
	@echo "  AR      $$@"
	$$(Q)rm -f $$@ && ar rcs $$@ $$^
$$($(1)_OBJS): EXTRA_CFLAGS := $$($(1)_CFLAGS)
ALL_OBJS += $$($(1)_OBJS)
endef

# $(1)=name, $(2)=output dir; <name>_SRCS, <name>_LIBS (component libs, in
# link order), <name>_LDLIBS, <name>_CFLAGS
define GV_EXE
$(1)_OBJS := $$(patsubst %.c,$$(BUILD)/obj/%.o,$$($(1)_SRCS))
$$(BUILD)/$(2)/$(1): $$($(1)_OBJS) $$(foreach l,$$($(1)_LIBS),$$(BUILD)/lib/libgv$$(l).a)
	@mkdir -p $$(@D)
	@echo "  LD      $$@"
	$$(Q)$$(CC) $$(ALL_LDFLAGS) -o $$@ $$($(1)_OBJS) \
		$$(foreach l,$$($(1)_LIBS),$$(BUILD)/lib/libgv$$(l).a) $$($(1)_LDLIBS) -lm -lpthread
$$($(1)_OBJS): EXTRA_CFLAGS := $$($(1)_CFLAGS)
ALL_OBJS += $$($(1)_OBJS)
endef

ALL_OBJS :=
GEN_HEADERS :=

include $(sort $(wildcard src/*/module.mk))
include $(sort $(wildcard tests/*/module.mk))
-include bench/module.mk

$(foreach l,$(LIBS),$(eval $(call GV_LIB,$(l))))
$(foreach p,$(PROGS),$(eval $(call GV_EXE,$(p),bin)))
$(foreach t,$(TEST_PROGS),$(eval $(call GV_EXE,$(t),tests)))
$(foreach b,$(BENCH_PROGS),$(eval $(call GV_EXE,$(b),bench)))

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(@D)
	@echo "  CC      $<"
	$(Q)$(CC) $(ALL_CFLAGS) $(EXTRA_CFLAGS) -c -o $@ $<

FUZZ_REPLAYS := $(foreach f,$(FUZZ_TARGETS),$(BUILD)/tests/fuzzreplay_$(f))

ALL_TARGETS := $(foreach l,$(LIBS),$(BUILD)/lib/libgv$(l).a) \
               $(foreach p,$(PROGS),$(BUILD)/bin/$(p)) \
               $(foreach t,$(TEST_PROGS),$(BUILD)/tests/$(t)) \
               $(EXTRA_ALL) $(FUZZ_REPLAYS)

.PHONY: all test bench bench-build fuzz fuzz-run test-gpu e2e clean format help
.DEFAULT_GOAL := all

all: $(ALL_TARGETS)

# The runner executes every test program and script, reads their TAP output
# and prints the one-line total.  BUILD is exported so scripts find binaries.
test: all
	$(Q)BUILD=$(BUILD) SAN=$(SAN) tests/run-tests.sh \
		$(foreach t,$(TEST_PROGS),$(BUILD)/tests/$(t)) $(FUZZ_REPLAYS) $(TEST_SCRIPTS)

# The benchmark programs alone, built but not run: CI builds them so that
# none rots between `make bench` runs.
bench-build: all $(foreach b,$(BENCH_PROGS),$(BUILD)/bench/$(b))

bench: bench-build
	$(Q)mkdir -p bench/results
	$(Q)BUILD=$(BUILD) bench/run-bench.sh \
		$(foreach b,$(BENCH_PROGS),$(BUILD)/bench/$(b)) $(BENCH_SCRIPTS)

# Fuzzing always uses clang's libFuzzer, in its own tree.  Each target
# <name> lists <name>_SRCS: the fuzz entry file plus the sources it tests.
FUZZ_BUILD := build-fuzz
FUZZ_CFLAGS := $(CSTD) -O1 -g -Isrc -fsanitize=fuzzer,address,undefined \
               -fno-sanitize-recover=all
define GV_FUZZ
$(FUZZ_BUILD)/$(1): $$($(1)_SRCS)
	@mkdir -p $$(@D)
	@echo "  FUZZ    $$@"
	$$(Q)clang $$(FUZZ_CFLAGS) $$($(1)_CFLAGS) -o $$@ $$($(1)_SRCS) $$($(1)_LDLIBS) -lm -lpthread
endef
$(foreach f,$(FUZZ_TARGETS),$(eval $(call GV_FUZZ,$(f))))

fuzz: $(foreach f,$(FUZZ_TARGETS),$(FUZZ_BUILD)/$(f))

# Every fuzz target is also built with the normal toolchain against a small
# replay driver and run by `make test` over its checked-in seed corpus
# (tests/fuzz/corpus/<name>/), so crashes found once stay fixed.
# Compiled one object per source, in a tree of the replay's own (its
# <name>_CFLAGS apply to every file, GV_FUZZ_NAME to the driver), with the
# headers tracked (-MMD): a header change rebuilds the replays that include
# it, and a change to one source recompiles that file alone.  Compiling each
# replay whole from its sources cost 5-7 s a replay on every change, most of
# a mutant's rebuild (make mutants, 2 of every 3 minutes of it).  The
# objects wait for the generated headers (GEN_HEADERS, from the modules):
# a source may include one before any rule knows it does.
define GV_FUZZ_REPLAY
$(1)_ROBJS := $$(patsubst %.c,$$(BUILD)/obj-replay/$(1)/%.o,$$($(1)_SRCS) tests/fuzz/replay_main.c)
$$($(1)_ROBJS): $$(BUILD)/obj-replay/$(1)/%.o: %.c | $$(GEN_HEADERS)
	@mkdir -p $$(@D)
	@echo "  CC      $$< ($(1))"
	$$(Q)$$(CC) $$(ALL_CFLAGS) $$($(1)_CFLAGS) -DGV_FUZZ_NAME='"$(1)"' -c -o $$@ $$<
$$(BUILD)/tests/fuzzreplay_$(1): $$($(1)_ROBJS)
	@mkdir -p $$(@D)
	@echo "  LD      $$@"
	$$(Q)$$(CC) $$(ALL_LDFLAGS) -o $$@ $$^ $$($(1)_LDLIBS) -lm -lpthread
REPLAY_OBJS += $$($(1)_ROBJS)
endef
REPLAY_OBJS :=
$(foreach f,$(FUZZ_TARGETS),$(eval $(call GV_FUZZ_REPLAY,$(f))))

FUZZ_SECONDS ?= 30
fuzz-run: fuzz
	$(Q)set -e; for f in $(FUZZ_TARGETS); do \
		mkdir -p $(FUZZ_BUILD)/corpus/$$f; \
		echo "== fuzzing $$f for $(FUZZ_SECONDS)s"; \
		$(FUZZ_BUILD)/$$f -max_total_time=$(FUZZ_SECONDS) $(FUZZ_BUILD)/corpus/$$f tests/fuzz/corpus/$$f; \
	done

test-gpu: all
	$(Q)BUILD=$(BUILD) tests/gpu/run-gpu-tests.sh

# End to end on a real Kubernetes (tests/e2e/run_e2e.py): the loopback
# v1.20.2 cluster of ../shared/k8s (built on first use, ~4 min on 2 cores),
# or the cluster $KUBECONFIG names; deploy/ installed as docs/install.md
# says, with make images' archives.  Root.  Holds /var/tmp/gv-k8s.lock.
e2e: all images
	$(Q)BUILD=$(BUILD) python3 tests/e2e/run_e2e.py

format:
	$(Q)clang-format -i $$(git ls-files '*.c' '*.h' | grep -v '\.pb-c\.')

clean:
	rm -rf build build-clang build-san build-clang-san build-fuzz build-cov

help:
	@sed -n '3,27p' Makefile

# Flake hunting: the same suite N times (fresh scratch and logs per run,
# build/test-logs/run-<i>/), then every case that failed at least once with
# its count.  CI runs it after the README's command (.ci/run).
N ?= 3
.PHONY: test-repeat coverage coverage-build
test-repeat: all
	$(Q)BUILD=$(BUILD) SAN=$(SAN) tests/repeat-tests.sh $(N) \
		$(foreach t,$(TEST_PROGS),$(BUILD)/tests/$(t)) $(FUZZ_REPLAYS) $(TEST_SCRIPTS)

# Coverage: its own tree, gcc --coverage at -O0 (so lines map 1:1), the whole
# suite, then gcovr's per-file line and branch figures for src/ (not tests,
# fakes or generated protobuf code).  A failing test does not stop the report
# but does fail the target.
COV_BUILD := build-cov
ifeq ($(GV_COVERAGE),1)
CFLAGS  += --coverage -fprofile-update=atomic
LDFLAGS += --coverage
# The interposer's dlsym must reach glibc's by a tail call (RTLD_NEXT is
# relative to the caller's return address; gcc 12 has no musttail): gcov's
# counters after the call and -O0 both prevent it, so loader.c is built as
# usual and left out of the figures.
$(BUILD)/obj/src/interposer/loader.o: CFLAGS := $(filter-out --coverage -fprofile-update=atomic,$(CFLAGS))
$(BUILD)/obj/src/interposer/loader.o: CFLAGS_BASE := $(patsubst -O0,-O2,$(CFLAGS_BASE))
endif
# The coverage configuration built, not run (CI: it must not rot).
coverage-build:
	$(Q)$(MAKE) --no-print-directory BUILD=$(COV_BUILD) OPT='-O0 -g' CC=gcc SAN= GV_COVERAGE=1 all

coverage:
	$(Q)if [ -d $(COV_BUILD) ]; then find $(COV_BUILD) -name '*.gcda' -delete; fi
	$(Q)rc=0; $(MAKE) --no-print-directory BUILD=$(COV_BUILD) OPT='-O0 -g' CC=gcc SAN= \
		GV_COVERAGE=1 test || rc=$$?; \
	gcovr --root . --object-directory $(COV_BUILD) --filter 'src/' \
		--exclude '.*\.pb-c\.[ch]$$' --exclude 'src/interposer/loader\.c' \
		--exclude-unreachable-branches --gcov-ignore-parse-errors --json-summary-pretty \
		--json-summary $(COV_BUILD)/coverage.json && \
	python3 scripts/coverage-report.py $(COV_BUILD)/coverage.json >$(COV_BUILD)/coverage.txt && \
	cat $(COV_BUILD)/coverage.txt && exit $$rc

# Container images without Docker or a registry (docs/install.md, "Images"):
# scripts/build-image.sh makes each image's tree from Debian packages
# (mmdebstrap) plus the binaries built here, then an OCI archive (umoci);
# the Dockerfiles call the same script.  Needs root and the Debian archive.
IMAGE_VERSION := $(shell sed -n 's/^\#define GV_VERSION "\(.*\)"$$/\1/p' src/common/gv_version.h)
IMAGE_DIR     := $(BUILD)/images
IMAGES        := $(IMAGE_DIR)/gpuvisor-node-$(IMAGE_VERSION).oci.tar \
                 $(IMAGE_DIR)/gpuvisor-scheduler-$(IMAGE_VERSION).oci.tar
.PHONY: images images-docker-check
images: $(IMAGES)
	$(Q)for f in $(IMAGES); do echo "  IMAGE   $$f"; done
$(IMAGE_DIR)/node.rootfs.tar: $(BUILD)/bin/gpuvisor-node $(BUILD)/lib/libgpuvisor.so
$(IMAGE_DIR)/scheduler.rootfs.tar: $(BUILD)/bin/gpuvisor-scheduler
$(IMAGE_DIR)/%.rootfs.tar: scripts/build-image.sh scripts/debian-packages.txt
	@mkdir -p $(@D)
	@echo "  ROOTFS  $@ (mmdebstrap, log $@.log)"
	$(Q)scripts/build-image.sh rootfs $* $(BUILD) $@ >$@.log 2>&1 || { tail -20 $@.log; exit 1; }
$(IMAGE_DIR)/gpuvisor-%-$(IMAGE_VERSION).oci.tar: $(IMAGE_DIR)/%.rootfs.tar
	@echo "  OCI     $@"
	$(Q)scripts/build-image.sh oci $* $< $@

# Both Dockerfiles built for real (podman) and compared, file by file, with
# make images' archives (scripts/check-dockerfiles.sh).  Root; CI runs it.
images-docker-check: images
	$(Q)scripts/check-dockerfiles.sh $(BUILD)

-include $(ALL_OBJS:.o=.d) $(REPLAY_OBJS:.o=.d)
