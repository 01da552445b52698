// The Node package (client/node), installed from its npm pack tarball, against
// the real failoverd: the loop, admin refusals followed, failoverd killed
// mid-run and restarted, a hung failoverd costing one deadline, tokens.
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
const {Client, failureFromStatus, failureFromError} = require('failoverd-client');

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
    const refused = await anonymous.run('ch', okOn('a'));
    assert.ok(!refused.ok && !refused.failStatic, 'refused, not unreachable');
    anonymous.close();
    const client = new Client({server: s.address, token: 'decide-secret'});
    assert.ok((await client.run('ch', okOn('a'))).ok);
    client.close();
  } finally {
    await s.stop();
  }
});

// Upstreams that fail the way real ones do, on loopback: a port nobody listens
// on, a name that does not resolve, one that accepts and never answers, and a
// plain-text server behind an https URL.
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
  const plain = await serve((socket) => socket.write('HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok'));
  return {
    refused: `http://127.0.0.1:${await freePort()}/v1`,
    dns: 'http://failoverd-test-upstream.invalid/v1',
    silent: `http://127.0.0.1:${silent.address().port}/v1`,
    notTls: `https://127.0.0.1:${plain.address().port}/v1`,
    close() {
      for (const s of sockets) s.destroy();
      silent.close();
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
};
const CASES = {
  refused: ['TRANSPORT_ERROR_CONNECT_REFUSED', 'FAILURE_REASON_NETWORK'],
  dns: ['TRANSPORT_ERROR_DNS', 'FAILURE_REASON_NETWORK'],
  silent: ['TRANSPORT_ERROR_TIMEOUT', 'FAILURE_REASON_TIMEOUT'],
  notTls: ['TRANSPORT_ERROR_TLS', 'FAILURE_REASON_NETWORK'],
};

test('fetch, axios and the openai SDK: every way to fail reaches the next target', () => withServer(async (s) => {
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
        assert.strictEqual(seen[0].transport_error, transport, what);
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
      assert.strictEqual(failure.transport_error, undefined, lib);
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

test('a full backlog drops successes before failures', async () => {
  const client = new Client({server: `127.0.0.1:${await freePort()}`, maxBufferedReports: 3, flushIntervalMs: 60000});
  for (const [target, ok] of [['a', false], ['b', true], ['c', false], ['d', false]]) {
    client._queue(ok ? {chain: 'ch', target, success: {}} : {chain: 'ch', target, failure: failureFromStatus(503)});
  }
  assert.deepStrictEqual(client._buffer.map((r) => r.target), ['a', 'c', 'd']);
  assert.strictEqual(client.droppedReports, 1);
  await client.close(0);
});
