// The suite's exit status counts only its scored scenarios; the others it runs (the Tasks
// extension, pending ones) must pass as well unless the baseline names them. Reads every
// checks.json under the results folder; exits 1 listing each FAILURE, WARNING or SKIPPED
// check (a check skipped is a check not made), each scenario that made no check, each
// baseline entry that no longer fails (or never ran), and a run of another number of
// scenarios than the pinned suite runs.
//   node unscored-check.mjs RESULTS_DIR BASELINE_YML SCENARIOS
// A baseline entry is `- scenario  # why` (the whole scenario) or `- scenario:check  # why`
// (that check alone), its reason required.
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

const [results, baseline, scenariosExpected] = process.argv.slice(2);
const bad = [];
const waived = new Map(); // "scenario" or "scenario:check" -> whether it still fails
for (const line of readFileSync(baseline, 'utf8').split('\n')) {
  if (!/^\s*-/.test(line)) continue;
  const entry = line.match(/^\s*-\s*([\w-]+(?::[\w-]+)?)\s+#\s*\S/);
  if (entry) waived.set(entry[1], false);
  else bad.push(`baseline entry without its reason (- scenario  # why): ${line.trim()}`);
}
const failing = (status) => status === 'FAILURE' || status === 'WARNING' || status === 'SKIPPED';
let scenarios = 0;
for (const run of readdirSync(results)) {
  // Each run's folder is <leg>-<scenario>-<timestamp>.
  const scenario = run.replace(/^(server|client)-/, '').replace(/-\d{4}-\d{2}-\d{2}T[\d-]+Z$/, '');
  scenarios++;
  const checks = JSON.parse(readFileSync(join(results, run, 'checks.json'), 'utf8'));
  const failed = checks.filter((check) => failing(check.status));
  if (waived.has(scenario)) {
    waived.set(scenario, failed.length > 0 || checks.length === 0);
    continue;
  }
  if (checks.length === 0) bad.push(`${scenario}: made no check`);
  for (const check of failed) {
    const key = `${scenario}:${check.id}`;
    if (waived.has(key)) waived.set(key, true);
    else bad.push(`${scenario}: ${check.id} ${check.status}: ${check.errorMessage ?? ''}`);
  }
}
for (const [entry, stillFails] of waived)
  if (!stillFails) bad.push(`baseline entry ${entry} no longer fails, or did not run: remove it`);
if (scenarios !== Number(scenariosExpected))
  bad.push(`${scenarios} scenarios ran, where the pinned suite runs ${scenariosExpected}`);
for (const line of bad) console.error(`interop: ${line}`);
console.log(`interop: ${scenarios} scenarios checked, scored or not; ${bad.length} failing`);
process.exit(bad.length ? 1 : 0);
