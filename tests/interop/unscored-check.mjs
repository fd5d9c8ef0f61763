// The suite's exit status counts only its scored scenarios; the others it runs (the Tasks
// extension, pending ones) must pass as well unless the baseline names them. Reads every
// checks.json under the results folder; exits 1 listing each FAILURE or WARNING check.
//   node unscored-check.mjs RESULTS_DIR BASELINE_YML
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

const [results, baseline] = process.argv.slice(2);
const expected = new Set(
  readFileSync(baseline, 'utf8').split('\n')
    .map((line) => line.match(/^\s*-\s*([\w-]+)/)?.[1]).filter(Boolean));
const bad = [];
let scenarios = 0;
for (const run of readdirSync(results)) {
  // Each run's folder is <leg>-<scenario>-<timestamp>.
  const scenario = run.replace(/^(server|client)-/, '').replace(/-\d{4}-\d{2}-\d{2}T[\d-]+Z$/, '');
  scenarios++;
  if (expected.has(scenario)) continue;
  for (const check of JSON.parse(readFileSync(join(results, run, 'checks.json'), 'utf8')))
    if (check.status === 'FAILURE' || check.status === 'WARNING')
      bad.push(`${scenario}: ${check.id} ${check.status}: ${check.errorMessage ?? ''}`);
}
if (scenarios === 0) bad.push(`no scenario results in ${results}`);
for (const line of bad) console.error(`interop: ${line}`);
console.log(`interop: ${scenarios} scenarios checked, scored or not; ${bad.length} failing checks`);
process.exit(bad.length ? 1 : 0);
