// leasehold dashboard, part 2 of 3: reading the server — the API with its
// bearer token, the page's state, re-reads folded into at most four a
// second, and the event stream (server-sent events read with fetch, which,
// unlike EventSource, can send the Authorization header). It renders
// through view, which dashboard.js fills in.

import { $, listOf, normEvent, normLease, num, parseTime, pick } from './format.js';

const base = (location.pathname.match(/^(.*\/)dashboard\/[^/]*$/) || [null, '/'])[1];
export const TOKEN_KEY = 'leasehold.token';
const MIN_REFRESH_MS = 250; // at most 4 re-reads a second
export const POLL_MS = 2000; // without the event stream
export const RESYNC_MS = 15000; // with it, now and then all the same
const EVENTS_N = 50; // events listed
const HISTORY_N = 1000; // events read for the pictures (the server keeps fewer)
const SERVER_KEEPS = 256; // events the server keeps by default (EngineConfig.RecentEvents)
export const WINDOW_MS = 5 * 60 * 1000; // what the timeline and charts show
export const BUCKET_MS = 10 * 1000; // grants per second are counted per bucket
const MAX_HISTORY = 20000; // events kept for the pictures, at most
const MAX_COUNT_FETCHES = 16; // waiter counts read per refresh, at most

// view is how reading renders: dashboard.js sets both.
export const view = {
  render: () => {},
  stats: (_body) => {},
};

export const state = {
  prefix: '',
  leases: [], // normalized, as last read
  readAt: 0, // performance.now() of that read
  selected: '', // name whose waiters are shown
  detail: null, // {lease, waiters, readAt} or {missing: true}
  events: [],
  history: new Map(), // key → event, the last minutes', from reads and the stream
  samples: [], // {t, waiters}: the server's queued waiters at each read
  skew: 0, // server clock minus this one, when they differ by seconds
  counts: new Map(), // name → waiters, from events and detail reads
  started: undefined, // the server's start (ms), from its stats
  fullRead: false, // the last read of recent events was full: the server's kept events or as many as asked for
  authNeeded: false,
  live: false,
  apiOK: true,
};

// ---- the API ----------------------------------------------------------

function token() {
  try {
    return sessionStorage.getItem(TOKEN_KEY) || '';
  } catch {
    return '';
  }
}

function headers(accept) {
  const h = { Accept: accept };
  const t = token();
  if (t) h.Authorization = 'Bearer ' + t;
  return h;
}

// problem turns an error response (application/problem+json or not)
// into an Error carrying status, title and detail.
async function problem(res) {
  let title = res.statusText || 'HTTP ' + res.status;
  let detail = '';
  try {
    const text = await res.text();
    try {
      const p = JSON.parse(text);
      title = pick(p, 'title', 'Title') || title;
      detail = pick(p, 'detail', 'Detail', 'error', 'message') || '';
    } catch {
      detail = text.trim().slice(0, 300);
    }
  } catch {
    // the body is gone; keep the status
  }
  const e = new Error(detail ? `${title}: ${detail}` : title);
  e.status = res.status;
  e.title = title;
  e.detail = detail;
  return e;
}

export async function api(path, opts = {}) {
  const res = await fetch(base + path, {
    method: opts.method || 'GET',
    headers: headers('application/json'),
    signal: opts.signal,
    cache: 'no-store',
  });
  noteDate(res);
  if (!res.ok) {
    const e = await problem(res);
    if (e.status === 401) needAuth(e);
    throw e;
  }
  // JSON whatever the Content-Type says; an empty body is null.
  const text = await res.text();
  return text.trim() === '' ? null : JSON.parse(text);
}

// noteDate keeps the server's clock offset from its Date header (whole
// seconds), so that the pictures' "now" matches the events' times.
function noteDate(res) {
  const d = Date.parse(res.headers.get('Date') || '');
  if (isNaN(d)) return;
  const off = d - Date.now();
  state.skew = Math.abs(off) > 2000 ? off : 0;
}

export const serverNow = () => Date.now() + state.skew;

export const leasePath = (name) => 'v1/leases/' + encodeURIComponent(name);

// ---- messages, auth, connection state --------------------------------

let errorKind = '';
let errorTimer = null;

// showError shows msg with the characters no one could see escaped (names
// in it are already escaped; a problem's detail quotes its own).
export function showError(msg, kind) {
  const p = $('error');
  p.textContent = window.leaseholdDraw.unhide(msg);
  p.hidden = false;
  errorKind = kind;
  clearTimeout(errorTimer);
  if (kind === 'action') errorTimer = setTimeout(() => clearError('action'), 20000);
}

export function clearError(kind) {
  if (kind && errorKind !== kind) return;
  $('error').hidden = true;
  $('error').textContent = '';
  errorKind = '';
}

function needAuth(e) {
  if (!state.authNeeded) {
    state.authNeeded = true;
    stopStream();
  }
  $('auth-reason').textContent = token()
    ? `The server refused the token (${window.leaseholdDraw.unhide(e.detail || e.title)}). Enter another.`
    : 'The server needs a bearer token.';
  $('auth').hidden = false;
  setConn('disconnected', 'token needed');
}

export function setConn(s, text) {
  const p = $('conn');
  p.dataset.state = s;
  $('conn-text').textContent =
    text || { live: 'live', polling: 'polling every 2 s', disconnected: 'disconnected', connecting: 'connecting' }[s];
}

function updateConn() {
  if (state.authNeeded) return;
  if (!state.apiOK) setConn('disconnected');
  else setConn(state.live ? 'live' : 'polling');
}

// ---- reading state ----------------------------------------------------

let inflight = false;
let pending = false;
export let lastRefresh = -Infinity;
let refreshTimer = null;

// scheduleRefresh re-reads state soon, at most every MIN_REFRESH_MS,
// folding bursts of events into one read.
export function scheduleRefresh() {
  if (inflight) {
    pending = true;
    return;
  }
  if (refreshTimer) return;
  const wait = Math.max(0, lastRefresh + MIN_REFRESH_MS - performance.now());
  refreshTimer = setTimeout(() => {
    refreshTimer = null;
    refresh();
  }, wait);
}

async function refresh() {
  if (state.authNeeded) return;
  inflight = true;
  lastRefresh = performance.now();
  try {
    await readAll();
  } finally {
    inflight = false;
    if (pending) {
      pending = false;
      scheduleRefresh();
    }
  }
}

async function readAll() {
  const q = state.prefix ? '&prefix=' + encodeURIComponent(state.prefix) : '';
  const [leases, stats, events] = await Promise.allSettled([
    api('v1/leases?prefix=' + encodeURIComponent(state.prefix)),
    api('v1/stats'),
    api(`v1/events/recent?n=${HISTORY_N}${q}`),
  ]);
  if (state.authNeeded) return;
  if (leases.status === 'rejected') {
    const e = leases.reason;
    state.apiOK = e.status !== undefined; // a status means the server answered
    updateConn();
    let msg = e.status ? `Reading leases: ${e.message}` : 'The server cannot be reached.';
    if (e.status === 403) msg += ' Enter a prefix these credentials may read.';
    showError(msg, 'refresh');
    return;
  }
  state.apiOK = true;
  if (errorKind === 'refresh') clearError();
  updateConn();

  state.leases = listOf(leases.value, 'leases', 'Leases').map(normLease);
  state.readAt = performance.now();
  if (stats.status === 'fulfilled') {
    view.stats(stats.value);
    sample(stats.value);
    const started = parseTime(pick(stats.value, 'started', 'Started'));
    if (started !== undefined && !Number.isNaN(started)) state.started = started;
  }
  if (events.status === 'fulfilled') {
    const evs = listOf(events.value, 'events', 'Events').map(normEvent);
    // A read of as many as the server keeps by default (or as asked for):
    // its ring is full, and it has dropped older events (a server that
    // keeps more and has had exactly that many events is taken for one).
    state.fullRead = evs.length >= HISTORY_N || (!state.prefix && evs.length === SERVER_KEEPS);
    evs.forEach((ev) => countFrom(ev)); // oldest first, so the last word stays
    const mine = evs.filter((ev) => !state.prefix || !ev.name || ev.name.startsWith(state.prefix));
    mine.forEach(remember);
    state.events = mine.slice(-EVENTS_N);
  }
  const names = new Set(state.leases.map((l) => l.name));
  for (const n of state.counts.keys()) if (!names.has(n)) state.counts.delete(n);
  await Promise.all([readDetail(), readCounts()]);
  view.render();
}

// remember keeps ev for the pictures; the same event read twice (from
// the stream and from a read) is kept once.
function remember(ev) {
  if (ev.time === undefined || !ev.name || ev.type === 'overflow') return;
  const key = [ev.time, ev.type, ev.name, ev.owner, ev.token ?? '', ev.waiters ?? ''].join('\u0000');
  if (!state.history.has(key)) state.history.set(key, ev);
}

function sample(body) {
  const w = num(pick(body, 'waiters', 'Waiters'));
  if (w === undefined) return;
  const now = serverNow();
  const last = state.samples.at(-1);
  if (last && now - last.t < 500 && last.waiters === w) return;
  state.samples.push({ t: now, waiters: w });
}

// prune forgets what is older than the pictures show.
export function prune() {
  const from = serverNow() - WINDOW_MS - 60000;
  for (const [k, ev] of state.history) if (ev.time < from) state.history.delete(k);
  // A busy server: keep the latest MAX_HISTORY (kept in arrival order).
  for (const k of state.history.keys()) {
    if (state.history.size <= MAX_HISTORY) break;
    state.history.delete(k);
  }
  const i = state.samples.findIndex((s) => s.t >= from);
  state.samples.splice(0, i < 0 ? state.samples.length : Math.max(0, i - 1));
  if (state.samples.length > 5000) state.samples.splice(0, state.samples.length - 5000);
}

function countFrom(ev) {
  if (ev.name && ev.waiters !== undefined) state.counts.set(ev.name, ev.waiters);
  // A semaphore's waiter queues or leaves under the semaphore's name: the
  // counts of its permits' rows (NAME/permit/I) are read again.
  if (ev.type === 'queued' || ev.type === 'dequeued') {
    for (const n of state.counts.keys()) if (n.startsWith(ev.name + '/permit/')) state.counts.delete(n);
  }
}

async function readDetail() {
  const name = state.selected;
  if (!name) return;
  try {
    const body = await api(leasePath(name));
    if (name !== state.selected) return;
    const lease = normLease(body);
    const waiters = lease.waiterList || [];
    state.detail = { lease, waiters, readAt: performance.now() };
    state.counts.set(name, waiters.length);
  } catch (e) {
    if (name !== state.selected) return;
    state.detail = e.status === 404 ? { missing: true } : { error: e.message };
    if (e.status === 404) state.counts.delete(name);
  }
}

// readCounts reads the queue length of leases the list did not give one
// for and no event has told: a few per refresh.
async function readCounts() {
  const unknown = state.leases
    .filter((l) => l.waiters === undefined && !state.counts.has(l.name) && l.name !== state.selected)
    .slice(0, MAX_COUNT_FETCHES);
  await Promise.all(
    unknown.map(async (l) => {
      try {
        const body = await api(leasePath(l.name));
        const w = pick(body, 'waiters', 'Waiters');
        state.counts.set(l.name, Array.isArray(w) ? w.length : num(w) ?? 0);
      } catch {
        // gone, or not allowed: leave it unknown
      }
    }),
  );
}

// ---- the event stream -------------------------------------------------

let stream = null; // AbortController of the open stream
let streamRetry = null;
let streamBackoff = 1000;

function stopStream() {
  clearTimeout(streamRetry);
  streamRetry = null;
  if (stream) stream.abort();
  stream = null;
  state.live = false;
}

export function startStream() {
  stopStream();
  if (state.authNeeded) return;
  const ctrl = new AbortController();
  stream = ctrl;
  follow(ctrl).then(
    () => streamEnded(ctrl, null),
    (e) => streamEnded(ctrl, e),
  );
}

function streamEnded(ctrl, e) {
  if (ctrl.signal.aborted || stream !== ctrl) return; // stopped on purpose
  stream = null;
  state.live = false;
  updateConn();
  if (state.authNeeded) return;
  // An API without the stream (404, 405, 501) is polled; retry rarely.
  const unsupported = e && [404, 405, 501].includes(e.status);
  const wait = unsupported ? 60000 : streamBackoff;
  streamBackoff = Math.min(streamBackoff * 2, 30000);
  streamRetry = setTimeout(startStream, wait);
  scheduleRefresh();
}

// follow reads the server-sent events with fetch, which, unlike
// EventSource, can send the Authorization header.
async function follow(ctrl) {
  const url = base + 'v1/events?prefix=' + encodeURIComponent(state.prefix);
  const res = await fetch(url, { headers: headers('text/event-stream'), signal: ctrl.signal, cache: 'no-store' });
  if (!res.ok) {
    const e = await problem(res);
    if (e.status === 401) needAuth(e);
    throw e;
  }
  if (!res.body) throw new Error('this browser cannot stream responses');
  state.live = true;
  state.apiOK = true;
  streamBackoff = 1000;
  updateConn();
  scheduleRefresh(); // whatever happened before the stream opened

  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '';
  let type = '';
  let data = [];
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += value;
    let nl;
    while ((nl = buf.indexOf('\n')) >= 0) {
      let line = buf.slice(0, nl);
      buf = buf.slice(nl + 1);
      if (line.endsWith('\r')) line = line.slice(0, -1);
      if (line === '') {
        if (data.length) onEvent(type || 'message', data.join('\n'));
        type = '';
        data = [];
        continue;
      }
      if (line.startsWith(':')) continue; // a comment: keepalive
      const colon = line.indexOf(':');
      const field = colon < 0 ? line : line.slice(0, colon);
      let v = colon < 0 ? '' : line.slice(colon + 1);
      if (v.startsWith(' ')) v = v.slice(1);
      if (field === 'event') type = v;
      else if (field === 'data') data.push(v);
    }
  }
}

function onEvent(type, raw) {
  let ev = null;
  try {
    ev = normEvent(JSON.parse(raw));
  } catch {
    // not JSON: the type alone still says to re-read
  }
  if (type === 'overflow' || (ev && ev.type === 'overflow')) {
    // Events were missed: forget what they told and re-read everything.
    state.counts.clear();
  } else if (ev) {
    countFrom(ev);
    if (!state.prefix || ev.name.startsWith(state.prefix)) remember(ev);
  }
  scheduleRefresh();
}

