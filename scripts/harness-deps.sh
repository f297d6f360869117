#!/usr/bin/env bash
# Installs the pinned harnesses `make harness-check` drives into the ignored `.deps/harness`
# venv (nothing global; a no-op once the pins are in). From PyPI by name, nothing else:
#   verifiers 0.4.0 with its dependencies;
#   Harbor 0.25.0 with its dependencies (the newest the registry serves; issue 21 tried 0.26.0),
#     installed with --ignore-requires-python: it declares Python >= 3.12 and Debian 12 has
#     3.11; scripts/harness_check.py aliases the two 3.12 typing names its ACP agent uses;
#   agent-client-protocol 0.12.1 (the `acp` SDK both ACP runners import; verifiers pins it);
#   uv, with which verifiers' subprocess runtime prepares its ACP runner script as in any
#   rollout (`uv sync --script`, from PyPI, cached in .deps/harness/uv-cache).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="$PWD/.deps/harness"
PINS=("verifiers==0.4.0" "agent-client-protocol==0.12.1" "uv==0.13.9")
HARBOR="harbor==0.25.0"
want="${PINS[*]} $HARBOR"
if [ "$(cat "$VENV/.installed" 2>/dev/null)" = "$want" ]; then
  exit 0
fi
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "${PINS[@]}"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --ignore-requires-python "$HARBOR"
echo "$want" >"$VENV/.installed"
echo "harness-deps: ${PINS[*]} $HARBOR in $VENV"
