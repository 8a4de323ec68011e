# sluice — GNU Make, no configure step.
#
#   make                 build/libsluice.a, build/libsluice.so, build/sluice
#   make check           every test (installs missing Debian packages first)
#   make run             the main job: a replay demo of a boundary burst
#   make bench           the engine benchmarks, with their anchors, one run
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
endif

WARN     = -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes
CPPFLAGS = -Iinclude -D_GNU_SOURCE
CFLAGS  ?= $(OPT) -g
ALL_CFLAGS = -std=c17 $(WARN) $(CFLAGS) $(SANFLAGS) -fPIC -pthread -MMD -MP
LIBS     = -lsodium -lpthread
LDFLAGS += $(SANFLAGS) -pthread

LIB_SRC  = $(wildcard src/*.c src/algo/*.c src/store/*.c src/config/*.c)
CLI_SRC  = $(wildcard src/cli/*.c)
LIB_OBJ  = $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
CLI_OBJ  = $(CLI_SRC:%.c=$(BUILD)/obj/%.o)
TEST_SRC = $(wildcard tests/unit/test_*.c)
TEST_BIN = $(TEST_SRC:tests/unit/%.c=$(BUILD)/tests/%)
INTEG    = $(wildcard tests/integration/*.sh)

.PHONY: all check unit integration run bench deps deps-bench clean
all: $(BUILD)/libsluice.a $(BUILD)/libsluice.so $(BUILD)/sluice

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(ALL_CFLAGS) -c $< -o $@

$(BUILD)/libsluice.a: $(LIB_OBJ)
	@rm -f $@
	$(AR) rcs $@ $^

# Only the sl_ API is exported from the shared library.
$(BUILD)/libsluice.so: $(LIB_OBJ) src/libsluice.map
	$(CC) -shared $(LDFLAGS) -Wl,--version-script=src/libsluice.map \
	  -Wl,-soname,libsluice.so.0 -o $@ $(LIB_OBJ) $(LIBS)

$(BUILD)/sluice: $(CLI_OBJ) $(BUILD)/libsluice.a
	$(CC) $(LDFLAGS) -o $@ $(CLI_OBJ) $(BUILD)/libsluice.a $(LIBS)

$(BUILD)/tests/%: tests/unit/%.c tests/unit/helpers.h $(BUILD)/libsluice.a
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) -Isrc $(ALL_CFLAGS) $(LDFLAGS) -o $@ $< \
	  $(BUILD)/libsluice.a -lcmocka $(LIBS) -lm

deps:
	@scripts/deps.sh build

deps-bench:
	@scripts/deps.sh build bench

# Every test: unit tests (cmocka), then the CLI's integration scripts.
check: deps
	@$(MAKE) --no-print-directory all $(TEST_BIN)
	@$(MAKE) --no-print-directory unit integration

unit: $(TEST_BIN)
	@set -e; for t in $(TEST_BIN); do echo "== $$t"; $$t; done

integration: $(BUILD)/sluice
	@set -e; for t in $(INTEG); do echo "== $$t"; SLUICE=$(BUILD)/sluice sh $$t; done

run: deps
	@$(MAKE) --no-print-directory all
	@SLUICE=$(BUILD)/sluice scripts/demo.sh

bench: deps-bench
	@$(MAKE) --no-print-directory all
	@SLUICE=$(BUILD)/sluice BUILD=$(BUILD) bench/run.sh

clean:
	rm -rf build

-include $(LIB_OBJ:.o=.d) $(CLI_OBJ:.o=.d)
