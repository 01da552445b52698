// The Node package (client/node), installed from its npm pack tarball, against
// the real failoverd: the loop, admin refusals followed, failoverd killed
// mid-run and restarted, a hung failoverd costing one deadline, tokens, typed
// errors, unknown options refused, the event hook, and what fetch, axios and
// the openai and anthropic SDKs throw.
// usage: node --test test.js   (FAILOVERD_BINARY and the package installed next to it)
'use strict';
const assert = require('node:assert');
const {test} = require('node:test');
const {spawn} = require('node:child_process');
const fs = require('node:fs');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');
const http = require('node:http');
const {Client, failureFromStatus, failureFromError, failureFromResponse, FailoverdError, FailoverdUnreachable,
  Unauthenticated, UnknownChain} = require('failoverd-client');

const BINARY = process.env.FAILOVERD_BINARY;
const PROTO_DIR = path.join(path.dirname(require.resolve('failoverd-client')), 'proto');
const v1 = grpc.loadPackageDefinition(protoLoader.loadSync(['failover/v1/admin.proto'],
    {includeDirs: [PROTO_DIR], keepCase: true, enums: String, longs: Number, defaults: true, oneofs: true})).failover.v1;

function freePort() {
  return new Promise((resolve) => {
    const s = net.createServer();
    s.listen(0, '127.0.0.1', () => {
      const port = s.address().port;
      s.close(() => resolve(port));
    });
  });
}

// Polls `check` until it holds or `timeoutMs` passes: a condition with a deadline, never a fixed wait.
async function eventually(check, timeoutMs = 10000) {
  const end = Date.now() + timeoutMs;
  while (Date.now() < end) {
    if (await check()) return true;
    await new Promise((r) => setTimeout(r, 20));
  }
  return check();
}

// The state letter of /proc/PID/stat ('T' once stopped).
function processState(pid) {
  const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
}

async function startFailoverd(dir, port, extra = []) {
  const portFile = path.join(dir, 'port');
  fs.rmSync(portFile, {force: true});
  const proc = spawn(BINARY, ['--listen', `127.0.0.1:${port}`, '--port-file', portFile, '--data-dir',
    path.join(dir, 'data'), '--metrics-listen', '', ...extra], {stdio: 'ignore'});
  assert.ok(await eventually(() => fs.existsSync(portFile) && fs.statSync(portFile).size > 0), 'failoverd did not start');
  return {proc, address: `127.0.0.1:${port}`,
    stop(signal = 'SIGKILL') {
      return new Promise((resolve) => {
        if (proc.exitCode !== null || proc.signalCode !== null) return resolve();
        proc.once('exit', resolve);
        proc.kill(signal);
      });
    }};
}

function admin(address, method, request, token) {
  const stub = new v1.AdminService(address, grpc.credentials.createInsecure());
  const md = new grpc.Metadata();
  if (token) md.set('authorization', `Bearer ${token}`);
  return new Promise((resolve, reject) => stub[method](request, md, (err, resp) => {
    stub.close();
    err ? reject(err) : resolve(resp);
  }));
}

const config = {targets: [{name: 'a'}, {name: 'b'}], chains: [{name: 'ch', targets: ['a', 'b']}]};
const okOn = (...targets) => async (a) => targets.includes(a.target)
  ? {ok: true, response: `from ${a.target}`, latencyMs: 2}
  : {ok: false, failure: failureFromStatus(500, 'upstream broke')};

async function withServer(fn, extra = []) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'failoverd-node-'));
  const port = await freePort();
  const server = {current: await startFailoverd(dir, port, extra), dir, port};
  try {
    await fn(server);
  } finally {
    server.current.proc.kill('SIGCONT');
    await server.current.stop();
  }
}

test('the loop follows failoverd\'s verdicts', () => withServer(async (s) => {
  await admin(s.current.address, 'Apply', config);
  const client = new Client({server: s.current.address});
  const r = await client.run('ch', okOn('b'));
  assert.ok(r.ok, r.error);
  assert.strictEqual(r.servedBy, 'b');
  assert.strictEqual(r.response, 'from b');
  assert.deepStrictEqual(r.attempts.map((a) => a.target), ['a', 'b']);
  assert.strictEqual(r.attempts[0].verdict, 'VERDICT_TRY_NEXT');
  assert.strictEqual(r.attempts[0].reason, 'FAILURE_REASON_SERVER_ERROR');
  assert.strictEqual((await client.run('ch', okOn('a', 'b'))).servedBy, 'b');  // a tripped
  client.close();
}));

test('the API is camelCase in milliseconds, and a key it does not know is refused', () => withServer(async (s) => {
  await admin(s.current.address, 'Apply', {targets: [{name: 'a', upstream_model: 'm-a',
    timeout: {seconds: 2, nanos: 500000000}, max_retries: 1}, {name: 'b'}], chains: [{name: 'ch', targets: ['a', 'b']}]});
  const client = new Client({server: s.current.address});
  const seen = [];
  const r = await client.run('ch', async (a) => {
    seen.push(a);
    return {ok: false, failure: {httpStatus: 429, retryAfterMs: 1500, message: 'too many requests'}};
  }, {timeoutMs: 10000});
  assert.deepStrictEqual(Object.keys(seen[0]).sort(),
      ['health', 'labels', 'maxRetries', 'position', 'target', 'timeoutMs', 'upstreamModel']);
  assert.strictEqual(seen[0].upstreamModel, 'm-a');
  assert.strictEqual(seen[0].timeoutMs, 2500);
  assert.strictEqual(seen[0].maxRetries, 1);
  assert.strictEqual(r.attempts[0].reason, 'FAILURE_REASON_RATE_LIMIT');
  const view = await admin(s.current.address, 'GetTarget', {name: 'a'});
  assert.match(view.status.last_error, /too many requests/, 'the camelCase failure did not reach failoverd whole');
  assert.throws(() => new Client({server: s.current.address, timeout: 5}), /unknown option key "timeout"/);
  await assert.rejects(client.run('ch', okOn('a'), {timeout_ms: 5}), /unknown run option key "timeout_ms"/);
  await assert.rejects(client.run('ch', async () => ({ok: false, failure: {http_status: 503}})),
      /unknown failure key "http_status"/);
  client.close();
}));

test('setup errors are thrown typed; upstream failures stay in the result', () => withServer(async (s) => {
  await admin(s.current.address, 'Apply', config);
  const client = new Client({server: s.current.address});
  await assert.rejects(client.run('no-such-chain', okOn('a')),
      (err) => err instanceof UnknownChain && err.chain === 'no-such-chain' && err.code === grpc.status.NOT_FOUND);
  await assert.rejects(client.run('Bad Name!', okOn('a')),
      (err) => err instanceof FailoverdError && err.code === grpc.status.INVALID_ARGUMENT && /chain/.test(err.message));
  const r = await client.run('ch', okOn());
  assert.ok(!r.ok && r.error !== '', 'every upstream failing is a result, not an error');
  client.close();
  const address = `127.0.0.1:${await freePort()}`;
  const away = new Client({server: address, timeoutMs: 2000});
  for (let i = 0; i < 2; i++) {  // the second while backing off, without a call
    await assert.rejects(away.run('ch', okOn('a')), (err) => err instanceof FailoverdUnreachable &&
        err.address === address && err.message.includes(address) && /UNAVAILABLE/.test(err.cause));
  }
  away.close();
}));

test('the onEvent hook sees the failover, the trip and a fail-static request', () => withServer(async (s) => {
  await admin(s.current.address, 'Apply', {targets: [...config.targets, {name: 'c'}, {name: 'd'}],
    chains: [...config.chains, {name: 'ch2', targets: ['c', 'd']}]});
  const broken = new Client({server: s.current.address, onEvent: () => { throw new Error("the caller's bug"); }});
  assert.strictEqual((await broken.run('ch2', okOn('d'))).servedBy, 'd', 'a hook that throws broke the request');
  broken.close();
  const events = [];
  const client = new Client({server: s.current.address, timeoutMs: 2000, onEvent: (e) => events.push(e)});
  assert.ok((await client.run('ch', okOn('b'))).ok);
  assert.deepStrictEqual(events.map((e) => [e.kind, e.target, e.nextTarget, e.reason]),
      [['targetDown', 'a', '', 'FAILURE_REASON_SERVER_ERROR'], ['failover', 'a', 'b', 'FAILURE_REASON_SERVER_ERROR']]);
  await s.current.stop('SIGKILL');
  events.length = 0;
  assert.ok((await client.run('ch', okOn('b'))).failStatic);
  assert.deepStrictEqual(events.map((e) => e.kind), ['failStatic']);
  assert.match(events[0].message, /UNAVAILABLE/);
  client.close();
}));

test('admin refusals are followed, not taken for an outage', () => withServer(async (s) => {
  await admin(s.current.address, 'Apply', config);
  for (const target of ['a', 'b']) await admin(s.current.address, 'TriggerFailover', {target});
  const client = new Client({server: s.current.address});
  const calls = [];
  const r = await client.run('ch', async (a) => { calls.push(a.target); return {ok: true}; });
  assert.ok(!r.ok);
  assert.ok(!r.failStatic);
  assert.deepStrictEqual(calls, [], 'traffic went to targets an admin took out');
  client.close();
}));

test('killed mid-run: serves from the last plan, sends the backlog after a restart', () => withServer(async (s) => {
  await admin(s.current.address, 'Apply', config);
  const client = new Client({server: s.current.address, timeoutMs: 2000});
  assert.strictEqual((await client.run('ch', okOn('b'))).servedBy, 'b');
  await s.current.stop('SIGKILL');
  for (let i = 0; i < 3; i++) {
    const r = await client.run('ch', okOn('b'));
    assert.ok(r.ok, r.error);
    assert.ok(r.failStatic);
    assert.strictEqual(r.servedBy, 'b');
  }
  assert.ok(client.bufferedReports > 0);
  s.current = await startFailoverd(s.dir, s.port);
  assert.ok(await eventually(() => client.bufferedReports === 0), 'the backlog was not sent');
  assert.ok(await eventually(async () => !(await client.run('ch', okOn('b'))).failStatic));
  assert.strictEqual(client.droppedReports, 0);
  client.close();
}));

test('a hung failoverd costs one deadline, then nothing', () => withServer(async (s) => {
  await admin(s.current.address, 'Apply', config);
  // The call timeout is far above what a request may take when it does not
  // wait on failoverd, even on a loaded machine.
  const client = new Client({server: s.current.address, timeoutMs: 5000, downBackoffMs: 100, maxDownBackoffMs: 200});
  assert.ok(!(await client.run('ch', okOn('a'))).failStatic);
  s.current.proc.kill('SIGSTOP');
  assert.ok(await eventually(() => processState(s.current.proc.pid) === 'T'));  // the stop is asynchronous
  assert.ok((await client.run('ch', okOn('a'))).failStatic);  // waits out one deadline
  let slowest = 0;
  const start = Date.now();
  while (Date.now() - start < 800) {  // several times the backoff
    const t0 = Date.now();
    const r = await client.run('ch', okOn('a'));
    slowest = Math.max(slowest, Date.now() - t0);
    assert.ok(r.ok && r.failStatic);
    await new Promise((resolve) => setImmediate(resolve));  // let the client's timer run, as a real server would
  }
  assert.ok(slowest < 2500, `a request waited for the deadline on the hung failoverd (${slowest} ms)`);
  s.current.proc.kill('SIGCONT');
  assert.ok(await eventually(async () => !(await client.run('ch', okOn('a'))).failStatic));
  client.close();
}));

test('a cancelled request and a past deadline stop the loop', () => withServer(async (s) => {
  await admin(s.current.address, 'Apply', config);
  const client = new Client({server: s.current.address});
  const controller = new AbortController();
  controller.abort();
  let r = await client.run('ch', okOn('a'), {signal: controller.signal});
  assert.ok(!r.ok && r.error.includes('cancelled') && r.attempts.length === 0, r.error);
  r = await client.run('ch', okOn('a'), {timeoutMs: 0});
  assert.ok(!r.ok && r.error.includes('deadline') && r.attempts.length === 0, r.error);
  client.close();
}));

test('tokens are sent', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'failoverd-node-'));
  fs.writeFileSync(path.join(dir, 'tokens'), 'admin ops admin-secret\ndecide gw decide-secret\n');
  const s = await startFailoverd(dir, await freePort(), ['--tokens-file', path.join(dir, 'tokens')]);
  try {
    await admin(s.address, 'Apply', config, 'admin-secret');
    const anonymous = new Client({server: s.address});
    await assert.rejects(anonymous.run('ch', okOn('a')),  // refused, not unreachable
        (err) => err instanceof Unauthenticated && err.code === grpc.status.UNAUTHENTICATED);
    anonymous.close();
    const client = new Client({server: s.address, token: 'decide-secret'});
    assert.ok((await client.run('ch', okOn('a'))).ok);
    client.close();
  } finally {
    await s.stop();
  }
});

// Upstreams that fail the way real ones do, on loopback: a port nobody listens
// on, a name that does not resolve, one that resets the connection once the
// request arrives, one that accepts and never answers, and a plain-text server
// behind an https URL.
async function mockUpstreams() {
  const sockets = [];
  const serve = (onConnection) => new Promise((resolve) => {
    const server = net.createServer((socket) => {
      sockets.push(socket);
      socket.on('error', () => {});
      onConnection(socket);
    });
    server.listen(0, '127.0.0.1', () => resolve(server));
  });
  const silent = await serve(() => {});
  const reset = await serve((socket) => socket.once('data', () => socket.resetAndDestroy()));
  const plain = await serve((socket) => socket.write('HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok'));
  return {
    refused: `http://127.0.0.1:${await freePort()}/v1`,
    dns: 'http://failoverd-test-upstream.invalid/v1',
    reset: `http://127.0.0.1:${reset.address().port}/v1`,
    silent: `http://127.0.0.1:${silent.address().port}/v1`,
    notTls: `https://127.0.0.1:${plain.address().port}/v1`,
    close() {
      for (const s of sockets) s.destroy();
      silent.close();
      reset.close();
      plain.close();
    },
  };
}

// What each library throws, as a caller would catch it.
const LIBRARIES = {
  fetch: (url, signal) => fetch(`${url}/chat`, {signal: signal || AbortSignal.timeout(500)}),
  axios: (url, signal) => require('axios').get(`${url}/chat`, {timeout: 500, signal}),
  openai: (url, signal) => {
    const OpenAI = require('openai');
    const client = new (OpenAI.default || OpenAI)({apiKey: 'sk-test', baseURL: url, maxRetries: 0, timeout: 500});
    return client.chat.completions.create({model: 'm', messages: [{role: 'user', content: 'hi'}]}, {signal});
  },
  anthropic: (url, signal) => {
    const Anthropic = require('@anthropic-ai/sdk');
    const client = new (Anthropic.default || Anthropic)({apiKey: 'sk-test', baseURL: url, maxRetries: 0, timeout: 500});
    return client.messages.create({model: 'm', max_tokens: 8, messages: [{role: 'user', content: 'hi'}]}, {signal});
  },
};
const CASES = {
  refused: ['TRANSPORT_ERROR_CONNECT_REFUSED', 'FAILURE_REASON_NETWORK'],
  dns: ['TRANSPORT_ERROR_DNS', 'FAILURE_REASON_NETWORK'],
  reset: ['TRANSPORT_ERROR_RESET', 'FAILURE_REASON_NETWORK'],
  silent: ['TRANSPORT_ERROR_TIMEOUT', 'FAILURE_REASON_TIMEOUT'],
  notTls: ['TRANSPORT_ERROR_TLS', 'FAILURE_REASON_NETWORK'],
};

test('fetch, axios and the openai and anthropic SDKs: every way to fail reaches the next target', () => withServer(async (s) => {
  const upstreams = await mockUpstreams();
  const targets = [];
  const chains = [];
  for (const lib of Object.keys(LIBRARIES)) {
    for (const c of Object.keys(CASES)) {
      targets.push({name: `${lib}-${c}-dead`}, {name: `${lib}-${c}-ok`});
      chains.push({name: `${lib}-${c}`, targets: [`${lib}-${c}-dead`, `${lib}-${c}-ok`]});
    }
  }
  await admin(s.current.address, 'Apply', {targets, chains});
  const client = new Client({server: s.current.address});
  try {
    for (const [lib, call] of Object.entries(LIBRARIES)) {
      for (const [c, [transport, reason]] of Object.entries(CASES)) {
        const seen = [];
        const r = await client.run(`${lib}-${c}`, async (a) => {
          if (a.target.endsWith('-ok')) return {ok: true, response: 'served'};
          try {
            await call(upstreams[c]);
            return {ok: true};
          } catch (err) {
            const failure = failureFromError(err);
            seen.push(failure);
            return {ok: false, failure};
          }
        });
        const what = `${lib} ${c}: ${JSON.stringify(seen)}`;
        assert.strictEqual(seen.length, 1, what);
        assert.strictEqual(seen[0].transportError, transport, what);
        assert.ok(r.ok, `${what}: ${r.error}`);
        assert.strictEqual(r.servedBy, `${lib}-${c}-ok`, what);
        assert.strictEqual(r.attempts[0].reason, reason, what);
        assert.strictEqual(r.attempts[0].verdict, 'VERDICT_TRY_NEXT', what);
      }
    }
  } finally {
    client.close();
    upstreams.close();
  }
}));

// A caller's own abort is `cancelled`: it never counts and never takes the
// upstream down. (It was reported as a timeout, which took a healthy provider
// DOWN.)
test('a caller\'s abort is cancelled, never a timeout', async () => {
  const upstreams = await mockUpstreams();
  try {
    for (const [lib, call] of Object.entries(LIBRARIES)) {
      const controller = new AbortController();
      const pending = call(upstreams.silent, controller.signal);
      setTimeout(() => controller.abort(), 50);
      const err = await pending.then(() => null, (e) => e);
      assert.ok(err, `${lib}: the call did not fail`);
      const failure = failureFromError(err);
      assert.strictEqual(failure.cancelled, true, `${lib}: ${JSON.stringify(failure)} from ${err.name}`);
      assert.strictEqual(failure.transportError, undefined, lib);
    }
  } finally {
    upstreams.close();
  }
});

// A short-lived process: its successes wait in the backlog (flushed every
// minute here) and must reach failoverd when it closes the client.
test('close sends what is buffered', () => withServer(async (s) => {
  await admin(s.current.address, 'Apply', config);
  const client = new Client({server: s.current.address, flushIntervalMs: 60000});
  const r = await client.run('ch', okOn('a'));
  assert.ok(r.ok, r.error);
  assert.ok(client.bufferedReports > 0);
  await client.close();
  assert.strictEqual(client.bufferedReports, 0);
  assert.strictEqual(client.droppedReports, 0);
  const view = await admin(s.current.address, 'GetTarget', {name: 'a'});
  assert.strictEqual(view.status.health, 'HEALTH_STATE_HEALTHY', 'the success never reached failoverd');
}));

test('close gives up on an absent failoverd within its bound', () => withServer(async (s) => {
  await admin(s.current.address, 'Apply', config);
  const client = new Client({server: s.current.address, flushIntervalMs: 60000});
  assert.ok((await client.run('ch', okOn('a'))).ok);
  await s.current.stop('SIGKILL');
  const start = Date.now();
  await client.close(500);
  assert.ok(Date.now() - start < 5000, `close took ${Date.now() - start} ms`);
  assert.ok(client.droppedReports > 0);
}));

// A failoverd from before ReportOutcomes: it plans a, takes reports and streams.
async function serverBeforeReportOutcomes() {
  const decision = grpc.loadPackageDefinition(protoLoader.loadSync(['failover/v1/decision.proto'],
      {includeDirs: [PROTO_DIR], keepCase: true, enums: String, longs: Number, defaults: true, oneofs: true}))
      .failover.v1;
  const seen = {batchCalls: 0, streamed: []};
  const server = new grpc.Server();
  server.addService(decision.DecisionService.service, {
    PickTarget: (call, done) => done(null, {decision_id: 'd1', attempts: [{target: 'a'}]}),
    ReportOutcome: (call, done) => done(null, {verdict: 'VERDICT_DONE'}),
    ReportOutcomes: (call, done) => {
      seen.batchCalls += 1;
      done({code: grpc.status.UNIMPLEMENTED, details: 'Method not found!'});
    },
    StreamOutcomes: (call, done) => {
      const reports = [];
      call.on('data', (r) => reports.push(r));
      call.on('end', () => {
        seen.streamed.push(reports);
        done(null, {accepted: reports.length});
      });
    },
  });
  const port = await new Promise((resolve, reject) => server.bindAsync('127.0.0.1:0',
      grpc.ServerCredentials.createInsecure(), (err, bound) => (err ? reject(err) : resolve(bound))));
  return {address: `127.0.0.1:${port}`, seen, stop: () => server.forceShutdown()};
}

test('to a failoverd from before ReportOutcomes the backlog goes as streams, and the call is asked for once',
    async () => {
      const older = await serverBeforeReportOutcomes();
      try {
        const client = new Client({server: older.address, flushIntervalMs: 60000});
        for (let i = 0; i < 2; i++) {
          assert.ok((await client.run('ch', okOn('a'))).ok);
          assert.strictEqual(await client.flush(), 1);
        }
        await client.close();
        assert.deepStrictEqual(older.seen.streamed.filter((s) => s.length > 0).map((s) => s.length), [1, 1]);
        assert.strictEqual(older.seen.batchCalls, 1, 'asked for ReportOutcomes before every batch');
      } finally {
        older.stop();
      }
    });

test('a full backlog drops successes before failures', async () => {
  const client = new Client({server: `127.0.0.1:${await freePort()}`, maxBufferedReports: 3, flushIntervalMs: 60000});
  for (const [target, ok] of [['a', false], ['b', true], ['c', false], ['d', false]]) {
    client._queue(ok ? {chain: 'ch', target, success: {}} : {chain: 'ch', target, failure: failureFromStatus(503)});
  }
  assert.deepStrictEqual(client._buffer.map((r) => r.target), ['a', 'c', 'd']);
  assert.strictEqual(client.droppedReports, 1);
  await client.close(0);
});

// Error replies shaped as the providers send them, through the SDKs: the SDK
// throws its APIError, failureFromResponse takes its status, headers and the
// body it already parsed, and failoverd decides as for the raw reply.
const REPLIES = {
  openai429: [429, {'retry-after': '2', 'x-ratelimit-reset-requests': '2s'},
    {error: {message: 'Rate limit reached for requests', type: 'requests', code: 'rate_limit_exceeded'}},
    'FAILURE_REASON_RATE_LIMIT'],
  openai402: [402, {}, {error: {message: 'You exceeded your current quota, please check your plan and billing details.',
    type: 'insufficient_quota', code: 'insufficient_quota'}}, 'FAILURE_REASON_BILLING'],
  anthropic529: [529, {}, {type: 'error', error: {type: 'overloaded_error', message: 'Overloaded'}},
    'FAILURE_REASON_OVERLOADED'],
  anthropic429: [429, {'retry-after': '3', 'anthropic-ratelimit-requests-reset': '2030-01-01T00:00:00Z'},
    {type: 'error', error: {type: 'rate_limit_error', message: 'Number of request tokens has exceeded your per-minute rate limit'}},
    'FAILURE_REASON_RATE_LIMIT'],
};

test('the SDKs\' error replies (429, 402, 529) are classified as the provider meant', () => withServer(async (s) => {
  const upstream = http.createServer((req, res) => {
    const [status, headers, body] = REPLIES[req.url.split('/')[1]];
    res.writeHead(status, {'content-type': 'application/json', ...headers});
    res.end(JSON.stringify(body));
  });
  await new Promise((resolve) => upstream.listen(0, '127.0.0.1', resolve));
  const names = Object.keys(REPLIES);
  await admin(s.current.address, 'Apply', {targets: names.flatMap((n) => [{name: `${n}-x`}, {name: `${n}-ok`}]),
    chains: names.map((n) => ({name: n, targets: [`${n}-x`, `${n}-ok`]}))});
  const client = new Client({server: s.current.address});
  try {
    for (const name of names) {
      const lib = name.startsWith('openai') ? 'openai' : 'anthropic';
      const r = await client.run(name, async (a) => {
        if (a.target.endsWith('-ok')) return {ok: true};
        try {
          await LIBRARIES[lib](`http://127.0.0.1:${upstream.address().port}/${name}`);
          return {ok: true};
        } catch (err) {
          assert.ok(err.status, `${name}: ${err}`);
          return {ok: false, failure: failureFromResponse(err.status, err.headers, err.error)};
        }
      });
      assert.strictEqual(r.attempts[0].reason, REPLIES[name][3], name);
      assert.strictEqual(r.servedBy, `${name}-ok`, `${name}: ${r.error}`);
    }
  } finally {
    client.close();
    upstream.close();
  }
}));
