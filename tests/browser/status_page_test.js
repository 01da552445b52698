// The status page in a real browser (Debian's chromium, headless, driven by
// puppeteer-core) against the real failoverd and failoverctl:
//   - the page asks for a token (a tokens file is set), then lists the chains;
//   - a trip reported over gRPC shows within a second, without a reload;
//   - a pin made on the page is refused with a decide token and takes effect
//     with an admin token (checked over gRPC);
//   - after a reload the event list has no gaps, even for events made while
//     the page was away;
//   - the chain filter works and the page fits a phone's width;
//   - the instance line, time in state and next check, DEGRADED set apart from
//     FALLBACK, no Disable offered on a target a config file declares,
//     events with date and zone filtered by kind and name, shadow events marked
//     beside real ones, and no token box
//     when failoverd has no tokens file; the last check's result;
//   - in cluster mode (two replicas on a one-member etcd) the replicas, with
//     the leader marked.
// Saves a screenshot of the page.
// usage: node status_page_test.js FAILOVERD FAILOVERCTL SCREENSHOT.png
'use strict';
const {spawn, execFileSync} = require('child_process');
const fs = require('fs');
const os = require('os');
const net = require('net');
const path = require('path');
const puppeteer = require('puppeteer-core');

const [failoverd, failoverctl, screenshot] = process.argv.slice(2);
const ADMIN = 'admin-secret-for-the-page';
const DECIDE = 'decide-secret-for-the-page';

function fail(message) {
  throw new Error(message);
}

// `tokens`: start with a tokens file (and a config file declaring one target).
async function startFailoverd(dir, tokens = true, extra = []) {
  const args = ['--data-dir', path.join(dir, 'data'), '--listen', '127.0.0.1:0', '--port-file', path.join(dir, 'port'),
                '--http-listen', '127.0.0.1:0', '--metrics-listen', '', ...extra];
  if (tokens) {
    fs.writeFileSync(path.join(dir, 'tokens'), `admin ${ADMIN}\ndecide ${DECIDE}\n`);
    fs.mkdirSync(path.join(dir, 'config'));
    fs.writeFileSync(path.join(dir, 'config', 'filed.yaml'), 'targets:\n  - name: filed-llm\n');
    args.push('--tokens-file', path.join(dir, 'tokens'), '--config', path.join(dir, 'config'));
  }
  const child = spawn(failoverd, args, {stdio: ['ignore', 'ignore', 'pipe']});
  let log = '';
  child.stderr.on('data', (d) => { log += d; });
  const deadline = Date.now() + 20000;
  while (!/http_port=(\d+)/.test(log)) {
    if (Date.now() > deadline || child.exitCode !== null) fail('failoverd did not start: ' + log);
    await new Promise((r) => setTimeout(r, 50));
  }
  const grpcPort = Number(/ port=(\d+)/.exec(log)[1]);
  const httpPort = Number(/http_port=(\d+)/.exec(log)[1]);
  return {child, grpc: `127.0.0.1:${grpcPort}`, http: `http://127.0.0.1:${httpPort}`, log: () => log};
}

// Stops a started process and waits until it has exited: failoverd still
// writes its data dir while it shuts down, so removing the dir before then
// races with it (ENOTEMPTY). SIGKILL if it has not exited in 15 s.
async function stop(started) {
  const {child} = started;
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGTERM');
  let timer;
  const late = new Promise((resolve) => { timer = setTimeout(() => resolve('late'), 15000); });
  if (await Promise.race([exited, late]) === 'late') {
    child.kill('SIGKILL');
    await exited;
  }
  clearTimeout(timer);
}

function freePort() {
  return new Promise((resolve, reject) => {
    const probe = net.createServer().listen(0, '127.0.0.1', () => {
      const {port} = probe.address();
      probe.close(() => resolve(port));
    }).on('error', reject);
  });
}

// A one-member etcd on loopback, for cluster mode.
async function startEtcd(dir) {
  const client = `http://127.0.0.1:${await freePort()}`;
  const peer = `http://127.0.0.1:${await freePort()}`;
  const child = spawn(process.env.ETCD || '/usr/bin/etcd',
      ['--name', 'page', '--data-dir', path.join(dir, 'etcd'), '--listen-client-urls', client,
       '--advertise-client-urls', client, '--listen-peer-urls', peer, '--initial-advertise-peer-urls', peer,
       '--initial-cluster', `page=${peer}`], {stdio: ['ignore', 'ignore', 'pipe']});
  let log = '';
  child.stderr.on('data', (d) => { log += d; });
  const deadline = Date.now() + 20000;
  while (!/ready to serve client requests/.test(log)) {
    if (Date.now() > deadline || child.exitCode !== null) fail('etcd did not start: ' + log);
    await new Promise((r) => setTimeout(r, 50));
  }
  return {child, endpoint: client.replace('http://', '')};
}

function ctl(server, token, ...args) {
  return execFileSync(failoverctl, ['--server', server, '--token', token, ...args], {encoding: 'utf8'});
}

// assistant-llm's last hour: primary, then fallback after the trip, degraded now.
async function expectTimeline(page) {
  await page.waitForFunction(() => {
    const spans = [...document.querySelectorAll('#chains tr[data-chain="assistant-llm"] .timeline span')];
    const states = spans.map((s) => s.className).filter((state) => state !== 'none');  // before it existed
    return states[0] === 'primary' && states.includes('fallback') && states[states.length - 1] === 'degraded';
  }, {timeout: 3000}).catch(async () => {
    fail('timeline: ' + await page.$eval('#chains tr[data-chain="assistant-llm"]', (row) => row.innerHTML));
  });
  console.log('ok   the chain\'s timeline shows its last hour: primary, fallback, degraded');
}

async function main() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'failoverd-page-'));
  const server = await startFailoverd(dir);
  let browser;
  try {
    fs.writeFileSync(path.join(dir, 'chains.yaml'),
        'targets:\n  - name: argus-llm\n  - name: gemma-local\n    kind: local\n  - name: openrouter\n' +
        'chains:\n  - name: assistant-llm\n    targets: [argus-llm, gemma-local]\n' +
        '    shadow:\n      - name: eager\n        policy:\n          trip:\n            errors: 1\n' +
        '  - name: batch-llm\n    targets: [openrouter, gemma-local]\n');
    ctl(server.grpc, ADMIN, 'apply', '-f', path.join(dir, 'chains.yaml'));

    browser = await puppeteer.launch({executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
                                      headless: 'new', args: ['--no-sandbox', '--disable-gpu']});
    const page = await browser.newPage();
    await page.setViewport({width: 1100, height: 900});
    const problems = [];
    page.on('pageerror', (e) => problems.push(String(e)));
    await page.goto(server.http, {waitUntil: 'load'});

    // Tokens are configured: nothing shows until one is entered.
    await page.waitForFunction(() => document.getElementById('connection').textContent === 'token needed',
                               {timeout: 10000});
    if (await page.$$eval('#chains tbody tr', (rows) => rows.length) !== 0) fail('state shown without a token');
    await page.type('#token', DECIDE);
    await page.keyboard.press('Enter');
    await page.waitForFunction(() => document.querySelectorAll('#chains tbody tr').length === 2 &&
                               document.getElementById('connection').textContent === 'live', {timeout: 10000});
    console.log('ok   the page lists the chains once a decide token is entered');

    // The filter narrows the chains (and the targets to theirs).
    await page.type('#filter', 'batch');
    await page.waitForFunction(() => document.querySelectorAll('#chains tbody tr').length === 1 &&
                               !document.querySelector('#targets tr[data-target="argus-llm"]'), {timeout: 2000});
    await page.click('#filter', {clickCount: 3});
    await page.keyboard.press('Backspace');
    await page.waitForFunction(() => document.querySelectorAll('#chains tbody tr').length === 2, {timeout: 2000});
    console.log('ok   the filter narrows the chains and their targets');

    // A trip reported over gRPC shows within a second, without a reload.
    ctl(server.grpc, DECIDE, 'report', '--chain', 'assistant-llm', '--target', 'argus-llm', '--status', '503',
        '--message', 'overloaded');
    await page.waitForFunction(() => {
      const row = document.querySelector('#chains tr[data-chain="assistant-llm"]');
      const target = document.querySelector('#targets tr[data-target="argus-llm"]');
      return row && row.children[2].textContent === 'gemma-local' && row.children[1].textContent === 'fallback' &&
          target && target.children[1].textContent === 'down' && target.children[6].textContent.includes('overloaded');
    }, {timeout: 1000});
    console.log('ok   a trip reported over gRPC shows within a second');

    // The chain's shadow policy judged the same report: its events are listed
    // beside the real ones, marked with its name, and the kind filter finds them.
    await page.waitForFunction(() => [...document.querySelectorAll('#events li.shadow[data-shadow="eager"]')].some(
        (li) => li.textContent.startsWith('shadow eager') && li.textContent.includes('would have: target argus-llm')),
    {timeout: 5000}).catch(async () => fail('no shadow event: ' + await page.$eval('#events', (e) => e.textContent)));
    const real = await page.$$eval('#events li:not(.shadow)', (items) => items.map((li) => li.textContent));
    if (!real.some((t) => /^#\d+/.test(t) && t.includes('target argus-llm'))) fail('real trip not listed: ' + real);
    await page.select('#event-kind', 'shadow');
    await page.waitForFunction(() => {
      const items = [...document.querySelectorAll('#events li')];
      return items.length >= 2 && items.every((li) => li.dataset.kind === 'shadow');
    }, {timeout: 2000});
    await page.select('#event-kind', '');
    console.log('ok   shadow events show beside real ones, marked with the shadow\'s name');

    // The tripped target: how long it has been down and when it is checked next.
    await page.waitForFunction(() => {
      const cells = document.querySelector('#targets tr[data-target="argus-llm"]').children;
      return /^\d+s$/.test(cells[3].textContent) && /^(in \d|due now)/.test(cells[4].textContent);
    }, {timeout: 3000});
    console.log('ok   a DOWN target shows its time in state and its next check');
    // Its traffic: the reported failure, then a success with its latency
    // (reported after the refresh the trip caused, so the row is read again).
    ctl(server.grpc, DECIDE, 'report', '--chain', 'assistant-llm', '--target', 'gemma-local', '--success',
        '--latency', '250ms');
    await page.waitForFunction(() => {
      const cell = (name) => document.querySelector(`#targets tr[data-target="${name}"]`).children[2].textContent;
      return cell('argus-llm') === '1 req · 100% err' && cell('gemma-local') === '1 req · 0% err · 250 ms';
    }, {timeout: 3000}).catch(async () => fail('traffic: ' + await page.$eval('#targets', (t) => t.textContent)));
    console.log('ok   targets show their traffic of the last ten minutes');
    const instance = await page.$eval('#instance', (e) => e.textContent);
    if (!/^failoverd \S+ · up \d+s · single node$/.test(instance)) fail('instance line: ' + instance);
    console.log('ok   the instance line: ' + instance);

    // DEGRADED (no usable target) does not look like FALLBACK, nor a target
    // not yet judged like one in trouble.
    const colours = await page.evaluate(() => Object.fromEntries(['degraded', 'fallback', 'unknown', 'down'].map((state) => {
      const span = document.createElement('span');
      span.className = 'badge ' + state;
      document.body.append(span);
      const style = getComputedStyle(span);
      const colour = style.backgroundColor + ' ' + style.color;
      span.remove();
      return [state, colour];
    })));
    if (colours.degraded === colours.fallback || colours.unknown === colours.fallback || colours.degraded === colours.down) {
      fail('states share colours: ' + JSON.stringify(colours));
    }
    ctl(server.grpc, DECIDE, 'report', '--chain', 'batch-llm', '--target', 'openrouter', '--status', '503');
    ctl(server.grpc, DECIDE, 'report', '--chain', 'batch-llm', '--target', 'gemma-local', '--status', '503');
    await page.waitForFunction(() => {
      const row = document.querySelector('#chains tr[data-chain="batch-llm"]');
      return row && row.children[1].textContent === 'degraded' && row.classList.contains('degraded-row');
    }, {timeout: 2000});
    console.log('ok   a DEGRADED chain stands apart from FALLBACK');
    await expectTimeline(page);

    // A target a config file declares offers no Disable (failoverd would refuse it).
    const filed = await page.$eval('#targets tr[data-target="filed-llm"]', (row) => row.textContent);
    if (filed.includes('Disable') || !filed.includes('from filed.yaml')) fail('file-declared target row: ' + filed);
    if (!(await page.$('#targets tr[data-target="argus-llm"] button[data-key="disable:argus-llm"]'))) {
      fail('no Disable on a target made over the API');
    }
    console.log('ok   Disable is offered only where failoverd accepts it');

    // Events: date, time and zone; filtered by kind and by name.
    const year = String(new Date().getFullYear());
    const stamp = await page.$eval('#events li time', (t) => t.textContent);
    if (!stamp.includes(year) || !/[A-Z]{2,}|[+-]\d/.test(stamp.slice(-6))) fail('event time without date or zone: ' + stamp);
    await page.select('#event-kind', 'target');
    await page.waitForFunction(() => [...document.querySelectorAll('#events li')].every((li) => li.dataset.kind === 'target') &&
                               document.querySelectorAll('#events li').length >= 3, {timeout: 2000});
    await page.type('#event-name', 'openrouter');
    await page.waitForFunction(() => {
      const items = [...document.querySelectorAll('#events li')];
      return items.length === 1 && items[0].textContent.includes('target openrouter:');
    }, {timeout: 2000});
    await page.select('#event-kind', '');
    await page.click('#event-name', {clickCount: 3});
    await page.keyboard.press('Backspace');
    console.log('ok   events show ' + stamp + ' and filter by kind and name');

    // A pin from the page: refused with the decide token, done with an admin token.
    // Chosen and clicked in one turn of the page's event loop: the table is
    // rebuilt on every event and every 15 s, and a button found in one build
    // is detached by the next (puppeteer then refuses to click it).
    const pin = () => page.evaluate(() => {
      const row = document.querySelector('#chains tr[data-chain="batch-llm"]');
      const select = row.querySelector('select');
      select.value = 'gemma-local';
      select.dispatchEvent(new Event('change', {bubbles: true}));
      row.querySelector('button[data-key="pin:batch-llm"]').click();
    });
    await pin();
    await page.waitForFunction(() => document.getElementById('message').textContent.includes('admin token'),
                               {timeout: 5000});
    let chain = JSON.parse(ctl(server.grpc, ADMIN, '-o', 'json', 'get', 'chain', 'batch-llm'));
    if (chain.status.pinnedTarget) fail('a decide token pinned the chain');
    console.log('ok   a pin with a decide token is refused');
    await page.type('#token', ADMIN);
    await page.keyboard.press('Enter');
    await page.waitForFunction(() => document.getElementById('connection').textContent === 'live', {timeout: 10000});
    await pin();
    await page.waitForFunction(() => {
      const row = document.querySelector('#chains tr[data-chain="batch-llm"]');
      return row && row.children[1].textContent === 'pinned';
    }, {timeout: 5000});
    chain = JSON.parse(ctl(server.grpc, ADMIN, '-o', 'json', 'get', 'chain', 'batch-llm'));
    if (chain.status.pinnedTarget !== 'gemma-local') fail('the pin did not take effect: ' + JSON.stringify(chain));
    console.log('ok   a pin with an admin token takes effect');
    await page.screenshot({path: screenshot, fullPage: true});

    // Reload; change things while the page is away and after it is back.
    await page.reload({waitUntil: 'load'});
    ctl(server.grpc, ADMIN, 'unpin', 'batch-llm');
    await page.type('#token', DECIDE);
    await page.keyboard.press('Enter');
    await page.waitForFunction(() => document.getElementById('connection').textContent === 'live', {timeout: 10000});
    ctl(server.grpc, ADMIN, 'failover', 'trigger', 'openrouter', '--reason', 'provider maintenance');
    const latest = JSON.parse(ctl(server.grpc, ADMIN, '-o', 'json', 'events', '--limit', '1')).events[0];
    await page.waitForFunction((want) => {
      const first = document.querySelector('#events li');
      return first && first.getAttribute('data-sequence') === want;
    }, {timeout: 5000}, String(latest.sequence));
    await expectTimeline(page);  // rebuilt from the API after the reload
    // Numbered events only: the chain's shadow judges on its own clock, and its
    // events (no sequence) may land anywhere in the list.
    const listed = await page.$$eval('#events li:not(.shadow)',
                                     (items) => items.map((li) => Number(li.getAttribute('data-sequence'))));
    for (let i = 1; i < listed.length; ++i) {
      if (listed[i] !== listed[i - 1] - 1) fail(`the event list has a gap: ${listed.join(', ')}`);
    }
    const text = await page.$eval('#events', (ol) => ol.textContent);
    if (!text.includes('unpin') || !text.includes('provider maintenance')) fail('events missing after reload: ' + text);
    console.log(`ok   after a reload the event list runs without gaps (#${listed[listed.length - 1]}..#${listed[0]})`);
    // On a phone the page scrolls down, not sideways (wide tables scroll in their own box).
    await page.setViewport({width: 390, height: 844, isMobile: true});
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    if (overflow > 0) fail(`the page is ${overflow}px wider than a phone`);
    console.log('ok   the page fits a phone\'s width');
    if (problems.length) fail('the page threw: ' + problems.join('; '));
    console.log('screenshot: ' + screenshot);

    // Without a tokens file the page shows no token box.
    const open = fs.mkdtempSync(path.join(os.tmpdir(), 'failoverd-page-open-'));
    const plain = await startFailoverd(open, false);
    try {
      const second = await browser.newPage();
      await second.goto(plain.http, {waitUntil: 'load'});
      await second.waitForFunction(() => document.getElementById('connection').textContent === 'live', {timeout: 10000});
      if (!(await second.$eval('#auth', (e) => e.hidden))) fail('a token box on a failoverd without tokens');
      console.log('ok   no token box when failoverd has no tokens file');

      // A passing health check shows what it found, not only when.
      fs.writeFileSync(path.join(open, 'one.yaml'),
          'targets:\n  - name: checked-llm\n  - name: spare-llm\nchains:\n  - name: solo\n    targets: [checked-llm, spare-llm]\n');
      execFileSync(failoverctl, ['--server', plain.grpc, 'apply', '-f', path.join(open, 'one.yaml')]);
      const probe = async (body) => {
        const reply = await fetch(plain.http + '/v1/probe', {method: 'POST', body: JSON.stringify(body),
                                                             headers: {'content-type': 'application/json'}});
        if (!reply.ok) fail('POST /v1/probe: ' + reply.status + ' ' + await reply.text());
        return reply.json();
      };
      const task = ((await probe({proberId: 'page-test'})).tasks || []).find((t) => t.target === 'checked-llm');
      if (!task) fail('no health check handed out for checked-llm');
      const taken = await probe({proberId: 'page-test', results: [{leaseId: task.leaseId, outcome: 'PROBE_OUTCOME_PASS',
                                                                   latency: '0.085s'}]});
      if (taken.resultsAccepted !== 1) fail('the check result was not taken: ' + JSON.stringify(taken));
      await second.waitForFunction(() => {
        const row = document.querySelector('#targets tr[data-target="checked-llm"]');
        return row && row.children[5].textContent.includes('passed in 85ms');
      }, {timeout: 5000}).catch(async () => fail('last check: ' + await second.$eval('#targets', (t) => t.textContent)));
      console.log('ok   a target shows its last check\'s result: passed in 85ms');
    } finally {
      await stop(plain);
      fs.rmSync(open, {recursive: true, force: true});
    }

    // In cluster mode the page lists the replicas and marks the leader.
    const clusterDir = fs.mkdtempSync(path.join(os.tmpdir(), 'failoverd-page-cluster-'));
    const started = [];
    try {
      const etcd = await startEtcd(clusterDir);
      started.push(etcd);
      const flags = ['--etcd-endpoints', etcd.endpoint, '--etcd-prefix', '/page', '--leader-lease', '2'];
      for (const name of ['one', 'two']) {
        fs.mkdirSync(path.join(clusterDir, name));
        started.push(await startFailoverd(path.join(clusterDir, name), false, flags));
      }
      // Each replica lists the cards in etcd every third of a lease: wait
      // until the one the page asks knows both.
      const deadline = Date.now() + 15000;
      const known = () => (JSON.parse(execFileSync(failoverctl, ['--server', started[1].grpc, '-o', 'json', 'status'],
                                                   {encoding: 'utf8'})).cluster.replicas || []).length;
      while (known() !== 2) {
        if (Date.now() > deadline) fail('the replicas never listed each other');
        await new Promise((r) => setTimeout(r, 100));
      }
      const third = await browser.newPage();
      await third.goto(started[1].http, {waitUntil: 'load'});
      await third.waitForFunction((addresses) => {
        const shown = [...document.querySelectorAll('#replicas .replica')];
        return !document.getElementById('replicas').hidden && shown.length === 2 &&
            shown.filter((r) => r.classList.contains('leader')).length === 1 &&
            addresses.every((a) => shown.some((r) => r.dataset.address === a)) &&
            /cluster leader|follower of 127/.test(document.getElementById('instance').textContent);
      }, {timeout: 15000}, [started[1].grpc, started[2].grpc]).catch(async () => {
        fail('replicas: ' + await third.$eval('header', (h) => h.textContent) +
             await third.$eval('#replicas', (e) => e.outerHTML));
      });
      console.log('ok   in cluster mode the page lists the replicas: ' +
                  await third.$eval('#replicas', (e) => e.textContent));
    } finally {
      for (const p of started.reverse()) await stop(p);
      fs.rmSync(clusterDir, {recursive: true, force: true});
    }
  } finally {
    if (browser) await browser.close();
    await stop(server);
    fs.rmSync(dir, {recursive: true, force: true});
  }
}

main().catch((e) => {
  console.error('FAIL ' + e.message);
  process.exit(1);
});
