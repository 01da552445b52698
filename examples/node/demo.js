// The decision loop with failoverd-client, and a watcher, against a running failoverd:
//   ../../client/node/pack.sh ../../client/node && npm install && node demo.js --server 127.0.0.1:50051
// Creates a demo chain (node-primary, node-fallback), serves a request while
// the primary is broken, and prints who served it, what the client's hook saw
// and the switch a watcher saw. Exits non-zero if anything is not as expected.
'use strict';
const {Client, failureFromStatus, grpc, v1} = require('failoverd-client');

function call(stub, method, request) {
  return new Promise((resolve, reject) => stub[method](request, (err, reply) => (err ? reject(err) : resolve(reply))));
}

async function main() {
  const at = process.argv.indexOf('--server');
  const server = at > 0 ? process.argv[at + 1] : '127.0.0.1:50051';
  const credentials = grpc.credentials.createInsecure();
  await call(new (v1().AdminService)(server, credentials), 'Apply', {
    targets: [{name: 'node-primary'}, {name: 'node-fallback'}],
    chains: [{name: 'node-demo', targets: ['node-primary', 'node-fallback']}],
  });

  // A watcher: every event on the chain, live.
  const stream = new (v1().DecisionService)(server, credentials).WatchEvents({chains: ['node-demo']});
  const switched = new Promise((resolve, reject) => {
    stream.on('data', (event) => {
      const s = event.chainSwitched;
      if (s && s.reason === 'SWITCH_REASON_TRIP') resolve(`${s.chain}: ${s.fromTarget} -> ${s.toTarget} (${s.detail})`);
    });
    stream.on('error', (err) => { if (err.code !== grpc.status.CANCELLED) reject(err); });
  });
  await new Promise((resolve) => stream.once('data', resolve));

  const seen = [];
  const client = new Client({server, onEvent: (e) => seen.push(`${e.kind} ${e.target} ${e.nextTarget}`.trim())});
  const result = await client.run('node-demo', async (attempt) => attempt.target === 'node-primary'
    ? {ok: false, failure: failureFromStatus(500, 'primary is down')}
    : {ok: true, response: `hello from ${attempt.upstreamModel}`, latencyMs: 10}, {timeoutMs: 30000});
  await client.close();
  console.log(`served by ${result.servedBy}: ${result.response}`);
  console.log(`the client's hook saw: ${seen.join('; ')}`);
  const watched = await Promise.race([switched, new Promise((r) => setTimeout(() => r('nothing'), 10000))]);
  console.log(`watcher saw: ${watched}`);
  stream.cancel();
  const ok = result.servedBy === 'node-fallback' && seen.includes('failover node-primary node-fallback') &&
    watched.includes('node-primary -> node-fallback');
  process.exit(ok ? 0 : 1);
}

main().catch((err) => { console.error(err.message); process.exit(1); });
