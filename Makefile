# The two commands of the README: `make run` and `make test`. Both do all the set-up.
BUILD      ?= build
BUILD_SAN  ?= build-san
DATA       ?= data
JOBS       ?= $(shell nproc)
# Looked for when the sanitizer build is first configured, after `deps` has installed clang.
SAN_CC     ?= $(shell command -v clang >/dev/null 2>&1 && echo clang || echo cc)
SAN_FUZZ    = $(if $(filter clang,$(SAN_CC)),ON,OFF)
TOOLGATE   := $(BUILD)/toolgate --data $(DATA)
# The shared test data (the JSON Schema test suite and meta-schemas); empty: the build's own
# setting, ../shared/testdata next to the checkout unless configured otherwise.
TESTDATA   ?=
TESTDATA_SET := $(if $(TESTDATA),-DTG_TESTDATA_DIR=$(abspath $(TESTDATA)))

.PHONY: all deps build build-san run test test-fast bench docs clean

all: build

deps:
	@scripts/install-deps.sh

$(BUILD)/CMakeCache.txt: | deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo

$(BUILD_SAN)/CMakeCache.txt: | deps
	CC=$(SAN_CC) cmake -S . -B $(BUILD_SAN) -DCMAKE_BUILD_TYPE=Debug -DTG_SANITIZE=ON -DTG_FUZZ=$(SAN_FUZZ)

build: deps $(BUILD)/CMakeCache.txt
	$(if $(TESTDATA_SET),cmake -S . -B $(BUILD) $(TESTDATA_SET))
	cmake --build $(BUILD) -j $(JOBS)

build-san: deps $(BUILD_SAN)/CMakeCache.txt
	$(if $(TESTDATA_SET),cmake -S . -B $(BUILD_SAN) $(TESTDATA_SET))
	cmake --build $(BUILD_SAN) -j $(JOBS)

# Sets up a demo workspace on first use (printing the owner's token once), then serves MCP
# over Streamable HTTP on 127.0.0.1:7878 until interrupted.
LISTEN ?= 127.0.0.1:7878
run: build
	@test -f $(DATA)/toolgate.db || $(TOOLGATE) init --demo
	$(TOOLGATE) tools list --agent demo
	@echo "serving MCP on http://$(LISTEN)/mcp (Ctrl-C stops); an agent token: $(BUILD)/toolgate --data $(DATA) token create --agent demo"
	$(TOOLGATE) serve --listen $(LISTEN)

# Sanitizer build first, plain build last, so the output ends with ctest's summary line.
# The fuzz runs need the libFuzzer targets, which only clang builds: no silent skip.
test: build build-san
	@test -x $(BUILD_SAN)/fuzz_jsonrpc || { echo "make test: $(BUILD_SAN) has no fuzz targets:" \
	  "they need clang (make deps installs it); remove $(BUILD_SAN) to configure it again" >&2; \
	  exit 1; }
	cd $(BUILD_SAN) && ctest --output-on-failure -j $(JOBS)
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

test-fast: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

bench: build
	bench/run.sh $(BUILD)
	bench/http.sh $(BUILD)

docs: build
	$(BUILD)/toolgate tools docs

clean:
	rm -rf $(BUILD) $(BUILD_SAN)
