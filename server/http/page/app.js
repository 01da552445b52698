// The status page: state from GET /v1/status, recent events from GET
// /v1/events, then live changes from GET /v1/watch (Server-Sent Events read
// with fetch, so the token travels as a bearer header, never a cookie). A
// reconnect or a reload resumes after the last sequence seen, so the event
// list has no gaps. What the chains' shadow policies would have done comes on
// the same stream (unnumbered, live only) and is listed beside the real events,
// marked with the shadow's name; it never changes the state shown. Every
// string from failoverd is inserted as text.
'use strict';

const page = {
  token: '',            // held in memory only
  chains: new Map(),
  targets: new Map(),
  events: [],
  lastSequence: 0,
  parts: null,          // a snapshot arriving in parts
  filter: '',
  switches: [],         // chain switches of the last hour, oldest first (the timelines)
  eventKind: '',        // '' or chain, target, config, shadow
  eventName: '',
  pinChoice: new Map(),
  watch: null,          // AbortController of the running stream
  retry: 500,
};
const MAX_EVENTS = 200;
const $ = (id) => document.getElementById(id);

function lower(value, prefix) {
  return String(value || '').replace(prefix, '').toLowerCase();
}

function ago(timestamp) {
  if (!timestamp) return '-';
  const seconds = Math.max(0, Math.round((Date.now() - Date.parse(timestamp)) / 1000));
  if (seconds < 60) return seconds + 's';
  if (seconds < 3600) return Math.floor(seconds / 60) + 'm ' + (seconds % 60) + 's';
  if (seconds < 86400) return Math.floor(seconds / 3600) + 'h ' + Math.floor((seconds % 3600) / 60) + 'm';
  return Math.floor(seconds / 86400) + 'd';
}

// How long until `timestamp` ("due now" once it is past), for next checks.
function until(timestamp) {
  if (!timestamp) return '-';
  const seconds = Math.round((Date.parse(timestamp) - Date.now()) / 1000);
  if (seconds <= 0) return 'due now';
  if (seconds < 60) return 'in ' + seconds + 's';
  if (seconds < 3600) return 'in ' + Math.floor(seconds / 60) + 'm ' + (seconds % 60) + 's';
  return 'in ' + Math.floor(seconds / 3600) + 'h ' + Math.floor((seconds % 3600) / 60) + 'm';
}

// Date, time and zone, as events need to be read next to other logs.
function fullTime(timestamp) {
  if (!timestamp) return '';
  return new Date(timestamp).toLocaleString(undefined, {year: 'numeric', month: '2-digit', day: '2-digit',
      hour: '2-digit', minute: '2-digit', second: '2-digit', hour12: false, timeZoneName: 'short'});
}

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key === 'class') node.className = value;
    else if (key.startsWith('on')) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value);
  }
  for (const child of children) node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  return node;
}

function badge(text) {
  return el('span', {class: 'badge ' + text}, text);
}

function say(text, ok) {
  const message = $('message');
  message.textContent = text;
  message.className = ok ? 'ok' : '';
}

function setConnection(text) {
  $('connection').textContent = text;
}

function headers(withBody) {
  const h = {};
  if (page.token) h['Authorization'] = 'Bearer ' + page.token;
  if (withBody) h['Content-Type'] = 'application/json';
  return h;
}

async function api(method, path, body) {
  const response = await fetch(path, {
    method, headers: headers(body !== undefined), credentials: 'omit', cache: 'no-store',
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  let data = {};
  try { data = text ? JSON.parse(text) : {}; } catch (e) { data = {}; }
  if (!response.ok) {
    const error = new Error((data.error && data.error.message) || response.statusText);
    error.status = response.status;
    throw error;
  }
  return data;
}

// --- state --------------------------------------------------------------

function setTargetHealth(name, health, extra) {
  const target = page.targets.get(name);
  if (target) Object.assign(target, {health}, extra);
  for (const chain of page.chains.values()) {
    for (const t of chain.targets || []) if (t.name === name) t.health = health;
  }
}

function apply(event) {
  if (event.snapshot) {
    const s = event.snapshot;
    if (!page.parts) page.parts = {chains: [], targets: []};
    page.parts.chains.push(...(s.chains || []));
    page.parts.targets.push(...(s.targets || []));
    if (s.more) return;
    page.chains = new Map(page.parts.chains.map((c) => [c.name, c]));
    page.targets = new Map(page.parts.targets.map((t) => [t.name, t]));
    page.parts = null;
    return;
  }
  addEvent(event);
  const last = page.switches[page.switches.length - 1];
  if (event.chainSwitched && (!last || Number(event.sequence) > Number(last.sequence))) page.switches.push(event);
  if (event.chainSwitched) {
    const e = event.chainSwitched;
    const chain = page.chains.get(e.chain);
    if (chain) {
      chain.activeTarget = e.toTarget;
      chain.state = e.toState;
      chain.lastSwitch = event.time;
      chain.pinnedTarget = e.toState === 'CHAIN_STATE_PINNED' ? e.toTarget : '';
    }
  } else if (event.targetState) {
    const e = event.targetState;
    const extra = {reason: e.reason || '', since: event.time};
    if (e.lastError) extra.lastError = e.lastError;
    setTargetHealth(e.target, e.toState, extra);
    refreshSoon();  // its next check moved with it
  } else if (event.configChanged) {
    refreshSoon();  // objects came or went: read the state again
  }
}

// The sequence of the newest real (numbered) event listed; 0 when none.
function newestSequence() {
  for (let i = page.events.length - 1; i >= 0; --i) if (!page.events[i].shadow) return Number(page.events[i].sequence);
  return 0;
}

function addEvent(event) {
  // A real event is listed once; shadow events have no sequence to compare.
  if (!event.shadow && page.events.length && Number(event.sequence) <= newestSequence()) return;
  page.events.push(event);
  if (page.events.length > MAX_EVENTS) page.events.shift();
}

function describe(event) {
  return describeWhat(event) + (event.actor ? ' by ' + event.actor : '');
}

function describeWhat(event) {
  if (event.chainSwitched) {
    const e = event.chainSwitched;
    return `chain ${e.chain}: ${e.fromTarget || '(none)'} -> ${e.toTarget || '(none)'} (${lower(e.reason, 'SWITCH_REASON_')}` +
        `${e.detail ? ': ' + e.detail : ''}) state ${lower(e.fromState, 'CHAIN_STATE_')} -> ${lower(e.toState, 'CHAIN_STATE_')}`;
  }
  if (event.targetState) {
    const e = event.targetState;
    return `target ${e.target}: ${lower(e.fromState, 'HEALTH_STATE_')} -> ${lower(e.toState, 'HEALTH_STATE_')} ` +
        `(${lower(e.source, 'TRANSITION_SOURCE_')}${e.reason ? ': ' + e.reason : ''})`;
  }
  if (event.configChanged) {
    const e = event.configChanged;
    return `config: ${lower(e.what, 'CONFIG_OBJECT_KIND_')} ${e.name} ${lower(e.change, 'CONFIG_CHANGE_')}`;
  }
  return 'event';
}

// --- rendering ----------------------------------------------------------

function visibleChains() {
  const filter = page.filter.trim().toLowerCase();
  return [...page.chains.values()].filter((c) => !filter || c.name.toLowerCase().includes(filter));
}

function action(label, key, run) {
  return el('button', {type: 'button', 'data-key': key, onclick: run}, label);
}

const HOUR = 3600 * 1000;

// A chain's last hour as a bar of segments, one per state it was in (from its
// switches; before the first, the state that switch left).
function timeline(chain) {
  const now = Date.now();
  const from = now - HOUR;
  const mine = page.switches.filter((e) => e.chainSwitched.chain === chain.name && Date.parse(e.time) > from);
  const segments = [];
  let start = from;
  // Before a chain's first switch ("(none) -> a") it did not exist: left blank.
  const created = mine.length && !mine[0].chainSwitched.fromTarget;
  let state = created ? 'none' : mine.length ? mine[0].chainSwitched.fromState : chain.state;
  let target = mine.length ? mine[0].chainSwitched.fromTarget : chain.activeTarget;
  for (const e of mine) {
    segments.push({start, end: Date.parse(e.time), state, target});
    start = Date.parse(e.time);
    state = e.chainSwitched.toState;
    target = e.chainSwitched.toTarget;
  }
  segments.push({start, end: now, state, target});
  const bar = el('div', {class: 'timeline', role: 'img',
                         'aria-label': `${chain.name}: ${mine.length} switches in the last hour`});
  for (const segment of segments) {
    const name = lower(segment.state, 'CHAIN_STATE_');
    const when = new Date(segment.start).toLocaleTimeString();
    bar.append(el('span', {class: name, style: `flex-grow: ${Math.max(segment.end - segment.start, 1)}`,
                           title: `${name} on ${segment.target || '(none)'} from ${when}`}));
  }
  return bar;
}

function render() {
  const focused = document.activeElement && document.activeElement.getAttribute('data-key');
  const chains = visibleChains();
  const chainRows = chains.map((c) => {
    const state = lower(c.state, 'CHAIN_STATE_');
    const names = (c.targets || []).map((t) => t.name);
    const choice = page.pinChoice.get(c.name) || names[0] || '';
    const select = el('select', {'aria-label': 'target to pin ' + c.name, 'data-key': 'select:' + c.name,
                                 onchange: (e) => page.pinChoice.set(c.name, e.target.value)});
    for (const name of names) {
      const option = el('option', {value: name}, name);
      if (name === choice) option.selected = true;
      select.append(option);
    }
    const actions = el('td', {},
        select, action('Pin', 'pin:' + c.name, () => act('/v1/admin/pin', {chain: c.name, target: select.value},
                                                         `pinned ${c.name} to ${select.value}`)));
    if (c.pinnedTarget) {
      actions.append(action('Unpin', 'unpin:' + c.name,
                            () => act('/v1/admin/unpin', {chain: c.name}, `unpinned ${c.name}`)));
    }
    const targets = el('td', {});
    for (const t of c.targets || []) targets.append(el('span', {}, t.name + ' '), badge(lower(t.health, 'HEALTH_STATE_')), ' ');
    return el('tr', {'data-chain': c.name, class: state === 'degraded' ? 'degraded-row' : ''},
        el('td', {}, c.name), el('td', {}, badge(state)), el('td', {}, c.activeTarget || '-'),
        el('td', {'data-since': c.lastSwitch || ''}, ago(c.lastSwitch)), el('td', {}, timeline(c)), targets, actions);
  });
  $('chains').tBodies[0].replaceChildren(...chainRows);

  const wanted = page.filter.trim() ? new Set(chains.flatMap((c) => (c.targets || []).map((t) => t.name))) : null;
  const targetRows = [...page.targets.values()].filter((t) => !wanted || wanted.has(t.name)).map((t) => {
    const health = lower(t.health, 'HEALTH_STATE_');
    const actions = el('td', {});
    if (health === 'manual') {
      actions.append(action('Cancel failover', 'cancel:' + t.name,
                            () => act('/v1/admin/cancel', {target: t.name}, `cancelled the failover of ${t.name}`)));
    } else {
      actions.append(action('Fail over', 'trigger:' + t.name, () => {
        const reason = window.prompt(`Reason for failing over ${t.name}`, 'maintenance');
        if (reason !== null) act('/v1/admin/trigger', {target: t.name, reason}, `failed over ${t.name}`);
      }));
    }
    // A target a config file declares is enabled or disabled in that file:
    // failoverd refuses the call, so the page does not offer it.
    if (!t.managedBy) {
      actions.append(t.enabled === false
          ? action('Enable', 'enable:' + t.name, () => act('/v1/admin/enable', {target: t.name}, `enabled ${t.name}`))
          : action('Disable', 'disable:' + t.name, () => act('/v1/admin/disable', {target: t.name}, `disabled ${t.name}`)));
    }
    actions.append(action('Probe now', 'probe:' + t.name,
                          () => act('/v1/admin/probe-now', {target: t.name}, `health check of ${t.name} due now`)));
    const name = el('td', {}, t.name);
    if (t.managedBy) name.append(el('br', {}), el('span', {class: 'file', title: t.managedBy}, 'from ' + basename(t.managedBy)));
    const held = t.heldUntil && Date.parse(t.heldUntil) > Date.now();
    const next = held ? el('td', {}, 'held until ' + new Date(t.heldUntil).toLocaleTimeString())
                      : el('td', {'data-until': t.nextCheck || ''}, until(t.nextCheck));
    return el('tr', {'data-target': t.name},
        name, el('td', {}, badge(health)), el('td', {class: 'traffic'}, traffic(t)),
        el('td', {'data-since': t.since || ''}, ago(t.since)), next,
        el('td', {}, el('span', {'data-since': t.lastProbe || ''}, ago(t.lastProbe)),
           ...(t.lastCheck ? [el('br', {}), el('span', {class: 'check'}, t.lastCheck)] : [])),
        el('td', {class: 'error'}, t.lastError || '-'),
        actions);
  });
  $('targets').tBodies[0].replaceChildren(...targetRows);
  if (focused) {
    const again = document.querySelector(`[data-key="${CSS.escape(focused)}"]`);
    if (again) again.focus();
  }
}

function basename(file) {
  return String(file).split('/').pop();
}

function eventKind(event) {
  if (event.shadow) return 'shadow';
  return event.chainSwitched ? 'chain' : event.targetState ? 'target' : event.configChanged ? 'config' : '';
}

// The chain or target an event is about (a chain's switch names its targets too).
function eventNames(event) {
  if (event.chainSwitched) return [event.chainSwitched.chain, event.chainSwitched.fromTarget, event.chainSwitched.toTarget];
  if (event.targetState) return [event.targetState.target];
  if (event.configChanged) return [event.configChanged.name];
  return [];
}

function renderEvents() {
  const name = page.eventName.trim().toLowerCase();
  const shown = page.events.filter((e) => (!page.eventKind || eventKind(e) === page.eventKind) &&
      (!name || eventNames(e).some((n) => String(n || '').toLowerCase().includes(name))));
  const items = shown.reverse().map((e) => {
    // A shadow event did not happen: its shadow's name stands where the sequence is.
    const label = e.shadow ? el('span', {class: 'seq shadow-name'}, 'shadow ' + e.shadow) :
                             el('span', {class: 'seq'}, '#' + e.sequence);
    const attrs = {'data-sequence': String(e.sequence || 0), 'data-kind': eventKind(e)};
    if (e.shadow) Object.assign(attrs, {'data-shadow': e.shadow, class: 'shadow'});
    return el('li', attrs, label, el('time', {datetime: e.time || ''}, fullTime(e.time)), ' ',
              e.shadow ? 'would have: ' : '', describe(e));
  });
  $('events').replaceChildren(...items);
}

// A target's traffic over the last ten minutes, from its per-minute counts:
// requests, the share that failed, the mean latency of timed successes.
function traffic(target) {
  const from = Date.now() - 10 * 60 * 1000;
  let requests = 0;
  let errors = 0;
  let latency = 0;
  let timed = 0;
  for (const m of target.traffic || []) {
    if (Date.parse(m.start) + 60 * 1000 <= from) continue;
    requests += Number(m.requests || 0);
    errors += Number(m.errors || 0);
    if (m.latency) {
      const ok = Number(m.requests || 0) - Number(m.errors || 0);
      latency += parseFloat(m.latency) * ok;
      timed += ok;
    }
  }
  if (!requests) return '-';
  const parts = [`${requests} req`, `${Math.round((100 * errors) / requests)}% err`];
  if (timed) parts.push(`${Math.round((1000 * latency) / timed)} ms`);
  return parts.join(' · ');
}

// Version, uptime and, in cluster mode, this replica's role, its leader and
// lag, and the replicas that hold a lease in etcd.
function renderInstance(status) {
  const parts = ['failoverd ' + (status.version || '?')];
  const uptime = parseFloat(status.uptime || '0');
  if (status.serverTime) parts.push('up ' + ago(new Date(Date.parse(status.serverTime) - uptime * 1000).toISOString()));
  const cluster = status.cluster || {};
  const role = lower(cluster.role, 'ROLE_');
  if (role && role !== 'unspecified') {
    parts.push(role === 'leader' ? 'cluster leader' : `follower of ${cluster.leader || '(no leader)'}`);
    parts.push('lag ' + (cluster.lag || 0));
    if (cluster.logError) parts.push('log: ' + cluster.logError);
  } else {
    parts.push('single node');
  }
  $('instance').textContent = parts.join(' · ');
  const replicas = cluster.replicas || [];
  $('replicas').hidden = replicas.length === 0;
  $('replicas').replaceChildren(...(replicas.length ? [el('span', {class: 'note'}, `Replicas (${replicas.length}):`)] : []),
      ...replicas.map((r) => el('span', {class: 'replica' + (r.leader ? ' leader' : ''), 'data-address': r.address},
          [r.address, r.leader ? 'leader' : '', r.version || '', r.started ? 'up ' + ago(r.started) : '']
              .filter(Boolean).join(' · '))));
}

function tick() {
  for (const cell of document.querySelectorAll('td[data-since], span[data-since]')) cell.textContent = ago(cell.getAttribute('data-since'));
  for (const cell of document.querySelectorAll('td[data-until]')) cell.textContent = until(cell.getAttribute('data-until'));
}

// --- talking to failoverd -----------------------------------------------

async function act(path, body, done) {
  try {
    await api('POST', path, body);
    say(done, true);
  } catch (error) {
    if (error.status === 401 || error.status === 403) {
      say(`An admin token is needed: ${error.message}`);
      $('token').focus();
    } else {
      say(error.message);
    }
  }
}

async function readState() {
  const chains = new Map();
  const targets = new Map();
  let token = '';
  do {
    const status = await api('GET', '/v1/status' + (token ? '?page_token=' + encodeURIComponent(token) : ''));
    if (!token) renderInstance(status);
    for (const c of status.chains || []) chains.set(c.name, c);
    for (const t of status.targets || []) targets.set(t.name, t);
    token = status.nextPageToken || '';
  } while (token);
  page.chains = chains;
  page.targets = targets;
}

let refreshTimer = null;
function refreshSoon() {
  clearTimeout(refreshTimer);
  refreshTimer = setTimeout(async () => {
    try { await readState(); render(); } catch (e) { /* the stream reports trouble */ }
  }, 200);
}

function handleBlock(block) {
  let id = '';
  let kind = 'message';
  const data = [];
  for (const line of block.split('\n')) {
    if (line.startsWith(':')) continue;
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
    if (field === 'id') id = value;
    else if (field === 'event') kind = value;
    else if (field === 'data') data.push(value);
  }
  if (!data.length) return;
  const payload = JSON.parse(data.join('\n'));
  if (kind === 'error') {
    say((payload.error && payload.error.message) || 'the event stream ended');
    return;
  }
  if (kind === 'shadow') {  // beside the real events; the state shown stays as it is
    addEvent(payload);
    renderEvents();
    return;
  }
  apply(payload);
  if (id) page.lastSequence = Number(id);
  render();
  renderEvents();
}

async function watch() {
  const controller = new AbortController();
  page.watch = controller;
  const url = '/v1/watch?include_shadow=true' + (page.lastSequence ? '&after=' + page.lastSequence : '');
  try {
    const response = await fetch(url, {headers: headers(false), signal: controller.signal, cache: 'no-store',
                                       credentials: 'omit'});
    if (!response.ok) {
      const text = await response.text();
      let message = response.statusText;
      try { message = JSON.parse(text).error.message; } catch (e) { /* keep the status text */ }
      if (response.status === 401 || response.status === 403) return needToken(message);
      throw new Error(message);
    }
    setConnection('live');
    page.retry = 500;
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = '';
    for (;;) {
      const {value, done} = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, {stream: true});
      let end;
      while ((end = buffer.indexOf('\n\n')) >= 0) {
        handleBlock(buffer.slice(0, end));
        buffer = buffer.slice(end + 2);
      }
    }
  } catch (error) {
    if (controller.signal.aborted) return;
    say(error.message);
  }
  if (controller.signal.aborted) return;
  setConnection('reconnecting');
  setTimeout(() => { if (page.watch === controller) watch(); }, page.retry);
  page.retry = Math.min(page.retry * 2, 10000);
}

function needToken(message) {
  $('auth').hidden = false;
  setConnection('token needed');
  say(message);
  $('auth-note').textContent = 'This failoverd needs a token: a decide token to see its state, an admin token to act.';
  $('token').focus();
}

async function start() {
  if (page.watch) page.watch.abort();
  page.watch = null;
  setConnection('connecting');
  try {
    const recent = await api('GET', '/v1/events?limit=50');
    // After the recent events: a switch in between is here, and the stream's
    // replay of it is not added twice.
    const hourAgo = new Date(Date.now() - HOUR).toISOString();
    const switches = await api('GET', '/v1/events?limit=1000&kinds=EVENT_KIND_CHAIN_SWITCHED&since=' + hourAgo);
    page.switches = switches.events || [];
    for (const e of recent.events || []) addEvent(e);
    page.lastSequence = Math.max(page.lastSequence, newestSequence());
    await readState();
  } catch (error) {
    if (error.status === 401 || error.status === 403) return needToken(error.message);
    say(error.message);
    setTimeout(start, 2000);
    return;
  }
  say('');
  // Without a tokens file every call is answered without a token: no box.
  $('auth').hidden = !page.token;
  render();
  renderEvents();
  watch();
}

$('token-form').addEventListener('submit', (e) => {
  e.preventDefault();
  page.token = $('token').value.trim();
  $('token').value = '';
  $('auth-note').textContent = page.token ? 'Using the token you entered (kept in memory only).' : '';
  start();
});
$('forget').addEventListener('click', () => {
  page.token = '';
  $('auth-note').textContent = 'Token forgotten.';
  start();
});
$('event-kind').addEventListener('change', (e) => {
  page.eventKind = e.target.value;
  renderEvents();
});
$('event-name').addEventListener('input', (e) => {
  page.eventName = e.target.value;
  renderEvents();
});
$('filter').addEventListener('input', (e) => {
  page.filter = e.target.value;
  render();
});
setInterval(tick, 1000);
// Traffic changes without events, and the timelines move on: read the state
// again now and then.
setInterval(refreshSoon, 15000);
start();
