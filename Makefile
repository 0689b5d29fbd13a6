# nmt: plain, non-recursive Makefile. No configure step.
#   make                 build tools into bin/ and plugins as bin/nmt-backend-*.so
#   make check           install missing dependencies, build, run every test (plain, ASan+UBSan,
#                        valgrind for the unit tests), fuzz
#   make check-stress N=5  the Bats suites N times under load: every test that ever failed
#   make demo            train en-de on the bundled Multi30k data, translate and score the test set
#   make install PREFIX=/usr/local
# Sources are found by wildcard: libcommon/*/*.c form libnmt.a, tools/NAME.c becomes bin/nmt-NAME
# (tools/nmt.c becomes bin/nmt), plugins/NAME/*.c become bin/nmt-backend-NAME.so,
# tests/unit/test_*.c become unit test programs.

PREFIX   ?= /usr/local
O        ?= .
BIN      := $(O)/bin
OBJ      := $(O)/build
VERSION  := 0.1.0
PLUGINDIR := $(PREFIX)/lib/nmt

CC       ?= cc
OPT      ?= -O2
CFLAGS   ?= $(OPT) -g
WFLAGS   := -std=c11 -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wno-unused-parameter
CPPFLAGS += -D_GNU_SOURCE -Ilibcommon -Iplugins -DNMT_VERSION='"$(VERSION)"' -DNMT_PLUGINDIR='"$(PLUGINDIR)"'
SAN      ?=
ifeq ($(SAN),1)
  CFLAGS += -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
  LDFLAGS += -fsanitize=address,undefined
endif
LIBS     := -lzstd -lcsv -lutf8proc -lm -ldl -lpthread
BLASLIBS := -lopenblas

LIB_SRC  := $(wildcard libcommon/*/*.c)
LIB_OBJ  := $(LIB_SRC:%.c=$(OBJ)/%.o)
LIB_A    := $(OBJ)/libnmt.a

TOOL_SRC := $(wildcard tools/*.c)
TOOLS    := $(patsubst tools/%.c,$(BIN)/nmt-%,$(filter-out tools/nmt.c,$(TOOL_SRC)))
ifneq ($(wildcard tools/nmt.c),)
  TOOLS  += $(BIN)/nmt
endif

PLUGIN_NAMES := $(sort $(filter-out cuda comm-%,$(notdir $(patsubst %/,%,$(dir $(wildcard plugins/*/*.c))))))
PLUGINS  := $(PLUGIN_NAMES:%=$(BIN)/nmt-backend-%.so)

UNIT_SRC := $(wildcard tests/unit/test_*.c)
UNITS    := $(patsubst tests/unit/%.c,$(OBJ)/tests/%,$(UNIT_SRC))
# bench/onednn_bench.c needs libdnnl-dev and is built by bench/onednn.sh, not here.
BENCH_SRC := $(filter-out bench/onednn_bench.c,$(wildcard bench/*.c))
BENCHES  := $(patsubst bench/%.c,$(OBJ)/bench/%,$(BENCH_SRC))
HELPER_SRC := $(wildcard tests/helpers/*.c)
HELPERS  := $(patsubst tests/helpers/%.c,$(OBJ)/tests/helpers/%,$(HELPER_SRC))
TESTPLUGIN_SRC := $(wildcard tests/plugins/*.c)
TESTPLUGINS := $(patsubst tests/plugins/%.c,$(OBJ)/tests/plugins/%.so,$(TESTPLUGIN_SRC))

# Communication modules: plugins/comm-NAME/*.c become bin/nmt-comm-NAME.so; the MPI one is built
# where Open MPI's compiler wrapper is (scripts/deps.sh installs it). Programs never link MPI.
MPICC    ?= $(shell command -v mpicc 2>/dev/null)
COMMS    := $(if $(MPICC),$(BIN)/nmt-comm-mpi.so)

NVCC     ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
ifneq ($(NVCC),)
  ifneq ($(wildcard plugins/cuda/*.cu),)
    HAVE_CUDA := 1
  endif
endif

# The NCCL device communication module (plugins/comm-nccl/, ABI plugins/devcomm.h): built with the
# cuda plugin, from C, against nccl.h (NCCL_INC, by default the CUDA toolkit's include folder). It
# opens libnccl.so.2 and libcuda.so.1 with dlopen, so it links neither and loads anywhere.
NCCL_INC ?= $(if $(NVCC),$(abspath $(dir $(NVCC))/../include))
ifneq ($(HAVE_CUDA),)
  ifneq ($(wildcard $(NCCL_INC)/nccl.h),)
    COMMS += $(BIN)/nmt-comm-nccl.so
    HAVE_NCCL := 1
  endif
endif

comma := ,
.PHONY: layers lint mutants check-stress valgrind bench-built all check test test-san fuzz install clean deps bench demo tests-built
all: $(TOOLS) $(PLUGINS) $(COMMS) $(if $(HAVE_CUDA),$(BIN)/nmt-backend-cuda.so)
	@echo "nmt: built $(words $(TOOLS)) tools and $(words $(PLUGINS) $(if $(HAVE_CUDA),cuda)) plugin(s) in $(BIN)/; CUDA: $(if $(NVCC),nvcc found ($(NVCC)),nvcc not found)$(if $(HAVE_CUDA),$(comma) cuda plugin built,$(comma) cuda plugin skipped)$(if $(HAVE_CUDA),$(if $(HAVE_NCCL),$(comma) nmt-comm-nccl.so built,$(comma) no nccl.h in $(NCCL_INC): nmt-comm-nccl.so skipped)); MPI: $(if $(MPICC),nmt-comm-mpi.so built,mpicc not found: one process only)"

$(OBJ)/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(WFLAGS) $(CFLAGS) -MMD -MP -fPIC -c $< -o $@

$(LIB_A): $(LIB_OBJ)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

$(BIN)/nmt-%: $(OBJ)/tools/%.o $(LIB_A)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -rdynamic $< $(LIB_A) $(LIBS) -o $@

# nmt-serve alone links the HTTP server, JSON and HTTP client libraries (scripts/deps.sh); the libcommon/serve objects
# that use them are pulled from libnmt.a only by what calls them.
SERVE_LIBS := -lmicrohttpd -ljansson -lcurl
$(BIN)/nmt-serve: LIBS += $(SERVE_LIBS)

$(BIN)/nmt: $(OBJ)/tools/nmt.o $(LIB_A)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) $< $(LIB_A) $(LIBS) -o $@

# The cpu plugin's kernels: full optimisation; -fno-math-errno and -fno-trapping-math let sqrtf and
# conditional expressions vectorise (no result changes); only the entry symbol is exported.
$(OBJ)/plugins/cpu/%.o: CFLAGS += -O3 -fno-math-errno -fno-trapping-math -fvisibility=hidden

# A plugin is every .c file under plugins/NAME/, linked as one shared object.
.SECONDARY:
.SECONDEXPANSION:
$(BIN)/nmt-backend-%.so: $$(addprefix $(OBJ)/,$$(addsuffix .o,$$(basename $$(wildcard plugins/$$*/*.c))))
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -shared $^ -lm -ldl -lpthread -o $@

$(OBJ)/plugins/comm-mpi/%.o: plugins/comm-mpi/%.c
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(shell $(MPICC) --showme:compile) $(WFLAGS) $(CFLAGS) -fvisibility=hidden -MMD -MP -fPIC -c $< -o $@

$(BIN)/nmt-comm-mpi.so: $(patsubst %.c,$(OBJ)/%.o,$(wildcard plugins/comm-mpi/*.c))
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -shared $^ $(shell $(MPICC) --showme:link) -o $@

$(OBJ)/plugins/comm-nccl/%.o: plugins/comm-nccl/%.c
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) -isystem $(NCCL_INC) $(WFLAGS) $(CFLAGS) -fvisibility=hidden -MMD -MP -fPIC -c $< -o $@

$(BIN)/nmt-comm-nccl.so: $(patsubst %.c,$(OBJ)/%.o,$(wildcard plugins/comm-nccl/*.c))
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -shared $^ -ldl -o $@

# The cuda plugin: every .cu file under plugins/cuda/, compiled by nvcc for the GPUs in CUDA_ARCH
# (sm_80 code runs on every 8.x GPU, sm_90 on H100/H200, and the compute_90 PTX is compiled by the
# driver for newer ones). The CUDA runtime is linked statically and loads the driver only when a GPU
# is used, and cuBLAS is loaded by the plugin's open(), so the plugin loads (and scores 0) on machines
# without a GPU. It takes no CFLAGS, hence no sanitizer flags; -z nodelete keeps the runtime mapped
# after dlclose (the CUDA runtime does not support being unloaded).
CUDA_ARCH ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=[sm_90,compute_90]
NVCCFLAGS ?= -O3 -g
NVCC_WFLAGS := -std=c++17 -Werror all-warnings -Xcompiler -Wall,-Wextra,-Werror,-Wshadow,-Wno-unused-parameter,-fPIC,-fvisibility=hidden
CUDA_OBJ := $(patsubst %.cu,$(OBJ)/%.o,$(wildcard plugins/cuda/*.cu))

$(OBJ)/plugins/cuda/%.o: plugins/cuda/%.cu
	@mkdir -p $(@D)
	$(NVCC) -D_GNU_SOURCE -Iplugins $(NVCC_WFLAGS) $(NVCCFLAGS) $(CUDA_ARCH) -MMD -MP -MF $(@:.o=.d) -c $< -o $@

$(BIN)/nmt-backend-cuda.so: $(CUDA_OBJ)
	@mkdir -p $(@D)
	$(NVCC) -shared $(CUDA_ARCH) -cudart static $^ -Xlinker -z,nodelete,-z,defs -ldl -lpthread -o $@

$(OBJ)/tests/test_%: $(OBJ)/tests/unit/test_%.o $(LIB_A)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -rdynamic $< $(LIB_A) $(LIBS) -o $@

$(OBJ)/tests/helpers/%: $(OBJ)/tests/helpers/%.o $(LIB_A)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) $< $(LIB_A) $(LIBS) -o $@

$(OBJ)/bench/%: $(OBJ)/bench/%.o $(LIB_A)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -rdynamic $< $(LIB_A) $(LIBS) $(BLASLIBS) -o $@

bench-built: all $(BENCHES)

$(OBJ)/tests/plugins/%.so: $(OBJ)/tests/plugins/%.o
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -shared $^ -o $@

# The cpu plugin with its AMX path on the tile emulation of plugins/cpu/amx.h, for the tests: an
# AMX machine's int8 path run through nmt-decode on any CPU with AVX-512 VNNI.
# Only isa.c (which grants the path) and the tile kernels depend on the emulation.
AMXEMU_SRC := plugins/cpu/isa.c plugins/cpu/linear_q_amx.c plugins/cpu/gemm_bf16_amx.c
AMXEMU_OBJ := $(patsubst plugins/cpu/%.c,$(OBJ)/tests/amxemu/%.o,$(AMXEMU_SRC)) \
	$(patsubst %.c,$(OBJ)/%.o,$(filter-out $(AMXEMU_SRC),$(wildcard plugins/cpu/*.c)))
$(OBJ)/tests/amxemu/%.o: plugins/cpu/%.c
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) -DCPU_AMX_EMULATE $(WFLAGS) $(CFLAGS) -O3 -fno-math-errno -fno-trapping-math \
		-fvisibility=hidden -MMD -MP -fPIC -c $< -o $@
$(OBJ)/tests/plugins/amxemu.so: $(AMXEMU_OBJ)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -shared $^ -lm -ldl -lpthread -o $@
TESTPLUGINS += $(OBJ)/tests/plugins/amxemu.so

tests-built: all $(UNITS) $(TESTPLUGINS) $(HELPERS)

deps:
	@bash scripts/deps.sh

# The include graph against the layers of libcommon/README.md.
layers:
	@bash tests/layers.sh && echo "layers: includes follow libcommon/README.md"

# Bats lines that cannot fail a test, or that can fail it by chance (tests/bats-lint.py).
lint:
	@python3 tests/bats-lint.py tests/bats/*.bats tests/bats/common.bash && echo "lint: every Bats check can fail its test, and none by chance"

# Small realistic breakages the suite must catch (by hand; not part of check).
mutants:
	python3 tests/mutants.py

# The Bats suites N times beside a busy loop on each core; lists every test that ever failed (by hand;
# not part of check).
N ?= 5
check-stress: tests-built
	bash tests/stress.sh $(N)

# The whole suite: plain build, then the same tests under ASan+UBSan, then the fuzzers. The builds
# compile NMT_TEST_JOBS files at a time (default: the number of cores), as the tests run that many.
CHECK_JOBS = $${NMT_TEST_JOBS:-$$(nproc)}
check: deps layers lint
	@rm -f .check-counts .check-counts.skips .check-counts.fails; st=0; t=$$(date +%s); times=; \
	lap() { n=$$(date +%s); times="$$times $$1 $$((n - t))s"; t=$$n; }; \
	$(MAKE) -j$(CHECK_JOBS) tests-built || exit 1; lap build; \
	bash tests/run.sh . .check-counts || st=1; lap plain; \
	$(MAKE) -j$(CHECK_JOBS) O=san SAN=1 tests-built || exit 1; lap san-build; \
	bash tests/run.sh san .check-counts || st=1; lap san; \
	VALGRIND=1 bash tests/run.sh . .check-counts || st=1; lap valgrind; \
	$(MAKE) -j$(CHECK_JOBS) fuzz FUZZ_SECONDS=$${FUZZ_SECONDS:-$(FUZZ_SECONDS)} || st=1; lap fuzz; \
	echo "check: time of each phase:$$times"; \
	bash tests/summary.sh .check-counts || st=1; \
	exit $$st

valgrind: tests-built
	VALGRIND=1 bash tests/run.sh . /dev/null

test: tests-built
	@rm -f .check-counts .check-counts.skips .check-counts.fails
	bash tests/run.sh . .check-counts
	@bash tests/summary.sh .check-counts

FUZZ_SRC := $(wildcard tests/fuzz/fuzz_*.c)
FUZZERS  := $(patsubst tests/fuzz/%.c,fuzz-build/%,$(FUZZ_SRC))
FUZZ_SECONDS ?= 40
# libcommon compiled once for all the fuzzers (coverage-instrumented, ASan+UBSan), each linked to it
FUZZ_CFLAGS := -std=c11 -g -O1 -fsanitize=address,undefined
FUZZ_LIB_OBJ := $(patsubst %.c,fuzz-build/obj/%.o,$(LIB_SRC))
$(FUZZ_LIB_OBJ): fuzz-build/obj/%.o: %.c $(wildcard libcommon/*/*.h)
	@mkdir -p $(@D)
	clang $(CPPFLAGS) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -c $< -o $@
$(FUZZERS): fuzz-build/%: tests/fuzz/%.c $(FUZZ_LIB_OBJ)
	clang $(CPPFLAGS) $(FUZZ_CFLAGS) -fsanitize=fuzzer $< $(FUZZ_LIB_OBJ) $(LIBS) -ljansson -lcurl -o $@

fuzz: $(FUZZERS)
	bash tests/fuzz/run.sh $(FUZZ_SECONDS) .check-counts $(FUZZERS)

# The main job: train English-German on the bundled Multi30k data, translate the test set, score it.
demo: deps
	$(MAKE) all
	$(MAKE) -C pipelines/multi30k demo

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PLUGINDIR) $(DESTDIR)$(PREFIX)/share/man/man1 \
	    $(DESTDIR)$(PREFIX)/share/man/man5 $(DESTDIR)$(PREFIX)/share/man/man7
	install -m 755 $(TOOLS) $(DESTDIR)$(PREFIX)/bin/
	$(if $(strip $(PLUGINS)),install -m 755 $(wildcard $(BIN)/nmt-backend-*.so) $(DESTDIR)$(PLUGINDIR)/)
	$(if $(strip $(COMMS)),install -m 755 $(COMMS) $(DESTDIR)$(PLUGINDIR)/)
	for p in man/*.1; do [ -e "$$p" ] && install -m 644 "$$p" $(DESTDIR)$(PREFIX)/share/man/man1/; done; true
	for p in man/*.5; do [ -e "$$p" ] && install -m 644 "$$p" $(DESTDIR)$(PREFIX)/share/man/man5/; done; true
	for p in man/*.7; do [ -e "$$p" ] && install -m 644 "$$p" $(DESTDIR)$(PREFIX)/share/man/man7/; done; true

clean:
	rm -rf bin build san fuzz-build .check-counts .check-counts.skips .check-counts.fails

-include $(shell find $(OBJ) -name '*.d' 2>/dev/null)
