#!/usr/bin/env bash
# The README's two tours, the CLI's and then the work-management catalog's, run as written
# against the real binary in a scratch folder laid out as a checkout beside shared/: a step
# whose comment says "exit 1" must exit 1 and every other must succeed. TOKEN_ID and
# APPROVAL_ID stand for the ids the steps before them made.
source "$(dirname "$0")/lib/check.bash"
readme=${TG_SOURCE_DIR:?set by ctest}/README.md

# The first sh block under the heading line $1, as written.
block() {
  awk -v h="$1" '$0 == h { on = 1; next }
    on && /^```sh$/ { inside = 1; next }
    inside && /^```$/ { exit }
    inside' "$readme"
}

tour=$dir/tour.sh
{
  echo 'fails() { "$@" && s=0 || s=$?; [ $s = 1 ] || { echo "exit $s, the README says 1: $*" >&2; return 1; }; }'
  echo 'newest_token() { build/toolgate token list --agent scout --json | jq -er ".tokens[0].tokenId"; }'
  echo 'newest_approval() { build/toolgate approvals list --json | jq -er ".approvals[0].id"; }'
  block "## A tour of the CLI"
  block "## The work-management catalog"
} | sed -E -e 's/^(\$B [^#]*[^ #]) +#.*exit 1.*/fails \1/' \
  -e 's/TOKEN_ID/"$(newest_token)"/; s/APPROVAL_ID/"$(newest_approval)"/' >"$tour"

check "the tours are found" 0 grep -c '^\$B' "$tour"
is "each has its steps" '. >= 30'
check "the failing steps are marked" 0 grep -c '^fails ' "$tour"
is "three of them" '. == 3'

mkdir -p "$dir/checkout/build"
ln -s "$(realpath "$tg")" "$dir/checkout/build/toolgate"
ln -s "$(realpath "${TG_TESTDATA:?set by ctest}/..")" "$dir/shared"
check "the tours run as written" 0 bash -c 'cd "$1/checkout" && bash -eo pipefail "$2"' _ "$dir" "$tour"
has "the catalog's task is T-2 after the CLI's tour" '^T-2$'
has "the held call ran once approved" '^T-1 +backlog .* Held$'
finish
