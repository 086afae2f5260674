# Quick start: `make run` (set-up + the main job), `make test` (set-up + all tests).
BUILD ?= build
JOBS ?= $(shell nproc)
TFM_DATA_DIR ?= $(abspath ../shared/data)
export TFM_DATA_DIR

.PHONY: all deps build run test test-sanitize bench clean

all: build

deps:
	@bash scripts/install-deps.sh

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release

build: deps $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

run: build
	@bash scripts/run-main.sh $(BUILD)/tfm

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

test-sanitize: deps
	cmake -S . -B build-sanitize -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTFM_SANITIZE=ON -DTFM_BENCH=OFF
	cmake --build build-sanitize -j $(JOBS)
	cd build-sanitize && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j $(JOBS)

clean:
	rm -rf $(BUILD) build-sanitize
