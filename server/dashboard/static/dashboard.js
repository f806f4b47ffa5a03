// leasehold dashboard: reads the server's JSON API, follows its event stream
// and renders leases, waiters, recent events and stats. No framework, no
// build step; every piece of server data reaches the page through
// textContent or an attribute, never through HTML parsing, and every name,
// owner, data or message from the server is shown with visible escapes
// (draw.visible, draw.unhide) — in the page, in tooltips, labels and the
// confirm dialog alike.
//
// This module (part 3 of 3, the page's entry) renders and acts; format.js
// has the small helpers, read.js reads the server and keeps the state, and
// draw.js (a classic script: window.leaseholdDraw) draws the pictures and
// writes the escapes.
'use strict';

import { $, el, fmtClock, fmtDur, num, pick } from './format.js';
import {
  BUCKET_MS,
  POLL_MS,
  RESYNC_MS,
  TOKEN_KEY,
  WINDOW_MS,
  api,
  clearError,
  lastRefresh,
  leasePath,
  prune,
  scheduleRefresh,
  serverNow,
  setConn,
  showError,
  startStream,
  state,
  view,
} from './read.js';

const draw = window.leaseholdDraw;

// ---- rendering --------------------------------------------------------

function renderStats(body) {
  const v = (k, K) => num(pick(body, k, K));
  const show = (id, x) => ($(id).textContent = x === undefined ? '–' : String(x));
  show('stat-held', v('held', 'Held'));
  show('stat-waiters', v('waiters', 'Waiters'));
  show('stat-sessions', v('sessions', 'Sessions'));
  const d = pick(body, 'durable', 'Durable');
  $('stat-durable').textContent = d === undefined ? '–' : d ? 'yes' : 'no';
  $('stat-durable').title = d ? 'acknowledged grants survive a crash' : 'grants are lost if the server crashes';
}

const rows = new Map(); // name → <tr>

function leaseRow(l) {
  const tr = el('tr', { dataset: { name: l.name } });
  const nameBtn = el('button', { type: 'button', class: 'lease-name', 'aria-controls': 'detail' });
  nameBtn.addEventListener('click', () => select(tr.dataset.name));
  const force = el('button', { type: 'button', class: 'danger', text: 'Force release' });
  force.addEventListener('click', (ev) => {
    ev.stopPropagation();
    forceRelease(tr.dataset.name, force);
  });
  tr.addEventListener('click', (ev) => {
    if (ev.target.closest('button')) return;
    select(tr.dataset.name);
  });
  tr.append(
    el('th', { scope: 'row' }, nameBtn),
    el('td', { class: 'owner', 'data-label': 'Holder' }),
    el('td', { class: 'num token', 'data-label': 'Token' }),
    el('td', { class: 'num age', 'data-label': 'Age' }),
    el('td', { class: 'num remaining', 'data-label': 'Remaining' }),
    el('td', { class: 'num waiters', 'data-label': 'Waiters' }),
    el('td', { class: 'session', 'data-label': 'Session' }),
    el('td', { class: 'data', 'data-label': 'Data' }),
    el('td', { class: 'actions' }, force),
  );
  return tr;
}

function setText(node, text) {
  if (node.textContent !== text) node.textContent = text;
}

function render() {
  const tbody = $('lease-rows');
  const seen = new Set();
  state.leases.forEach((l, i) => {
    seen.add(l.name);
    let tr = rows.get(l.name);
    if (!tr) {
      tr = leaseRow(l);
      rows.set(l.name, tr);
    }
    const c = tr.children;
    const nameBtn = c[0].firstChild;
    setText(nameBtn, draw.visible(l.name));
    nameBtn.setAttribute('aria-expanded', String(state.selected === l.name));
    setText(c[1], draw.visible(l.owner));
    setText(c[2], l.token === undefined ? '–' : draw.visible(l.token));
    const w = l.waiters ?? state.counts.get(l.name);
    setText(c[5], w === undefined ? '…' : String(w));
    setText(c[6], draw.visible(l.session));
    c[6].title = draw.visible(l.session);
    const d = dataText(l);
    setText(c[7], d.short);
    c[7].title = d.long;
    c[7].classList.toggle('binary', d.binary);
    c[8].firstChild.setAttribute('aria-label', `Force release ${draw.visible(l.name)}`);
    tr.classList.toggle('selected', state.selected === l.name);
    if (tbody.children[i] !== tr) tbody.insertBefore(tr, tbody.children[i] || null);
  });
  for (const [name, tr] of rows) {
    if (!seen.has(name)) {
      tr.remove();
      rows.delete(name);
    }
  }
  $('lease-count').textContent = `(${state.leases.length})`;
  $('no-leases').hidden = state.leases.length > 0;
  renderDetail();
  renderEvents();
  renderPictures();
  tick();
}

// dataText shows a lease's data with visible escapes: text as text,
// binary data (sent as base64) byte by byte; short in the cell, longer in
// its tooltip.
function dataText(l) {
  if (l.data !== undefined && l.data !== '') {
    const v = draw.visibleText(l.data);
    return { short: draw.cut(v, 48), long: draw.cut(v, 1000), binary: false };
  }
  if (l.dataBase64) {
    let bytes;
    try {
      bytes = Uint8Array.from(atob(l.dataBase64), (ch) => ch.charCodeAt(0));
    } catch {
      return { short: 'binary data', long: '', binary: true };
    }
    const v = draw.visibleBytes(bytes);
    return { short: `${bytes.length} B: ${draw.cut(v, 40)}`, long: draw.cut(v, 1000), binary: true };
  }
  return { short: '', long: '', binary: false };
}

// renderPictures redraws the charts and the timeline from the events and
// readings of the last WINDOW_MS.
function renderPictures() {
  prune();
  const now = serverNow();
  const evs = [...state.history.values()].sort((a, b) => a.time - b.time);
  // What the page knows begins at the server's start and at the first
  // event or reading it has: a wait that began before is not drawn from
  // its claimed start.
  const firsts = [evs.length ? evs[0].time : Infinity, state.samples.length ? state.samples[0].t : Infinity];
  const known = Math.max(state.started ?? -Infinity, Math.min(...firsts));
  let since = "the page's first reading";
  if (known === state.started) since = "the server's start";
  else if (known === firsts[0]) {
    since = droppedBefore(evs) ? 'the oldest event kept: the server has dropped older ones' : 'the oldest event kept';
  }
  draw.charts(document.querySelector('section.charts'), evs, state.samples, now, WINDOW_MS, BUCKET_MS, known, since);
  const lanes = draw.timeline($('timeline'), evs, state.leases, now, draw.zoom(evs, now, WINDOW_MS), known);
  $('no-timeline').hidden = lanes > 0;
}

// droppedBefore reports whether the server has dropped events older than
// evs (oldest first): its last read was full (as many events as it keeps
// by default, or as asked for), or a grant's renewal, release, expiry or
// force release is there without the grant. The server says neither, so
// this is inferred: a lease granted before a restart of a durable server
// and released after it looks the same.
function droppedBefore(evs) {
  if (state.fullRead) return true;
  const granted = new Set();
  for (const ev of evs) {
    const key = ev.name + '\u0000' + ev.token;
    if (ev.type === 'granted') granted.add(key);
    else if (['renewed', 'released', 'expired', 'forced'].includes(ev.type) && ev.token !== undefined && !granted.has(key)) {
      return true;
    }
  }
  return false;
}

// tick moves the clocks on between reads: age, remaining TTL, time waited.
function tick() {
  const elapsed = performance.now() - state.readAt;
  const now = Date.now();
  for (const l of state.leases) {
    const tr = rows.get(l.name);
    if (!tr) continue;
    const c = tr.children;
    setText(c[3], l.acquired === undefined ? '–' : fmtDur(now - l.acquired));
    if (l.remaining === undefined) {
      setText(c[4], '–');
    } else {
      const left = l.remaining - elapsed;
      setText(c[4], left > 0 ? fmtDur(left) : 'expiring');
      c[4].classList.toggle('expiring', left < Math.min(5000, (l.ttl || 0) / 3 || 5000));
    }
  }
  const d = state.detail;
  if (d && d.waiters) {
    const lis = $('detail-waiters').children;
    const since = performance.now() - d.readAt;
    d.waiters.forEach((w, i) => {
      const span = lis[i] && lis[i].querySelector('.since');
      if (span && w.waited !== undefined) setText(span, `waiting ${fmtDur(w.waited + since)}`);
    });
  }
}

function renderDetail() {
  const sec = $('detail');
  if (!state.selected) {
    sec.hidden = true;
    return;
  }
  sec.hidden = false;
  setText($('detail-name'), draw.visible(state.selected));
  const d = state.detail;
  const ol = $('detail-waiters');
  const holder = $('detail-holder');
  if (!d) {
    holder.textContent = 'Reading…';
    ol.replaceChildren();
    $('detail-empty').hidden = true;
    return;
  }
  if (d.missing || d.error) {
    holder.textContent = d.missing ? 'Not held now.' : draw.unhide(d.error);
    ol.replaceChildren();
    $('detail-empty').hidden = true;
    return;
  }
  const l = d.lease;
  const parts = [`Held by ${draw.visible(l.owner)}, token ${draw.visible(l.token)}`];
  if (l.session) parts.push(`session ${draw.visible(l.session)}`);
  const data = dataText(l);
  if (data.long) parts.push(`data ${draw.cut(data.long, 80)}`);
  holder.textContent = parts.join(' · ') + '.';
  ol.replaceChildren(
    ...d.waiters.map((w) =>
      el(
        'li',
        { dataset: { owner: w.owner } },
        el('strong', { class: 'owner', text: draw.visible(w.owner) }),
        w.session ? el('span', { class: 'session-of', text: `session ${draw.visible(w.session)}` }) : null,
        el('span', { class: 'since', text: w.waited === undefined ? '' : `waiting ${fmtDur(w.waited)}` }),
      ),
    ),
  );
  $('detail-empty').hidden = d.waiters.length > 0;
}

function renderEvents() {
  const list = $('event-list');
  const evs = state.events
    .map((ev, i) => ({ ev, i }))
    .sort((a, b) => (b.ev.time ?? 0) - (a.ev.time ?? 0) || b.i - a.i)
    .map(({ ev }) => ev);
  list.replaceChildren(
    ...evs.map((ev) => {
      const extra = [];
      if (ev.owner) extra.push(draw.visible(ev.owner));
      if (ev.token !== undefined && ev.token !== 0) extra.push(`token ${draw.visible(ev.token)}`);
      if (ev.handoff) extra.push(`handoff ${fmtDur(ev.handoff)}`);
      if (ev.waiters) extra.push(`${ev.waiters} waiting`);
      return el(
        'li',
        { dataset: { type: ev.type } },
        el('time', { datetime: ev.time ? new Date(ev.time).toISOString() : undefined, text: fmtClock(ev.time) }),
        el('span', { class: 'badge ' + ev.type.replace(/[^a-z]/g, ''), text: draw.visible(ev.type) }),
        el('span', { class: 'what', text: ev.name ? draw.visible(ev.name) : ev.type === 'overflow' ? 'events missed' : '' }),
        extra.length ? el('span', { class: 'extra', text: extra.join(' · ') }) : null,
      );
    }),
  );
  $('no-events').hidden = evs.length > 0;
}

// ---- actions ----------------------------------------------------------

function select(name) {
  if (state.selected === name) {
    state.selected = '';
    state.detail = null;
  } else {
    state.selected = name;
    state.detail = null;
  }
  render();
  if (state.selected) scheduleRefresh();
}

async function forceRelease(name, button) {
  const l = state.leases.find((x) => x.name === name);
  // The dialog shows names and owners escaped as the page does, so that
  // "x/admin" and "x/admin\u200B" cannot be taken for each other here.
  const shown = draw.visible(name);
  const holder = l ? `${draw.visible(l.owner)} (token ${draw.visible(l.token)})` : 'its holder';
  const ok = window.confirm(
    `Force release "${shown}", held by ${holder}?\n\n` +
      'The holder is not asked: it learns that it lost the lease when it next renews.',
  );
  if (!ok) return;
  button.disabled = true;
  try {
    await api(leasePath(name) + '/force-release', { method: 'POST' });
    clearError('action');
  } catch (e) {
    if (e.status === 404) showError(`"${shown}" was not held any more.`, 'action');
    else if (e.status) showError(`Force release of "${shown}" refused (${e.status}): ${e.detail || e.title}`, 'action');
    else showError(`Force release of "${shown}" failed: the server cannot be reached.`, 'action');
  } finally {
    button.disabled = false;
    scheduleRefresh();
  }
}

function restart() {
  state.counts.clear();
  state.history.clear();
  state.samples = [];
  state.detail = null;
  startStream();
  scheduleRefresh();
}

function init() {
  $('auth').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const t = $('auth-token').value.trim();
    if (!t) return;
    try {
      sessionStorage.setItem(TOKEN_KEY, t);
    } catch {
      showError('This browser keeps no sessionStorage: the token cannot be kept.', 'action');
      return;
    }
    $('auth-token').value = '';
    $('auth').hidden = true;
    state.authNeeded = false;
    setConn('connecting');
    restart();
  });
  $('auth-forget').addEventListener('click', () => {
    try {
      sessionStorage.removeItem(TOKEN_KEY);
    } catch {
      // nothing kept
    }
    $('auth-token').value = '';
  });
  $('detail-close').addEventListener('click', () => select(state.selected));
  let prefixTimer = null;
  $('prefix').addEventListener('input', () => {
    clearTimeout(prefixTimer);
    prefixTimer = setTimeout(() => {
      const p = $('prefix').value;
      if (p === state.prefix) return;
      state.prefix = p;
      restart();
    }, 300);
  });
  setInterval(tick, 250);
  setInterval(renderPictures, 2000); // the time axis moves on
  let resizeTimer = null;
  window.addEventListener('resize', () => {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(renderPictures, 150);
  });
  // Poll without the stream; re-sync now and then with it.
  let lastPoll = 0;
  setInterval(() => {
    const every = state.live ? RESYNC_MS : POLL_MS;
    if (performance.now() - Math.max(lastPoll, lastRefresh) >= every - 100) {
      lastPoll = performance.now();
      scheduleRefresh();
    }
  }, 500);
  restart();
}

view.render = render;
view.stats = renderStats;
init();
