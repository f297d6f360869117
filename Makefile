# prime-agent: every workflow is a target here. `make test` is what CI runs.
SHELL := bash
CARGO ?= cargo
MUSL_TARGET := x86_64-unknown-linux-musl
## The static builds (`make static`, `make dist`): opt-level s for size, but the two crates the
## stream's per-delta path lives in (serde_json, crossbeam-channel) at 3, and a plain static
## executable rather than static-pie (the target's RUSTFLAGS: no load-time relocations, 130 KB
## smaller). Measured side by side when adopted (docs/performance.md): SSE static/glibc 0.73 -> 0.78.
## opt-level z would save 350 KB more (still over 4 MB) but cost a quarter of the static SSE
## rate even with the stream's hot functions written not to need the inliner (0.64; same doc).
## build.rs links the x86_64 one with Rust's lld and identical code folding (26 KB).
STATIC_BUILD = CARGO_PROFILE_RELEASE_OPT_LEVEL=s $(CARGO) build --release \
	--config 'profile.release.package.serde_json.opt-level=3' \
	--config 'profile.release.package.crossbeam-channel.opt-level=3'
BIN := target/release/prime-agent
STATIC_BIN := target/$(MUSL_TARGET)/release/prime-agent
VERSION := $(shell sed -n 's/^version = "\(.*\)"$$/\1/p' Cargo.toml | head -n1)
DIST_TARGETS := x86_64-unknown-linux-musl aarch64-unknown-linux-musl
DIST_ARCHIVES := $(foreach t,$(DIST_TARGETS),dist/prime-agent-$(VERSION)-$(t).tar.gz)

.PHONY: build release startup-order test io-ban darwin-setup darwin-check dist-darwin test-deps harness-check static-smoke static-setup dist dist-setup dist-smoke registry registry-check harbor-source image demo static lint fmt fixtures cli-fixtures bench fuzz reliability ci clean

build:
	$(CARGO) build

release:
	$(CARGO) build --release

## The main loop does no IO, as a compile error: clippy.toml lists what the loop's modules
## (main_loop, handlers, session) may not call, and those modules deny it. `make test` runs this.
io-ban:
	$(CARGO) clippy --lib --quiet -- -D warnings \
		|| { echo "io-ban: the main loop's modules call IO (clippy.toml says where it goes instead)"; exit 1; }
	@echo "io-ban: the main loop's modules call no IO"

## macOS: both Apple targets compile and link on Linux through cargo-zigbuild, with Zig from
## PyPI (ziglang) as the C compiler and linker: no macOS SDK is needed, since the binary links
## only libSystem (base/signals.rs keeps ctrlc's Foundation-linked backend out). Nothing here
## can run the result: docs/install.md says so. `make test` runs this when `make darwin-setup`
## has installed the toolchain (.ci/run does).
DARWIN_TARGETS := aarch64-apple-darwin x86_64-apple-darwin
ZIG_VENV := .deps/zig
ZIGLANG := ziglang==0.17.1
CARGO_ZIGBUILD := 0.24.1
darwin-setup:
	rustup target add $(DARWIN_TARGETS)
	[ -x $(ZIG_VENV)/bin/python ] || python3 -m venv $(ZIG_VENV)
	$(ZIG_VENV)/bin/pip install --quiet --disable-pip-version-check $(ZIGLANG)
	command -v cargo-zigbuild >/dev/null 2>&1 || $(CARGO) install cargo-zigbuild --version $(CARGO_ZIGBUILD) --locked

darwin-check:
	@set -o pipefail; ok=0; bad=0; for t in $(DARWIN_TARGETS); do \
		if PATH="$(CURDIR)/$(ZIG_VENV)/bin:$$PATH" $(CARGO) zigbuild --quiet --target $$t 2>target/darwin-$$t.err \
			&& [ "$$(od -An -tx1 -N4 target/$$t/debug/prime-agent | tr -d ' ')" = cffaedfe ]; then \
			echo "darwin-check: $$t compiles and links (Mach-O)"; ok=$$((ok+1)); \
		else echo "darwin-check: $$t FAILED:"; tail -20 target/darwin-$$t.err; bad=$$((bad+1)); fi; \
	done; echo "darwin-check: $$ok passed, $$bad failed" | tee target/darwin-check.log; [ $$bad -eq 0 ]

## macOS release archives (dist/prime-agent-<version>-<apple target>.tar.gz), cross-built with
## cargo-zigbuild (`make darwin-setup`). Built and packaged here, never run here: not for the
## ACP registry entry, which lists only targets that have been run.
dist-darwin:
	@set -e; for t in $(DARWIN_TARGETS); do \
		PATH="$(CURDIR)/$(ZIG_VENV)/bin:$$PATH" $(CARGO) zigbuild --release --target $$t; \
		bash scripts/dist.sh package $$t target/$$t/release/prime-agent dist $(VERSION); \
	done

## Installs the pinned test components (scripts/test-deps.sh; a no-op once present), runs unit
## tests (pure mappings) and integration tests (the real binary over stdio), then a smoke
## test of the static binary when the musl toolchain is installed, and of both release
## archives when the cross toolchain is (.ci/run installs both).
test:
	@mkdir -p target; rm -f target/static-smoke.log target/dist-smoke.log target/registry-check.log target/darwin-check.log
	@bash scripts/test-deps.sh || echo "test-deps: incomplete; the tests that need the missing parts print 'skipped:'"
	@$(MAKE) --no-print-directory io-ban
	set -o pipefail; $(CARGO) test 2>&1 | tee target/test.log
	@if command -v musl-gcc >/dev/null 2>&1 && rustup target list --installed 2>/dev/null | grep -q $(MUSL_TARGET); then \
		$(MAKE) --no-print-directory static-smoke; \
	else echo "static-smoke: skipped (no musl toolchain; make static-setup)"; fi
	@if bash scripts/dist.sh check $(DIST_TARGETS) >/dev/null 2>&1; then \
		$(MAKE) --no-print-directory dist-smoke && $(MAKE) --no-print-directory registry-check; \
	else echo "dist-smoke: skipped (no cross toolchain; make dist-setup)"; \
		echo "registry-check: skipped (it checks the entry of both release archives; make dist-setup)"; fi
	@if [ -x $(ZIG_VENV)/bin/python ] && command -v cargo-zigbuild >/dev/null 2>&1; then \
		$(MAKE) --no-print-directory darwin-check; \
	else echo "darwin-check: skipped (no zig toolchain; make darwin-setup)"; fi
	@bash scripts/test_summary.sh target

## The static binary must be static and run a scripted turn alone in an empty root directory
## (under chroot as root, as a `FROM scratch` image runs it; see scripts/static_smoke.py).
static-smoke: static
	@file $(STATIC_BIN) | grep -Eq 'statically linked|static-pie linked' || { echo "not static"; exit 1; }
	@set -o pipefail; python3 scripts/static_smoke.py $(STATIC_BIN) fixtures/scripts/hello.jsonl \
		| tee target/static-smoke.log

## Release archives for every target in DIST_TARGETS, static, with their .sha256 files:
## dist/prime-agent-<version>-<target>.tar.gz (bin/prime-agent, LICENSE, README.md; scripts/dist.sh),
## and dist/install.sh beside them (docs/install.md fetches it from there), then the ACP registry
## entry (`make registry`) when Cargo.toml sets a repository.
## Stops with the exact set-up commands when the cross toolchain is missing (`make dist-setup`).
dist:
	@bash scripts/dist.sh check $(DIST_TARGETS)
	@set -e; for t in $(DIST_TARGETS); do \
		env $$(bash scripts/dist.sh env $$t) $(STATIC_BUILD) --target $$t; \
		bash scripts/dist.sh package $$t target/$$t/release/prime-agent dist $(VERSION); \
	done
	@python3 scripts/registry_entry.py --if-repository

## The ACP registry entry of the archives in dist/ (`make dist` first): dist/acp-registry/<id>/
## agent.json and icon.svg, generated from Cargo.toml by scripts/registry_entry.py, which checks
## each archive's .sha256 and that the binary's --version is the entry's version. Stops, saying
## why, while Cargo.toml sets no `repository` (`make dist` says why and goes on).
registry:
	python3 scripts/registry_entry.py

## The registry entry checked by the ACP registry's own build and verify scripts, offline
## (vendored unmodified in fixtures/acp-registry/, pinned to a commit): the entry is generated
## into a temporary registry tree with a test-only loopback release URL, dist/ is served on
## 127.0.0.1, and the scripts run against it (scripts/registry_check.py says what each step
## checks). `make test` runs it after dist-smoke, when the cross toolchain is installed.
REGISTRY_PYTHON := .deps/py/bin/python
registry-check: dist
	@[ -x $(REGISTRY_PYTHON) ] || bash scripts/test-deps.sh
	@set -o pipefail; $(REGISTRY_PYTHON) scripts/registry_check.py --dist dist | tee target/registry-check.log

## The source tree hosted Harbor takes a custom agent from (docs/harnesses.md#hosted-harbor):
## packaging/harbor (harbor-agent.json, its uv project, launch.py) with the static binaries of
## the release archives (checksums checked) in bin/<arch>/prime-agent, as dist/harbor-source/.
harbor-source: dist
	@rm -rf dist/harbor-source && mkdir -p dist/harbor-source
	cp packaging/harbor/harbor-agent.json packaging/harbor/pyproject.toml packaging/harbor/uv.lock \
		packaging/harbor/launch.py dist/harbor-source/
	@set -e; for t in $(DIST_TARGETS); do a=prime-agent-$(VERSION)-$$t.tar.gz; \
		(cd dist && sha256sum --quiet -c $$a.sha256); mkdir -p dist/harbor-source/bin/$${t%%-*}; \
		tar -xzOf dist/$$a bin/prime-agent > dist/harbor-source/bin/$${t%%-*}/prime-agent; \
		chmod 755 dist/harbor-source/bin/$${t%%-*}/prime-agent; done
	@echo "harbor-source: dist/harbor-source (push it to a git repository hosted Harbor can fetch)"

## Installs what `make dist` needs on Debian/Ubuntu (root for apt-get): the Rust musl targets,
## musl-gcc, the aarch64 cross gcc (for ring's C code and the link), `file`, and qemu's user
## emulator for the aarch64 smoke run (optional: without it that run is skipped).
dist-setup:
	rustup target add $(DIST_TARGETS)
	apt-get install -y musl-tools gcc-aarch64-linux-gnu file || { apt-get update && apt-get install -y musl-tools gcc-aarch64-linux-gnu file; }
	apt-get install -y qemu-user || echo "dist-setup: qemu-user did not install; the aarch64 smoke run will be skipped"

## Unpacks each archive, checks its checksum, that `file` says static for its architecture, and
## runs a scripted turn: natively in an empty root, the other architecture under qemu-user.
dist-smoke: dist
	@set -o pipefail; python3 scripts/dist_smoke.py fixtures/scripts/hello.jsonl $(DIST_ARCHIVES) \
		| tee target/dist-smoke.log

## A scripted session end to end, no API key, shown readably.
demo: release
	python3 fixtures/demo.py $(BIN)

## A statically linked musl binary; prints its size. Stops with the exact set-up commands when
## the musl toolchain is missing (`make static-setup` runs them, as root).
static:
	@missing=; \
	rustup target list --installed 2>/dev/null | grep -qx $(MUSL_TARGET) || missing="$$missing\n  rustup target add $(MUSL_TARGET)"; \
	command -v musl-gcc >/dev/null 2>&1 || missing="$$missing\n  apt-get update && apt-get install -y musl-tools"; \
	if [ -n "$$missing" ]; then printf "make static needs the musl toolchain; run (or: make static-setup):$$missing\n"; exit 1; fi
	@# Optimised for size: the static binary is what minimal containers ship (budget 4 MB);
	@# the glibc release build keeps opt-level 3 for stream throughput (STATIC_BUILD above).
	CC_x86_64_unknown_linux_musl=musl-gcc CARGO_TARGET_X86_64_UNKNOWN_LINUX_MUSL_RUSTFLAGS=-Crelocation-model=static \
		$(STATIC_BUILD) --target $(MUSL_TARGET)
	@file $(STATIC_BIN) 2>/dev/null || true
	@ls -l $(STATIC_BIN) | awk '{printf "static binary: %s bytes (%.2f MiB)\n", $$5, $$5/1048576}'

## Installs the real MCP servers and ACP clients the integration tests drive (pinned, into
## the ignored `.deps/`; see scripts/test-deps.sh). Tests needing one skip, saying so, without it.
test-deps:
	bash scripts/test-deps.sh

## Optional, not in `make test`: the binary driven through the harnesses' own code
## (docs/harnesses.md#make-harness-check). Installs verifiers 0.4.0 and Harbor 0.25.0 into
## `.deps/harness` (scripts/harness-deps.sh), runs one rollout through each against a loopback
## model (scripts/harness_check.py: Harbor's trajectory of a one-tool turn is two steps), then
## HARNESS_CHECK_ROLLOUTS (100) more through verifiers' harness, none unverified; Harbor also
## resolves the registry entry from a local file, installs it from a local archive (its binary
## download, over loopback HTTPS) into a bind-mount container (root: `unshare --mount`) and runs
## a trial, and takes packaging/harbor/harbor-agent.json as a source agent; then the `harness::`
## tests, whose edge sets verifiers' own `SemanticEdgeSet` then validates.
harness-check: build
	bash scripts/harness-deps.sh
	PATH="$(CURDIR)/.deps/harness/bin:$$PATH" UV_CACHE_DIR="$(CURDIR)/.deps/harness/uv-cache" \
		.deps/harness/bin/python scripts/harness_check.py target/debug/prime-agent
	set -o pipefail; $(CARGO) test --test integration harness:: 2>&1 | grep -E "^test |skipped:|test result"

## Installs what `make static` needs (the musl target and musl-gcc; apt-get needs root).
static-setup:
	rustup target add $(MUSL_TARGET)
	command -v musl-gcc >/dev/null 2>&1 || { apt-get install -y musl-tools || { apt-get update && apt-get install -y musl-tools; }; }

## A `FROM scratch` image holding only the static binary (Containerfile; podman or docker).
IMAGE ?= prime-agent
image: static
	$${CONTAINER:-$$(command -v podman || command -v docker)} build -f Containerfile -t $(IMAGE) .

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --all-targets -- -D warnings

fmt:
	$(CARGO) fmt --all

## Regenerate expected transcripts and subcommand outputs (fixtures/cli/) from the current
## binary (review the diff!).
fixtures:
	UPDATE_FIXTURES=1 $(CARGO) test --test integration transcripts
	UPDATE_FIXTURES=1 $(CARGO) test --test integration subcommands::

## The subcommands (`model list`, `session export`, `schedule`) against fixtures/cli/; part of
## `make test` too (tests/subcommands.rs).
cli-fixtures:
	$(CARGO) test --test integration subcommands::

## Benchmarks over stdio against the release binary: prints a table, writes target/bench.json.
## Regenerates scripts/startup.order (see build.rs) from an unstripped release binary run under
## valgrind through initialize and session/new; then rebuilds the release binary with it.
startup-order:
	$(CARGO) rustc --release --bin prime-agent -- -C strip=none
	python3 scripts/startup_order.py $(BIN) scripts/startup.order
	$(CARGO) build --release

bench: release
	-@$(MAKE) --no-print-directory static >/dev/null 2>&1
	@# `cargo bench` relinks target/release/prime-agent under the bench profile, whose symbol
	@# names (hashes) are not the release build's, so scripts/startup.order would not apply to
	@# what is measured: the release build is kept aside first and measured (BENCH_BIN).
	@mkdir -p target/bench-bin && cp $(BIN) target/bench-bin/prime-agent
	BENCH_BIN=$${BENCH_BIN:-$(CURDIR)/target/bench-bin/prime-agent} $(CARGO) bench --bench acp

## A long fuzz campaign over the JSON-RPC front end (the short one runs in `make test`).
FUZZ_CASES ?= 50000
fuzz:
	FUZZ_CASES=$(FUZZ_CASES) $(CARGO) test --release --test integration fuzz_front_end -- --nocapture

## Fault injection, leak checks (1000 cycles) and a fuzz campaign, with the 1 GB output run;
## prints the report table (scripts/reliability_table.py). Fails if any test fails or leaks.
RELIABILITY_FUZZ_CASES ?= 20000
RELIABILITY_TESTS := faults:: secrets:: reliability:: noblock:: construction:: remote:: fuzz_front_end \
	provider::a_500_is_retried_and_the_second_attempt_succeeds \
	provider::cancel_while_the_server_stalls_answers_cancelled_and_closes_the_socket \
	tools::timeout_and_orphaned_pipes_kill_the_whole_group \
	tools::huge_output_is_truncated_to_a_file_with_bounded_memory \
	tools::read_of_a_fifo_is_a_prompt_error_and_the_next_prompt_works \
	tools::read_of_dev_zero_is_an_error_and_memory_stays_small \
	kernel::a_kernel_killed_mid_cell_is_an_error_and_the_next_cell_recovers \
	kernel::output_printed_between_cells_keeps_the_idle_agent_small \
	protocol::stdin_closed_mid_frame_gets_a_parse_error_and_a_clean_exit \
	protocol::stdin_eof_mid_turn_exits_zero \
	protocol::sigterm_mid_turn_answers_and_exits_zero \
	protocol::an_overlong_line_is_refused_and_the_connection_survives \
	persist::crash_campaign_continue_restores_an_acknowledged_prefix \
	heartbeats::a_heartbeat_due_many_times_during_one_long_tool_call_puts_one_prompt_in \
	owners::two_processes_on_one_session_the_second_is_refused_and_nothing_is_lost \
	listing::session_list_over_30_files_of_8_mb_is_right_and_holds_no_cancel
reliability:
	@mkdir -p target
	set -o pipefail; FUZZ_CASES=$(RELIABILITY_FUZZ_CASES) LEAK_CYCLES=1000 PERSIST_CRASH_ITERATIONS=200 \
		$(CARGO) test --release --test integration -- --include-ignored --nocapture \
		$(RELIABILITY_TESTS) 2>&1 | grep -v -E '^\[[0-9TZ:.-]+ (TRACE|DEBUG|INFO|WARN|ERROR) ' \
		| tee target/reliability.log; status=$$?; \
	python3 scripts/reliability_table.py target/reliability.log && exit $$status

ci: lint test

clean:
	$(CARGO) clean
