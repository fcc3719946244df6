# The two commands of the README: `make run` and `make test`. Each installs what is missing first.
SWIFT ?= swift
SWIFT_BUILD_FLAGS ?=

.PHONY: deps test-deps build test run clean format

deps:
	@ops/install-deps.sh

test-deps:
	@ops/install-deps.sh --test

build: deps
	$(SWIFT) build $(SWIFT_BUILD_FLAGS)

release: deps
	$(SWIFT) build -c release $(SWIFT_BUILD_FLAGS)

# Builds everything (the findmy executable included, which the end-to-end tests start as a real
# process), then runs every test.
test: test-deps
	$(SWIFT) build $(SWIFT_BUILD_FLAGS)
	FINDMY_BIN="$$($(SWIFT) build $(SWIFT_BUILD_FLAGS) --show-bin-path)/findmy" $(SWIFT) test $(SWIFT_BUILD_FLAGS)

format:
	$(SWIFT) format --in-place --recursive Sources Tests Package.swift

clean:
	rm -rf .build
