# The commands a newcomer needs: `make run` and `make test`. Everything is built with CMake
# and Ninja into build/<preset>/; scripts rely on build/release/pmhash. Every build first
# runs scripts/install-deps.sh (silent, a fraction of a second, when nothing is missing).
JOBS ?= $(shell nproc)
CMAKE_COMMON = -G Ninja -Wno-dev

.PHONY: all deps build asan tsan run test test-release test-asan test-tsan stress-test bench flip-fuzz clean

all: build

deps:
	@scripts/install-deps.sh

build/release/build.ninja: | deps
	@cmake -S . -B build/release $(CMAKE_COMMON) -DCMAKE_BUILD_TYPE=Release >/dev/null

build/asan/build.ninja: | deps
	@cmake -S . -B build/asan $(CMAKE_COMMON) -DCMAKE_BUILD_TYPE=Debug -DPMHASH_SANITIZE=ON >/dev/null

build/tsan/build.ninja: | deps
	@cmake -S . -B build/tsan $(CMAKE_COMMON) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPMHASH_TSAN=ON >/dev/null

build: deps build/release/build.ninja
	@cmake --build build/release -j $(JOBS)

asan: deps build/asan/build.ninja
	@cmake --build build/asan -j $(JOBS)

tsan: deps build/tsan/build.ninja
	@cmake --build build/tsan -j $(JOBS)

# The main job: a short side-by-side benchmark of every registered engine on emulated PM.
run: build
	@scripts/main-job.sh

# Every suite in a release build, then the unit and conformance tests again under
# ASan + UBSan, and under ThreadSanitizer.
test: test-release test-asan test-tsan

test-release: build
	@cd build/release && ctest --output-on-failure -j $(JOBS)

test-asan: asan
	@cd build/asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --output-on-failure -j $(JOBS) -L 'unit|conformance'

test-tsan: tsan
	@cd build/tsan && TSAN_OPTIONS=halt_on_error=1 ctest --output-on-failure -j $(JOBS) \
	  -L 'unit|conformance'

# Not part of `make test`: the suites repeated under a CPU hog and on one core, to find
# flaky tests (docs/testing.md). REPEAT runs each (default 10); SEED repeats a hunt.
REPEAT ?= 10
SEED ?=
stress-test: build asan tsan
	@scripts/install-deps.sh stress-ng
	@scripts/stress-test.sh $(REPEAT) $(SEED)

bench: build
	@scripts/bench-scenarios.sh

# The flip-fuzz test of damaged pools at length (make test runs it short): FLIPS damaged
# bytes per region per pool, for every engine, clean and crashed; prints the by-region
# figures recorded in docs/reliability.md.
FLIPS ?= 200
flip-fuzz: build
	@cd build/release && PMHASH_FLIP_FUZZ=$(FLIPS) PMHASH_TOOL=$$PWD/pmhash \
	  ./crash_tests --gtest_filter='Engines/FlipFuzz.*'

clean:
	rm -rf build
