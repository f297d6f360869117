#!/bin/sh
# Installs prime-agent from a release archive, without root:
#
#   scripts/install.sh [--prefix DIR] [--sha256 HEX] [ARCHIVE|URL]
#
# ARCHIVE is a local dist/prime-agent-<version>-<target>.tar.gz, URL one to download (curl or
# wget). Without either, the archive for this machine's architecture is fetched from
# $PRIME_AGENT_DIST_BASE (a directory of release archives). The archive's sha256 must match:
# --sha256, else the `.sha256` file next to it (fetched beside a URL); with neither, nothing is
# installed. Checks that the new binary runs on this machine, then installs it as
# DIR/bin/prime-agent (DIR defaults to ~/.local), replacing an older one atomically; a binary
# that does not run replaces nothing. POSIX sh, so it works in minimal sandboxes (busybox).
set -eu

VERSION=0.1.0
prefix="${HOME:-}/.local"
sha=""
src=""

die() { echo "install.sh: $*" >&2; exit 1; }

while [ $# -gt 0 ]; do
    case "$1" in
        --prefix) [ $# -ge 2 ] || die "--prefix needs a directory"; prefix=$2; shift 2 ;;
        --prefix=*) prefix=${1#--prefix=}; shift ;;
        --sha256) [ $# -ge 2 ] || die "--sha256 needs a value"; sha=$2; shift 2 ;;
        -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
        -*) die "unknown option $1" ;;
        *) [ -z "$src" ] || die "one archive at a time"; src=$1; shift ;;
    esac
done
[ -n "$prefix" ] || die "no prefix (HOME is unset; pass --prefix)"

if [ -z "$src" ]; then
    [ -n "${PRIME_AGENT_DIST_BASE:-}" ] || die "give an archive or URL (or set PRIME_AGENT_DIST_BASE)"
    case "$(uname -m)" in
        x86_64|amd64) arch=x86_64 ;;
        aarch64|arm64) arch=aarch64 ;;
        *) die "no release archive for $(uname -m)" ;;
    esac
    src="${PRIME_AGENT_DIST_BASE%/}/prime-agent-$VERSION-$arch-unknown-linux-musl.tar.gz"
fi

sha256_of() {
    if command -v sha256sum >/dev/null 2>&1; then sha256sum "$1" | cut -d' ' -f1
    elif command -v shasum >/dev/null 2>&1; then shasum -a 256 "$1" | cut -d' ' -f1
    elif command -v openssl >/dev/null 2>&1; then openssl dgst -sha256 "$1" | sed 's/.*= *//'
    else die "no sha256sum, shasum or openssl to check the archive with"; fi
}

fetch() { # URL DEST
    if command -v curl >/dev/null 2>&1; then curl -fsSL -o "$2" "$1"
    elif command -v wget >/dev/null 2>&1; then wget -q -O "$2" "$1"
    else die "neither curl nor wget to download $1"; fi
}

work=$(mktemp -d "${TMPDIR:-/tmp}/prime-agent-install.XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM

case "$src" in
    http://*|https://*)
        archive="$work/archive.tar.gz"
        fetch "$src" "$archive" || die "could not download $src"
        if [ -z "$sha" ]; then
            fetch "$src.sha256" "$work/archive.sha256" || die "no checksum at $src.sha256 (pass --sha256)"
            sha=$(cut -d' ' -f1 < "$work/archive.sha256")
        fi ;;
    *)
        [ -f "$src" ] || die "no such archive: $src"
        archive=$src
        if [ -z "$sha" ]; then
            [ -f "$src.sha256" ] || die "no checksum: $src.sha256 is missing (pass --sha256)"
            sha=$(cut -d' ' -f1 < "$src.sha256")
        fi ;;
esac

actual=$(sha256_of "$archive")
[ "$actual" = "$sha" ] || die "sha256 mismatch for $src: expected $sha, got $actual"

mkdir "$work/x"
gzip -dc "$archive" | (cd "$work/x" && tar -xf -) || die "could not unpack $src"
[ -f "$work/x/bin/prime-agent" ] || die "$src holds no bin/prime-agent"

mkdir -p "$prefix/bin" || die "cannot create $prefix/bin"
new="$prefix/bin/.prime-agent.new"
cp "$work/x/bin/prime-agent" "$new" || die "cannot write $new"
chmod 0755 "$new"
# The new binary must run here BEFORE it replaces anything: an archive of another architecture
# would otherwise leave a working install broken. It runs from beside its destination, not
# from $work, so a noexec /tmp does not refuse a good archive. On ENOEXEC a shell may run the
# file as a script, so the exit code alone is not enough: the output must be the version line.
version=$("$new" --version 2>/dev/null) || version=""
case "$version" in
    "prime-agent "*) ;;
    *) rm -f "$new"
       die "$src does not run on this machine ($(uname -m); another architecture?); nothing was replaced" ;;
esac
mv -f "$new" "$prefix/bin/prime-agent" || die "cannot replace $prefix/bin/prime-agent"
echo "installed $prefix/bin/prime-agent ($version)"
case ":${PATH:-}:" in
    *":$prefix/bin:"*) ;;
    *) echo "note: $prefix/bin is not on PATH" ;;
esac
