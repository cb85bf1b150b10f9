# Fusee's entry points. Each target does its own set-up on a fresh
# Debian/Ubuntu machine: install the packages, configure, build.
#   make demo        the demo (see README.md)
#   make test        every default suite; ends with "tests: N passed, N failed"
#   make test-long   the longer crash, kill and simulation runs
#   make test-asan   the default suites under ASan + UBSan
#   make bench       the benchmarks, beside the disk's raw flush latency
#   make spec TLC_JAR=/path/to/tla2tools.jar
#                    model-check spec/FuseeLog.tla with TLC (docs/spec.md)
#   make install [PREFIX=/usr/local] [DESTDIR=]
#                    the command, the library, the headers, fusee.pc and
#                    the CMake package (docs/install.md)
#   make deb         fusee_<version>_<arch>.deb in the current directory

BUILD      ?= build
ASAN_BUILD ?= build-asan
CCACHE     := $(shell command -v ccache 2>/dev/null)
# clang++: GCC 12 (Debian 12) destroys a lambda written inside a co_await
# expression twice when it captures a std::string (docs/engine.md).
MESON_ENV  := CXX="$(CCACHE) clang++"
JOBS       ?= $(shell nproc)
PREFIX     ?= /usr/local
DESTDIR    ?=

.PHONY: all deps build test test-long test-asan demo bench spec install deb clean

all: build

deps:
	@scripts/install-deps

$(BUILD)/build.ninja: | deps
	@$(MESON_ENV) meson setup $(BUILD) --buildtype=debugoptimized >$(BUILD).setup.log || (cat $(BUILD).setup.log; exit 1)

build: deps $(BUILD)/build.ninja
	@ninja -C $(BUILD) -j$(JOBS)

test: build
	@scripts/run-tests $(BUILD) unit crash

# Every crash point of every enumeration (make test checks a seeded sample
# of them within a budget per case: tests/support/crash_sample.hpp).
test-long: build
	@FUSEE_CRASH_WHOLE=1 scripts/run-tests $(BUILD) unit crash slow

# -fno-sanitize=function: clang 14's check of indirect calls' function types
# cannot compile some coroutines at -O0 ("Cannot represent a difference
# across sections"); the rest of UBSan stays on.
$(ASAN_BUILD)/build.ninja: | deps
	@$(MESON_ENV) meson setup $(ASAN_BUILD) --buildtype=debug -Db_sanitize=address,undefined -Db_lundef=false \
	  -Dcpp_args=-fno-sanitize=function -Dcpp_link_args=-fno-sanitize=function >$(ASAN_BUILD).setup.log || \
	  (cat $(ASAN_BUILD).setup.log; exit 1)

test-asan: deps $(ASAN_BUILD)/build.ninja
	@ninja -C $(ASAN_BUILD) -j$(JOBS)
	@UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 scripts/run-tests $(ASAN_BUILD) unit crash

demo: deps $(BUILD)/build.ninja
	@ninja -C $(BUILD) -j$(JOBS) cli/fusee
	@$(BUILD)/cli/fusee demo --dir ./data

bench: build
	@ninja -C $(BUILD) -j$(JOBS) benchmarks
	@scripts/run-bench $(BUILD)

# Not part of `make test`: needs a Java runtime and TLC_JAR, and says so.
spec:
	@spec/run-tlc "$(TLC_JAR)"

install: build
	@meson configure $(BUILD) -Dprefix=$(PREFIX)
	@ninja -C $(BUILD) -j$(JOBS)
	@meson install -C $(BUILD) --no-rebuild $(if $(DESTDIR),--destdir "$(DESTDIR)")

deb: build
	@scripts/make-deb $(BUILD) .

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
