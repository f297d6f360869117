#!/usr/bin/env bash
# Release archives: the static binary of one target as
#   dist/prime-agent-<version>-<target>.tar.gz   (bin/prime-agent and its hard link
#                                                 prime-agent, LICENSE, README.md)
#   dist/prime-agent-<version>-<target>.tar.gz.sha256   (`sha256sum` format)
#   dist/install.sh   (scripts/install.sh: the docs fetch it from beside the archives)
#
#   scripts/dist.sh check TARGET...            what the cross build lacks, as commands (exit 1)
#   scripts/dist.sh env TARGET                 the build environment for TARGET (NAME=value lines)
#   scripts/dist.sh package TARGET BINARY OUTDIR VERSION
#
# The archive is reproducible (sorted names, owner 0, mtime of the last commit) so the
# checksum of a rebuild from the same commit does not change. `make dist` builds and packages
# both targets; `make dist-setup` installs what `check` asks for.
set -euo pipefail

# The C compiler ring (rustls' crypto) is built with, per target. Debian's cross gcc compiles it
# against its own headers; the Rust musl target brings its own libc and start files, so the
# result links statically with no musl sysroot for aarch64.
cc_for() {
    case "$1" in
        x86_64-unknown-linux-musl) echo musl-gcc ;;
        aarch64-unknown-linux-musl) echo aarch64-linux-gnu-gcc ;;
        *) echo "dist: unknown target $1" >&2; exit 2 ;;
    esac
}

# The linker for targets the host's `cc` cannot link (empty: rustc's default, as `make static`
# uses, so both build the same x86_64 binary without rebuilding each other's).
linker_for() {
    case "$1" in
        aarch64-unknown-linux-musl) echo aarch64-linux-gnu-gcc ;;
    esac
}

# The environment `cargo build --target TARGET` needs, one NAME=value a line.
env_for() {
    local t_ T linker
    t_=$(echo "$1" | tr - _); T=$(echo "$t_" | tr a-z A-Z)
    echo "CC_$t_=$(cc_for "$1")"
    linker=$(linker_for "$1")
    [ -z "$linker" ] || echo "CARGO_TARGET_${T}_LINKER=$linker"
    # A plain static executable, not static-pie (as `make static`; no space: word-split).
    echo "CARGO_TARGET_${T}_RUSTFLAGS=-Crelocation-model=static"
}

apt_for() {
    case "$1" in
        musl-gcc) echo musl-tools ;;
        aarch64-linux-gnu-gcc) echo gcc-aarch64-linux-gnu ;;
    esac
}

check() {
    local missing=() installed
    installed=$(rustup target list --installed 2>/dev/null || true)
    for t in "$@"; do
        grep -qx "$t" <<<"$installed" || missing+=("rustup target add $t")
        local cc; cc=$(cc_for "$t")
        command -v "$cc" >/dev/null 2>&1 || missing+=("apt-get install -y $(apt_for "$cc")")
    done
    command -v file >/dev/null 2>&1 || missing+=("apt-get install -y file")
    if ((${#missing[@]})); then
        echo "make dist needs a cross toolchain; run (or, as root: make dist-setup):"
        printf '  %s\n' "${missing[@]}"
        exit 1
    fi
}

package() {
    local target=$1 binary=$2 out=$3 version=$4
    local name="prime-agent-$version-$target" stage
    stage=$(mktemp -d)
    trap 'rm -rf "$stage"' RETURN
    mkdir -p "$stage/bin" "$out"
    install -m 0755 "$binary" "$stage/bin/prime-agent"
    # The same file at the top too, as a hard link (no second copy in the archive): ACP
    # registry entries name `./<executable>` at the archive's root, and Harbor's installer runs
    # the basename of `cmd` from there (docs/install.md).
    ln "$stage/bin/prime-agent" "$stage/prime-agent"
    install -m 0644 "$(dirname "$0")/../README.md" "$stage/README.md"
    install -m 0644 "$(dirname "$0")/../LICENSE" "$stage/LICENSE"
    local mtime
    mtime=$(git -C "$(dirname "$0")/.." log -1 --format=%ct 2>/dev/null || echo 0)
    tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$mtime" \
        -C "$stage" -cf - bin LICENSE README.md prime-agent | gzip -n "${DIST_GZIP_LEVEL:--9}" > "$out/$name.tar.gz"
    (cd "$out" && sha256sum "$name.tar.gz" > "$name.tar.gz.sha256")
    # The installer travels with the archives, so `$BASE/install.sh` exists wherever they are
    # served (docs/install.md) instead of a 404 that `curl | sh` would run as an empty script.
    install -m 0755 "$(dirname "$0")/install.sh" "$out/install.sh"
    echo "dist: $out/$name.tar.gz ($(stat -c %s "$out/$name.tar.gz") bytes) $(cut -d' ' -f1 "$out/$name.tar.gz.sha256")"
}

cmd=${1:-}; shift || true
case "$cmd" in
    check) check "$@" ;;
    env) env_for "$1" ;;
    package) package "$@" ;;
    *) echo "usage: $0 check TARGET... | env TARGET | package TARGET BINARY OUTDIR VERSION" >&2; exit 2 ;;
esac
