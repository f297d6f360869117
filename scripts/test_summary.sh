#!/usr/bin/env bash
# The last line of `make test`: totals over the logs the run wrote, and the smoke tests it
# skipped.
#
#   scripts/test_summary.sh DIR    (DIR holds test.log, static-smoke.log, dist-smoke.log,
#                                   registry-check.log, darwin-check.log)
#
# A skipped smoke test writes no log (its toolchain is missing), so only the logs that exist
# are read: awk given a missing file exits 2, which made `make test` fail on a fresh machine
# after every test had passed. Exits 0; the failures themselves already failed the run.
set -euo pipefail

dir=${1:-target}
logs=()
skipped=()
for name in test static-smoke dist-smoke registry-check darwin-check; do
    if [ -f "$dir/$name.log" ]; then
        logs+=("$dir/$name.log")
    elif [ "$name" != test ]; then
        skipped+=("$name")
    fi
done
if ((${#logs[@]})); then
    awk '/^test result:/ {p+=$4; f+=$6}
         /^(static|dist)-smoke: [0-9]+ passed/ {p+=$2; f+=$4}
         /^darwin-check: [0-9]+ passed/ {p+=$2; f+=$4}
         /^registry-check: [0-9]+ passed/ {p+=$2; f+=$4}
         END {print "total: " p+0 " passed, " f+0 " failed"}' "${logs[@]}"
else
    echo "total: no test log in $dir"
fi
if ((${#skipped[@]})); then
    echo "skipped: ${skipped[*]} (their toolchains are not installed; see the lines above)"
fi
