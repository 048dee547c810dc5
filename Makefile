# ddprun — one Makefile for the launcher, the store and libddp.
#
#   make            build everything under build/
#   make run        install missing Debian packages (as root), build, run the example job
#   make test       every test: unit (cmocka), end-to-end, compat and slurm (pytest)
#   make bench      the side-by-side benchmarks in bench/
#   make lint       clang-format check and cppcheck
#   make install    PREFIX=/usr/local DESTDIR=
#
# Options: CUDA=auto|0|1 (CUDA_HOME=/usr/local/cuda), URING=auto|0|1 (liburing:
# the store server's connections over io_uring), SAN=1 (ASan+UBSan), V=1.
#
# Sources are found by convention so that a new file needs no Makefile edit:
#   rendezvous/*.c        store protocol, server, clients, node rendezvous
#   rendezvous/cli/*.c    the ddpstore program
#   launcher/*.c          the ddprun agent; launcher/main.c holds main()
#   worker-runtime/src/*.c       libddp; worker-runtime/src/cuda/*.c only with CUDA
#   tests/unit/test_*.c   one cmocka binary per module, of the part its name says
#                         (test_launch_*, test_ddp_*, else rendezvous/: see layers)
#   tests/progs/*.c       small programs the end-to-end tests run under ddprun
#   bench/*/*.c           one benchmark program per file
#   tests/fuzz/fuzz_*.c   libFuzzer targets (make fuzz; needs clang)

.DEFAULT_GOAL := all
# Keep intermediate objects (tests and benches are built through pattern rules).
.SECONDARY:
SHELL := /bin/bash

VERSION := 0.1.0
PREFIX ?= /usr/local
DESTDIR ?=
BINDIR := $(PREFIX)/bin
LIBDIR := $(PREFIX)/lib
INCDIR := $(PREFIX)/include
MANDIR := $(PREFIX)/share/man
PCDIR := $(LIBDIR)/pkgconfig

B := build
CC ?= cc

ifeq ($(V),1)
Q :=
else
Q := @
endif

# ---- optional parts: NAME=auto|0|1 ------------------------------------------------
# $(call optional,NAME,FOUND,WHAT_IS_MISSING): 1 or 0 for NAME's value (auto: FOUND),
# or stop with an error when NAME=1 and it is not found, or NAME is not auto/0/1.
optional = $(if $(filter auto,$($(1))),$(2),$(if $(filter 1,$($(1))),$(if $(filter 1,$(2)),1,$(error $(1)=1 but $(3))),$(if $(filter 0,$($(1))),0,$(error $(1) must be auto, 0 or 1 (got '$($(1))')))))

CUDA ?= auto
CUDA_HOME ?= /usr/local/cuda
cuda_found := $(if $(and $(wildcard $(CUDA_HOME)/bin/nvcc),$(wildcard $(CUDA_HOME)/include/nccl.h),$(wildcard $(CUDA_HOME)/include/cuda_runtime.h)),1,0)
cuda_missing := nvcc, cuda_runtime.h or nccl.h not found under CUDA_HOME=$(CUDA_HOME)
CUDA_ON := $(call optional,CUDA,$(cuda_found),$(cuda_missing))

# io_uring (liburing) for the store server: without it the server serves its
# connections with libuv streams only; with it the running kernel still
# decides (rendezvous/store_ring.c).
URING ?= auto
uring_found := $(shell pkg-config --exists liburing 2>/dev/null && echo 1 || echo 0)
uring_missing := liburing is not installed (apt-get install liburing-dev)
URING_ON := $(call optional,URING,$(uring_found),$(uring_missing))

# ---- flags ------------------------------------------------------------------
PKGS := libuv libcjson
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS := $(shell pkg-config --libs $(PKGS) 2>/dev/null || echo -luv -lcjson)

WARN := -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter -Wstrict-prototypes -Wmissing-prototypes
CFLAGS ?= -O2 -g
ALL_CFLAGS := -std=gnu11 $(WARN) $(CFLAGS) -fPIC -MMD -MP -D_GNU_SOURCE \
	-DDDP_VERSION=\"$(VERSION)\" $(PKG_CFLAGS)
ALL_LDFLAGS := $(LDFLAGS)
SYS_LIBS := $(PKG_LIBS) -lpthread -lm -lrt -ldl
# Only the programs that contain the store server link liburing (libddp,
# the worker runtime, holds only the client).
URING_LIBS :=
ifeq ($(URING_ON),1)
  ALL_CFLAGS += -DDDP_HAVE_URING=1 $(shell pkg-config --cflags liburing)
  URING_LIBS := $(shell pkg-config --libs liburing)
endif

ifeq ($(SAN),1)
  ALL_CFLAGS += -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
  SAN_LDFLAGS := -fsanitize=address,undefined
  ALL_LDFLAGS += $(SAN_LDFLAGS)
endif

CUDA_LIBS :=
ifeq ($(CUDA_ON),1)
  ALL_CFLAGS += -DDDP_WITH_CUDA=1 -I$(CUDA_HOME)/include
  # An rpath to the toolkit so the binaries find libcudart/libnccl where the
  # toolkit is installed; neither library needs a GPU or driver to load.
  CUDA_LIBS := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lnccl -lcudart
  NVCC := $(CUDA_HOME)/bin/nvcc
  # Machine code for Turing, Ampere and Hopper, and Hopper's PTX, which the
  # driver compiles at load on anything newer (nvcc's default, Turing's alone,
  # left every newer GPU to that).
  NVCC_ARCH ?= -gencode arch=compute_75,code=sm_75 -gencode arch=compute_80,code=sm_80 \
	-gencode arch=compute_90,code=[sm_90,compute_90]
endif

# ---- layers ------------------------------------------------------------------------
# Each part sees only its own headers and those of the parts below it, and a
# unit test links only its part's objects and theirs, so an include or a call
# the wrong way fails the build:
#   rendezvous/       the bottom: store, rendezvous, worker contract, util
#   rendezvous/cli/   ddpstore, above rendezvous/
#   launcher/         ddprun, above rendezvous/
#   worker-runtime/   libddp (include/ddp.h public, src/ private), above rendezvous/
#   public            the rest (examples/, tests/progs/, bench/): ddp.h only,
#                     but for the few that name another part below
# The launcher and libddp never see each other. Unit tests go by name:
# test_launch_* and test_slurm are the launcher's, test_ddp_* libddp's, the
# others rendezvous/'s; fuzz targets likewise (fuzz_launch_*, fuzz_ddp_*,
# the others rendezvous/'s). tests/e2e/test_layers.py holds the Makefile to this.
INC_rendezvous := -Irendezvous
INC_cli := -Irendezvous
INC_launcher := -Ilauncher -Irendezvous
INC_worker-runtime := -Iworker-runtime/include -Iworker-runtime/src -Irendezvous
INC_public := -Iworker-runtime/include
PARTS := rendezvous cli launcher worker-runtime public
# The test programs that call libddp's internals (the bucket planner, the
# store client, the TCP ring's frames) rather than only ddp.h.
PROG_INTERNAL_NAMES := ddp_badframe ddp_compat ddp_hello
# $(call part_of,FILE): the part a source file belongs to.
part_of = $(firstword \
	$(if $(filter rendezvous/cli/%,$(1)),cli) \
	$(if $(filter rendezvous/% bench/store/%,$(1)),rendezvous) \
	$(if $(filter launcher/% tests/unit/test_launch_% tests/unit/test_slurm.c \
		tests/fuzz/fuzz_launch_%,$(1)),launcher) \
	$(if $(filter worker-runtime/% tests/unit/test_ddp_% tests/fuzz/fuzz_ddp_% \
		$(PROG_INTERNAL_NAMES:%=tests/progs/%.c),$(1)),worker-runtime) \
	$(if $(filter tests/unit/% tests/fuzz/%,$(1)),rendezvous) \
	public)

# Rebuild everything when the configuration changes (SAN, CUDA, CFLAGS, the
# parts' include paths).
CONFIG := $(CC) $(ALL_CFLAGS) $(ALL_LDFLAGS) CUDA_ON=$(CUDA_ON) URING_ON=$(URING_ON) $(NVCC_ARCH) \
	$(foreach p,$(PARTS),$(p):$(INC_$(p)))
# The stamp is rewritten only by goals that build (never by lint or install
# checks), and only when the configuration differs, so its mtime says when
# the configuration last changed. make.vars records the make variables of that
# build, so tests that call make (install) can reuse them.
CONFIG_STAMP := $(B)/config.stamp
$(CONFIG_STAMP): FORCE
	@mkdir -p $(@D)
	@echo '$(CONFIG)' | cmp -s - $@ || { echo '$(CONFIG)' > $@; rm -f $(B)/make.vars; }
	@[ -f $(B)/make.vars ] || echo 'SAN=$(SAN) CUDA=$(CUDA_ON)' > $(B)/make.vars
.PHONY: FORCE
FORCE:

# ---- sources ------------------------------------------------------------------
# store_ring.c, the server's io_uring transport, only with liburing.
RING_SRC := rendezvous/store_ring.c
RDZV_SRC := $(filter-out $(if $(filter 1,$(URING_ON)),,$(RING_SRC)),$(wildcard rendezvous/*.c))
# The pieces of rendezvous/ a worker needs: the wire codec, the blocking client
# and the worker contract (workenv.c, for ddp_spawn).
RDZV_CLIENT_SRC := $(filter rendezvous/store_proto.c rendezvous/store_client.c \
	rendezvous/store_client_ops.c rendezvous/store_addr.c rendezvous/util.c \
	rendezvous/workenv.c rendezvous/store_proto_enc.c,$(RDZV_SRC))
DDPSTORE_SRC := $(wildcard rendezvous/cli/*.c)
LAUNCHER_SRC := $(wildcard launcher/*.c)
LAUNCHER_LIB_SRC := $(filter-out launcher/main.c,$(LAUNCHER_SRC))
DDP_SRC := $(wildcard worker-runtime/src/*.c)
ifeq ($(CUDA_ON),1)
  DDP_SRC += $(wildcard worker-runtime/src/cuda/*.c)
endif
UNIT_SRC := $(wildcard tests/unit/test_*.c)
PROG_SRC := $(wildcard tests/progs/*.c)
# mpi_coll.c is built by bench/allreduce/run.sh with mpicc: nothing here links MPI.
BENCH_SRC := $(filter-out bench/allreduce/mpi_coll.c,$(wildcard bench/*/*.c))

obj = $(patsubst %.c,$(B)/obj/%.o,$(1))
RDZV_OBJ := $(call obj,$(RDZV_SRC))
RDZV_CLIENT_OBJ := $(call obj,$(RDZV_CLIENT_SRC))
LAUNCHER_LIB_OBJ := $(call obj,$(LAUNCHER_LIB_SRC))
DDP_OBJ := $(call obj,$(DDP_SRC))
# What a unit test of each part links: its part's objects and those below.
UNIT_OBJ_rendezvous := $(RDZV_OBJ)
UNIT_OBJ_launcher := $(LAUNCHER_LIB_OBJ) $(RDZV_OBJ)
UNIT_OBJ_worker-runtime := $(DDP_OBJ) $(RDZV_CLIENT_OBJ)
UNIT_LIBS_rendezvous := $(URING_LIBS)
UNIT_LIBS_launcher := $(URING_LIBS)
UNIT_LIBS_worker-runtime := $(CUDA_LIBS)

BIN_DDPRUN := $(if $(wildcard launcher/main.c),$(B)/bin/ddprun)
BIN_DDPSTORE := $(if $(DDPSTORE_SRC),$(B)/bin/ddpstore)
LIB_A := $(if $(DDP_SRC),$(B)/lib/libddp.a)
LIB_SO := $(if $(DDP_SRC),$(B)/lib/libddp.so.0)
LIB_SO_LINK := $(if $(DDP_SRC),$(B)/lib/libddp.so)
BIN_TRAIN := $(if $(and $(wildcard examples/train.c),$(DDP_SRC)),$(B)/bin/train)
BIN_TRAIN_CUDA := $(if $(and $(filter 1,$(CUDA_ON)),$(wildcard examples/train_cuda.cu),$(DDP_SRC)),$(B)/bin/train_cuda)
UNIT_BIN := $(patsubst tests/unit/%.c,$(B)/tests/unit/%,$(UNIT_SRC))
PROG_BIN := $(patsubst tests/progs/%.c,$(B)/tests/progs/%,$(PROG_SRC))
BENCH_BIN := $(patsubst bench/%.c,$(B)/bench/%,$(BENCH_SRC))
PC_FILE := $(B)/lib/pkgconfig/ddp.pc

TARGETS := $(BIN_DDPRUN) $(BIN_DDPSTORE) $(LIB_A) $(LIB_SO) $(LIB_SO_LINK) $(BIN_TRAIN) $(BIN_TRAIN_CUDA) $(if $(LIB_A),$(PC_FILE))

.PHONY: all run test test-unit test-e2e test-compat check-build bench lint format fuzz print-cflags print-libs \
	install uninstall clean deps deps-test deps-bench
all: $(TARGETS)

# ---- compile ------------------------------------------------------------------
$(B)/obj/%.o: %.c $(CONFIG_STAMP)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(ALL_CFLAGS) $(INC_$(call part_of,$<)) -c $< -o $@

# ---- link ---------------------------------------------------------------------
$(B)/bin/ddprun: $(call obj,launcher/main.c) $(LAUNCHER_LIB_OBJ) $(RDZV_OBJ)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $^ $(URING_LIBS) $(SYS_LIBS)

$(B)/bin/ddpstore: $(call obj,$(DDPSTORE_SRC)) $(RDZV_OBJ)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $^ $(URING_LIBS) $(SYS_LIBS)

# libddp.a holds one object: the library's objects linked together (ld -r)
# with every global symbol but the public API made local, as libddp.map does
# for the .so, so that a program's own store_set or util_now_ms neither
# clashes with nor is taken for ours. The kept names are libddp.map's global
# patterns (ddp_*). The member list lives in this Makefile: a change to it (a
# source added to RDZV_CLIENT_SRC) must rebuild the library though no object is new.
DDP_PUBLIC := $(shell sed -n '/global:/,/local:/{/:/d;s/[[:space:];]//g;p;}' worker-runtime/libddp.map)
$(B)/lib/libddp.a: $(DDP_OBJ) $(RDZV_CLIENT_OBJ) worker-runtime/libddp.map Makefile
	@mkdir -p $(@D)
	@$(if $(Q),echo "  AR      $@")
	$(Q)rm -f $@ $(B)/obj/libddp.o && ld -r -o $(B)/obj/libddp-all.o $(filter %.o,$^) && \
		objcopy -w $(foreach p,$(DDP_PUBLIC),'--keep-global-symbol=$(p)') \
			$(B)/obj/libddp-all.o $(B)/obj/libddp.o && \
		ar rcs $@ $(B)/obj/libddp.o

# build/lib is laid out as make install lays out LIBDIR: the file is named by
# its soname, which is what a program linked with -lddp asks the loader for,
# and libddp.so is only the link the linker's -lddp finds. With the file
# under the link's name, a program linked against build/lib (with an rpath
# there) found no libddp.so.0 at run time.
$(B)/lib/libddp.so.0: $(DDP_OBJ) $(RDZV_CLIENT_OBJ) worker-runtime/libddp.map Makefile
	@mkdir -p $(@D)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(ALL_LDFLAGS) -shared -Wl,-soname,libddp.so.0 \
		-Wl,--version-script=worker-runtime/libddp.map -o $@ $(filter %.o,$^) \
		$(CUDA_LIBS) $(SYS_LIBS)

# Renamed into place (a tree built before held a plain file here): a link
# beside it (make install, tests run two) never finds no libddp.so.
$(B)/lib/libddp.so: $(B)/lib/libddp.so.0
	$(Q)ln -sfn libddp.so.0 $@.$$$$ && mv -Tf $@.$$$$ $@

# Programs linked with libddp take the static archive, so they run from build/
# without LD_LIBRARY_PATH. The test programs that call libddp's internals (the
# bucket planner, the store client), which the archive keeps local, link its
# objects instead.
DDP_LINK_IN = $(B)/lib/libddp.a
LINK_DDP = $(DDP_LINK_IN) $(CUDA_LIBS) $(SYS_LIBS)
PROG_INTERNAL := $(addprefix $(B)/tests/progs/,$(PROG_INTERNAL_NAMES))
$(PROG_INTERNAL): DDP_LINK_IN = $(DDP_OBJ) $(RDZV_CLIENT_OBJ)
$(PROG_INTERNAL): $(DDP_OBJ) $(RDZV_CLIENT_OBJ)

$(B)/bin/train: $(call obj,examples/train.c) $(LIB_A)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $(call obj,examples/train.c) $(LINK_DDP)

$(B)/bin/train_cuda: examples/train_cuda.cu $(LIB_A) $(CONFIG_STAMP)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  NVCC    $@")
	$(Q)$(NVCC) -O2 -std=c++17 $(NVCC_ARCH) -Iworker-runtime/include -o $@ $< $(B)/lib/libddp.a \
		-Xlinker -rpath,$(CUDA_HOME)/lib64 -L$(CUDA_HOME)/lib64 -lnccl -lcudart $(SYS_LIBS) \
		$(if $(filter 1,$(SAN)),-Xcompiler=-fsanitize=address -Xcompiler=-fsanitize=undefined)

# A unit test's part: $(call unit_part,BIN).
unit_part = $(call part_of,tests/unit/$(notdir $(1)).c)
$(foreach t,$(UNIT_BIN),$(eval $(t): $(UNIT_OBJ_$(call unit_part,$(t)))))
# test_ddp_join runs the store server its ranks join: all of rendezvous/, not
# only the client pieces libddp holds.
$(B)/tests/unit/test_ddp_join: $(RDZV_OBJ)
$(B)/tests/unit/test_ddp_join: UNIT_LIBS_worker-runtime += $(URING_LIBS)
# test_ddp_reduce compiles reduce.c's kernels itself with signed overflow
# trapping (no sanitizer runtime to link): their integer sums must wrap
# without it.
$(B)/obj/tests/unit/test_ddp_reduce.o: ALL_CFLAGS += -fsanitize=signed-integer-overflow \
	-fsanitize-undefined-trap-on-error
# test_ddp_reuse stands between libddp and malloc, to hand a freed block
# straight back as an allocator may.
$(B)/tests/unit/test_ddp_reuse: UNIT_LIBS_worker-runtime += -Wl,--wrap=calloc -Wl,--wrap=free
$(B)/tests/unit/%: $(B)/obj/tests/unit/%.o
	@mkdir -p $(@D)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $^ -lcmocka $(UNIT_LIBS_$(call unit_part,$@)) $(SYS_LIBS)

$(B)/tests/progs/%: $(B)/obj/tests/progs/%.o $(LIB_A)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $< $(if $(LIB_A),$(LINK_DDP),$(SYS_LIBS))

# The launch benchmark's floor and timer must be bare C programs: linking the
# project's libraries (NCCL, the CUDA runtime) would make the floor slower and
# inflate every measured RSS (a spawned child's peak includes its parent's
# image before exec).
$(B)/bench/launch/%: $(B)/obj/bench/launch/%.o
	@mkdir -p $(@D)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $<

# The all-reduce floor is bare for the same reason: it measures this machine.
$(B)/bench/allreduce/floor: $(B)/obj/bench/allreduce/floor.o
	@mkdir -p $(@D)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $<

# The store benchmark speaks the wire protocol itself: rendezvous/ only.
$(B)/bench/store/%: $(B)/obj/bench/store/%.o $(RDZV_OBJ)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $^ $(URING_LIBS) $(SYS_LIBS)

# The others are libddp programs like any: ddp.h and the archive.
$(B)/bench/%: $(B)/obj/bench/%.o $(LIB_A)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $< $(LINK_DDP)

# Regenerated on every build: PREFIX is not part of the configuration stamp.
# Renamed into place: a make install beside it (the tests run two) never
# copies it half-written.
$(PC_FILE): worker-runtime/ddp.pc.in FORCE
	@mkdir -p $(@D)
	$(Q)sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(VERSION)|g' \
		-e 's|@LIBS_PRIVATE@|$(DDP_STATIC_LIBS)|g' $< > $@.$$$$ && \
		mv -f $@.$$$$ $@

# ---- dependencies (Debian packages) ---------------------------------------------
deps:
	$(Q).ci/deps.sh build
deps-test:
	$(Q).ci/deps.sh test
deps-bench:
	$(Q).ci/deps.sh bench

# ---- run the main job -----------------------------------------------------------
NPROC ?= 4
run: deps
	$(Q)$(MAKE) --no-print-directory all
	$(B)/bin/ddprun --nproc-per-node=$(NPROC) $(B)/bin/train

# ---- tests ---------------------------------------------------------------------
# storebench too: tests/e2e/test_bench_tools.py checks the dialects it speaks.
check-build: $(TARGETS) $(UNIT_BIN) $(PROG_BIN) $(B)/bench/store/storebench

test: deps-test
	$(Q)$(MAKE) --no-print-directory check-build
	$(Q)tests/run.sh all

test-unit: check-build
	$(Q)tests/run.sh unit
test-e2e: check-build
	$(Q)tests/run.sh e2e
test-compat: check-build
	$(Q)tests/run.sh compat

# ---- benchmarks ----------------------------------------------------------------
bench: deps-bench
	$(Q)$(MAKE) --no-print-directory all $(BENCH_BIN) $(PROG_BIN)
	$(Q)for d in bench/*/; do \
	  if [ -x $$d/run.sh ]; then echo "=== $$d"; $$d/run.sh || exit 1; fi; \
	done

# ---- fuzzing (clang libFuzzer) ----------------------------------------------------
# A target links the sources of its part and those below, by its name as the
# unit tests do (fuzz_launch_*: the launcher's, fuzz_ddp_*: libddp's, the
# others rendezvous/'s only). Every source is compiled once with clang and the
# sanitizers under $(B)/fuzz/obj (the project's own objects may be gcc's and
# are not instrumented); undefined behaviour stops the run like a crash.
FUZZ_SRC := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_BIN := $(patsubst tests/fuzz/%.c,$(B)/fuzz/%,$(FUZZ_SRC))
FUZZ_SECONDS ?= 60
# Without liburing and CUDA: the codecs, parsers and the libuv transport are
# what is fuzzed.
FUZZ_RDZV_SRC := $(filter-out $(RING_SRC),$(RDZV_SRC))
FUZZ_SRC_rendezvous := $(FUZZ_RDZV_SRC)
FUZZ_SRC_launcher := $(LAUNCHER_LIB_SRC) $(FUZZ_RDZV_SRC)
FUZZ_SRC_worker-runtime := $(wildcard worker-runtime/src/*.c) $(RDZV_CLIENT_SRC)
FUZZ_CFLAGS := -std=gnu11 -g -O1 -D_GNU_SOURCE -DDDP_VERSION=\"$(VERSION)\" $(PKG_CFLAGS) \
	-MMD -MP -fsanitize=address,undefined -fno-sanitize-recover=undefined
fuzz_obj = $(patsubst %.c,$(B)/fuzz/obj/%.o,$(1))
fuzz_part = $(call part_of,tests/fuzz/$(notdir $(1)).c)
$(B)/fuzz/obj/%.o: %.c $(CONFIG_STAMP)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  FUZZCC  $<")
	$(Q)clang $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link $(INC_$(call part_of,$<)) -c $< -o $@
$(foreach t,$(FUZZ_BIN),$(eval $(t): $(call fuzz_obj,$(FUZZ_SRC_$(call fuzz_part,$(t))))))
$(B)/fuzz/%: $(B)/fuzz/obj/tests/fuzz/%.o
	@mkdir -p $(@D)
	@$(if $(Q),echo "  LD      $@")
	$(Q)clang -fsanitize=fuzzer,address,undefined -o $@ $^ $(SYS_LIBS)
# Every build type-checks the fuzz targets with the project's compiler (they
# build only with clang, in make fuzz): an interface they call that changes
# fails here, not minutes into the CI's fuzz step.
FUZZ_CHECKED := $(patsubst tests/fuzz/%.c,$(B)/fuzz-checked/%.ok,$(FUZZ_SRC))
$(B)/fuzz-checked/%.ok: tests/fuzz/%.c $(CONFIG_STAMP)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  CHECK   $<")
	$(Q)$(CC) -std=gnu11 -fsyntax-only -D_GNU_SOURCE -DDDP_VERSION=\"$(VERSION)\" \
		$(PKG_CFLAGS) -MMD -MP -MF $(@:.ok=.d) -MT $@ $(INC_$(call part_of,$<)) $<
	@touch $@
-include $(FUZZ_CHECKED:.ok=.d)
check-build: $(FUZZ_CHECKED)
fuzz: $(FUZZ_BIN)
	$(Q)for f in $(FUZZ_BIN); do n=$$(basename $$f); \
	  mkdir -p $(B)/fuzz/corpus-$$n; \
	  echo "fuzz: $$n for $(FUZZ_SECONDS)s"; \
	  $$f -max_total_time=$(FUZZ_SECONDS) -max_len=65536 $(B)/fuzz/corpus-$$n tests/fuzz/corpus/$$n || exit 1; \
	done

# ---- lint ----------------------------------------------------------------------
# Tracked files and new ones not yet added (but not ignored ones).
C_FILES = $(shell git ls-files --cached --others --exclude-standard '*.c' '*.h' 2>/dev/null)
# cppcheck reads each part with the include paths its compiler gets.
files_of = $(foreach f,$(C_FILES),$(if $(filter $(1),$(call part_of,$(f))),$(f)))
CPPCHECK := cppcheck --quiet --error-exitcode=1 --enable=warning,portability,performance \
	--inline-suppr --std=c11 -D__GNUC__ -D_GNU_SOURCE -DDDP_VERSION=\"lint\" \
	--suppress=missingIncludeSystem
lint:
	$(Q)clang-format --dry-run -Werror $(C_FILES)
	$(Q)$(foreach p,$(PARTS),$(if $(call files_of,$(p)),\
		$(CPPCHECK) $(INC_$(p)) $(call files_of,$(p)) &&)) true
	$(Q)/usr/bin/python3 -m pyflakes tests bench examples .ci
	@echo "lint: clang-format, cppcheck and pyflakes clean"
format:
	$(Q)clang-format -i $(C_FILES)

# The compile flags of a part (PART=launcher) or of a source file, which need
# not exist (FILE=rendezvous/x.c), as the compile rule passes them: for
# tests/e2e/test_layers.py, which compiles probes with them.
print_part = $(or $(PART),$(if $(FILE),$(call part_of,$(FILE))))
# What a program linking build/lib/libddp.a adds (libddp(3)); ddp.pc's
# Libs.private too. A SAN=1 archive needs the sanitizers' runtimes as well.
DDP_STATIC_LIBS = $(strip $(CUDA_LIBS) $(SYS_LIBS))
print-libs:
	$(info $(strip $(DDP_STATIC_LIBS) $(SAN_LDFLAGS)))
	@:
print-cflags:
	$(if $(filter $(print_part),$(PARTS)),,$(error give FILE=path.c or PART=, one of $(PARTS)))
	$(info $(ALL_CFLAGS) $(INC_$(print_part)))
	@:

# ---- install ---------------------------------------------------------------------
MANPAGES := $(wildcard man/*.1 man/*.3)
install: all
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCDIR) $(DESTDIR)$(PCDIR) \
		$(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man3
	$(if $(BIN_DDPRUN),install -m 755 $(BIN_DDPRUN) $(DESTDIR)$(BINDIR)/ddprun)
	$(if $(BIN_DDPSTORE),install -m 755 $(BIN_DDPSTORE) $(DESTDIR)$(BINDIR)/ddpstore)
	$(if $(LIB_A),install -m 644 $(LIB_A) $(DESTDIR)$(LIBDIR)/libddp.a)
	$(if $(LIB_SO),install -m 755 $(LIB_SO) $(DESTDIR)$(LIBDIR)/libddp.so.0)
	$(if $(LIB_SO),ln -sf libddp.so.0 $(DESTDIR)$(LIBDIR)/libddp.so)
	$(if $(LIB_A),install -m 644 worker-runtime/include/ddp.h $(DESTDIR)$(INCDIR)/ddp.h)
	$(if $(LIB_A),install -m 644 $(PC_FILE) $(DESTDIR)$(PCDIR)/ddp.pc)
	for m in $(filter %.1,$(MANPAGES)); do install -m 644 $$m $(DESTDIR)$(MANDIR)/man1/; done
	for m in $(filter %.3,$(MANPAGES)); do install -m 644 $$m $(DESTDIR)$(MANDIR)/man3/; done
	$(if $(INSTALL_LDCONFIG),ldconfig)

# ld.so finds a new libddp.so.0 in /usr/lib or /usr/local/lib only once its
# cache is rebuilt: done for a real install there as root, never for a staged
# one (DESTDIR), another prefix (the tests') or a user, who are told what to
# do in the README (LD_LIBRARY_PATH, ldconfig, or -Wl,-rpath).
INSTALL_LDCONFIG = $(and $(LIB_SO),$(if $(DESTDIR),,1),\
	$(filter /usr /usr/local,$(patsubst %/,%,$(PREFIX))),$(filter 0,$(shell id -u)))

uninstall:
	rm -f $(DESTDIR)$(BINDIR)/ddprun $(DESTDIR)$(BINDIR)/ddpstore \
		$(DESTDIR)$(LIBDIR)/libddp.a $(DESTDIR)$(LIBDIR)/libddp.so $(DESTDIR)$(LIBDIR)/libddp.so.0 \
		$(DESTDIR)$(INCDIR)/ddp.h $(DESTDIR)$(PCDIR)/ddp.pc \
		$(addprefix $(DESTDIR)$(MANDIR)/man1/,$(notdir $(filter %.1,$(MANPAGES)))) \
		$(addprefix $(DESTDIR)$(MANDIR)/man3/,$(notdir $(filter %.3,$(MANPAGES))))

clean:
	rm -rf $(B)

-include $(shell find $(B)/obj $(B)/fuzz/obj -name '*.d' 2>/dev/null)
