#!/usr/bin/env bash
# docs/TOOLS.md is generated from the provider specs and must not drift from them.
set -euo pipefail
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"${TG_BINARY:?set by ctest}" tools docs --out "$out" 2>/dev/null
if ! diff -u "${TG_SOURCE_DIR:?}/docs/TOOLS.md" "$out"; then
  echo "docs/TOOLS.md is stale: run 'make docs' and commit it"
  echo "0 passed, 1 failed"
  exit 1
fi
echo "1 passed, 0 failed"
