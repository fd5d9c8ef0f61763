#!/usr/bin/env bash
# The README's work-management tour against the real binary: a mission and a work, an agent
# scoped to the work, and that agent creating, discussing and finishing a task through the
# seed-000 tool names, with the operator's approval in between; then what it reads back.
source "$(dirname "$0")/lib/check.bash"

check "init --demo" 0 "$tg" init --demo

check "missions create" 0 "$tg" missions create --slug launch --title "Launch the site" --cap-cents 5000
is "mission created" '.slug == "launch"'
check "missions create twice" 1 "$tg" missions create --slug launch --title again
is "duplicate refused" '.error.code == "precondition_failed"'
check "missions create without a title" 2 "$tg" missions create --slug other
check "missions create with a bad cap" 2 "$tg" missions create --slug other --title T --cap-cents lots
check "missions create other" 0 "$tg" missions create --slug other --title "Another mission"
check "ideas create" 0 "$tg" ideas create --mission launch --title "Pricing page"
is "idea slug from its title" '.slug == "pricing-page"'
check "ideas create in an unknown mission" 1 "$tg" ideas create --mission nope --title x
is "unknown mission" '.error.code == "not_found"'
check "works create" 0 "$tg" works create --slug site --mission launch --idea pricing-page --title "The website"
check "works create in the other mission" 0 "$tg" works create --slug elsewhere --mission other
check "works create without a mission" 2 "$tg" works create --slug nope
check "missions list" 0 "$tg" missions list
has "missions table" '^launch +active +1 +1 +0/5000 +Launch the site'
check "missions list --json" 0 "$tg" missions list --json
is "mission tree" '.missions[0].works[0].slug == "site" and .missions[0].ideas[0].slug == "pricing-page"'
check "ideas list" 0 "$tg" ideas list --mission launch
has "ideas table" 'pricing-page'
check "works list --json" 0 "$tg" works list --json
is "works of every mission" '(.works | map(.slug)) == ["site", "elsewhere"] and .works[0].mission == "launch" and .truncated == false'
check "ideas list --mission --json" 0 "$tg" ideas list --mission launch --json
is "the mission's ideas" '(.ideas | map(.slug)) == ["pricing-page"] and .truncated == false'
check "works list --mission" 0 "$tg" works list --mission other --json
is "the mission's works only" '(.works | map(.slug)) == ["elsewhere"]'
# A mission lists its first 100 ideas and works; the listing says what it left out.
check "missions create many" 0 "$tg" missions create --slug many --title "Many ideas"
for i in $(seq 101); do "$tg" ideas create --mission many --title "Idea $i" >/dev/null; done
check "ideas list past 100" 0 "$tg" ideas list --mission many
has "the rest said" '^\(mission many: the first 100 of its 101 ideas shown\)$'
check "ideas list past 100 --json" 0 "$tg" ideas list --mission many --json
is "the rest flagged" '(.ideas | length) == 100 and .truncated'
check "missions list --limit 1" 0 "$tg" missions list --limit 1
has "more missions said" '^\(more missions not shown: --limit goes up to 100\)$'
# A filter naming nothing is not_found, not an empty list that hides the typo.
check "ideas list in an unknown mission" 1 "$tg" ideas list --mission nope
is "unknown mission named" '.error.code == "not_found" and .error.message == "No mission nope in this workspace."'
check "works list in an unknown mission" 1 "$tg" works list --mission nope --json
is "unknown mission named" '.error.code == "not_found" and .error.details.missionSlug == "nope"'

check "agents create builder" 0 "$tg" agents create --slug builder --scope work:site --grant canAssignTasks
check "agents create helper" 0 "$tg" agents create --slug helper --scope work:site
check "agents create outsider" 0 "$tg" agents create --slug outsider --scope work:elsewhere --grant canAssignTasks

check "createTask" 0 "$tg" call createTask --agent builder --args \
  '{"title":"Write the pricing copy","priority":"p1","labels":["copy"],"assigneeAgentSlugs":["builder","helper"],"status":"todo"}'
is "task created in todo" '.slug == "T-1" and .status == "todo"'
check "createTask assigning outside the work" 1 "$tg" call createTask --agent builder --args \
  '{"title":"x","assigneeAgentSlugs":["outsider"]}'
is "out of scope" '.error.code == "permission_denied" and .error.details.outOfScope == "outsider"'
check "createTask in another scope" 1 "$tg" call createTask --agent builder --args \
  '{"title":"x","scope":{"workId":"elsewhere"}}'
is "scope out of reach" '.error.code == "permission_denied"'
check "createTask with a title too long" 1 "$tg" call createTask --agent builder \
  --args "{\"title\":\"$(printf 'x%.0s' $(seq 201))\"}"
is "bound enforced" '.error.code == "validation_failed"'
check "createTask without the grant" 1 "$tg" call createTask --agent helper --args '{"title":"x"}'
is "gate" '.error.details.missingPermission == "tasks.assign" and .error.details.flag == "canAssignTasks"'

check "commentOnTask" 0 "$tg" call commentOnTask --agent builder --args \
  '{"taskSlug":"T-1","body":"@helper can you draft the FAQ?","mentions":[{"type":"agent","slug":"helper"}]}'
is "message id" '.messageId | length > 0'
check "commentOnTask off the task" 1 "$tg" call commentOnTask --agent outsider --args '{"taskSlug":"T-1","body":"hi"}'
is "not reachable" '.error.code == "not_found"'
check "commentOnTask by the owner, not on the task" 1 "$tg" call commentOnTask --user owner --args '{"taskSlug":"T-1","body":"hi"}'
is "not a participant" '.error.code == "permission_denied"'

check "transitionTask to in_progress" 0 "$tg" call transitionTask --agent builder --args '{"taskSlug":"T-1","to":"in_progress"}'
is "moved" '.status == "in_progress"'
check "transitionTask along no edge" 1 "$tg" call transitionTask --agent builder --args '{"taskSlug":"T-1","to":"backlog"}'
is "illegal move" '.error.code == "validation_failed" and (.error.details.allowed | index("done")) != null'
check "tasks assign an approver" 0 "$tg" tasks assign T-1 --user owner --role approver
check "transitionTask to done before approval" 1 "$tg" call transitionTask --agent builder --args '{"taskSlug":"T-1","to":"done"}'
is "approval pending" '.error.code == "precondition_failed" and .error.details.pendingApprovers[0].name == "owner"'
check "tasks approve someone else" 1 "$tg" tasks approve T-1 --agent helper
is "not an approver" '.error.code == "precondition_failed"'
check "tasks approve without --user" 2 "$tg" tasks approve T-1
check "tasks approve" 0 "$tg" tasks approve T-1 --user owner
is "approved" '.changed == true and .pendingApprovers == []'
check "transitionTask to done" 0 "$tg" call transitionTask --agent builder --args \
  '{"taskSlug":"T-1","to":"done","reason":"copy approved"}'

check "tasks list" 0 "$tg" tasks list
has "tasks table" '^T-1 +done +p1 +work:site +Write the pricing copy'
check "tasks list --json" 0 "$tg" tasks list --status done --json
is "filtered list" '(.tasks | length) == 1 and .truncated == false'
check "tasks list --agent" 0 "$tg" tasks list --agent helper --json
is "the agent's tasks" '.tasks | map(.slug) == ["T-1"]'
check "tasks list --agent of no task" 0 "$tg" tasks list --agent outsider --json
is "none" '.tasks == []'
check "tasks list --mission --work" 0 "$tg" tasks list --mission launch --work site --json
is "the work's tasks" '.tasks | map(.slug) == ["T-1"]'
check "tasks list --mission of no task" 0 "$tg" tasks list --mission other --json
is "none there" '.tasks == []'
check "tasks list --agent unknown" 1 "$tg" tasks list --agent nobody
is "unknown agent named" '.error.code == "not_found" and .error.message == "No agent nobody in this workspace."'
check "tasks list --mission unknown" 1 "$tg" tasks list --mission nope
is "unknown mission named" '.error.code == "not_found" and .error.message == "No mission nope in this workspace."'
check "tasks list --work unknown" 1 "$tg" tasks list --work nope
is "unknown work named" '.error.code == "not_found" and .error.message == "No work nope in this workspace."'
check "tasks show" 0 "$tg" tasks show T-1 --json
is "task in full" '.task.status == "done" and (.assignees | length) == 3 and (.chat | length) == 1'
check "tasks show text" 0 "$tg" tasks show T-1
has "chat shown" 'agent:builder'
check "tasks show unknown" 1 "$tg" tasks show T-9

check "getActivity" 0 "$tg" call getActivity --agent builder --args '{"limit":50}'
is "the task's story" '[.rows[].actionType] | (index("TASK_CREATED") != null and index("TASK_COMMENTED") != null and index("TASK_UPDATED") != null)'
is "the task's scope only" '[.rows[].actionType] | index("MISSION_CREATED") == null'

# A title of two-byte characters whose quote in the activity summary is cut within one
# ("x" then 45 "é": the 80 bytes kept end halfway through the 40th) is still created.
title="x$(printf '\xc3\xa9%.0s' $(seq 45))"
check "createTask with a title cut within a character" 0 "$tg" call createTask --agent builder \
  --args "{\"title\":\"$title\"}"
is "created" '.slug == "T-2"'
check "getActivity of it" 0 "$tg" call getActivity --agent builder --args '{"limit":1}'
is "its summary ends on the last whole character" \
  ".rows[0].summary == \"Task T-2 created: x$(printf '\xc3\xa9%.0s' $(seq 39))\""

# Past the 200 messages a task shows, the text says the older ones are not shown, as the
# JSON's chatTruncated does (200 more, in one stdio session).
for i in $(seq 200); do
  printf '{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"work_task_comment",%s' "$i" \
    '"arguments":{"taskSlug":"T-1","body":"more"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}'
  echo
done >"$dir/comments.jsonl"
check "200 more comments" 0 "$tg" mcp --agent builder <"$dir/comments.jsonl"
is "none refused" '.result.isError != true'
check "tasks show of a long chat" 0 "$tg" tasks show T-1
has "older messages said to be left out" '^  \(older messages not shown: the newest are\)$'
check "tasks show of a long chat, as JSON" 0 "$tg" tasks show T-1 --json
is "the JSON says so too" '.chatTruncated == true and (.chat | length) == 200'

for cmd in missions ideas works tasks; do
  check "--help of '$cmd'" 0 "$tg" $cmd --help
  has "--help of '$cmd' prints usage" "usage: toolgate $cmd"
done
check "tasks frobnicate" 2 "$tg" tasks frobnicate

finish
