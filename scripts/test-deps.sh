#!/usr/bin/env bash
# Installs the real third-party components the integration tests drive, at pinned versions,
# into the project's own ignored folder `.deps/` (nothing global). Idempotent: a component
# already present at its pinned version is not fetched again. Tests that need one of them skip
# with a printed reason when it is missing (never silently); `.ci/run` runs this first.
#
#   .deps/node/node_modules/.bin/<cli>     npm packages (NPM_PACKAGES)
#   .deps/py/                              a venv with the PyPI packages (PIP_PACKAGES)
set -uo pipefail
cd "$(dirname "$0")/.."
DEPS="$PWD/.deps"
mkdir -p "$DEPS"

# name@version, one per line; each owner adds its line.
NPM_PACKAGES=(
  "@modelcontextprotocol/server-everything@2026.8.31"
  "acpx@0.19.1"
)
# name==version, one per line.
PIP_PACKAGES=(
  "jsonschema==4.26.0"
  "mcp==2.3.0"
  "opentelemetry-proto==1.45.2"
  "pytest==9.2.0"
  "agent-client-protocol[http]==0.12.1"
)

status=0
if command -v npm >/dev/null 2>&1; then
  mkdir -p "$DEPS/node"
  [ -f "$DEPS/node/package.json" ] || echo '{"name":"prime-agent-test-deps","private":true}' >"$DEPS/node/package.json"
  want=$(printf '%s\n' "${NPM_PACKAGES[@]}" | sort | tr '\n' ' ')
  if [ "$(cat "$DEPS/node/.installed" 2>/dev/null)" != "$want" ]; then
    if (cd "$DEPS/node" && npm install --no-audit --no-fund --loglevel=error "${NPM_PACKAGES[@]}" >/dev/null); then
      echo "$want" >"$DEPS/node/.installed"
      echo "test-deps: npm: ${NPM_PACKAGES[*]}"
    else
      echo "test-deps: npm install failed; tests that need ${NPM_PACKAGES[*]} will skip"; status=1
    fi
  fi
else
  echo "test-deps: no npm; tests that need ${NPM_PACKAGES[*]} will skip"; status=1
fi

if command -v python3 >/dev/null 2>&1; then
  want=$(printf '%s\n' "${PIP_PACKAGES[@]}" | sort | tr '\n' ' ')
  if [ "$(cat "$DEPS/py/.installed" 2>/dev/null)" != "$want" ]; then
    if { [ -x "$DEPS/py/bin/python" ] || python3 -m venv "$DEPS/py"; } \
      && "$DEPS/py/bin/python" -m pip install --quiet --disable-pip-version-check "${PIP_PACKAGES[@]}"; then
      echo "$want" >"$DEPS/py/.installed"
      echo "test-deps: pip: ${PIP_PACKAGES[*]}"
    else
      echo "test-deps: pip install failed; tests that need ${PIP_PACKAGES[*]} will skip"; status=1
    fi
  fi
fi
exit $status
