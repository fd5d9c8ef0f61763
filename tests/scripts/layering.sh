#!/usr/bin/env bash
# The layering rules of docs/ARCHITECTURE.md, checked on the #include lines of src/.
set -uo pipefail
cd "${TG_SOURCE_DIR:?set by ctest}/src"
fails=0
rule() { # rule DESCRIPTION FILES_GLOB PATTERN: no file in FILES may match PATTERN
  local what=$1 files=$2 pattern=$3 hits
  hits=$(grep -lE "$pattern" $files 2>/dev/null || true)
  if [ -n "$hits" ]; then echo "FAIL $what: $hits"; fails=$((fails + 1)); fi
}
rule "only src/db includes database headers" "$(ls */*.c */*.h | grep -v '^db/')" '#include <(sqlite3|libpq-fe)\.h>'
rule "util depends on nothing else in src" "util/*.c util/*.h" '#include "(core|db|tools|cli|mcp|http|agent)/'
rule "db depends only on util" "db/*.c db/*.h" '#include "(core|tools|cli|mcp|http|agent|git|domain)/'
rule "domain is pure rules on util" "domain/*.c domain/*.h" '#include "(core|db|tools|cli|mcp|http|agent|git)/'
rule "git depends only on util" "git/*.c git/*.h" '#include "(core|db|tools|cli|mcp|http|agent|domain)/'
rule "core knows no surface and no provider" "core/*.c core/*.h" '#include "(tools|cli|mcp|http|agent)/'
rule "tools never include a surface" "tools/*.c tools/*.h" '#include "(cli|mcp|http|agent)/'
rule "only core/call.c calls a handler" "$(ls */*.c | grep -v '^core/call\.c$')" '(->|\.)handler\('
echo "$fails failed"
[ "$fails" -eq 0 ]
