# Quick start: `make run` (set-up + the main job), `make test` (set-up + all tests).
BUILD ?= build
JOBS ?= $(shell nproc)
TFM_DATA_DIR ?= $(abspath ../shared/data)
export TFM_DATA_DIR

.PHONY: all deps build run test test-sanitize bench clean python install

all: build

deps:
	@bash scripts/install-deps.sh

# ccache (installed by deps) keeps compiled objects between checkouts and clones: paths are taken relative to the
# checkout (CCACHE_BASEDIR), so a fresh clone anywhere reuses what another built with the same flags. Precompiled
# headers are off under ccache (its hits replace them).
CCACHE := $(shell command -v ccache 2>/dev/null)
CACHE_FLAGS := $(if $(CCACHE),-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DTFM_PCH=OFF)
export CCACHE_BASEDIR := $(CURDIR)
export CCACHE_NOHASHDIR := 1

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CACHE_FLAGS)

build: deps $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

run: build
	@bash scripts/run-main.sh $(BUILD)/tfm

# Tests run two at a time, each with 2 OpenMP threads: on 2 cores libgomp's spinning at barriers made a test that
# takes 0.02 s alone take 34 s beside another (its peer's time slices spent spinning). Passive waiting is the
# same computation with threads that sleep at once (tfm honours a set OMP_WAIT_POLICY and does not re-execute).
TEST_ENV = OMP_WAIT_POLICY=passive

test: build
	cd $(BUILD) && $(TEST_ENV) ctest --output-on-failure -j $(JOBS)

# The Python module tfm for /usr/bin/python3 (staged in $(BUILD)/python: PYTHONPATH=$(BUILD)/python to use it).
python: deps $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS) --target tfm_python

# Headers, libtfm.so/.a, find_package(tfm), tfm.pc, the tfm tool and the Python module under PREFIX.
PREFIX ?= /usr/local
install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

# -O1 -g1 (line tables: symbolised reports): recipe.cpp builds in 36 s of CPU against 78 s at -O2 -g.
test-sanitize: deps
	cmake -S . -B build-sanitize -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" \
	  -DTFM_SANITIZE=ON -DTFM_BENCH=OFF $(CACHE_FLAGS)
	cmake --build build-sanitize -j $(JOBS)
	cd build-sanitize && $(TEST_ENV) ASAN_OPTIONS=detect_leaks=1 LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp:print_suppressions=0 ctest --output-on-failure -j $(JOBS)

clean:
	rm -rf $(BUILD) build-sanitize
