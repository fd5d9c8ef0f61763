#!/usr/bin/env bash
# The README's repository tour against the real binary: an agent edits its file, commits,
# opens a pull request; the operator merges it from the CLI; git clones the repository and
# sees the files.
set -euo pipefail
tg=${TG_BINARY:?set by ctest}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export TOOLGATE_DATA=$dir/data
fails=0
check() { # check DESCRIPTION EXPECTED_STATUS COMMAND...
  local what=$1 want=$2
  shift 2
  set +e
  "$@" >"$dir/out" 2>"$dir/err"
  local got=$?
  set -e
  if [ "$got" != "$want" ]; then
    echo "FAIL $what: exit $got, expected $want"
    sed 's/^/  | /' "$dir/out" "$dir/err"
    fails=$((fails + 1))
  fi
}
jqok() { # jqok DESCRIPTION FILTER: the last command's stdout satisfies FILTER
  jq -e "$2" "$dir/out" >/dev/null || { echo "FAIL $1"; sed 's/^/  | /' "$dir/out"; fails=$((fails + 1)); }
}

check "init" 0 "$tg" init --demo
check "mission" 0 "$tg" missions create --slug launch --title Launch
check "work" 0 "$tg" works create --slug site --mission launch
check "agent" 0 "$tg" agents create --slug writer --scope work:site --grant canEditAgentFiles \
  --grant canCommitToRepo --grant canOpenPullRequests --grant canCreateAgents

check "editAgentFile" 0 "$tg" call editAgentFile --agent writer --args '{"name":"SOUL.md","body":"# Writer\nI write the site.\n"}'
jqok "new hash" '.newHash | test("^[0-9a-f]{64}$")'
check "editAgentFile with a secret" 1 "$tg" call editAgentFile --agent writer \
  --args '{"name":"TOOLS.md","body":"token: glpat-'"abcdefghij0123456789"'"}'
jqok "secret refused by rule and line" '.error.code == "validation_failed" and .error.details.rule == "gitlab_pat" and .error.details.line == 1'
check "commitToRepo" 0 "$tg" call commitToRepo --agent writer \
  --args '{"files":[{"path":"index.md","content":"# Site\n","mode":"add"}],"commitMessage":"Add the index"}'
jqok "commit answers sha and branch" '(.sha | test("^[0-9a-f]{40}$")) and .branch == "main"'
check "commitToRepo traversal" 1 "$tg" call commitToRepo --agent writer \
  --args '{"files":[{"path":"../x","content":"x","mode":"add"}],"commitMessage":"no"}'
jqok "traversal refused" '.error.code == "validation_failed"'
check "createSubAgent" 0 "$tg" call createSubAgent --agent writer \
  --args '{"name":"Proof Reader","capabilities":"reads proofs","scope":"work","heartbeatCadence":"0 9 * * MON-FRI"}'
jqok "sub-agent" '.slug == "proof-reader"'
check "openPullRequest" 0 "$tg" call openPullRequest --agent writer \
  --args '{"files":[{"path":"about.md","content":"# About\n","mode":"add"}],"branchName":"about","title":"Add about","body":"An about page."}'
jqok "pull request 1" '.prNumber == 1 and (.prUrl | endswith("/repos/demo/works/site/data/pulls/1"))'

check "prs list" 0 "$tg" prs list
grep -q 'Add about' "$dir/out" || { echo "FAIL prs list shows the pull request"; fails=$((fails + 1)); }
check "prs show" 0 "$tg" prs show work:site/data 1
grep -q '+++ b/about.md' "$dir/out" || { echo "FAIL prs show has the diff"; fails=$((fails + 1)); }
check "prs merge" 0 "$tg" prs merge work:site/data 1
jqok "merged" '.state == "merged" and .fastForward == true'
check "prs merge again" 1 "$tg" prs merge work:site/data 1
check "prs show bad" 2 "$tg" prs show work:site/data
check "agents start" 0 "$tg" agents start proof-reader
jqok "started" '.status == "active" and .previousStatus == "draft"'
check "agents pause" 0 "$tg" agents pause proof-reader
check "agents archive" 0 "$tg" agents archive proof-reader
check "agents unarchive" 0 "$tg" agents unarchive proof-reader
jqok "unarchived as paused" '.status == "paused"'

check "repos list" 0 "$tg" repos list --json
path=$(jq -r '.repos[] | select(.repo == "work:site/data") | .path' "$dir/out")
check "git clone" 0 git clone -q "$path" "$dir/clone"
for f in index.md about.md .works/agents/writer/SOUL.md .works/agents/proof-reader/agent.yml; do
  [ -f "$dir/clone/$f" ] || { echo "FAIL the clone lacks $f"; fails=$((fails + 1)); }
done
check "git fsck" 0 git -C "$path" fsck --strict
check "git log" 0 git -C "$dir/clone" log --format=%s
grep -q 'chore(agent/writer): self-edit' "$dir/out" || { echo "FAIL git log shows the self-edit"; fails=$((fails + 1)); }

echo "$fails failed"
[ "$fails" -eq 0 ]
