#!/usr/bin/env bash
# The README's repository tour against the real binary: an agent edits its file, commits,
# opens a pull request; the operator merges it from the CLI; git clones the repository and
# sees the files.
source "$(dirname "$0")/lib/check.bash"

check "init" 0 "$tg" init --demo
check "mission" 0 "$tg" missions create --slug launch --title Launch
check "work" 0 "$tg" works create --slug site --mission launch
check "agent" 0 "$tg" agents create --slug writer --scope work:site --grant canEditAgentFiles \
  --grant canCommitToRepo --grant canOpenPullRequests --grant canCreateAgents

check "editAgentFile" 0 "$tg" call editAgentFile --agent writer --args '{"name":"SOUL.md","body":"# Writer\nI write the site.\n"}'
is "new hash" '.newHash | test("^[0-9a-f]{64}$")'
check "editAgentFile with a secret" 1 "$tg" call editAgentFile --agent writer \
  --args '{"name":"TOOLS.md","body":"token: glpat-'"abcdefghij0123456789"'"}'
is "secret refused by rule and line" '.error.code == "validation_failed" and .error.details.rule == "gitlab_pat" and .error.details.line == 1'
check "commitToRepo" 0 "$tg" call commitToRepo --agent writer \
  --args '{"files":[{"path":"index.md","content":"# Site\n","mode":"add"}],"commitMessage":"Add the index"}'
is "commit answers sha and branch" '(.sha | test("^[0-9a-f]{40}$")) and .branch == "main"'
check "commitToRepo traversal" 1 "$tg" call commitToRepo --agent writer \
  --args '{"files":[{"path":"../x","content":"x","mode":"add"}],"commitMessage":"no"}'
is "traversal refused" '.error.code == "validation_failed"'
check "createSubAgent" 0 "$tg" call createSubAgent --agent writer \
  --args '{"name":"Proof Reader","capabilities":"reads proofs","scope":"work","heartbeatCadence":"0 9 * * MON-FRI"}'
is "sub-agent" '.slug == "proof-reader"'
check "openPullRequest" 0 "$tg" call openPullRequest --agent writer \
  --args '{"files":[{"path":"about.md","content":"# About\n","mode":"add"}],"branchName":"about","title":"Add about","body":"An about page."}'
is "pull request 1" '.prNumber == 1 and (.prUrl | endswith("/repos/demo/works/site/data/pulls/1"))'

check "prs list" 0 "$tg" prs list
has "prs list shows the pull request" 'Add about'
check "prs show" 0 "$tg" prs show work:site/data 1
has "prs show has the diff" '\+\+\+ b/about\.md'
check "prs merge" 0 "$tg" prs merge work:site/data 1
is "merged" '.state == "merged" and .fastForward == true'
check "prs merge again" 1 "$tg" prs merge work:site/data 1
check "prs show bad" 2 "$tg" prs show work:site/data
check "openPullRequest with an empty body" 0 "$tg" call openPullRequest --agent writer \
  --args '{"files":[{"path":"team.md","content":"# Team\n","mode":"add"}],"branchName":"team","title":"Add team","body":""}'
check "prs show of it" 0 "$tg" prs show work:site/data 2
cp "$dir/out" "$dir/shown"
check "its header, one blank line, then the diff" 0 sed -n '2,3p' "$dir/shown"
has "no body shown" '^diff --git a/team\.md b/team\.md$'
check "agents start" 0 "$tg" agents start proof-reader
is "started" '.status == "active" and .previousStatus == "draft"'
check "agents pause" 0 "$tg" agents pause proof-reader
check "agents archive" 0 "$tg" agents archive proof-reader
check "agents unarchive" 0 "$tg" agents unarchive proof-reader
is "unarchived as paused" '.status == "paused"'

check "repos list" 0 "$tg" repos list --json
path=$(jq -r '.repos[] | select(.repo == "work:site/data") | .path' "$dir/out")
check "git clone" 0 git clone -q "$path" "$dir/clone"
for f in index.md about.md .works/agents/writer/SOUL.md .works/agents/proof-reader/agent.yml; do
  check "the clone has $f" 0 test -f "$dir/clone/$f"
done
check "git fsck" 0 git -C "$path" fsck --strict
check "git log" 0 git -C "$dir/clone" log --format=%s
has "git log shows the self-edit" 'chore\(agent/writer\): self-edit'

finish
