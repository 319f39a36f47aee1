# The commands a newcomer needs: `make run` and `make test`. Everything is built with CMake
# and Ninja into build/<preset>/; scripts rely on build/release/pmhash. Every build first
# runs scripts/install-deps.sh (silent, a fraction of a second, when nothing is missing).
JOBS ?= $(shell nproc)
CMAKE_COMMON = -G Ninja -Wno-dev

.PHONY: all deps build asan tsan run test test-release test-asan test-tsan check-release \
        check-asan check-tsan stress-test bench paper-figures flip-fuzz clean \
        venv python test-python ycsb serve-bench

all: build

deps:
	@scripts/install-deps.sh

build/release/build.ninja: | deps
	@cmake -S . -B build/release $(CMAKE_COMMON) -DCMAKE_BUILD_TYPE=Release >/dev/null

# The sanitizer trees carry line tables only (-g1): enough for the file:line of every
# report, a quarter less to compile than full debug information (docs/testing.md, "Time
# budget"). Reconfigure with -DCMAKE_CXX_FLAGS_DEBUG=-g to inspect variables in gdb.
build/asan/build.ninja: | deps
	@cmake -S . -B build/asan $(CMAKE_COMMON) -DCMAKE_BUILD_TYPE=Debug -DPMHASH_SANITIZE=ON \
	  -DCMAKE_CXX_FLAGS_DEBUG=-g1 -DPMHASH_UNITY=ON >/dev/null

build/tsan/build.ninja: | deps
	@cmake -S . -B build/tsan $(CMAKE_COMMON) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPMHASH_TSAN=ON \
	  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" -DPMHASH_UNITY=ON >/dev/null

build: deps build/release/build.ninja
	@cmake --build build/release -j $(JOBS)

# The sanitizer trees build what make test runs there: the library's and the server's
# unit tests and the conformance suite; not the crash suite, and not the bench and the
# tool (tool_tests: drivers of the library, whose tests run in the release tree; building
# them was 170 of the ASan tree's 468 CPU s). `make stress-test` builds and runs
# tool_tests under ASan too; `cmake --build build/<tree>` builds everything.
SANITIZER_TARGETS = --target unit_tests serve_tests conformance_tests

asan: deps build/asan/build.ninja
	@cmake --build build/asan -j $(JOBS) $(SANITIZER_TARGETS)

tsan: deps build/tsan/build.ninja
	@cmake --build build/tsan -j $(JOBS) $(SANITIZER_TARGETS)

# The Python package (python/, docs/python.md): a virtual environment with its build and
# test requirements (.venv), the module built in the release tree (PMHASH_PYTHON turned on
# there: it links the library already built), and its tests with pytest (they also drive
# `pmhash serve` with redis-py, so the release tool is built first).
VENV = .venv
$(VENV)/.ready: python/requirements-dev.txt | deps
	@/usr/bin/python3 -m venv $(VENV)
	@$(VENV)/bin/pip install -q --disable-pip-version-check -r python/requirements-dev.txt
	@touch $@
venv: $(VENV)/.ready

python: venv build
	@cmake -S . -B build/release -DPMHASH_PYTHON=ON \
	  -DPython_EXECUTABLE=$(CURDIR)/$(VENV)/bin/python >/dev/null
	@cmake --build build/release -j $(JOBS) --target _pmhash

test-python: python
	@PYTHONPATH=$(CURDIR)/build/release/python PMHASH_TOOL=$(CURDIR)/build/release/pmhash \
	  $(VENV)/bin/python -m pytest -q python/tests

# YCSB's core workloads against pmhash serve (scripts/ycsb.sh; ENGINES, RECORDS, OPS,
# THREADS as it says), and redis-benchmark against redis-server (scripts/serve-bench.sh).
ycsb: build
	@scripts/ycsb.sh
serve-bench: build
	@scripts/serve-bench.sh

# The main job: a short side-by-side benchmark of every registered engine on emulated PM.
run: build
	@scripts/main-job.sh

# Every suite in a release build, then the unit and conformance tests again under
# ASan + UBSan, and under ThreadSanitizer; at the end, the wall time of each tree's build
# and tests (scripts/test.sh). test-<tree> builds and runs one tree; check-<tree> runs the
# tests of a tree already built.
test:
	@scripts/test.sh

test-release: build
	@$(MAKE) --no-print-directory check-release
test-asan: asan
	@$(MAKE) --no-print-directory check-asan
test-tsan: tsan
	@$(MAKE) --no-print-directory check-tsan

check-release:
	@cd build/release && ctest --output-on-failure -j $(JOBS)

# Under ASan, the crash-simulator tests of dash, level (and its crashed-recovery replay,
# 31 s under ASan, 83 under TSan) and pfht (single-threaded, thousands of crash images:
# release runs them) and linear-log's delete that doubles the table twice
# under a crash at every fence (62 of the ASan unit tests' 211 CPU s; release runs it) are
# skipped, to keep make test within its budget (docs/testing.md, "Time budget").
ASAN_GTEST_FILTER := -*DashCrashTest.*:*LevelCrashTest.*:*LevelCrashReplay.*:*PfhtCrashTest.*:*LinearCrashTest.LoggedDeleteThatDoublesTheTableFirst*:*BhtCrashTest.WriteThroughAFlipIsAllOrNothing/eadr
export ASAN_GTEST_FILTER

check-asan:
	@cd build/asan && GTEST_FILTER='$(ASAN_GTEST_FILTER)' ASAN_OPTIONS=detect_leaks=1 \
	  UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j $(JOBS) -L 'unit|conformance'

# Under ThreadSanitizer, the exhaustive single-threaded tests that the release and ASan runs
# already cover are skipped (TSan finds races; these start no thread): the allocation-
# failure sweep of the engines without a background thread, every damaged header byte,
# and the crash-simulator tests of those engines (LinearCrashTest covers linear-log too;
# dash, level, path and pfht, which start no thread either, are skipped alike).
# The first two were 90 s of the TSan run's 315 s of CPU; the crash tests 27.5 s of one
# shard's 81 s (docs/testing.md, "Time budget"). So are all the other single-threaded
# engine-parameterised tests of the engines without a background thread (both hash
# variants): at 7a042eb with 14 engines the TSan run took 208 s, and these were most of
# its conformance half. Those engines keep the three conformance tests that start
# threads (ThreadsAgainstAModel, SearchesDuringWrites..., ScanKeepsItsGuarantee-
# BesideConcurrentWriters). Engines with a background thread (wophi, smartht, spash)
# keep all of theirs here. A new engine without one adds its name to the first list.
# The library's single-threaded exhaustive tests go too: the allocator's crash test and
# damaged chunk-table sweep, the undo log's damaged-log sweep, and bht's media figure
# (200,000 inserts into bht and cceh): 20 of TSan's 165 unit-test CPU s.
TSAN_NO_THREAD_ENGINES := group linear cceh bht dash level path pfht test_tiny
TSAN_SINGLE_THREADED := AllocationFailure.EveryAllocationPointOfTheScriptsFailsCleanly \
  Creation.IsExplicitAndOpeningNeverFormats \
  Creation.AHalfCreatedPoolIsCreatedOnOpen \
  Figures.EveryOperationReportsItsReadsAndWrites \
  Figures.GrowthCountsAgainstTheOperationThatTriggeredIt \
  Conformance.StatusesOfEveryCall \
  Conformance.GetsOfInlineKeysAllocateNothing \
  Conformance.MultiGetMatchesGet \
  Conformance.MultiGetAgreesWithGetAtEveryDepth \
  Conformance.WriteBatchesActAsTheirSingleCallsInOrder \
  Conformance.DeclaredOptionsAcceptTheirDefaultsAndRefuseGarbage \
  Conformance.OpenRefusesAPersistModeTheEngineDoesNotSupport \
  Conformance.MultiGetDepthOutOfRangeIsInvalidArgument \
  Conformance.KeysAndValuesAtTheirLimits \
  Conformance.EmptyAndBinaryKeys \
  Conformance.RandomOperationsAgreeWithAModel \
  Conformance.ResizeUnderLoad \
  Conformance.ReopenAfterCleanClose \
  Conformance.OverlongKeyIsInvalidArgumentForEveryCall \
  Conformance.ScanPassesEveryKeyWhenNothingChanges \
  Conformance.ScanKeepsItsGuaranteeWithWritersAndResizesBetweenPages \
  Conformance.ScanRefusesCursorsItNeverHandedOut \
  Conformance.ScanResumesAfterReopen \
  Conformance.ScanResumesWhereTheVisitorStopped \
  Conformance.KeysOfOneHashAreStoredOrRefusedCleanly
TSAN_GTEST_FILTER := -$(subst $(eval) ,:,$(strip $(foreach t,$(TSAN_SINGLE_THREADED),$(foreach e,$(TSAN_NO_THREAD_ENGINES),*$(t)/$(e)*)))):PoolState.EveryDamagedHeaderByteIsCorruption:AllocatorCrashTest.*:AllocatorTest.EveryDamagedChunkTableByteIsCorruption:UndoLogTest.DamagedLogIsCorruptionAndTouchesNothing:BhtTest.FullBuffersWriteAtMostHalfTheMediaBytesOfCcehPerInsert:*LinearCrashTest.*:*GroupCrashTest.*:*CcehCrashTest.*:*BhtCrashTest.*:*DashCrashTest.*:*LevelCrashTest.*:*LevelCrashReplay.*:*PathCrashTest.*:*PfhtCrashTest.*
export TSAN_GTEST_FILTER

check-tsan:
	@cd build/tsan && GTEST_FILTER='$(TSAN_GTEST_FILTER)' TSAN_OPTIONS=halt_on_error=1 \
	  ctest --output-on-failure -j $(JOBS) -L 'unit|conformance'

# Not part of `make test`: the suites repeated under a CPU hog and on one core, to find
# flaky tests (docs/testing.md). REPEAT runs each (default 10); SEED repeats a hunt.
REPEAT ?= 10
SEED ?=
stress-test: build asan tsan
	@cmake --build build/asan -j $(JOBS) --target tool_tests
	@scripts/install-deps.sh stress-ng
	@scripts/stress-test.sh $(REPEAT) $(SEED)

# Long runs, not part of `make test` (docs/testing.md): the kill -9 soak for SOAK_SECONDS
# per crash-consistent engine, the allocation-failure test with every failure point fully
# checked, and the multi-thread crash tests ten times longer, all with one new seed
# (PMHASH_SEED; replay with SOAK_SEED=N). About 12 minutes with the defaults.
.PHONY: soak
SOAK_SECONDS ?= 60
ifndef SOAK_SEED
SOAK_SEED := $(shell date +%s)
endif
soak: build
	@echo "make soak: seed $(SOAK_SEED) (replay: make soak SOAK_SEED=$(SOAK_SEED))"
	@cd build/release && PMHASH_SEED=$(SOAK_SEED) PMHASH_SOAK_SECONDS=$(SOAK_SECONDS) \
	  ./crash_tests --gtest_filter='*ProcessCrash.Soak*'
	@cd build/release && PMHASH_SEED=$(SOAK_SEED) PMHASH_ALLOC_FAULTS=all ./conformance_tests \
	  --gtest_filter='*AllocationFailure*'
	@cd build/release && PMHASH_SEED=$(SOAK_SEED) PMHASH_CRASH_SOAK=10 ./crash_tests \
	  --gtest_filter='*CrashThreads*'

bench: build
	@scripts/bench-scenarios.sh

# Every paper scenario rerun at this commit into bench/results/ (kept in git: the JSON),
# then BENCHMARKS.md's tables rewritten from it (scripts/bench-tables.py). About an hour
# on 2 cores. `scripts/bench-tables.py --check` (ctest bench_tables) keeps them in step.
paper-figures: build
	@RESULTS_DIR=bench/results scripts/bench-scenarios.sh
	@scripts/bench-tables.py --one-commit

# Not part of `make test`: a test of the tests. Each mutation of
# tests/mutation/mutations.json (a dropped flush or fence, a commit before its data, a free
# before its unlink, ...) is applied to a scratch copy (build/mutation/), built and run
# against the suites it names; it must be caught, or be documented as harmless
# (docs/reliability.md, "Mutation testing").
.PHONY: mutation
mutation: deps
	@scripts/mutation.py --jobs $(JOBS)

# The flip-fuzz test of damaged pools at length (make test runs it short): FLIPS damaged
# bytes per region per pool, for every engine, clean and crashed; prints the by-region
# figures recorded in docs/reliability.md.
FLIPS ?= 200
flip-fuzz: build
	@cd build/release && PMHASH_FLIP_FUZZ=$(FLIPS) PMHASH_TOOL=$$PWD/pmhash \
	  ./crash_tests --gtest_filter='Engines/FlipFuzz.*'

clean:
	rm -rf build
