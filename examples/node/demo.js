// Runs the decision loop and a watcher against a running failoverd:
//   npm install && node demo.js --server 127.0.0.1:50051
// Exits non-zero if anything is not as expected.
'use strict';
const {connect, call, runRequest, watch} = require('./failover_client');

async function main() {
  const at = process.argv.indexOf('--server');
  const server = at > 0 ? process.argv[at + 1] : '127.0.0.1:50051';
  const {decide, admin} = connect(server);
  await call(admin, 'Apply', {
    targets: [{name: 'node-primary'}, {name: 'node-fallback'}],
    chains: [{name: 'node-demo', targets: ['node-primary', 'node-fallback']}],
  });

  const stream = watch(decide, {chains: ['node-demo']});
  const switched = new Promise((resolve, reject) => {
    stream.on('data', (event) => {
      const s = event.chain_switched;
      if (s && s.reason === 'SWITCH_REASON_TRIP') resolve(`${s.chain}: ${s.from_target} -> ${s.to_target} (${s.detail})`);
    });
    stream.on('error', (err) => { if (err.code !== 1) reject(err); });  // 1 = CANCELLED by us
  });
  const opened = new Promise((resolve) => stream.once('data', resolve));
  await opened;

  const upstream = async (attempt) => attempt.target === 'node-primary'
    ? {ok: false, status: 500, message: 'primary is down'}
    : {ok: true, result: `hello from ${attempt.upstream_model}`};
  const served = await runRequest(decide, 'node-demo', upstream);
  console.log(`served by ${served.target}: ${served.result}`);
  const seen = await Promise.race([switched, new Promise((r) => setTimeout(() => r('nothing'), 10000))]);
  console.log(`watcher saw: ${seen}`);
  stream.cancel();
  if (served.target !== 'node-fallback' || !seen.includes('node-primary -> node-fallback')) process.exit(1);
  process.exit(0);
}

main().catch((err) => { console.error(err.message); process.exit(1); });
