// The provider error corpus through the Node helper and a real failoverd:
//   node corpus_test.js --server HOST:PORT
// Each raw reply of tests/data/provider_errors.json goes through
// failureFromResponse, is reported on its own chain, and must get the reason,
// verdict, counted flag, health and hold the corpus gives. Exits non-zero on
// any difference, naming the case.
'use strict';
const fs = require('fs');
const path = require('path');
const {failureFromResponse, grpc, v1} = require('failoverd-client');

function call(stub, method, request) {
  return new Promise((resolve, reject) => stub[method](request, (err, reply) => (err ? reject(err) : resolve(reply))));
}

const UNITS = {ms: 0.001, s: 1, m: 60, h: 3600};
function seconds(text) {
  const m = /^(\d+)(ms|s|m|h)$/.exec(text);
  return Number(m[1]) * UNITS[m[2]];
}

function render(value, nowMs) {
  const m = /\{\{now\+(\w+):(\w+)\}\}/.exec(value);
  if (!m) return value;
  const at = new Date(nowMs + seconds(m[1]) * 1000);
  const text = m[2] === 'http' ? at.toUTCString()
    : m[2] === 'rfc3339' ? at.toISOString().replace(/\.\d+Z$/, 'Z') : String(at.getTime());
  return value.slice(0, m.index) + text + value.slice(m.index + m[0].length);
}

async function main() {
  const at = process.argv.indexOf('--server');
  const credentials = grpc.credentials.createInsecure();
  const decide = new (v1().DecisionService)(process.argv[at + 1], credentials);
  const admin = new (v1().AdminService)(process.argv[at + 1], credentials);
  const corpus = JSON.parse(fs.readFileSync(path.join(__dirname, '..', 'data', 'provider_errors.json'), 'utf8'));
  const nowMs = Date.now();
  const targets = [];
  const chains = [];
  for (const c of corpus.cases) {
    targets.push({name: `${c.name}-a`}, {name: `${c.name}-b`});
    chains.push({name: c.name, targets: [`${c.name}-a`, `${c.name}-b`]});
  }
  await call(admin, 'Apply', {targets, chains});
  const problems = [];
  for (const c of corpus.cases) {
    const headers = Object.entries(c.headers).map(([k, v]) => [k, render(v, nowMs)]);
    const body = 'body_text' in c ? c.body_text : JSON.stringify(c.body);
    const plan = await call(decide, 'PickTarget', {chain: c.name});
    const r = await call(decide, 'ReportOutcome', {
      decisionId: plan.decisionId, target: `${c.name}-a`, failure: failureFromResponse(c.status, headers, body),
    });
    const want = c.expect;
    const got = {
      reason: r.reason.replace('FAILURE_REASON_', '').toLowerCase(),
      verdict: r.verdict.replace('VERDICT_', ''),
      counted: r.counted,
      health: r.targetHealth.replace('HEALTH_STATE_', ''),
    };
    for (const key of Object.keys(got)) {
      if (got[key] !== want[key]) problems.push(`${c.name}: ${key} is ${got[key]}, want ${want[key]}`);
    }
    const view = await call(admin, 'GetTarget', {name: `${c.name}-a`});
    if (want.hold) {
      const held = Number(view.status.heldUntil.seconds) - nowMs / 1000;
      if (Math.abs(held - seconds(want.hold)) > 3) problems.push(`${c.name}: held ${held.toFixed(0)}s, want ${want.hold}`);
    }
    if (want.down_for && !view.status.reason.includes('rate limited until its limit resets in')) {
      problems.push(`${c.name}: reason "${view.status.reason}" does not say it is down until the reset`);
    }
  }
  for (const p of problems) console.log(p);
  console.log(`${corpus.cases.length} cases, ${problems.length} problems`);
  process.exit(problems.length ? 1 : 0);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
