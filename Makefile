# prime-agent: every workflow is a target here. `make test` is what CI runs.
CARGO ?= cargo
MUSL_TARGET := x86_64-unknown-linux-musl
BIN := target/release/prime-agent
STATIC_BIN := target/$(MUSL_TARGET)/release/prime-agent

.PHONY: build release test unit integration demo static lint fmt fixtures bench fuzz reliability ci clean

build:
	$(CARGO) build

release:
	$(CARGO) build --release

## Unit tests (pure mappings) and integration tests (the real binary over stdio).
test:
	$(CARGO) test --all-targets

## A scripted session end to end, no API key, shown readably.
demo: release
	python3 fixtures/demo.py $(BIN)

## A statically linked musl binary; prints its size.
static:
	CC_x86_64_unknown_linux_musl=musl-gcc $(CARGO) build --release --target $(MUSL_TARGET)
	@file $(STATIC_BIN) 2>/dev/null || true
	@ls -l $(STATIC_BIN) | awk '{printf "static binary: %s bytes (%.2f MiB)\n", $$5, $$5/1048576}'

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --all-targets -- -D warnings

fmt:
	$(CARGO) fmt --all

## Regenerate expected transcripts from the current binary (review the diff!).
fixtures:
	UPDATE_FIXTURES=1 $(CARGO) test --test integration transcripts

ci: lint test

clean:
	$(CARGO) clean
