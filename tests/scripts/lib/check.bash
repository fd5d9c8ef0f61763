# Shared by the script tests (sourced, not run): a scratch data folder and checks on the
# real binary that count passes and failures and end with "N passed, M failed".
set -euo pipefail
tg=${TG_BINARY:?set by ctest}
dir=$(mktemp -d)
# A script cut short stops the servers it left in the background (its own jobs, by pid).
trap 'jobs -p | xargs -r kill 2>/dev/null; rm -rf "$dir"' EXIT
export TOOLGATE_DATA=$dir/data
unset TOOLGATE_TOKEN # a command given no caller would act as its holder
passes=0
fails=0

failed() { # failed MESSAGE: counts a failure and shows the last command's output
  echo "FAIL $1"
  sed 's/^/  | /' "$dir/out" "$dir/err"
  fails=$((fails + 1))
}
check() { # check DESCRIPTION EXPECTED_STATUS COMMAND...: runs COMMAND, keeps its output
  local what=$1 want=$2
  shift 2
  set +e
  "$@" >"$dir/out" 2>"$dir/err"
  local got=$?
  set -e
  if [ "$got" != "$want" ]; then failed "$what: exit $got, expected $want"; else passes=$((passes + 1)); fi
}
has() { # has DESCRIPTION PATTERN: the last command's stdout matches PATTERN
  if grep -qE -- "$2" "$dir/out"; then passes=$((passes + 1)); else failed "$1: no '$2' in output"; fi
}
says() { # says DESCRIPTION PATTERN: the last command's stderr matches PATTERN
  if grep -qE -- "$2" "$dir/err"; then passes=$((passes + 1)); else failed "$1: no '$2' in stderr"; fi
}
is() { # is DESCRIPTION JQ_FILTER: the last command's stdout satisfies the filter
  if jq -e "$2" "$dir/out" >/dev/null 2>&1; then passes=$((passes + 1)); else failed "$1: not $2"; fi
}
are() { # are DESCRIPTION JQ_FILTER: the last command's stdout, its JSON values in one array, satisfies the filter
  if jq -se "$2" "$dir/out" >/dev/null 2>&1; then passes=$((passes + 1)); else failed "$1: not $2"; fi
}
finish() { # prints the closing line; the script's status
  echo "$passes passed, $fails failed"
  [ "$fails" -eq 0 ]
}
