#!/usr/bin/env bash
# The CLI end to end against the real binary: the README's tour, exit codes, --help.
source "$(dirname "$0")/lib/check.bash"

check "call before init" 1 "$tg" call agent.tool.list --agent demo
# An empty file where the database goes is none: a command says so and leaves it empty.
mkdir -p "$dir/hollow" && : > "$dir/hollow/toolgate.db"
check "an empty database file" 1 "$tg" --data "$dir/hollow" agents list
says "told there is no database" 'no database in .*/hollow: run .toolgate init --demo. first'
check "left empty" 0 test ! -s "$dir/hollow/toolgate.db"
check "init --demo" 0 "$tg" init --demo
has "init prints the token" 'owner API token \(shown once, keep it\): tg_'
owner_token=$(grep -o 'tg_[A-Za-z0-9_-]*' "$dir/out" | head -1)
check "init twice" 1 "$tg" init --demo
check "migrate" 0 "$tg" migrate
has "migrate is idempotent" 'applied 0 migrations'

check "tools list" 0 "$tg" tools list
has "catalog" 'agent.tool.list'
check "tools list --json" 0 "$tg" tools list --json
is "catalog json" '.tools | map(.canonicalName) | index("admin.agent.create") != null'
check "tools list --agent demo" 0 "$tg" tools list --agent demo --json
is "demo agent's list" '.tools | map(.name) | (index("agent_tool_list") != null) and all(startswith("admin_") | not)'
check "tools list --agent on the api surface" 0 "$tg" tools list --agent demo --surface api --json
is "api surface list" '.tools | map(.name) | index("agent_tool_list") != null'
check "tools list for an unknown agent" 1 "$tg" tools list --agent ghost
is "unknown agent" '.error.code == "not_found"'
check "tools list --surface bad" 2 "$tg" tools list --surface nope

check "call agent.tool.list" 0 "$tg" call agent.tool.list --agent demo --args '{}'
is "call output" '.tools[0].name == "agent_tool_list"'
check "call unknown tool" 1 "$tg" call no.such.tool --agent demo
is "not_found envelope" '.error.code == "not_found"'
check "call an api tool as an agent on its surface" 1 "$tg" call admin.agent.list --agent demo
is "surface envelope" '.error.code == "permission_denied" and .error.details.reason == "surface"'
check "call with bad args" 1 "$tg" call agent.tool.list --agent demo --args '{"x":1}'
is "validation envelope" '.error.code == "validation_failed" and .error.details.violations[0].keyword == "additionalProperties"'
check "call with broken JSON" 2 "$tg" call agent.tool.list --agent demo --args '{'
check "call without a caller" 2 "$tg" call agent.tool.list
check "call as an unknown agent" 1 "$tg" call agent.tool.list --agent ghost
check "dry run" 0 "$tg" call agent.tool.list --agent demo --dry-run
is "dry run" '.allowed == true and (.gates | map(.gate)) == ["run","surface","caller","status","naming","permissions","policy","run_cap","budget","arguments","approval"]'
check "dry run refused" 1 "$tg" call admin.run.list --agent demo --surface api --dry-run
is "refused dry run" '.allowed == false and .error.error.details.missingPermission == "runs.read"'

check "agents create" 0 "$tg" agents create --slug helper --grant canAssignTasks
check "agents create duplicate" 1 "$tg" agents create --slug helper
check "agents create unknown grant" 1 "$tg" agents create --slug typo --grant task.asign
check "agents grant" 0 "$tg" agents grant helper runs.read
check "agents list" 0 "$tg" agents list --json
is "agents list" '.agents | map(select(.slug == "helper"))[0] | .permissions.canAssignTasks == true and (.grants | index("runs.read")) != null'
check "helper reads runs on the api surface" 0 "$tg" call admin.run.list --agent helper --surface api
check "agents revoke" 0 "$tg" agents revoke helper runs.read
check "revoked at once" 1 "$tg" call admin.run.list --agent helper --surface api
check "token create" 0 "$tg" token create --agent helper
token=$(jq -r .token "$dir/out")
check "token list before use" 0 "$tg" token list --agent helper --json
is "a token never used" '.tokens[0].lastUsedAt == null'
check "dry run by token" 0 "$tg" call agent.tool.list --token "$token" --dry-run
check "token list after a dry run" 0 "$tg" token list --agent helper --json
is "a dry run writes no use" '.tokens[0].lastUsedAt == null'
check "call by token" 0 "$tg" call agent.tool.list --token "$token"
# An agent's token calls as an agent: the operators' surface is not its own.
check "an agent's token on an api tool" 1 "$tg" call work.task.assign --token "$token" --args '{}'
is "refused for its surface" '.error.details.reason == "surface" and .error.details.surface == "agent"'
check "call by a bad token" 1 "$tg" call agent.tool.list --token tg_nope
# TOOLGATE_TOKEN keeps the token off the command line; a caller named on it wins.
check "call by TOOLGATE_TOKEN" 0 env TOOLGATE_TOKEN="$token" "$tg" call agent.tool.list
is "as the token's holder" '.tools | map(.name) | index("agent_tool_list") != null'
check "call by a bad TOOLGATE_TOKEN" 1 env TOOLGATE_TOKEN=tg_nope "$tg" call agent.tool.list
says "the token in TOOLGATE_TOKEN named" 'the token in TOOLGATE_TOKEN is unknown or revoked'
check "a caller named over TOOLGATE_TOKEN" 0 env TOOLGATE_TOKEN=tg_nope "$tg" call \
  admin.policy.list --user owner
check "an empty TOOLGATE_TOKEN names no caller" 2 env TOOLGATE_TOKEN= "$tg" call agent.tool.list
check "token list" 0 "$tg" token list --agent helper --json
is "token listed by id and prefix" ".tokens | length == 1 and .[0].prefix == \"${token:0:11}\" and .[0].holder == \"agent:helper\" and .[0].revokedAt == null"
is "a call by token is its use" '.tokens[0].lastUsedAt | type == "string"'
token_id=$(jq -r '.tokens[0].tokenId' "$dir/out")
check "token list text" 0 "$tg" token list
has "token list shows the holder" "^$token_id +tg_[A-Za-z0-9_-]+ +agent:helper"
check "token list with two holders" 2 "$tg" token list --user owner --agent helper
check "token revoke" 0 "$tg" token revoke "$token_id"
is "token revoked" '.changed == true and (.revokedAt | type) == "string"'
check "call by a revoked token" 1 "$tg" call agent.tool.list --token "$token"
check "token revoke again" 0 "$tg" token revoke "$token_id"
is "token revoked once" '.changed == false'
check "revoked token not listed" 0 "$tg" token list --agent helper --json
is "no live token" '.tokens == []'
check "revoked token listed with --all" 0 "$tg" token list --agent helper --all --json
is "revoked token" '.tokens[0].revokedAt != null'
check "token revoke unknown" 1 "$tg" token revoke no-such-token
is "unknown token" '.error.code == "not_found"'
check "mcp with a revoked token" 1 "$tg" mcp --token "$token"
says "revoked token" 'the token is unknown or revoked'
check "mcp with a revoked TOOLGATE_TOKEN" 1 env TOOLGATE_TOKEN="$token" "$tg" mcp
says "revoked token in TOOLGATE_TOKEN" 'the token in TOOLGATE_TOKEN is unknown or revoked'
check "agents create a draft" 0 "$tg" agents create --slug drafty --status draft
check "mcp as a draft agent" 0 "$tg" mcp --agent drafty </dev/null
says "a draft agent is offered no tools" 'agent drafty is draft: it is offered no tools'
# A client gone before its answer is written: reported, not a death by SIGPIPE (status 141).
check "mcp whose output is closed" 1 bash -c '{ sleep 1; echo "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}"; } |
  "$0" mcp --agent drafty | true; exit "${PIPESTATUS[1]}"' "$tg"
says "output closed reported" 'mcp: stopped: output closed'
# Told to stop (SIGTERM) while its client reads none of its output, so that a write waits on
# the client: it gives up the message it was writing and ends.
check "mcp told to stop while its output is full" 0 bash -c '
  mkfifo "$1/mcp.in" "$1/mcp.out"
  "$0" mcp --agent demo <"$1/mcp.in" >"$1/mcp.out" 2>"$1/mcp.err" &
  pid=$!
  exec 7>"$1/mcp.in" 8<"$1/mcp.out"
  for i in $(seq 64); do printf "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"tools/list\"}\n" "$i"; done >&7
  for _ in $(seq 300); do grep -q "serving stdio" "$1/mcp.err" && break; sleep 0.1; done
  sleep 1 # their answers fill the pipe long before
  kill -TERM "$pid"
  for _ in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid"; echo "it never ended" >&2; fi
  wait "$pid"; status=$?
  cat "$1/mcp.err" >&2
  exit "$status"' "$tg" "$dir"
says "the message cut short" 'the message being written is cut short'
check "serve --no-auth as an unknown agent" 1 "$tg" serve --no-auth --agent ghost --listen 127.0.0.1:0
says "unknown agent named" "no agent 'ghost' in this workspace"
cp "$dir/err" "$dir/ghost.err"
check "no rate limit told by a server that does not start" 1 grep -q 'bucket of' "$dir/ghost.err"
check "mcp as an unknown agent" 1 "$tg" mcp --agent ghost
says "unknown agent named by mcp" "no agent 'ghost' in this workspace"
cp "$dir/err" "$dir/ghost.err"
check "nor by a stdio server that does not start" 1 grep -q 'bucket of' "$dir/ghost.err"
check "serve on a port past 65535" 2 "$tg" serve --listen 127.0.0.1:99999
says "bad port" 'the port must be a number from 0 to 65535'
check "refused before it starts: its reason alone" 0 test "$(wc -l <"$dir/err")" = 1
check "serve without a port" 2 "$tg" serve --listen 127.0.0.1
says "HOST:PORT wanted" 'cannot use --listen 127.0.0.1: give HOST:PORT'
check "serve --no-auth off loopback" 2 "$tg" serve --no-auth --listen 0.0.0.0:0
says "loopback only" 'only allowed on a loopback address'
# A port another server holds: the error says how to pick another.
# port_of LOG: the port a server logged it listens on, once it did (empty after 10 s).
port_of() {
  local p=""
  for _ in $(seq 100); do
    p=$(grep -o 'listening on 127\.0\.0\.1:[0-9]*' "$1" | cut -d: -f2 || true)
    [ -n "$p" ] && break
    sleep 0.1
  done
  echo "$p"
}
"$tg" serve --no-auth --listen 127.0.0.1:0 2>"$dir/first.log" &
first=$!
port=$(port_of "$dir/first.log")
if [ -n "$port" ]; then
  check "serve on a busy port" 1 timeout 30 "$tg" serve --no-auth --listen "127.0.0.1:$port"
  says "busy port" 'Address already in use \(another server has it: give another with --listen HOST:PORT\)'
  cp "$dir/err" "$dir/busy.err"
  check "no rate limit told by a server that could not listen" 1 grep -q 'bucket of' "$dir/busy.err"
else
  failed "serve on a busy port: the first server did not start"
fi
kill -TERM "$first" 2>/dev/null || true
check "the server on the busy port stops" 0 wait "$first"
# A log no one reads any more (its pipe closed once the port was read) is no death by
# SIGPIPE: the line a bad token logs is dropped, and the server goes on.
"$tg" serve --listen 127.0.0.1:0 2> >(grep -m1 -o 'listening on 127\.0\.0\.1:[0-9]*' >"$dir/port") &
quiet=$!
for _ in $(seq 100); do [ -s "$dir/port" ] && break; sleep 0.1; done
port=$(cut -d: -f2 <"$dir/port")
sleep 0.5 # the log's reader gone
check "a bad token, its log line unread" 0 curl -s -o /dev/null -w '%{http_code}' \
  -H 'Authorization: Bearer tg_nope' "http://127.0.0.1:$port/mcp" -d '{}'
has "refused" '^401$'
check "serving on, its log closed" 0 curl -sf "http://127.0.0.1:$port/healthz"
kill -TERM "$quiet" 2>/dev/null || true
check "ended as told" 0 wait "$quiet"
# A token's last use: written by the server's sweep within seconds of its first, and the
# last minute's once more as it stops, also on SIGHUP (its terminal closing), which stops it
# as SIGTERM does; a message served on stdio is one too.
check "token for uses" 0 "$tg" token create --agent demo
use_token=$(jq -r .token "$dir/out")
last_use() { "$tg" token list --agent demo --json | jq -r --arg p "${use_token:0:11}" '.tokens[] | select(.prefix == $p) | .lastUsedAt'; }
"$tg" serve --listen 127.0.0.1:0 2>"$dir/uses.log" &
uses=$!
port=$(port_of "$dir/uses.log")
ping_by_token() {
  curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $use_token" \
    -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' \
    -H 'MCP-Protocol-Version: 2026-07-28' -H 'Mcp-Method: server/discover' \
    "http://127.0.0.1:$port/mcp" -d '{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}'
}
check "a request by token" 0 ping_by_token
has "answered" '^200$'
first_use=null
for _ in $(seq 100); do first_use=$(last_use); [ "$first_use" != null ] && break; sleep 0.1; done
if [ "$first_use" != null ]; then passes=$((passes + 1)); else failed "the server wrote no use of the token"; fi
sleep 0.01
check "another request by token" 0 ping_by_token
kill -HUP "$uses" 2>/dev/null || true
check "the server stops on SIGHUP" 0 wait "$uses"
later_use=$(last_use)
if [[ "$later_use" > "$first_use" ]]; then passes=$((passes + 1)); else failed "the last use ($later_use) was not written at the stop (first $first_use)"; fi
# Started ignoring SIGHUP (nohup), it outlives its terminal: a hangup does not stop it, and
# the SIGTERM after it does (a SIGHUP waited for would be heard first, being pending first).
(trap '' HUP; exec "$tg" serve --listen 127.0.0.1:0 2>"$dir/nohup.log") &
nohup_server=$!
[ -n "$(port_of "$dir/nohup.log")" ] || failed "the server under nohup did not start"
kill -HUP "$nohup_server" 2>/dev/null || true
kill -TERM "$nohup_server" 2>/dev/null || true
check "the server under nohup stops on SIGTERM" 0 wait "$nohup_server"
check "a hangup ignored under nohup" 0 grep -q 'stopping on signal 15' "$dir/nohup.log"
check "a message by token on stdio" 0 bash -c 'echo "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"server/discover\",\"params\":{\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\",\"io.modelcontextprotocol/clientCapabilities\":{}}}}" | "$0" mcp --token "$1"' "$tg" "$use_token"
stdio_use=$(last_use)
check "a message by TOOLGATE_TOKEN on stdio" 0 bash -c 'echo "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\",\"params\":{\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\",\"io.modelcontextprotocol/clientCapabilities\":{}}}}" | TOOLGATE_TOKEN="$1" "$0" mcp' "$tg" "$use_token"
is "answered by TOOLGATE_TOKEN" '.id == 1 and (.result.tools | length) > 0'
says "serving by TOOLGATE_TOKEN" 'serving stdio as .* \(by TOOLGATE_TOKEN\)'
if [[ "$stdio_use" > "$later_use" ]]; then passes=$((passes + 1)); else failed "stdio wrote no use ($stdio_use after $later_use)"; fi
check "call as the owner user" 0 "$tg" call admin.policy.list --user owner
check "an agent's call after it" 0 "$tg" call agent.tool.list --agent demo
check "runs calls of a user" 0 "$tg" runs calls --user owner --limit 1 --json
is "the user's last call, newest first, not the agent's" \
  '.truncated and (.calls | length) == 1 and .calls[0].step == "tool:admin.policy.list"
   and .calls[0].metadata.surface == "api"'
check "runs calls of an unknown user" 1 "$tg" runs calls --user ghost
is "unknown user named" '.error.code == "not_found" and .error.details.username == "ghost"'
check "runs calls without --user" 2 "$tg" runs calls
check "a user's calls need runs.read" 1 \
  "$tg" call admin.user.calls --agent helper --surface api --args '{"username":"owner"}'
is "runs.read missing" '.error.code == "permission_denied" and .error.details.missingPermission == "runs.read"'
check "policy set" 0 "$tg" policy set agent.tool.list disabled
check "disabled by policy" 1 "$tg" call agent.tool.list --agent demo
is "policy envelope" '.error.details.reason == "disabled_by_policy"'
check "policy back to default" 0 "$tg" policy set agent_tool_list default
check "policy list" 0 "$tg" policy list
# A tool held for approval: the call asks, someone else decides, the very call runs once.
held='{"title":"Held"}'
check "policy set approval" 0 "$tg" policy set work.task.create approval
check "a held call" 1 "$tg" call work.task.create --agent demo --args "$held"
is "refused with its request" '.error.code == "precondition_failed"
  and .error.details.reason == "approval_required" and (.error.details.approvalId | length) == 36'
approval=$(jq -r .error.details.approvalId "$dir/out")
check "approvals list" 0 "$tg" approvals list --json
is "the request with its caller and arguments" ".approvals | length == 1 and .[0].id == \"$approval\"
  and .[0].caller == \"demo\" and .[0].args.title == \"Held\" and .[0].status == \"pending\""
check "approvals list text" 0 "$tg" approvals list
has "one line a request" "^$approval pending .* agent by demo: work.task.create"
check "approvals show" 0 "$tg" approvals show "$approval"
has "the arguments whole" '"title": "Held"'
check "approvals show of an unknown request" 1 "$tg" approvals show nope
is "unknown request shown" '.error.code == "not_found" and .error.details.approvalId == "nope"'
held_call='{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"work_task_create",'\
'"arguments":{"title":"Held"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",'\
'"io.modelcontextprotocol/clientCapabilities":{}}}}'
check "the same call over MCP" 0 bash -c 'echo "$1" | "$0" mcp --agent demo' "$tg" "$held_call"
is "waits for the same request" ".result.isError
  and .result.structuredContent.error.details.approvalId == \"$approval\""
check "no task while it waits" 0 "$tg" tasks list --json
is "no task" '.tasks | map(select(.title == "Held")) | length == 0'
check "an agent cannot approve" 1 "$tg" call agent.approval.resolve --agent demo --surface api \
  --args "{\"approvalId\":\"$approval\",\"decision\":\"approve\"}"
is "no agent decides" '.error.code == "permission_denied" and .error.details.reason == "people_only"'
check "approvals approve" 0 "$tg" approvals approve "$approval" --note "looks fine"
has "approved for the hour" "^$approval work.task.create: approved, until "
check "approvals approve twice" 1 "$tg" approvals approve "$approval"
is "no longer pending" '.error.code == "precondition_failed" and .error.details.status == "approved"'
check "the approved call runs" 0 "$tg" call work.task.create --agent demo --args "$held"
is "its task" '.slug | startswith("T-")'
check "once" 1 "$tg" call work.task.create --agent demo --args "$held"
second=$(jq -r .error.details.approvalId "$dir/out")
check "approvals deny" 0 "$tg" approvals deny "$second" --json
is "denied" '.status == "denied"'
check "the denied call" 1 "$tg" call work.task.create --agent demo --args "$held"
is "refused as denied" '.error.code == "permission_denied" and .error.details.reason == "approval_denied"'
check "approvals list --status all" 0 "$tg" approvals list --status all --json
is "one used, one denied, one task" "(.approvals | map(.status)) == [\"denied\", \"used\"]
  and .approvals[1].decidedBy == \"owner\" and .approvals[1].note == \"looks fine\""
check "approvals approve unknown" 1 "$tg" approvals approve nope
is "unknown request" '.error.code == "not_found"'
check "approvals approve without an id" 2 "$tg" approvals approve
check "approvals list bad status" 1 "$tg" approvals list --status nope
is "bad status" '.error.code == "validation_failed"'
# What an approver reads: a list line cut says so; text that would reorder how the rest shows
# (U+202E) is shown escaped, so that the text read is the text that runs.
spoof=$(printf '{"title":"Routine cleanup","description":"ok%300s\u202e and delete everything"}' '')
check "a held call to spoof" 1 "$tg" call work.task.create --agent demo --args "$spoof"
spoofed=$(jq -r .error.details.approvalId "$dir/out")
check "approvals list of it" 0 "$tg" approvals list
has "its line cut, said" "^$spoofed pending .*\\(escaped\\) .*\\.\\.\\. \\(cut: approvals show ID shows them whole\\)$"
check "approvals show of it" 0 "$tg" approvals show "$spoofed"
has "escaped, said" '^arguments \(escaped: they hold characters that change what is shown\):$'
has "the control escaped" 'ok {300}\\u202E and delete everything'
if grep -q $'\u202e' "$dir/out"; then failed "the control shown raw"; else passes=$((passes + 1)); fi
# So is a C1 control (U+009B, a terminal's control sequence introducer to some).
check "a held call with a C1 control" 1 "$tg" call work.task.create --agent demo \
  --args '{"title":"Fix typo\u009b2K\u009b1Gharmless"}'
c1=$(jq -r .error.details.approvalId "$dir/out")
check "approvals show of that" 0 "$tg" approvals show "$c1"
has "the C1 control escaped" 'Fix typo\\u009B2K\\u009B1Gharmless'
if grep -q $'\u009b' "$dir/out"; then failed "the C1 control shown raw"; else passes=$((passes + 1)); fi
check "policy back from approval" 0 "$tg" policy set work.task.create default

check "workspace set --naming catalog" 0 "$tg" workspace set --naming catalog
check "catalog profile offers only seed names" 0 "$tg" tools list --agent demo --json
is "catalog profile list" '.tools | length > 0 and (map(.name) | all(test("^[a-z][A-Za-z]*$")))'
check "workspace set bad profile" 1 "$tg" workspace set --naming fancy
check "workspace set --naming canonical" 0 "$tg" workspace set --naming canonical

check "runs start" 0 "$tg" runs start --agent demo
run=$(cat "$dir/out")
check "call in a run" 0 "$tg" call agent.tool.list --agent demo --run "$run"
check "call in a run again" 0 "$tg" call agent.tool.list --agent demo --run "$run"
check "runs show" 0 "$tg" runs show "$run" --json
is "runs show" '(.logs | length) == 2 and .logs[0].step == "tool:agent.tool.list" and .logs[0].level == "INFO"
  and .truncated == false'
# A run of more rows than it shows (1000) says so, in JSON and in text.
check "runs start for many calls" 0 "$tg" runs start --agent demo
long_run=$(cat "$dir/out")
for i in $(seq 1001); do
  printf '{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"agent_tool_list",%s}\n' "$i" \
    '"arguments":{},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}'
done >"$dir/calls.jsonl"
check "1001 calls in it" 0 "$tg" mcp --agent demo --run "$long_run" --rate-limit off <"$dir/calls.jsonl"
check "runs show of it" 0 "$tg" runs show "$long_run" --json
is "its first 1000 rows, truncated" '(.logs | length) == 1000 and .truncated == true'
check "runs show of it, as text" 0 "$tg" runs show "$long_run"
has "the rows left out said" "more rows than shown: these are the run's first 1000"
check "runs end of it" 0 "$tg" runs end "$long_run"
check "runs list" 0 "$tg" runs list --agent demo
check "runs list --json" 0 "$tg" runs list --agent demo --json
is "the agent's runs" "(.runs | map(.id) | index(\"$run\")) != null and all(.runs[]; .agent == \"demo\")"
check "runs list of an unknown agent" 1 "$tg" runs list --agent nobody
is "unknown agent named" '.error.code == "not_found" and .error.message == "No agent nobody in this workspace."'
check "runs end" 0 "$tg" runs end "$run"
check "call in an ended run" 1 "$tg" call agent.tool.list --agent demo --run "$run"
check "call in a run of a too long id" 1 "$tg" call agent.tool.list --agent demo --run "$run-x"
is "too long a run id refused, not echoed" '.error.code == "validation_failed"
  and .error.details.reason == "bad_run_id" and (tostring | contains("-x") | not)'
# A stdio server started in a run attaches every call to it, as 'call --run' does.
stdio_call='{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"agent_tool_list",'\
'"arguments":{},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",'\
'"io.modelcontextprotocol/clientCapabilities":{}}}}'
check "runs start for a stdio server" 0 "$tg" runs start --agent demo
stdio_run=$(cat "$dir/out")
check "a stdio server in a run" 0 bash -c 'echo "$2" | "$0" mcp --agent demo --run "$1"' \
  "$tg" "$stdio_run" "$stdio_call"
is "its call answered" '.result.structuredContent.tools | length > 0'
check "runs show of the stdio server's run" 0 "$tg" runs show "$stdio_run" --json
is "the call is the run's" '(.logs | length) == 1 and .logs[0].step == "tool:agent.tool.list"
  and .logs[0].metadata.surface == "mcp"'
# A run that would refuse every call stops the server before it serves.
check "a stdio server in an unknown run" 1 bash -c 'echo "$1" | "$0" mcp --agent demo --run nope' \
  "$tg" "$stdio_call"
says "the run named" '--run: No run nope of this agent'
check "runs end of it" 0 "$tg" runs end "$stdio_run"
check "a stdio server in an ended run" 1 bash -c 'echo "$2" | "$0" mcp --agent demo --run "$1"' \
  "$tg" "$stdio_run" "$stdio_call"
says "the run ended" "is completed, not running"
check "a user's stdio server in a run" 1 "$tg" mcp --token "$owner_token" --run "$stdio_run"
says "runs are agents'" "--run: Only agents' calls belong to runs"
check "the ended run kept its one call" 0 "$tg" runs show "$stdio_run" --json
is "no row for the servers refused" '(.logs | length) == 1'
check "runs list bad limit" 2 "$tg" runs list --limit x
# Without --run, an active agent's stdio server is a run of its own, opened at its first call
# and ended when the server stops: a per-run cap (one editAgentFile a run) binds for the
# session. The server writes the run itself, so an operator tool held by the policy does not
# stop it.
check "policy holds admin.run.start" 0 "$tg" policy set admin.run.start disabled
edit_call='{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"agent_file_edit",'\
'"arguments":{"name":"SOUL.md","body":"Calm."},"_meta":{"io.modelcontextprotocol/protocolVersion":'\
'"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}'
check "a stdio server in a run of its own" 0 bash -c 'printf "%s\n%s\n" "$1" "${1/\"id\":1/\"id\":2}" |
  "$0" mcp --agent demo' "$tg" "$edit_call"
are "its second edit refused by the cap of its run" '(.[0].result.isError | not)
  and .[1].result.structuredContent.error.details.reason == "per_run_cap"'
check "runs list after it" 0 "$tg" runs list --agent demo --limit 1 --json
is "one run of mcp for both calls, ended" '.runs[0].calls == 2 and .runs[0].status == "completed"
  and .runs[0].trigger == "mcp"'
check "policy back" 0 "$tg" policy set admin.run.start default
# A client that starts the server only to look (claude mcp list: initialize, tools/list)
# leaves no run.
check "runs list before the look" 0 "$tg" runs list --agent demo --limit 1 --json
newest_run=$(jq -r '.runs[0].id' "$dir/out")
look='{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25",'\
'"capabilities":{},"clientInfo":{"name":"t","version":"1"}}}'
check "a stdio server asked for its tools only" 0 bash -c 'printf "%s\n%s\n%s\n" "$1" \
  "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}" \
  "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\"}" | "$0" mcp --agent demo' \
  "$tg" "$look"
are "its tools listed" '.[1].result.tools | length > 0'
check "runs list after the look" 0 "$tg" runs list --agent demo --limit 1 --json
is "no run for it" ".runs[0].id == \"$newest_run\""
# A server's rate limit: past it a call is refused with rate_limited, an unknown tool's too,
# and the server goes on serving.
unknown_call=${stdio_call/agent_tool_list/no_such_tool}
printf '%s\n' "$stdio_call" "${stdio_call/\"id\":1/\"id\":2}" "${stdio_call/\"id\":1/\"id\":3}" \
  "${unknown_call/\"id\":1/\"id\":4}" "${unknown_call/\"id\":1/\"id\":5}" >"$dir/limited.in"
check "a stdio server limited to two calls an hour" 0 bash -c '"$0" mcp --token "$2" \
  --rate-limit 2/3600 <"$1"' "$tg" "$dir/limited.in" "$owner_token"
are "its third call and the unknown tool's refused" '(.[0].result.isError | not)
  and (.[1].result.isError | not) and ([.[2:5][] | .result.isError
  and .result.structuredContent.error.code == "rate_limited"
  and .result.structuredContent.error.details.retryAfterMs > 0
  and .result.structuredContent.error.details.limit == 2] | length == 3 and all)'
says "the limit logged" 'each caller has a bucket of 2 tool calls, refilled in 3600 s'
# A refusal gets a row unless one did within the second; the count of those that did not is
# written by the next row, the server's idle look or its stop, whichever comes first.
refusals_of_owner() { # the number of calls refused for their rate, as the owner's rows count them
  "$tg" runs calls --user owner --limit 100 --json |
    jq '[.calls[] | select(.metadata.code == "rate_limited") | .metadata.refusals] | add'
}
check "the calls of the owner it acted as" 0 refusals_of_owner
has "its three refusals counted" '^3$'
# A call the MCP layer refuses before the call path (a request state that does not open)
# counts too.
forged_call=${stdio_call/\"arguments\":\{\}/\"arguments\":\{\},\"requestState\":\"forged\"}
check "a forged state, then a call, a call an hour" 0 bash -c 'printf "%s\n%s\n" "$1" "$2" |
  "$0" mcp --agent demo --rate-limit 1/3600' "$tg" "$forged_call" "${stdio_call/\"id\":1/\"id\":2}"
are "the forged one refused as such, then the call for its rate" '(.[0].error.code == -32602)
  and .[1].result.structuredContent.error.code == "rate_limited"'
check "a stdio server unlimited" 0 bash -c '"$0" mcp --agent demo --rate-limit off <"$1"' \
  "$tg" "$dir/limited.in"
are "every call answered" '([.[0:3][] | .result.isError | not] | all)
  and ([.[3:5][] | .error.code == -32602] | all)'
says "no limit, loudly" 'warn: mcp: --rate-limit off'
check "mcp with a bad rate limit" 2 "$tg" mcp --agent demo --rate-limit 0/60
says "told what it takes" 'takes CALLS/SECONDS'
check "serve with a bad rate limit" 2 "$tg" serve --rate-limit 10
"$tg" serve --listen 127.0.0.1:0 --no-auth --rate-limit 1/3600 2>"$dir/limited.log" &
limited=$!
port=$(port_of "$dir/limited.log")
call_over_http() {
  curl -s -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' \
    -H 'MCP-Protocol-Version: 2026-07-28' -H 'Mcp-Method: tools/call' \
    -H 'Mcp-Name: agent_tool_list' "http://127.0.0.1:$port/mcp" -d "$stdio_call"
}
check "an HTTP server limited to a call an hour" 0 call_over_http
is "its first call answered" '.result.isError | not'
check "a second call to it" 0 call_over_http
is "refused for its rate" '.result.structuredContent.error.code == "rate_limited"
  and .result.structuredContent.error.details.perSeconds == 3600'
check "a third call to it" 0 call_over_http
kill -TERM "$limited" 2>/dev/null || true
check "the limited server stops" 0 wait "$limited"
check "the owner's calls after it" 0 refusals_of_owner
has "its two refusals counted too" '^5$'
# A stdio server killed (SIGKILL) leaves its run running; the next server on the machine ends
# it failed, and leaves the run of a server still serving alone.
logged_run() { # logged_run LOG: the run a stdio server logs it opened, once it did ("" if not)
  for _ in $(seq 100); do grep -q 'calls are run' "$1" && break; sleep 0.1; done
  sed -n 's/.*calls are run \([0-9a-f-]*\).*/\1/p' "$1"
}
serve_held() { # serve_held NAME: a stdio server of demo that made a call, so is in its run,
  # its input open on fd 8 (NAME 'b') or 7
  mkfifo "$dir/$1.in"
  if [ "$1" = b ]; then exec 8<>"$dir/$1.in"; else exec 7<>"$dir/$1.in"; fi
  "$tg" mcp --agent demo <"$dir/$1.in" >/dev/null 2>"$dir/$1.err" 7>&- 8>&- & # holds no writer
  held_pid=$!
  echo "$stdio_call" >"$dir/$1.in"
  held_run=$(logged_run "$dir/$1.err")
  [ -n "$held_run" ] || failed "the stdio server $1 opened no run"
}
serve_held a
killed_pid=$held_pid killed_run=$held_run
check "a stdio server killed" 0 kill -KILL "$killed_pid"
{ wait "$killed_pid"; } 2>/dev/null || true # without its "Killed" line
exec 7>&-
check "runs show of its run" 0 "$tg" runs show "$killed_run" --json
is "left running" '.run.status == "running" and .run.trigger == "mcp" and .run.endedAt == null'
serve_held b
check "the next server's run" 0 "$tg" runs show "$held_run" --json
is "is running" '.run.status == "running"'
check "its log" 0 cat "$dir/b.err"
has "says it ended the killed server's run" 'ended 1 run of servers gone'
check "runs show of the killed server's run" 0 "$tg" runs show "$killed_run" --json
is "ended failed" '.run.status == "failed" and .run.endedAt != null'
check "a server beside the one serving" 0 bash -c 'echo "$1" | "$0" mcp --agent demo' \
  "$tg" "$stdio_call"
if grep -q 'ended .* run' "$dir/err"; then failed "it ended no run"; else passes=$((passes + 1)); fi
check "runs show of the serving one's run" 0 "$tg" runs show "$held_run" --json
is "still running" '.run.status == "running" and .run.endedAt == null'
exec 8>&-
wait "$held_pid"
check "runs show once its input closed" 0 "$tg" runs show "$held_run" --json
is "ended completed" '.run.status == "completed"'
# An HTTP server ends them too as it starts.
serve_held c
killed_pid=$held_pid killed_run=$held_run
check "another stdio server killed" 0 kill -KILL "$killed_pid"
{ wait "$killed_pid"; } 2>/dev/null || true
exec 7>&-
"$tg" serve --no-auth --listen 127.0.0.1:0 2>"$dir/reaper.log" &
reaper=$!
[ -n "$(port_of "$dir/reaper.log")" ] || failed "the HTTP server did not start"
check "runs show once an HTTP server started" 0 "$tg" runs show "$killed_run" --json
is "the killed server's run ended failed" '.run.status == "failed" and .run.endedAt != null'
kill -TERM "$reaper"
check "the HTTP server stops" 0 wait "$reaper"
check "the HTTP server's log" 0 cat "$dir/reaper.log"
has "says it ended the run" 'ended 1 run of servers gone'
# An agent's 2025-11-25 session over HTTP is a run too, opened at its first call: a server
# killed leaves it running, and the next server ends it failed. A user's session is none.
http_post() { # http_post PORT [HEADER...] BODY: says the HTTP status, the headers in $dir/headers
  local port=$1 args=()
  shift
  while [ $# -gt 1 ]; do args+=(-H "$1"); shift; done
  curl -s -D "$dir/headers" -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json' \
    -H 'Accept: application/json, text/event-stream' "${args[@]}" "http://127.0.0.1:$port/mcp" \
    -d "$1"
}
http_session() { # http_session PORT: opens a 2025-11-25 session and calls a tool in it
  local sid
  [ "$(http_post "$1" '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}')" = 200 ] ||
    return 1
  sid=$(tr -d '\r' < "$dir/headers" | sed -n 's/^[Mm]cp-[Ss]ession-[Ii]d: //p')
  set -- "$1" "Mcp-Session-Id: $sid" 'MCP-Protocol-Version: 2025-11-25'
  [ "$(http_post "$@" '{"jsonrpc":"2.0","method":"notifications/initialized"}')" = 202 ] &&
    http_post "$@" '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"agent_tool_list","arguments":{}}}'
}
"$tg" serve --no-auth --agent demo --listen 127.0.0.1:0 2>"$dir/session.log" &
session_server=$!
port=$(port_of "$dir/session.log")
check "a session of demo over HTTP" 0 http_session "$port"
has "opened" '^200$'
check "runs list after it" 0 "$tg" runs list --agent demo --limit 1 --json
is "its run, running" '.runs[0].status == "running" and .runs[0].trigger == "mcp"
  and .runs[0].calls == 1'
killed_run=$(jq -r '.runs[0].id' "$dir/out")
# Killed and waited for in one block: its "Killed" line goes where the block's stderr does.
{ kill -KILL "$session_server" && { wait "$session_server" || true; }; } 2>/dev/null ||
  failed "the HTTP server could not be killed"
"$tg" serve --no-auth --listen 127.0.0.1:0 2>"$dir/owner.log" &
owner_server=$!
port=$(port_of "$dir/owner.log")
check "runs show once the next HTTP server started" 0 "$tg" runs show "$killed_run" --json
is "the killed server's session run ended failed" '.run.status == "failed"'
check "the newest run before a user's session" 0 "$tg" runs list --limit 1 --json
newest=$(jq -r '.runs[0].id' "$dir/out")
check "a session of the owner over HTTP" 0 http_session "$port"
has "opened" '^200$'
check "the newest run after it" 0 "$tg" runs list --limit 1 --json
is "no run for it" ".runs[0].id == \"$newest\""
kill -TERM "$owner_server"
check "the owner's HTTP server stops" 0 wait "$owner_server"
check "its log" 0 cat "$dir/owner.log"
has "says it ended the run" 'ended 1 run of servers gone'
# By an agent's token too; a user's calls and a draft agent's get no run.
check "token for the stdio run" 0 "$tg" token create --agent demo
check "a stdio server by an agent's token" 0 bash -c 'echo "$1" | "$0" mcp --token "$2"' \
  "$tg" "$stdio_call" "$(jq -r .token "$dir/out")"
check "runs list after the token's server" 0 "$tg" runs list --agent demo --limit 1 --json
is "its run" '.runs[0].calls == 1 and .runs[0].trigger == "mcp"'
# One whose token is revoked as it serves stops, and its run ends cancelled, as an HTTP
# session's does.
check "a token to revoke" 0 "$tg" token create --agent demo
mkfifo "$dir/revoked.in"
exec 5<>"$dir/revoked.in"
"$tg" mcp --token "$(jq -r .token "$dir/out")" <"$dir/revoked.in" >/dev/null \
  2>"$dir/revoked.err" 5>&- &
revoked_pid=$!
revoked_token=$(jq -r .tokenId "$dir/out")
echo "$stdio_call" >&5
revoked_run=$(logged_run "$dir/revoked.err")
check "its token revoked" 0 "$tg" token revoke "$revoked_token"
echo '{"jsonrpc":"2.0","id":2,"method":"ping"}' >&5
check "the server of a revoked token stops" 1 wait "$revoked_pid"
exec 5>&-
check "its log" 0 cat "$dir/revoked.err"
has "says why" 'stopped: its token was revoked'
check "runs show of its run" 0 "$tg" runs show "$revoked_run" --json
is "ended cancelled" '.run.status == "cancelled" and .run.endedAt != null'
check "a stdio server by the owner's token" 0 bash -c 'echo "$1" | "$0" mcp --token "$2"' \
  "$tg" "$stdio_call" "$owner_token"
is "served" '.result.structuredContent.tools | length > 0'
check "a stdio server of a draft agent" 0 bash -c 'echo "$1" | "$0" mcp --agent drafty' \
  "$tg" "$stdio_call"
check "runs list of the draft agent" 0 "$tg" runs list --agent drafty --json
is "no run for it" '.runs == []'
# Started while the server serves, the agent's next call opens the server's run, which
# ends with the server.
mkfifo "$dir/late.in"
exec 6<>"$dir/late.in"
"$tg" mcp --agent drafty <"$dir/late.in" >"$dir/late.out" 2>"$dir/late.err" 6>&- &
late_pid=$!
answered() { # answered N: waits for the late server's Nth answer
  for _ in $(seq 100); do [ "$(wc -l <"$dir/late.out")" -ge "$1" ] && return; sleep 0.1; done
  failed "the late server gave no answer $1"
}
echo "$stdio_call" >&6
answered 1
check "runs list of the draft agent serving" 0 "$tg" runs list --agent drafty --json
is "no run for it yet" '.runs == []'
check "agents start drafty" 0 "$tg" agents start drafty
echo "${stdio_call/\"id\":1/\"id\":2}" >&6
answered 2
exec 6>&-
check "the late server ends" 0 wait "$late_pid"
check "its answers" 0 cat "$dir/late.out"
are "refused as a draft, served once started" '(.[0].result.isError == true)
  and .[0].result.structuredContent.error.details.reason == "agent_not_active"
  and (.[1].result.isError | not)'
check "runs list of the started agent" 0 "$tg" runs list --agent drafty --json
is "one run of mcp for its call, ended" '(.runs | length) == 1 and .runs[0].calls == 1
  and .runs[0].status == "completed" and .runs[0].trigger == "mcp"'

for cmd in "" init migrate tools call agents token runs policy approvals workspace schema; do
  check "--help of '$cmd'" 0 "$tg" $cmd --help
  has "--help of '$cmd' prints usage" 'usage: toolgate'
done
# A suite folder copied alone has no remotes or meta-schemas beside it: the error names the
# options that say where they are.
mkdir -p "$dir/suite/draft2020-12" "$dir/empty"
echo '[]' >"$dir/suite/draft2020-12/none.json" # a test file of no tests
check "schema test-suite without remotes" 1 "$tg" schema test-suite "$dir/suite/draft2020-12"
has "names --remotes" 'cannot open .*/draft2020-12/\.\./remotes: .*--remotes DIR'
check "schema test-suite without meta-schemas" 1 "$tg" schema test-suite "$dir/suite/draft2020-12" \
  --remotes "$dir/empty"
has "names --metaschemas" 'json-schema-2020-12-metaschema: .*--metaschemas DIR'
check "schema test-suite with both named" 0 "$tg" schema test-suite "$dir/suite/draft2020-12" \
  --remotes "$dir/empty" --metaschemas "$dir/empty"
has "the suite ran" '^0 passed, 0 failed$'
check "--version" 0 "$tg" --version
has "version" '^toolgate [0-9]+\.[0-9]+\.[0-9]+$'
check "unknown command" 2 "$tg" frobnicate
check "no command" 2 "$tg"

# A token names its workspace: with several, it needs no --tenant, and another is refused.
check "token for two workspaces" 0 "$tg" token create --agent demo
demo_token=$(jq -r .token "$dir/out")
check "a second workspace" 0 "$tg" init --tenant other
check "a name needs --tenant now" 1 "$tg" call agent.tool.list --agent demo
check "a token does not" 0 "$tg" call agent.tool.list --token "$demo_token"
check "nor does stdio by token" 0 "$tg" mcp --token "$demo_token" </dev/null
check "the token's own workspace" 0 "$tg" --tenant demo call agent.tool.list --token "$demo_token"
check "another workspace" 1 "$tg" --tenant other call agent.tool.list --token "$demo_token"
says "another workspace refused" "the token belongs to another workspace than 'other'"
check "another workspace on stdio" 1 "$tg" --tenant other mcp --token "$demo_token" </dev/null
# Over HTTP it is refused as any bad token is, and logged as what it is.
"$tg" --tenant other serve --listen 127.0.0.1:0 2>"$dir/other.log" &
other=$!
port=$(port_of "$dir/other.log")
check "another workspace over HTTP" 0 curl -s -o /dev/null -w '%{http_code}' \
  -H "Authorization: Bearer $demo_token" -H 'Content-Type: application/json' \
  -H 'Accept: application/json, text/event-stream' "http://127.0.0.1:$port/mcp" \
  -d '{"jsonrpc":"2.0","id":1,"method":"ping"}'
has "refused" '^401$'
kill -TERM "$other" 2>/dev/null || true
check "the other workspace's server stops" 0 wait "$other"
check "its log" 0 cat "$dir/other.log"
has "logged as another workspace's" 'belongs to another workspace than the one this server serves'

# An option given twice is refused, not one of them dropped.
check "an option given twice" 2 "$tg" --tenant demo tasks list --status todo --status done
says "the option named" "tasks list: --status is given twice"
# The catalog on one surface holds only that surface's tools.
check "tools list --surface api" 0 "$tg" tools list --surface api --json
is "the api surface's tools only" '.tools | length > 0 and all(.[]; .surfaces | index("api") != null)'
check "tools list" 0 "$tg" tools list --json
is "some tools are on no api surface" '.tools | any(.[]; .surfaces | index("api") == null)'
is "who may call each, whatever the grants" '.tools | map({(.canonicalName): .callers}) | add
  | .["admin.grant.add"] == "people" and .["agent.file.edit"] == "agents"
    and .["agent.tool.list"] == "all"'
# A suite folder holding no test passes nothing.
mkdir "$dir/no-suite"
check "schema test-suite of no tests" 1 "$tg" schema test-suite "$dir/no-suite"
has "no tests named" "no test files"

# Arguments and files go into JSON, UTF-8 text: other bytes are refused, and said, rather than
# an option dropped (a filter listing everything) or a command failing without a word.
check "a filter of foreign bytes" 2 "$tg" tasks list --agent $'\xc3'
says "the argument named" "argument '\\\\xc3' is not UTF-8 text"
check "an argument of foreign bytes" 2 "$tg" policy set $'caf\xe9' approval
says "its bytes shown" "argument 'caf\\\\xe9' is not UTF-8 text"
check "a workspace of foreign bytes" 2 "$tg" --tenant $'\xff' tasks list
printf 'caf\xe9\n' >"$dir/latin1.md"
check "a file of foreign bytes" 1 "$tg" --tenant demo skills add "$dir/latin1.md"
says "the file named" "latin1.md: not UTF-8 text"
printf 'a\0b\n' >"$dir/nul.md"
check "a file holding a NUL" 1 "$tg" --tenant demo skills add "$dir/nul.md"
says "that file named" "nul.md: not UTF-8 text"

# A listing says what it leaves out, and --limit takes it further.
check "agents create a second" 0 "$tg" --tenant demo agents create --slug second
check "agents list --limit 1" 0 "$tg" --tenant demo agents list --limit 1
has "the rest said" '^\(more: raise --limit\)$'
check "agents list --limit 1 --json" 0 "$tg" --tenant demo agents list --limit 1 --json
is "one agent, more flagged" '(.agents | length) == 1 and .truncated'
check "agents list --limit 1000" 0 "$tg" --tenant demo agents list --limit 1000 --json
is "every agent" '(.agents | length) > 1 and .truncated == false'
check "token list --limit 1" 0 "$tg" --tenant demo token list --limit 1 --json
is "one token, more flagged" '(.tokens | length) == 1 and .truncated'
check "token list --limit lots" 2 "$tg" --tenant demo token list --limit lots
check "a mission for documents" 0 "$tg" --tenant demo missions create --slug docs --title Docs
check "a work for documents" 0 "$tg" --tenant demo works create --slug handbook --mission docs
printf '# One\n' >"$dir/one.md"
check "kb put" 0 "$tg" --tenant demo kb put --work handbook --slug one --title One --file "$dir/one.md"
check "kb put another" 0 "$tg" --tenant demo kb put --work handbook --slug two --title Two --file "$dir/one.md"
check "kb list --limit 1" 0 "$tg" --tenant demo kb list --limit 1 --json
is "one document, more flagged" '(.documents | length) == 1 and .truncated'
check "kb list" 0 "$tg" --tenant demo kb list
has "both documents" '^handbook +two '
printf -- '---\nname: First skill\ndescription: One.\n---\nDo one thing.\n' >"$dir/first.md"
printf -- '---\nname: Second skill\ndescription: Two.\n---\nDo another.\n' >"$dir/second.md"
check "skills add, bound twice" 0 "$tg" --tenant demo skills add "$dir/first.md" --bind tenant --bind agent:demo
check "skills add another" 0 "$tg" --tenant demo skills add "$dir/second.md"
check "skills list --limit 1" 0 "$tg" --tenant demo skills list --limit 1 --json
is "one skill, more flagged" '(.skills | length) == 1 and .truncated'
check "skills list" 0 "$tg" --tenant demo skills list
has "both bindings kept" '^first-skill +First skill +(agent:demo,tenant|tenant,agent:demo)$'

# Each option of a command is given once: a second would drop the first without a word.
check "call --args twice" 2 "$tg" --tenant demo call agent.tool.list --agent demo --args '{}' --args '{"x":1}'
says "that option named" "call: --args is given twice"
check "kb put --slug twice" 2 "$tg" --tenant demo kb put --work handbook --slug a --slug b --title A --file "$dir/one.md"
says "kb put's option named" "kb put: --slug is given twice"
check "--tenant twice" 2 "$tg" --tenant demo --tenant other agents list
says "the global option named" "--tenant is given twice"
check "--data empty" 2 "$tg" --data '' agents list
says "an empty folder name refused" "--data needs a value"

# A file that is a folder says so; a filter naming no repository is not_found.
check "kb put of a folder" 1 "$tg" --tenant demo kb put --work handbook --slug x --title X --file "$dir"
says "a folder named" "Is a directory"
check "prs list of no such repository" 1 "$tg" --tenant demo prs list --repo work:nope/data
is "not_found" '.error.code == "not_found" and .error.details.repo == "work:nope/data"'
check "prs list of a work's repository, not made yet" 0 "$tg" --tenant demo prs list --repo work:handbook/data --json
is "none" '.pullRequests == [] and .truncated == false'
check "prs show of a number past 64 bits" 2 "$tg" --tenant demo prs show work:handbook/data 99999999999999999999

# schema validate prints up to 1000 violations and says when there were more.
echo '{"items": {"type": "string"}}' >"$dir/strings.json"
seq 1001 | jq -s . >"$dir/numbers.json"
check "schema validate, 1001 violations" 1 "$tg" schema validate --schema "$dir/strings.json" --instance "$dir/numbers.json"
has "the rest said" '^\(more violations than the 1000 shown\)$'
if [ "$(grep -c 'keyword type' "$dir/out")" = 1000 ]; then passes=$((passes + 1)); else failed "1000 violations printed"; fi
echo '["a", 2]' >"$dir/one-number.json"
check "schema validate, one violation" 1 "$tg" schema validate --schema "$dir/strings.json" --instance "$dir/one-number.json"
has "the violation" '^/1: .*keyword type'
if grep -q "more violations" "$dir/out"; then failed "no more said for one"; else passes=$((passes + 1)); fi

finish
