# sluice — GNU Make, no configure step.
#
#   make                 build/libsluice.a, build/libsluice.so, build/sluice
#   make install         PREFIX=/usr/local, DESTDIR= (GNU conventions)
#   make check           every test (installs missing Debian packages first)
#   make run             the main job: sluice serve on the embedded config
#   make demo            a replay demo of the boundary burst
#   make docs            docs/algorithms.md and its plots, from sim and accuracy
#   make bench           the engine benchmarks, with their anchors, one run
#   make bench-server    the daemon beside redis-server and nginx, one run
#   make bench-fleet     fleet mode (state in Redis) beside its anchors
#   make fuzz            the libFuzzer harnesses, FUZZ_SECONDS each (clang)
#   make layers          every #include points down the layers
#   make sizes           no file over 1,000 lines, no function over 150
#   make SANITIZE=address,undefined check    (or SANITIZE=thread)
#
# Instrumented builds live in their own directory, so they never mix objects
# with the plain build.

CC      ?= cc
SANITIZE ?=
comma   := ,

ifeq ($(SANITIZE),)
BUILD   ?= build
OPT     ?= -O2
else
BUILD   ?= build/san-$(subst $(comma),-,$(SANITIZE))
OPT     ?= -O1
SANFLAGS = -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=all
# libh2o's own pools live until exit (see tests/lsan.supp).
export LSAN_OPTIONS = suppressions=$(CURDIR)/tests/lsan.supp:print_suppressions=0
endif

WARN     = -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes
CPPFLAGS = -Iinclude -D_GNU_SOURCE
CFLAGS  ?= $(OPT) -g
ALL_CFLAGS = -std=c17 $(WARN) $(CFLAGS) $(SANFLAGS) -fPIC -pthread -MMD -MP
LIBS     = -lsodium -lpthread
LDFLAGS += $(SANFLAGS) -pthread

# The sources, layer by layer (docs/architecture.md; `make layers` checks
# that includes point only down). The library is the leaf helpers, the
# algorithms, the store, the limiters and the policy syntax: it needs only
# libsodium. The daemon's layers (rules, engine, fleet, server) need
# libyaml, hiredis and (the server) h2o, jansson; the simulator (sim) needs
# only the library; the CLI is the binary.
BASE_SRC   = $(wildcard src/base/*.c)
LIB_SRC    = $(BASE_SRC) $(wildcard src/*.c src/algo/*.c src/store/*.c)
RULES_SRC  = $(wildcard src/rules/*.c)
ENGINE_SRC = $(wildcard src/engine/*.c)
FLEET_SRC  = $(wildcard src/fleet/*.c)
SIM_SRC    = $(wildcard src/sim/*.c)
SERVER_SRC = $(wildcard src/server/*.c)
CLI_SRC    = $(wildcard src/cli/*.c)
MODULE_SRC = $(wildcard src/module/*.c)
SRV_SRC  = $(RULES_SRC) $(ENGINE_SRC) $(FLEET_SRC) $(SIM_SRC) $(SERVER_SRC)
SRV_OBJ  = $(SRV_SRC:%.c=$(BUILD)/obj/%.o)
SRV_LIBS = -lh2o-evloop -lyaml -ljansson -lhiredis -lssl -lcrypto
# The daemon's layers that need no h2o (rules, engine, fleet: its clients
# reach the event loop through an adapter; the simulator's engine; the RESP
# parser): an archive the unit tests and test tools link.
CORE_SRV_OBJ = $(RULES_SRC:%.c=$(BUILD)/obj/%.o) \
  $(ENGINE_SRC:%.c=$(BUILD)/obj/%.o) $(FLEET_SRC:%.c=$(BUILD)/obj/%.o) \
  $(SIM_SRC:%.c=$(BUILD)/obj/%.o) $(BUILD)/obj/src/server/resp_parse.o \
  $(BUILD)/obj/src/server/resp_txn.o
CORE_SRV_LIBS = -lyaml -lhiredis -lcrypto
LIB_OBJ  = $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
# The library's objects with their internals linkable: what the daemon, the
# unit tests and the test tools link (see "The library exports only sl_").
LIB_INTERNAL = $(BUILD)/libsluice-internal.a
CLI_OBJ  = $(CLI_SRC:%.c=$(BUILD)/obj/%.o)
MODULE_OBJ = $(MODULE_SRC:%.c=$(BUILD)/obj/%.o)
TEST_SRC = $(wildcard tests/unit/test_*.c)
TEST_BIN = $(TEST_SRC:tests/unit/%.c=$(BUILD)/tests/%)
# Programs the integration scripts drive (e.g. the Redis parity checker).
TOOL_SRC = $(wildcard tests/tools/*.c)
TOOL_BIN = $(TOOL_SRC:tests/tools/%.c=$(BUILD)/tests/tools/%)
# check_lib.sh and serve_lib.sh are sourced by the scripts, not run.
INTEG    = $(filter-out %_lib.sh,$(wildcard tests/integration/*.sh))


.PHONY: all check unit integration examples layers sizes run demo docs screenshots bench fuzz deps deps-bench deps-fuzz clean
all: $(BUILD)/libsluice.a $(BUILD)/libsluice.so $(BUILD)/sluice $(MODULE_ALL)

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(ALL_CFLAGS) -c $< -o $@

# ---- The library exports only sl_ ----
#
# Only the API of include/sluice.h, marked SL_API there, leaves the library:
# its objects are compiled with -fvisibility=hidden, so every other symbol
# (store_lock, algo_gcra, limiter_force_to, the base/ helpers) is hidden,
# and one added tomorrow is hidden without anyone remembering to. Hidden
# rather than static or renamed sl__: these internals are shared between the
# library's files and called by the daemon (the engine's limiter_force_to,
# the server's log_msg and strbuf_*), so renaming them would touch every
# layer for no change in behaviour, and a prefix is a rule that only review
# enforces, where visibility is enforced by the compiler.
#   libsluice.so  hidden symbols never reach the dynamic symbol table (so
#                 no version script is needed: tests/integration/install.sh
#                 checks what nm shows, plain and sanitized builds alike).
#   libsluice.a   an archive of the separate objects would still export
#                 their hidden symbols to a static link (hidden only takes
#                 effect in a linked output), so the objects are prelinked
#                 into one (ld -r) whose hidden symbols are then made local
#                 (objcopy --localize-hidden): an application's own
#                 store_lock cannot clash with the library's.
#   $(LIB_INTERNAL)  the same objects as a plain archive, for the daemon,
#                 the unit tests and the test tools, which call internals
#                 (limiter.h, algo/algo.h, store/mem.h, base/); never
#                 installed. The fuzz harnesses compile the sources
#                 themselves.
# The shared library's file carries the version of include/sluice.h
# (libsluice.so.0.1.0); its soname, the major version (libsluice.so.0), and
# libsluice.so, what -lsluice finds, are links to it, in build/ as installed.
OBJCOPY ?= objcopy
SL_VERSION := $(shell awk '/^.define SL_VERSION_(MAJOR|MINOR|PATCH) / \
  { v = v (v == "" ? "" : ".") $$3 } END { print v }' include/sluice.h)
SO_NAME = libsluice.so.$(firstword $(subst ., ,$(SL_VERSION)))
SO_FILE = libsluice.so.$(SL_VERSION)

# The Makefile is a prerequisite so that a tree built before the flag (or
# before a change to it) recompiles the library instead of exporting again.
$(LIB_OBJ): ALL_CFLAGS += -fvisibility=hidden
$(LIB_OBJ): Makefile

$(BUILD)/libsluice.a: $(LIB_OBJ)
	@rm -f $@ $(BUILD)/obj/libsluice.o
	$(LD) -r -o $(BUILD)/obj/libsluice.o $^
	$(OBJCOPY) --localize-hidden $(BUILD)/obj/libsluice.o
	$(AR) rcs $@ $(BUILD)/obj/libsluice.o

$(LIB_INTERNAL): $(LIB_OBJ)
	@rm -f $@
	$(AR) rcs $@ $^

$(BUILD)/$(SO_FILE): $(LIB_OBJ)
	$(CC) -shared $(LDFLAGS) -Wl,-soname,$(SO_NAME) -o $@ $(LIB_OBJ) $(LIBS)

$(BUILD)/libsluice.so: $(BUILD)/$(SO_FILE)
	ln -sf $(SO_FILE) $(BUILD)/$(SO_NAME)
	ln -sf $(SO_NAME) $@

# ---- The Redis module (docs/fleet.md, "The Redis module") ----
#
# build/sluice-redis.so: src/module/ linked with the library's own objects
# (the algorithms, the policy syntax), so the module and the library decide
# with the same code. Nothing else is linked in: every Redis function comes
# through RedisModule_GetApi at load, and -z defs proves no symbol is left
# for the loader. A sanitized module cannot load into a plain redis-server
# (the sanitizer runtime must come first), so sanitized builds test the
# module through tests/unit/test_module.c instead.
ifeq ($(SANITIZE),)
MODULE_ALL = $(BUILD)/sluice-redis.so
endif
# Only RedisModule_OnLoad is exported (the library's sl_ API stays inside).
$(MODULE_OBJ): ALL_CFLAGS += -fvisibility=hidden
$(MODULE_OBJ): Makefile
$(BUILD)/sluice-redis.so: $(MODULE_OBJ) $(LIB_INTERNAL)
	$(CC) -shared $(LDFLAGS) -Wl,-z,defs -Wl,--exclude-libs,ALL -o $@ \
	  $(MODULE_OBJ) $(LIB_INTERNAL)

# ---- make install ----
#
# GNU conventions: PREFIX (default /usr/local) and the directories under it
# may be set on the command line, DESTDIR stages the whole tree somewhere
# else (a package build), INSTALL names the install(1) to use. The shared
# library goes in with its soname links, mode 644 like every library on
# Debian; sluice.pc is written from src/sluice.pc.in with the directories
# and the version. Nothing runs ldconfig: after installing into a system
# directory, run it so that the loader finds libsluice.so.0.
PREFIX  ?= /usr/local
bindir       = $(PREFIX)/bin
libdir       = $(PREFIX)/lib
includedir   = $(PREFIX)/include
mandir       = $(PREFIX)/share/man
man1dir      = $(mandir)/man1
pkgconfigdir = $(libdir)/pkgconfig
INSTALL ?= install
INSTALL_PROGRAM = $(INSTALL) -m 755
INSTALL_DATA    = $(INSTALL) -m 644

.PHONY: install uninstall
install: all
	$(INSTALL) -d $(DESTDIR)$(bindir) $(DESTDIR)$(includedir) \
	  $(DESTDIR)$(libdir) $(DESTDIR)$(pkgconfigdir) $(DESTDIR)$(man1dir)
	$(INSTALL_PROGRAM) $(BUILD)/sluice $(DESTDIR)$(bindir)/sluice
	$(INSTALL_DATA) include/sluice.h $(DESTDIR)$(includedir)/sluice.h
	$(INSTALL_DATA) $(BUILD)/libsluice.a $(DESTDIR)$(libdir)/libsluice.a
	$(INSTALL_DATA) $(BUILD)/$(SO_FILE) $(DESTDIR)$(libdir)/$(SO_FILE)
	ln -sf $(SO_FILE) $(DESTDIR)$(libdir)/$(SO_NAME)
	ln -sf $(SO_NAME) $(DESTDIR)$(libdir)/libsluice.so
	sed -e '/^#/d' -e 's|@PREFIX@|$(PREFIX)|' \
	  -e 's|@LIBDIR@|$(patsubst $(PREFIX)/%,$${prefix}/%,$(libdir))|' \
	  -e 's|@INCLUDEDIR@|$(patsubst $(PREFIX)/%,$${prefix}/%,$(includedir))|' \
	  -e 's|@VERSION@|$(SL_VERSION)|' src/sluice.pc.in >$(BUILD)/sluice.pc
	$(INSTALL_DATA) $(BUILD)/sluice.pc $(DESTDIR)$(pkgconfigdir)/sluice.pc
	$(INSTALL_DATA) man/sluice.1 $(DESTDIR)$(man1dir)/sluice.1

uninstall:
	rm -f $(DESTDIR)$(bindir)/sluice $(DESTDIR)$(includedir)/sluice.h \
	  $(DESTDIR)$(libdir)/libsluice.a $(DESTDIR)$(libdir)/$(SO_FILE) \
	  $(DESTDIR)$(libdir)/$(SO_NAME) $(DESTDIR)$(libdir)/libsluice.so \
	  $(DESTDIR)$(pkgconfigdir)/sluice.pc $(DESTDIR)$(man1dir)/sluice.1

$(BUILD)/sluice: $(CLI_OBJ) $(SRV_OBJ) $(LIB_INTERNAL)
	$(CC) $(LDFLAGS) -o $@ $(CLI_OBJ) $(SRV_OBJ) $(LIB_INTERNAL) \
	  $(SRV_LIBS) $(LIBS)

$(BUILD)/libsluice-server.a: $(CORE_SRV_OBJ)
	@rm -f $@
	$(AR) rcs $@ $^

$(BUILD)/tests/%: tests/unit/%.c tests/unit/helpers.h $(LIB_INTERNAL) \
    $(BUILD)/libsluice-server.a
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) -Isrc $(ALL_CFLAGS) $(LDFLAGS) -o $@ $< \
	  $(filter %.o,$^) $(BUILD)/libsluice-server.a $(LIB_INTERNAL) \
	  -lcmocka $(CORE_SRV_LIBS) $(LIBS) -lm

$(BUILD)/tests/tools/%: tests/tools/%.c $(LIB_INTERNAL) \
    $(BUILD)/libsluice-server.a
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) -Isrc $(ALL_CFLAGS) $(LDFLAGS) -o $@ $< \
	  $(BUILD)/libsluice-server.a $(LIB_INTERNAL) $(CORE_SRV_LIBS) \
	  $(LIBS) -lm

# The script is embedded in script.o (.incbin).
$(BUILD)/obj/src/fleet/script.o: src/fleet/decide.lua
# The page at /ui/ is embedded in http_ui.o (.incbin).
$(BUILD)/obj/src/server/http_ui.o: ui/index.html ui/ui.js ui/ui.css

deps:
	@scripts/deps.sh build test

deps-bench:
	@scripts/deps.sh build bench

# Every test: unit tests (cmocka), the integration scripts (the CLI's, and
# the daemon's against real peers: curl, redis-cli, nginx, wrk), and the
# README's C example (built against the static library and run).
check: deps
	@$(MAKE) --no-print-directory layers sizes
	@$(MAKE) --no-print-directory all $(TEST_BIN) $(TOOL_BIN) \
	  $(BUILD)/examples/quickstart
	@$(MAKE) --no-print-directory unit integration examples

# Includes point only down the layers (scripts/layers.py says which), and
# no file or function is too long to read (scripts/sizes.py).
layers:
	@python3 scripts/layers.py

sizes:
	@python3 scripts/sizes.py

$(BUILD)/examples/%: examples/%.c $(BUILD)/libsluice.a
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $< $(BUILD)/libsluice.a $(LIBS)

examples: $(BUILD)/examples/quickstart
	@echo "== $(BUILD)/examples/quickstart"; $(BUILD)/examples/quickstart >/dev/null

unit: $(TEST_BIN)
	@set -e; for t in $(TEST_BIN); do echo "== $$t"; $$t; done

integration: $(BUILD)/sluice $(TOOL_BIN) $(MODULE_ALL)
	@set -e; for t in $(INTEG); do echo "== $$t"; \
	  SLUICE=$(BUILD)/sluice TOOLS=$(BUILD)/tests/tools sh $$t; done

# The main job: the daemon on the embedded default config.
run: deps
	@$(MAKE) --no-print-directory all
	@SLUICE=$(BUILD)/sluice scripts/run.sh

# The replay demo of the boundary burst (make run's job before the daemon).
demo: deps
	@$(MAKE) --no-print-directory all
	@SLUICE=$(BUILD)/sluice scripts/demo.sh

# docs/img/ui-*.png: the page at /ui/ in headless Chromium (tests/integration/
# ui.sh with SHOTS), for the README and docs/ui.md.
screenshots: deps
	@$(MAKE) --no-print-directory all
	@SHOTS=$(CURDIR)/docs/img SLUICE=$(BUILD)/sluice sh tests/integration/ui.sh

# docs/algorithms.md and docs/img/, written from the program's own output
# (sluice sim and sluice accuracy), so the figures are always its own.
docs: deps
	@$(MAKE) --no-print-directory all
	@SLUICE=$(BUILD)/sluice scripts/gen-docs.sh

bench: deps-bench
	@$(MAKE) --no-print-directory all $(BUILD)/tests/tools/state_bench
	@SLUICE=$(BUILD)/sluice BUILD=$(BUILD) bench/run.sh

# The daemon (HTTP and RESP) beside redis-server and nginx, as ratios.
.PHONY: bench-server deps-bench-server
bench-server: deps-bench-server
	@$(MAKE) --no-print-directory all
	@SLUICE=$(BUILD)/sluice bench/server/run.sh

deps-bench-server:
	@scripts/deps.sh build bench-server

# Fleet mode beside its anchors: exact mode against redis-benchmark's
# EVALSHA token bucket on the same Redis, approximate mode against memory
# mode (with its measured overshoot), one run.
.PHONY: bench-fleet
bench-fleet: deps-bench-server
	@$(MAKE) --no-print-directory all
	@SLUICE=$(BUILD)/sluice bench/fleet/run.sh
	@SLUICE=$(BUILD)/sluice MODULE=$(BUILD)/sluice-redis.so sh bench/fleet/module.sh

# Every attack of docs/hardening.md at once against one daemon on
# loopback, bounded (SOAK_SECONDS, default 60; under five minutes in all):
# prints RSS, the store against its cap, a probe's p99, the hot keys' extra
# admissions and what was refused, and fails when a promise is broken.
.PHONY: soak
SOAK_SECONDS ?= 60
soak: deps
	@$(MAKE) --no-print-directory all
	@python3 scripts/soak.py --sluice $(BUILD)/sluice --seconds $(SOAK_SECONDS)

# libFuzzer harnesses (clang), each run for FUZZ_SECONDS from the committed
# seeds in fuzz/corpus/NAME; new inputs go to build/fuzz/corpus-NAME, a failing
# input to build/fuzz/NAME-crash-* (and make fails).
FUZZ_SECONDS ?= 30
FUZZ_CC ?= clang
FUZZ_BIN = $(patsubst fuzz/%.c,build/fuzz/%,$(wildcard fuzz/*_fuzz.c))
FUZZ_CFLAGS = -std=c17 -g -O1 -fsanitize=fuzzer,address,undefined \
  -fno-sanitize-recover=all $(CPPFLAGS) -pthread

FUZZ_CLI = src/cli/replay.c src/cli/sim.c $(SIM_SRC)
# The daemon's parts that need no h2o: YAML rules, engine, RESP parser.
FUZZ_SRV = $(RULES_SRC) $(ENGINE_SRC) $(FLEET_SRC) src/server/resp_parse.c \
  src/server/resp_txn.c
build/fuzz/%_fuzz: fuzz/%_fuzz.c $(LIB_SRC) $(FUZZ_CLI) $(FUZZ_SRV)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -Isrc -o $@ $< $(LIB_SRC) $(FUZZ_CLI) \
	  $(FUZZ_SRV) -lyaml -lhiredis -lcrypto $(LIBS)

fuzz: deps-fuzz $(FUZZ_BIN)
	@set -e; for f in $(FUZZ_BIN); do n=$$(basename $$f _fuzz); \
	  mkdir -p build/fuzz/corpus-$$n; echo "== $$f ($(FUZZ_SECONDS)s)"; \
	  if ! $$f -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 \
	      -artifact_prefix=build/fuzz/$$n- \
	      build/fuzz/corpus-$$n fuzz/corpus/$$n >build/fuzz/$$n.log 2>&1; then \
	    tail -n 40 build/fuzz/$$n.log; \
	    echo "make fuzz: $$n failed; the input is build/fuzz/$$n-*" >&2; exit 1; \
	  fi; tail -n 4 build/fuzz/$$n.log; done

deps-fuzz:
	@scripts/deps.sh build fuzz

clean:
	rm -rf build

-include $(LIB_OBJ:.o=.d) $(CLI_OBJ:.o=.d) $(MODULE_OBJ:.o=.d) $(SRV_OBJ:.o=.d) $(TEST_BIN:=.d) \
  $(TOOL_BIN:=.d)
