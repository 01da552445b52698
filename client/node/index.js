// failoverd's decision loop for Node callers: every plan and verdict from
// failoverd, fail-static when it is away (the last plan seen, reports
// buffered), a hung failoverd noticed once, successes never waited for.
// The API is camelCase throughout and every time is in milliseconds; the
// failover.v1 messages are converted at the edge.
'use strict';
const crypto = require('crypto');
const fs = require('fs');
const path = require('path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

// Set on every error failoverd itself returns: its answers are decisions to
// follow, not signs that failoverd is away.
const ANSWERED_TRAILER = 'failoverd-answered';
const BATCH = 256;        // reports per ReportOutcomes call
const ASK_FOR_BATCHES_AGAIN_MS = 60000;  // a failoverd that refused ReportOutcomes is sent streams this long
const MAX_COUNT = 10000;  // successes one report may stand for
const MAX_STEPS = 64;     // attempts per request

// The failover.v1 package (DecisionService, AdminService) as this client
// loads it: camelCase fields, enums as their names, durations as {seconds,
// nanos}. For calls the loop does not make (an admin's, a watcher); make
// their credentials with the `grpc` exported beside it (the same @grpc/grpc-js).
let loaded = null;
function v1() {
  if (loaded === null) {
    const definition = protoLoader.loadSync(['failover/v1/decision.proto', 'failover/v1/admin.proto'], {
      // The packed copy; in the repository, its proto/ dir.
      includeDirs: [path.join(__dirname, 'proto'), path.join(__dirname, '..', '..', 'proto')],
      keepCase: false, enums: String, longs: Number, defaults: true, oneofs: true,
    });
    loaded = grpc.loadPackageDefinition(definition).failover.v1;
  }
  return loaded;
}

// --- errors run() throws ---------------------------------------------------
// Thrown when the request cannot be served for a reason of the setup rather
// than of the upstreams (which are in the result): failoverd refused the call,
// or cannot be reached and no plan for the chain was seen. `code` is gRPC's.
class FailoverdError extends Error {
  constructor(message, code) {
    super(message);
    this.name = this.constructor.name;
    this.code = code;
  }
}
class FailoverdUnreachable extends FailoverdError {
  constructor(address, cause) {
    super(`failoverd at ${address} cannot be reached: ${cause}`, grpc.status.UNAVAILABLE);
    this.address = address;
    this.cause = cause;
  }
}
class Unauthenticated extends FailoverdError {}
class UnknownChain extends FailoverdError {
  constructor(chain, message) {
    super(message, grpc.status.NOT_FOUND);
    this.chain = chain;
  }
}

function refusal(err, chain) {
  const message = err.details || String(err.code);
  if (err.code === grpc.status.UNAUTHENTICATED || err.code === grpc.status.PERMISSION_DENIED) {
    return new Unauthenticated(message, err.code);
  }
  if (err.code === grpc.status.NOT_FOUND) return new UnknownChain(chain, message);
  return new FailoverdError(message, err.code);
}

// --- options and messages at the edge ----------------------------------------
// A key the API does not know is refused: a misspelt or snake_case option
// would otherwise be ignored without a word.
function checkKeys(object, known, what) {
  if (object === undefined || object === null) return;
  if (typeof object !== 'object') throw new TypeError(`failoverd-client: ${what} must be an object`);
  for (const key of Object.keys(object)) {
    if (!known.includes(key)) {
      throw new TypeError(`failoverd-client: unknown ${what} key "${key}" (known: ${known.join(', ')})`);
    }
  }
}
const CLIENT_OPTIONS = ['server', 'token', 'tlsCa', 'tlsCert', 'tlsKey', 'timeoutMs', 'maxBufferedReports',
  'flushIntervalMs', 'downBackoffMs', 'maxDownBackoffMs', 'onEvent'];
const RUN_OPTIONS = ['bodyBytes', 'sessionKey', 'requestId', 'excludeTargets', 'timeoutMs', 'signal'];
const FAILURE_KEYS = ['httpStatus', 'grpcCode', 'transportError', 'message', 'errorCode', 'retryAfterMs', 'phase',
  'admissionRejected', 'cancelled', 'response'];
const RESPONSE_KEYS = ['headers', 'body'];

function ms(d) { return seconds(d) * 1000; }

// failover.v1.Attempt as the caller sees it.
function toAttempt(a) {
  return {target: a.target, upstreamModel: a.upstreamModel, labels: a.labels || {},
    timeoutMs: a.timeout ? ms(a.timeout) : null, maxRetries: a.maxRetries, position: a.position, health: a.health};
}

// The caller's Failure as failover.v1.Failure.
function toFailure(f) {
  checkKeys(f, FAILURE_KEYS, 'failure');
  checkKeys(f.response, RESPONSE_KEYS, 'failure.response');
  const {retryAfterMs, ...rest} = f;
  if (retryAfterMs !== undefined) rest.retryAfter = duration(retryAfterMs / 1000);
  return rest;
}

function unreachable(err) {
  if (!err || (err.code !== grpc.status.UNAVAILABLE && err.code !== grpc.status.DEADLINE_EXCEEDED)) return false;
  return !(err.metadata && err.metadata.get(ANSWERED_TRAILER).length > 0);
}

function duration(seconds) {
  const whole = Math.floor(seconds);
  return {seconds: whole, nanos: Math.round((seconds - whole) * 1e9)};
}

function seconds(d) {
  return d ? Number(d.seconds || 0) + Number(d.nanos || 0) / 1e9 : 0;
}

function describe(failure) {
  if (!failure) return 'failed';
  if (failure.httpStatus) return `${failure.httpStatus} ${failure.message || ''}`.trim();
  return failure.message || 'failed';
}

function makeReport(chain, decisionId, target, number, outcome) {
  const report = {chain, decisionId, target, attempt: number};
  if (outcome.ok) report.success = {};
  else report.failure = toFailure(outcome.failure || {message: 'failed'});
  if (outcome.latencyMs > 0) report.latency = duration(outcome.latencyMs / 1000);
  return report;
}

class Client {
  constructor(options = {}) {
    checkKeys(options, CLIENT_OPTIONS, 'option');
    const o = {server: '127.0.0.1:50051', timeoutMs: 5000, maxBufferedReports: 1000, flushIntervalMs: 500,
      downBackoffMs: 1000, maxDownBackoffMs: 5000, ...options};
    this._o = o;
    const channelOptions = {'grpc.max_reconnect_backoff_ms': 1000, 'grpc.initial_reconnect_backoff_ms': 100};
    const credentials = o.tlsCa || o.tlsCert || o.tlsKey
      ? grpc.credentials.createSsl(o.tlsCa ? fs.readFileSync(o.tlsCa) : null,
          o.tlsKey ? fs.readFileSync(o.tlsKey) : null, o.tlsCert ? fs.readFileSync(o.tlsCert) : null)
      : grpc.credentials.createInsecure();
    this._stub = new (v1().DecisionService)(o.server, credentials, channelOptions);
    this._plans = new Map();
    this._buffer = [];
    this._dropped = 0;
    this._backoffMs = 0;  // 0: failoverd answers
    this._lastCause = '';  // why failoverd last could not be reached
    this._closed = false;
    this._timer = null;
    // Report ids: failoverd counts a report sent again (a batch whose call
    // failed mid-way) once. Random per client; sequences rise from 1.
    this._sender = crypto.randomBytes(16).toString('hex');
    this._nextSequence = 1;
    this._streamsUntil = 0;  // Date.now(): until then the backlog goes as streams
    this._schedule(o.flushIntervalMs);
  }

  // The order to use for `chain` when failoverd is unreachable and no plan was seen yet.
  setDeclaredOrder(chain, targets) {
    if (!this._plans.has(chain)) this._plans.set(chain, targets.map((target) => ({target})));
  }

  get bufferedReports() { return this._buffer.reduce((n, r) => n + Math.max(r.count || 0, 1), 0); }
  get droppedReports() { return this._dropped; }

  // Sends the reports not sent yet, for at most flushTimeoutMs (a short-lived
  // process would lose them otherwise), then closes the channel; what failoverd
  // did not take by then is dropped and counted in droppedReports.
  async close(flushTimeoutMs = 2000) {
    if (this._closed) return;
    this._closed = true;
    if (this._timer) clearTimeout(this._timer);
    if (flushTimeoutMs > 0 && this._buffer.length > 0) await this._flush(Date.now() + flushTimeoutMs);
    this._dropped += this.bufferedReports;
    this._buffer = [];
    this._stub.close();
  }

  // Serves one request on `chain`; attempt(target, context) makes one call and
  // resolves to {ok, failure?, latencyMs?, response?}.
  async run(chain, attempt, options = {}) {
    checkKeys(options, RUN_OPTIONS, 'run option');
    const deadline = options.timeoutMs === undefined ? null : Date.now() + options.timeoutMs;
    const signal = options.signal;
    const result = {ok: false, servedBy: '', response: undefined, error: '', attempts: [], failStatic: false};
    const pick = {chain, bodyBytes: options.bodyBytes || 0, sessionKey: options.sessionKey || '',
      requestId: options.requestId || '', excludeTargets: options.excludeTargets || []};
    let plan = null;
    if (this._backoffMs === 0) {
      try {
        plan = await this._unary('PickTarget', pick, deadline);
        this._note(true);
      } catch (err) {
        if (!unreachable(err)) {
          if (err.code !== grpc.status.UNAVAILABLE) throw refusal(err, chain);
          result.error = err.details || String(err.code);  // failoverd's answer: no target may be tried
          return result;
        }
        this._noteDown(err);
      }
    }
    if (plan === null) {
      const cached = this._plans.get(chain);
      if (!cached || cached.length === 0) {
        throw new FailoverdUnreachable(this._o.server,
            `${this._lastCause || 'no answer'}; no plan for chain ${chain} was seen to serve from`);
      }
      return this._runStatic(chain, '', cached, [], attempt, deadline, signal, result);
    }
    if (!plan.attempts || plan.attempts.length === 0) {
      result.error = `failoverd returned an empty plan for chain ${chain}`;
      return result;
    }
    const attempts = plan.attempts.map(toAttempt);
    this._plans.set(chain, attempts.slice());
    let current = attempts[0];
    const tried = [];
    let number = 1;
    while (result.attempts.length < MAX_STEPS) {
      const stop = this._stopReason(deadline, signal, 0);
      if (stop) {
        result.error = stop;
        return result;
      }
      const outcome = await attempt(current, {number, deadline, signal});
      tried.push(current.target);
      const record = {target: current.target, number, ok: !!outcome.ok, verdict: 'VERDICT_UNSPECIFIED',
        reason: 'FAILURE_REASON_UNSPECIFIED', latencyMs: outcome.latencyMs};
      result.attempts.push(record);
      const report = makeReport(chain, plan.decisionId, current.target, number, outcome);
      if (outcome.ok) {  // the verdict of a success is always DONE: not waited for
        this._queue(report);
        record.verdict = 'VERDICT_DONE';
        Object.assign(result, {ok: true, servedBy: current.target, response: outcome.response});
        this._promote(chain, current.target);
        return result;
      }
      let verdict = null;
      if (this._backoffMs === 0) {
        try {
          verdict = await this._unary('ReportOutcome', report, deadline);
          this._note(true);
        } catch (err) {
          if (!unreachable(err)) {
            result.error = `failoverd refused the report: ${err.details}`;
            return result;
          }
          this._noteDown(err);
        }
      }
      if (verdict === null) {  // failoverd went away mid-request: carry on down the plan
        this._queue(report);
        return this._runStatic(chain, plan.decisionId, attempts, tried, attempt, deadline, signal, result);
      }
      record.verdict = verdict.verdict;
      record.reason = verdict.reason;
      if (verdict.targetHealth === 'HEALTH_STATE_DOWN') {
        this._emit({kind: 'targetDown', chain, target: current.target, reason: verdict.reason, message: verdict.error});
      }
      if (verdict.verdict === 'VERDICT_TRY_NEXT') {
        this._emit({kind: 'failover', chain, target: current.target, nextTarget: verdict.nextAttempt.target,
          reason: verdict.reason});
      }
      if (verdict.verdict === 'VERDICT_RETRY_SAME') {
        const delayMs = ms(verdict.retryDelay);
        const stopWait = this._stopReason(deadline, signal, delayMs);
        if (stopWait) {
          result.error = stopWait;
          return result;
        }
        await new Promise((resolve) => setTimeout(resolve, delayMs));
      } else if (verdict.verdict === 'VERDICT_TRY_NEXT') {
        current = toAttempt(verdict.nextAttempt);
      } else {
        result.error = verdict.error || describe(outcome.failure);
        return result;
      }
      number += 1;
    }
    result.error = `gave up after ${MAX_STEPS} attempts`;
    return result;
  }

  // Sends the buffered reports now; resolves to how many outcomes were delivered.
  flush() { return this._flush(); }

  // --- internals -------------------------------------------------------------
  _metadata() {
    const m = new grpc.Metadata();
    if (this._o.token) m.set('authorization', `Bearer ${this._o.token}`);
    return m;
  }

  _callDeadline(deadline) {
    const own = Date.now() + this._o.timeoutMs;
    return new Date(deadline === null ? own : Math.min(own, deadline));
  }

  _unary(method, request, deadline) {
    return new Promise((resolve, reject) => {
      this._stub[method](request, this._metadata(), {deadline: this._callDeadline(deadline)},
          (err, response) => (err ? reject(err) : resolve(response)));
    });
  }

  // The batch in one call: ReportOutcomes, or a stream to a failoverd from
  // before it (asked again a minute later: it may have been upgraded).
  async _sendBatch(batch, deadline) {
    if (Date.now() >= this._streamsUntil) {
      try {
        return await this._unary('ReportOutcomes', {outcomes: batch}, deadline);
      } catch (err) {
        if (!err || err.code !== grpc.status.UNIMPLEMENTED) throw err;
        this._streamsUntil = Date.now() + ASK_FOR_BATCHES_AGAIN_MS;  // the refusal counted nothing
      }
    }
    return this._streamOutcomes(batch, deadline);
  }

  _streamOutcomes(reports, deadline = null) {
    return new Promise((resolve, reject) => {
      const call = this._stub.StreamOutcomes(this._metadata(), {deadline: this._callDeadline(deadline)},
          (err, summary) => (err ? reject(err) : resolve(summary)));
      for (const r of reports) call.write(r);
      call.end();
    });
  }

  _stopReason(deadline, signal, waitMs) {
    if (signal && signal.aborted) return 'cancelled by the caller';
    if (deadline !== null && deadline - Date.now() <= waitMs) {
      return waitMs > 0 ? "the request's deadline comes before the retry delay ends"
        : "the request's deadline passed before the next attempt";
    }
    return '';
  }

  async _runStatic(chain, decisionId, plan, tried, attempt, deadline, signal, result) {
    result.failStatic = true;
    this._emit({kind: 'failStatic', chain, message: this._lastCause});
    const failures = [];
    let number = result.attempts.length;
    for (const a of plan) {
      if (tried.includes(a.target)) continue;
      const stop = this._stopReason(deadline, signal, 0);
      if (stop) {
        result.error = stop;
        return result;
      }
      number += 1;
      const outcome = await attempt(a, {number, deadline, signal});
      tried.push(a.target);
      this._queue(makeReport(chain, decisionId, a.target, number, outcome));
      result.attempts.push({target: a.target, number, ok: !!outcome.ok, verdict: 'VERDICT_UNSPECIFIED',
        reason: 'FAILURE_REASON_UNSPECIFIED', latencyMs: outcome.latencyMs});
      if (outcome.ok) {
        Object.assign(result, {ok: true, servedBy: a.target, response: outcome.response});
        this._promote(chain, a.target);
        return result;
      }
      failures.push(`${a.target}: ${describe(outcome.failure)}`);
    }
    result.error = `failoverd unreachable and every target failed: ${failures.join('; ')}`;
    return result;
  }

  // The next fail-static request starts where this one was served.
  _promote(chain, target) {
    const plan = this._plans.get(chain);
    const i = plan ? plan.findIndex((a) => a.target === target) : -1;
    if (i > 0) plan.unshift(plan.splice(i, 1)[0]);
  }

  // Queues a report (bounded, oldest dropped); a success on the newest one's
  // chain and target joins it as a count.
  _queue(report) {
    const last = this._buffer[this._buffer.length - 1];
    const n = last ? Math.max(last.count || 0, 1) : 0;
    // A report that was sent (and came back) keeps what its id stands for.
    if (last && report.success && last.success && last.target === report.target && last.chain === report.chain &&
        !!last.latency === !!report.latency && n < MAX_COUNT && !last.reportId && !report.reportId) {
      if (report.latency) {
        const mean = seconds(last.latency) + (seconds(report.latency) - seconds(last.latency)) / (n + 1);
        last.latency = duration(mean);
      }
      last.count = n + 1;
      last.decisionId = '';
      last.attempt = 0;
    } else {
      this._buffer.push(report);
      while (this._buffer.length > this._o.maxBufferedReports) {
        // The oldest success goes first: the failures decide trips.
        const i = Math.max(0, this._buffer.findIndex((r) => r.success));
        this._dropped += Math.max(this._buffer[i].count || 0, 1);
        this._buffer.splice(i, 1);
      }
    }
    if (this._buffer.length >= BATCH) this._schedule(0);
  }

  // Calls the caller's hook; a hook that throws is logged, never breaks the request.
  _emit(event) {
    if (!this._o.onEvent) return;
    try {
      this._o.onEvent({target: '', nextTarget: '', reason: 'FAILURE_REASON_UNSPECIFIED', message: '', ...event});
    } catch (err) {
      console.error('failoverd-client: the onEvent hook threw:', err);
    }
  }

  _noteDown(err) {
    this._lastCause = `${grpc.status[err.code] || err.code}: ${err.details}`;
    this._note(false);
  }

  _note(reached) {
    const wasUp = this._backoffMs === 0;
    if (reached) {
      this._backoffMs = 0;
    } else {
      this._backoffMs = wasUp ? this._o.downBackoffMs : Math.min(this._backoffMs * 2, this._o.maxDownBackoffMs);
      if (wasUp) this._schedule(this._backoffMs);
    }
  }

  // The one owner of the backlog's delivery and of asking a silent failoverd
  // again; its timer never keeps the process alive.
  _schedule(ms) {
    if (this._closed) return;
    if (this._timer) clearTimeout(this._timer);
    this._timer = setTimeout(() => this._tick(), ms);
    this._timer.unref();
  }

  async _tick() {
    this._timer = null;
    if (this._backoffMs > 0) {
      try {
        await this._streamOutcomes([]);  // changes nothing: does failoverd answer?
        this._note(true);
      } catch (err) {
        this._note(!unreachable(err));
      }
    }
    if (this._backoffMs === 0 && this._buffer.length > 0) await this._flush();
    this._schedule(this._backoffMs > 0 ? this._backoffMs : this._o.flushIntervalMs);
  }

  // Sends the backlog while failoverd answers; with a deadline (close), also to
  // a failoverd last seen down, and only until the deadline.
  async _flush(deadline = null) {
    let delivered = 0;
    while ((deadline !== null || this._backoffMs === 0) && this._buffer.length > 0) {
      if (deadline !== null && Date.now() >= deadline) return delivered;
      const batch = this._buffer.splice(0, BATCH);
      for (const r of batch) {
        if (!r.reportId) r.reportId = {sender: this._sender, sequence: this._nextSequence++};
      }
      try {
        const summary = await this._sendBatch(batch, deadline);
        this._note(true);
        delivered += summary.refused === 0 ? batch.reduce((n, r) => n + Math.max(r.count || 0, 1), 0) : summary.accepted;
      } catch (err) {
        if (!unreachable(err)) continue;  // refused whole: sending it again would not help
        this._note(false);
        // Sent again whole, ahead of newer ones; the report ids make it count once.
        this._buffer.unshift(...batch.slice(0, Math.max(0, this._o.maxBufferedReports - this._buffer.length)));
        return delivered;
      }
    }
    return delivered;
  }
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

// The Failure for an upstream's HTTP error reply. headers: a plain object, a
// Map, fetch's Headers or [name, value] pairs; body: a string, a Buffer, or
// the object an SDK already parsed (the openai and anthropic SDKs' err.error).
function failureFromResponse(status, headers, body) {
  const entries = headers instanceof Map || (headers && typeof headers.entries === 'function' && !Array.isArray(headers))
    ? [...headers.entries()] : Array.isArray(headers) ? headers : Object.entries(headers || {});
  const kept = {};
  let count = 0;
  for (const [name, value] of entries) {
    const v = String(value);
    if (isResetHeader(name) && count < MAX_HEADERS && name.length + v.length <= 1024) {
      kept[name.toLowerCase()] = v;
      count += 1;
    }
  }
  const bytes = Buffer.isBuffer(body) || body instanceof Uint8Array ? Buffer.from(body)
    : Buffer.from(typeof body === 'object' && body !== null ? JSON.stringify(body) : String(body ?? ''), 'utf8');
  return {httpStatus: status, phase: 'PHASE_BEFORE_RESPONSE',
    response: {headers: kept, body: bytes.subarray(0, MAX_BODY_BYTES)}};
}

// The Failure for an HTTP status when the reply itself is not at hand.
function failureFromStatus(status, message = '', retryAfterMs = undefined) {
  const failure = {httpStatus: status, message, phase: 'PHASE_BEFORE_RESPONSE'};
  if (retryAfterMs !== undefined) failure.retryAfterMs = retryAfterMs;
  return failure;
}

const TRANSPORT_ERRORS = {
  ECONNREFUSED: 'TRANSPORT_ERROR_CONNECT_REFUSED', ENOTFOUND: 'TRANSPORT_ERROR_DNS', EAI_AGAIN: 'TRANSPORT_ERROR_DNS',
  ECONNRESET: 'TRANSPORT_ERROR_RESET', EPIPE: 'TRANSPORT_ERROR_RESET', UND_ERR_SOCKET: 'TRANSPORT_ERROR_RESET',
  UND_ERR_CLOSED: 'TRANSPORT_ERROR_RESET', ERR_STREAM_PREMATURE_CLOSE: 'TRANSPORT_ERROR_RESET',
  ETIMEDOUT: 'TRANSPORT_ERROR_TIMEOUT', ECONNABORTED: 'TRANSPORT_ERROR_TIMEOUT',  // axios: its `timeout` passed
  UND_ERR_CONNECT_TIMEOUT: 'TRANSPORT_ERROR_TIMEOUT', UND_ERR_HEADERS_TIMEOUT: 'TRANSPORT_ERROR_TIMEOUT',
  UND_ERR_BODY_TIMEOUT: 'TRANSPORT_ERROR_TIMEOUT', EPROTO: 'TRANSPORT_ERROR_TLS',
};
const TLS_CODE = /^(ERR_SSL_|ERR_TLS_|CERT_|UNABLE_TO_|DEPTH_ZERO_|SELF_SIGNED_)/;

// What one error of a chain says: 'timeout', 'cancelled', a transport error, or null.
function judge(e) {
  if (!e || typeof e !== 'object') return null;
  const names = [e.name, e.constructor && e.constructor.name].filter((n) => typeof n === 'string');
  const code = typeof e.code === 'string' ? e.code : '';
  // A deadline the library or the caller's AbortSignal.timeout set.
  if (names.some((n) => /Timeout/.test(n)) || e.code === 23) return 'TRANSPORT_ERROR_TIMEOUT';
  // The caller's own abort (AbortController, axios's CanceledError, the SDKs' user abort).
  if (names.some((n) => /Abort|Cancel/.test(n)) || code === 'ERR_CANCELED' || code === 'ABORT_ERR' || e.code === 20) {
    return 'cancelled';
  }
  if (TRANSPORT_ERRORS[code]) return TRANSPORT_ERRORS[code];
  if (TLS_CODE.test(code)) return 'TRANSPORT_ERROR_TLS';
  return null;
}

// The Failure for a call that got no HTTP reply: refused, DNS, reset, TLS,
// timeout. Takes what fetch (undici), axios or the openai and anthropic SDKs
// threw and follows the causes it wraps (err.cause) to the one that says what
// happened; the outermost that says anything decides. A caller's own abort is
// `cancelled` (never counted against the target); only a deadline is a timeout.
function failureFromError(err, afterFirstByte = false) {
  const phase = afterFirstByte ? 'PHASE_AFTER_FIRST_BYTE' : 'PHASE_BEFORE_RESPONSE';
  const message = String(err && err.message ? err.message : err).slice(0, 1024);
  const chain = [];
  for (let e = err; e && typeof e === 'object' && chain.length < 16 && !chain.includes(e); e = e.cause) chain.push(e);
  let verdict = null;
  for (const e of chain) {
    verdict = judge(e);
    if (verdict) break;
  }
  if (!verdict && chain.some((e) => /Connection/.test((e.constructor && e.constructor.name) || ''))) {
    verdict = 'TRANSPORT_ERROR_CONNECT_REFUSED';  // an SDK's connection error with no cause that says more
  }
  if (verdict === 'cancelled') return {cancelled: true, message, phase};
  return {transportError: verdict || 'TRANSPORT_ERROR_UNSPECIFIED', message, phase};
}

module.exports = {Client, failureFromResponse, failureFromStatus, failureFromError, FailoverdError,
  FailoverdUnreachable, Unauthenticated, UnknownChain, v1, grpc};
