# sdpshim: transparent sockets over RDMA.  One Makefile for the library, the
# launcher, the tests and the benchmarks.  `make help` lists the targets.

PREFIX  ?= /usr/local
DESTDIR ?=
LIBDIR  ?= $(PREFIX)/lib/sdpshim
BINDIR  ?= $(PREFIX)/bin
MANDIR  ?= $(PREFIX)/share/man
CC      ?= cc
BUILD   ?= build
SAN     ?= 0
DEBUG   ?= 0
VERSION ?= 0.1.0

WARN     := -Wall -Wextra -Werror -Wshadow -Wpointer-arith -Wstrict-prototypes \
            -Wmissing-prototypes -Wno-unused-parameter
CFLAGS   ?= -O2 -g
CPPFLAGS += -D_GNU_SOURCE -DSDPSHIM_VERSION=\"$(VERSION)\" \
            -DSDPSHIM_LIBDIR=\"$(LIBDIR)\" -I. -MMD -MP
# initial-exec TLS: the library is loaded at startup (LD_PRELOAD), never
# dlopen()ed, so a thread-local is one %fs-relative load instead of a
# __tls_get_addr call (dozens a message on the data path).
ALLCFLAGS = -std=gnu11 $(WARN) $(CFLAGS) -fPIC -fvisibility=hidden -ftls-model=initial-exec
ifeq ($(SAN),1)
BUILD    := build-san
ALLCFLAGS += -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
LDSAN    := -fsanitize=address,undefined
SANPROGS := 1
endif
# DEBUG=1: checks that only log in a release build assert (SDPSHIM_DEBUG),
# into build-dbg/.
ifeq ($(DEBUG),1)
BUILD    := build-dbg
CPPFLAGS += -DSDPSHIM_DEBUG
endif
RDMA_LIBS := -lrdmacm -libverbs
SANFLAGS  := -fsanitize=address,undefined

# The library: every .c in its four layers, from the bottom: base/ (libc
# table, guard, fd table, log, config, reasons, stats segment), core/ (the
# RDMA channel) and ipoib_fallback/ (the path choice), preload/ (the hooks).
# The launcher, `sdpshim run|stat|doctor`, is tools/ (docs/design.md).
LIB_SRCS  := $(wildcard base/*.c core/*.c ipoib_fallback/*.c preload/*.c)
CLI_SRCS  := $(wildcard tools/*.c)
# Pure modules: no interposition, no global state that needs the preload.
# Unit tests and the launcher link these.
PURE_SRCS := base/log.c base/policy.c base/stats_shm.c base/stats_read.c base/config.c base/reason.c base/fdtable.c \
             base/pin_budget.c base/self.c base/sha256.c base/hmac.c \
             core/wire.c core/switch_reader.c core/geometry.c core/timer_heap.c core/uevent.c \
             ipoib_fallback/rules.c ipoib_fallback/rules_match.c ipoib_fallback/negcache.c \
             ipoib_fallback/path.c
PURE_SRCS := $(wildcard $(PURE_SRCS))

LIB_OBJS  := $(LIB_SRCS:%.c=$(BUILD)/obj/%.o)
CLI_OBJS  := $(CLI_SRCS:%.c=$(BUILD)/obj/%.o)
PURE_OBJS := $(PURE_SRCS:%.c=$(BUILD)/pure/%.o)

UNIT_SRCS := $(wildcard tests/unit/test_*.c)
UNIT_BINS := $(UNIT_SRCS:tests/unit/%.c=$(BUILD)/tests/unit/%)
TLIB_SRCS := $(wildcard tests/lib/*.c)
TLIB_OBJS := $(TLIB_SRCS:%.c=$(BUILD)/pure/%.o)
PROG_SRCS := $(wildcard tests/progs/*.c)
# The test programs check their streams with the library's own SHA-256.
PROG_BASE_OBJS := $(BUILD)/pure/base/sha256.o
PROG_BINS := $(PROG_SRCS:tests/progs/%.c=$(BUILD)/tests/progs/%)
FUZZ_SRCS := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_BINS := $(FUZZ_SRCS:tests/fuzz/%.c=$(BUILD)/fuzz/%)

# Man pages (man/): section 1 the launcher, 5 the config file, 7 the library.
MAN1 := man/sdpshim.1
MAN5 := man/sdpshim.conf.5
MAN7 := man/libsdpshim.7

.PHONY: all install uninstall deb test unit native vm check fuzz fuzz-run clean help progs san

all: $(BUILD)/libsdpshim.so $(BUILD)/sdpshim progs

help:
	@echo "make            build $(BUILD)/libsdpshim.so, $(BUILD)/sdpshim and test programs"
	@echo "make test       unit tests + native bats suite + VM (soft-RoCE) bats suite"
	@echo "make unit|native|vm   one part of the suite"
	@echo "make SAN=1 ...  the same with ASan+UBSan into build-san/"
	@echo "make DEBUG=1 ... the same with debug assertions into build-dbg/"
	@echo "make fuzz       build libFuzzer harnesses (clang)"
	@echo "make install    PREFIX=$(PREFIX) DESTDIR=$(DESTDIR): library, sdpshim, man pages"
	@echo "make uninstall  the same PREFIX and DESTDIR: removes what install put there"
	@echo "make deb        the Debian package (debian/) into $(BUILD)/deb/"

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(ALLCFLAGS) -c $< -o $@

$(BUILD)/pure/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) -DSDPSHIM_PURE $(ALLCFLAGS) -c $< -o $@

$(BUILD)/libsdpshim.so: $(LIB_OBJS) preload/exports.map
	$(CC) -shared -o $@ $(LIB_OBJS) -Wl,--version-script=preload/exports.map \
	  -Wl,-z,defs -Wl,-z,now $(LDFLAGS) $(LDSAN) $(RDMA_LIBS) -ldl -lpthread

$(BUILD)/sdpshim: $(CLI_OBJS) $(PURE_OBJS)
	$(CC) -o $@ $^ $(LDFLAGS) $(LDSAN) -libverbs -lpthread

progs: $(PROG_BINS)

$(BUILD)/tests/progs/%: tests/progs/%.c $(TLIB_OBJS) $(PROG_BASE_OBJS)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) -Itests/lib -std=gnu11 $(WARN) $(CFLAGS) $(PROG_CFLAGS_$*) \
	  $(if $(SANPROGS),$(SANFLAGS)) -o $@ $< $(PROG_OBJS_$*) $(TLIB_OBJS) $(PROG_BASE_OBJS) \
	  $(RDMA_LIBS) -lpthread

# One program is built twice: with and without _FORTIFY_SOURCE=2 (issue 3).
PROG_CFLAGS_stream_fortify := -O2 -D_FORTIFY_SOURCE=2
# Programs that link modules of the library: the rogue peer speaks the wire
# format with core/wire.c's own encoders and decoders.  Its peer mode is a
# second source file, built as an object (the wildcard above takes every
# tests/progs/*.c for a program, so the target of that name is the object).
PROG_OBJS_rogue := $(BUILD)/pure/core/wire.o $(BUILD)/tests/progs/rogue_peer
$(BUILD)/tests/progs/rogue: $(PROG_OBJS_rogue)
$(BUILD)/tests/progs/rogue_peer: tests/progs/rogue_peer.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) -Itests/lib -std=gnu11 $(WARN) $(CFLAGS) \
	  $(if $(SANPROGS),$(SANFLAGS)) -c -o $@ $<

# Unit tests run under ASan and UBSan.  The pure modules and tests/lib are
# compiled that way once (build/asan/) and linked into every test.
UNIT_SAN  := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
UNIT_OBJS := $(PURE_SRCS:%.c=$(BUILD)/asan/%.o) $(TLIB_SRCS:%.c=$(BUILD)/asan/%.o)
.SECONDARY: $(UNIT_OBJS)
$(BUILD)/asan/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) -DSDPSHIM_PURE -Itests/lib -std=gnu11 $(WARN) $(CFLAGS) $(UNIT_SAN) -c -o $@ $<

$(BUILD)/tests/unit/%: tests/unit/%.c $(UNIT_OBJS) $(wildcard core/tcp_diag.*)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) -DSDPSHIM_PURE -Itests/lib -std=gnu11 $(WARN) $(CFLAGS) $(UNIT_SAN) \
	  -o $@ $< $(UNIT_OBJS) $(UNIT_EXTRA_$*) -lpthread

# test_sha256 and test_hmac need nothing more: base/sha256.c and base/hmac.c
# are pure modules.

# A unit test of a module that calls libc through base/real.h fills that
# table itself.
UNIT_EXTRA_test_tcp_diag := core/tcp_diag.c
# The registration cache under the pinned-memory budget, verbs stubbed in
# the test itself.
UNIT_EXTRA_test_mrcache := core/mrcache.c
$(BUILD)/tests/unit/test_mrcache: core/mrcache.c
# The Prometheus text format of `sdpshim stat --prom` (a tools/ module).
UNIT_EXTRA_test_prom := tools/prom_text.c
$(BUILD)/tests/unit/test_prom: tools/prom_text.c tools/prom_text.h
# The phase table and setter (core/phase.c) need only base/log.c.
UNIT_EXTRA_test_phase := core/phase.c
$(BUILD)/tests/unit/test_phase: core/phase.c
# The fork fence (core/verbs_fence.c) needs nothing more.
UNIT_EXTRA_test_verbs_fence := core/verbs_fence.c
$(BUILD)/tests/unit/test_verbs_fence: core/verbs_fence.c core/verbs_fence.h

# The zero-copy model (tests/model/, issue 13): the real data-path files of
# core/ with verbs, the peer, the app and time modelled, for test_zcopy,
# test_climb (the climb's messages, the test playing the link and the peer)
# and fuzz_zcopy.  The core's clock and condition waits go through the model.
ZCM_SRCS := $(wildcard tests/model/*.c)
ZCM_DEPS := $(ZCM_SRCS) $(wildcard tests/model/*.h)
ZCM_CORE := core/phase.c core/zcopy.c core/zc_window.c core/zc_read.c core/zc_write.c core/rx.c core/tx.c core/cq.c core/conn_io.c core/close.c \
            core/notify.c core/timers.c core/switch.c core/wire.c base/config.c base/log.c base/policy.c \
            base/reason.c core/climb.c core/drain.c core/tcp_ask.c base/hmac.c base/sha256.c $(wildcard core/switch_reader.c)
ZCM_WRAP := -Wl,--wrap=clock_gettime -Wl,--wrap=pthread_cond_timedwait \
            -Wl,--wrap=pthread_cond_wait -Wl,--wrap=pthread_cond_broadcast \
            -Wl,--wrap=pthread_cond_signal
ZCM_TESTS := $(BUILD)/tests/unit/test_zcopy $(BUILD)/tests/unit/test_climb
$(ZCM_TESTS): $(BUILD)/tests/unit/%: tests/unit/%.c $(ZCM_DEPS) $(ZCM_CORE) $(TLIB_SRCS)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) -Itests/lib -std=gnu11 $(WARN) $(CFLAGS) $(UNIT_SAN) \
	  -o $@ $< $(ZCM_SRCS) $(ZCM_CORE) $(TLIB_SRCS) $(ZCM_WRAP) -lpthread
$(BUILD)/fuzz/fuzz_zcopy: tests/fuzz/fuzz_zcopy.c $(ZCM_DEPS) $(ZCM_CORE)
	@mkdir -p $(dir $@)
	clang $(CPPFLAGS) -std=gnu11 -g -O1 -fsanitize=fuzzer,address,undefined \
	  -o $@ $< $(ZCM_SRCS) $(ZCM_CORE) $(ZCM_WRAP) -lpthread

unit: $(UNIT_BINS)
	@tests/run-unit.sh $(UNIT_BINS)

native: all
	@tests/run-bats.sh native

vm: all
	@tests/run-bats.sh vm

# The suites also preload the ASan+UBSan build (tests/*/..-sanitizers.bats).
san:
	@$(MAKE) --no-print-directory SAN=1 all

test: all $(UNIT_BINS) san
	@tests/run-all.sh

fuzz: $(FUZZ_BINS)
# Each harness: its kept crash inputs, then FUZZ_SECONDS (default 10) of fuzzing.
fuzz-run:
	@BUILD=$(BUILD) tests/run-fuzz.sh $(FUZZ_SECONDS)

$(BUILD)/fuzz/%: tests/fuzz/%.c $(PURE_SRCS)
	@mkdir -p $(dir $@)
	clang $(CPPFLAGS) -DSDPSHIM_PURE -std=gnu11 -g -O1 \
	  -fsanitize=fuzzer,address,undefined -o $@ $< $(PURE_SRCS) $(FUZZ_EXTRA_$*)

# A harness of a module outside PURE_SRCS (it calls libc through
# base/real.h) links that module too, and fills the table if it must.
FUZZ_EXTRA_fuzz_tcp_diag := core/tcp_diag.c
$(BUILD)/fuzz/fuzz_tcp_diag: $(FUZZ_EXTRA_fuzz_tcp_diag)

check:
	cppcheck --quiet --error-exitcode=1 --enable=warning,portability \
	  --suppress=missingIncludeSystem -D_GNU_SOURCE -I. base core ipoib_fallback preload tools

install: $(BUILD)/libsdpshim.so $(BUILD)/sdpshim
	install -d $(DESTDIR)$(LIBDIR) $(DESTDIR)$(BINDIR)
	install -m 0755 $(BUILD)/libsdpshim.so $(DESTDIR)$(LIBDIR)/libsdpshim.so
	install -m 0755 $(BUILD)/sdpshim $(DESTDIR)$(BINDIR)/sdpshim
	install -d $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man5 $(DESTDIR)$(MANDIR)/man7
	install -m 0644 $(MAN1) $(DESTDIR)$(MANDIR)/man1/
	install -m 0644 $(MAN5) $(DESTDIR)$(MANDIR)/man5/
	install -m 0644 $(MAN7) $(DESTDIR)$(MANDIR)/man7/

uninstall:
	rm -f $(DESTDIR)$(LIBDIR)/libsdpshim.so $(DESTDIR)$(BINDIR)/sdpshim
	rm -f $(addprefix $(DESTDIR)$(MANDIR)/man1/,$(notdir $(MAN1))) \
	      $(addprefix $(DESTDIR)$(MANDIR)/man5/,$(notdir $(MAN5))) \
	      $(addprefix $(DESTDIR)$(MANDIR)/man7/,$(notdir $(MAN7)))

# The Debian package (debian/, built with PREFIX=/usr into build-deb/ so a
# developer's build/ stays as it is).  dpkg-buildpackage writes its files to
# the parent directory; they are moved into $(BUILD)/deb/.
DEB_VERSION = $(shell dpkg-parsechangelog -S Version 2>/dev/null)
deb:
	env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL dpkg-buildpackage -us -uc -b
	mkdir -p $(BUILD)/deb
	mv ../sdpshim*_$(DEB_VERSION)_*.deb ../sdpshim_$(DEB_VERSION)_*.buildinfo \
	   ../sdpshim_$(DEB_VERSION)_*.changes $(BUILD)/deb/
	@ls -1 $(BUILD)/deb/

clean:
	rm -rf build build-san build-dbg build-h* build-deb

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
