// The failoverd decision loop and a watcher with @grpc/grpc-js, loading the
// proto files at run time with @grpc/proto-loader (no code generation).
'use strict';
const path = require('path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

const PROTO_DIR = path.join(__dirname, '..', '..', 'proto');

function connect(server) {
  const definition = protoLoader.loadSync(
      ['failover/v1/decision.proto', 'failover/v1/admin.proto'],
      {includeDirs: [PROTO_DIR], keepCase: true, enums: String, longs: Number, defaults: true, oneofs: true});
  const v1 = grpc.loadPackageDefinition(definition).failover.v1;
  const credentials = grpc.credentials.createInsecure();
  return {
    decide: new v1.DecisionService(server, credentials),
    admin: new v1.AdminService(server, credentials),
  };
}

// What failureFromResponse keeps of a reply: the headers with reset times and
// at most 16 KiB of body; failoverd reads the provider's error code, message
// and reset time from them.
const MAX_BODY_BYTES = 16 * 1024;
const MAX_HEADERS = 32;

function isResetHeader(name) {
  const lower = name.toLowerCase();
  return lower === 'retry-after' || lower.startsWith('x-ratelimit-') || lower.startsWith('anthropic-ratelimit-');
}

// The Failure to report for an upstream's HTTP error reply. headers: a plain
// object, a Map, fetch's Headers or [name, value] pairs; body: a string or a
// Buffer, as received.
function failureFromResponse(status, headers, body) {
  const entries = headers instanceof Map || (headers && typeof headers.entries === 'function' && !Array.isArray(headers))
    ? [...headers.entries()] : Array.isArray(headers) ? headers : Object.entries(headers || {});
  const kept = {};
  let count = 0;
  for (const [name, value] of entries) {
    const text = String(value);
    if (!isResetHeader(name) || count >= MAX_HEADERS || name.length + text.length > 1024) continue;
    kept[name.toLowerCase()] = text;
    count++;
  }
  const bytes = Buffer.isBuffer(body) ? body : Buffer.from(String(body ?? ''), 'utf8');
  return {
    http_status: status,
    phase: 'PHASE_BEFORE_RESPONSE',
    response: {headers: kept, body: bytes.subarray(0, MAX_BODY_BYTES)},
  };
}

const call = (client, method, request) => new Promise((resolve, reject) =>
  client[method](request, (err, response) => (err ? reject(err) : resolve(response))));

// Picks, attempts, reports and follows the verdict until DONE or FAIL.
// callUpstream(attempt) resolves to {ok: true, result}, or on failure to
// {ok: false, failure} (see failureFromResponse) or {ok: false, status, message}.
async function runRequest(decide, chain, callUpstream, bodyBytes = 0) {
  const plan = await call(decide, 'PickTarget', {chain, body_bytes: bodyBytes});
  let attempt = plan.attempts[0];
  for (let number = 1;; number++) {
    const outcome = await callUpstream(attempt);
    const report = {decision_id: plan.decision_id, chain, target: attempt.target, attempt: number};
    if (outcome.ok) {
      report.success = {};
    } else if (outcome.failure) {
      report.failure = outcome.failure;
    } else {
      report.failure = {http_status: outcome.status, message: outcome.message, phase: 'PHASE_BEFORE_RESPONSE'};
    }
    const verdict = await call(decide, 'ReportOutcome', report);
    switch (verdict.verdict) {
      case 'VERDICT_DONE': return {target: attempt.target, result: outcome.result};
      case 'VERDICT_FAIL': throw new Error(verdict.error);
      case 'VERDICT_RETRY_SAME': {
        const d = verdict.retry_delay || {seconds: 0, nanos: 0};
        await new Promise((r) => setTimeout(r, Number(d.seconds) * 1000 + d.nanos / 1e6));
        break;
      }
      default: attempt = verdict.next_attempt;
    }
  }
}

// Streams events; pass afterSequence (the last sequence seen) to resume.
function watch(decide, {chains = [], afterSequence} = {}) {
  const request = {chains};
  if (afterSequence !== undefined) request.after_sequence = afterSequence;
  return decide.WatchEvents(request);
}

module.exports = {connect, call, runRequest, watch, failureFromResponse, isResetHeader};
