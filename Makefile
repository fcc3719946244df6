# The two commands of the README: `make run` and `make test`. Each installs what is missing first.
SWIFT ?= swift
SWIFT_BUILD_FLAGS ?=

.PHONY: deps test-deps build test run clean format lint agent

deps:
	@ops/install-deps.sh

test-deps:
	@ops/install-deps.sh --test

build: deps
	$(SWIFT) build $(SWIFT_BUILD_FLAGS)

release: deps
	$(SWIFT) build -c release $(SWIFT_BUILD_FLAGS)

# findmy-agent for a device (docs/agent.md): release, with the Swift runtime linked in
# (--static-swift-stdlib: no Swift toolchain needed on the device, and less resident than linking
# it dynamically), in a build directory of its own so that the server's release build
# keeps its flags. The binary: .build/agent/release/findmy-agent (it needs libssl and libsodium
# from the system).
agent:
	$(SWIFT) build -c release --product findmy-agent --static-swift-stdlib --scratch-path .build/agent $(SWIFT_BUILD_FLAGS)

# Checks the format (lint), builds everything (the findmy executable included, which the end-to-end
# tests start as a real process), then runs every test: the Swift tests, the web panel in headless Chromium
# (ops/tests/browser.sh, screenshots in .build/artifacts/browser) and `make run` from a fresh clone.
CLIENT_TESTS = FindMyClientEndToEndTests|FindMyClientHTTPTests

test: test-deps lint
	$(SWIFT) build $(SWIFT_BUILD_FLAGS)
	FINDMY_BIN="$$($(SWIFT) build $(SWIFT_BUILD_FLAGS) --show-bin-path)/findmy" $(SWIFT) test $(SWIFT_BUILD_FLAGS) --skip '$(CLIENT_TESTS)'
	# FindMyClient and its transport work on Swift's cooperative thread pool (one thread a core); in
	# the run above the blocking end-to-end tests hold those threads for minutes, so the client's
	# tests run on their own.
	FINDMY_BIN="$$($(SWIFT) build $(SWIFT_BUILD_FLAGS) --show-bin-path)/findmy" $(SWIFT) test $(SWIFT_BUILD_FLAGS) --skip-build --filter '$(CLIENT_TESTS)'
	FINDMY_BIN="$$($(SWIFT) build $(SWIFT_BUILD_FLAGS) --show-bin-path)/findmy" ops/tests/browser.sh
	ops/tests/make-run.sh

format:
	$(SWIFT) format --in-place --recursive Sources Tests Package.swift

# The style every commit keeps (`make format` fixes most of what this finds); part of `make test`.
lint:
	$(SWIFT) format lint --strict --recursive Sources Tests Package.swift

# Builds a release binary and runs the server on ./data (or $FINDMY_DATA_DIR) at 127.0.0.1:8080
# (or $FINDMY_LISTEN), after printing how to create a user and enrol a device. As root in a
# checkout others cannot pass through, ./data cannot hold the cluster: see ops/default-data-dir.sh.
FINDMY_DATA_DIR ?= $(shell ops/default-data-dir.sh "$(CURDIR)")
FINDMY_LISTEN ?= 127.0.0.1:8080
run: release
	@mkdir -p "$(dir $(FINDMY_DATA_DIR))"; \
	bin="$$($(SWIFT) build -c release $(SWIFT_BUILD_FLAGS) --show-bin-path)/findmy"; \
	url="http://$(FINDMY_LISTEN)"; \
	echo ""; \
	echo "findmy: serving $$url with data in $(FINDMY_DATA_DIR) (Ctrl-C stops it)"; \
	echo ""; \
	echo "In another terminal, create a user (prints its API token once):"; \
	echo "  $$bin user add alice --data-dir $(FINDMY_DATA_DIR)"; \
	echo "Enrol a device with that token (prints the device token):"; \
	echo "  curl -s -X POST $$url/api/find-my/devices -H 'Authorization: Bearer USER_TOKEN' \\"; \
	echo "    -d '{\"device_uuid\": \"1b4e28ba-2fa1-11d2-883f-0016d3cca427\", \"name\": \"phone\", \"platform\": \"ios\"}'"; \
	echo "Report a fix with the device token:"; \
	echo "  curl -s -X POST $$url/api/find-my/report -H 'Authorization: Bearer DEVICE_TOKEN' \\"; \
	echo "    -d '{\"batch_id\": \"'\$$(cat /proc/sys/kernel/random/uuid)'\", \"fixes\": [{\"latitude\": 52.52, \"longitude\": 13.405, \"accuracy_m\": 12, \"source\": \"manual\", \"recorded_at\": \"'\$$(date -u +%Y-%m-%dT%H:%M:%SZ)'\"}]}'"; \
	echo "Set a password, then open the web panel at $$url/find-my:"; \
	echo "  $$bin user passwd alice --data-dir $(FINDMY_DATA_DIR)"; \
	echo ""; \
	exec "$$bin" serve --data-dir "$(FINDMY_DATA_DIR)" --listen "$(FINDMY_LISTEN)"

clean:
	rm -rf .build
