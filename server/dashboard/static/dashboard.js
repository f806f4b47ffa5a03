// leasehold dashboard: reads the server's JSON API, follows its event stream
// and renders leases, waiters, recent events and stats. No framework, no
// build step; every piece of server data reaches the page through
// textContent or an attribute, never through HTML parsing.
'use strict';

(() => {
  // The API sits beside the dashboard: /dashboard/ → /v1/..., and under a
  // reverse proxy's prefix, /p/dashboard/ → /p/v1/...
  const base = (location.pathname.match(/^(.*\/)dashboard\/[^/]*$/) || [null, '/'])[1];
  const TOKEN_KEY = 'leasehold.token';
  const MIN_REFRESH_MS = 250; // at most 4 re-reads a second
  const POLL_MS = 2000; // without the event stream
  const RESYNC_MS = 15000; // with it, now and then all the same
  const EVENTS_N = 50; // events listed
  const HISTORY_N = 1000; // events read for the pictures (the server keeps fewer)
  const WINDOW_MS = 5 * 60 * 1000; // what the timeline and charts show
  const BUCKET_MS = 10 * 1000; // grants per second are counted per bucket
  const MAX_HISTORY = 20000; // events kept for the pictures, at most
  const draw = window.leaseholdDraw;
  const MAX_COUNT_FETCHES = 16; // waiter counts read per refresh, at most

  const $ = (id) => document.getElementById(id);

  const state = {
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
    authNeeded: false,
    live: false,
    apiOK: true,
  };

  // ---- small helpers ----------------------------------------------------

  function el(tag, props, ...children) {
    const e = document.createElement(tag);
    if (props) {
      for (const [k, v] of Object.entries(props)) {
        if (v === undefined || v === null || v === false) continue;
        if (k === 'class') e.className = v;
        else if (k === 'text') e.textContent = v;
        else if (k === 'dataset') Object.assign(e.dataset, v);
        else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
        else e.setAttribute(k, v === true ? '' : String(v));
      }
    }
    for (const c of children) {
      if (c === null || c === undefined || c === false) continue;
      e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return e;
  }

  // pick returns the first of keys that o has, so the page reads both
  // snake_case and Go's CamelCase field names.
  function pick(o, ...keys) {
    if (!o || typeof o !== 'object') return undefined;
    for (const k of keys) if (o[k] !== undefined && o[k] !== null) return o[k];
    return undefined;
  }

  function num(v) {
    if (typeof v === 'number') return v;
    if (typeof v === 'string' && v.trim() !== '' && !isNaN(Number(v))) return Number(v);
    return undefined;
  }

  // ms reads a duration given in milliseconds (ttl_ms, TTLMs) or, failing
  // that, as Go's time.Duration in nanoseconds (TTL).
  function ms(o, msKeys, nsKeys = []) {
    const v = num(pick(o, ...msKeys));
    if (v !== undefined) return v;
    const ns = num(pick(o, ...nsKeys));
    return ns === undefined ? undefined : ns / 1e6;
  }

  function fmtDur(v) {
    if (v === undefined || isNaN(v)) return '–';
    if (v < 0) v = 0;
    if (v > 0 && v < 10) return v.toFixed(v < 1 ? 2 : 1) + ' ms';
    if (v < 1000) return Math.round(v) + ' ms';
    const s = v / 1000;
    if (s < 60) return s.toFixed(s < 10 ? 1 : 0) + ' s';
    const m = Math.floor(s / 60);
    if (m < 60) return m + 'm ' + String(Math.floor(s % 60)).padStart(2, '0') + 's';
    const h = Math.floor(m / 60);
    if (h < 24) return h + 'h ' + String(m % 60).padStart(2, '0') + 'm';
    return Math.floor(h / 24) + 'd ' + (h % 24) + 'h';
  }

  function parseTime(v) {
    if (v === undefined || v === null || v === '') return undefined;
    const t = typeof v === 'number' ? v : Date.parse(v);
    // Go's zero time means "not known".
    return isNaN(t) || t <= 0 ? undefined : t;
  }

  function fmtClock(t) {
    if (t === undefined) return '';
    const d = new Date(t);
    const p = (n, w = 2) => String(n).padStart(w, '0');
    return `${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}.${p(d.getMilliseconds(), 3)}`;
  }

  function normLease(o) {
    const waiters = pick(o, 'waiters', 'Waiters');
    const data = pick(o, 'data', 'Data');
    const data64 = pick(o, 'data_base64', 'DataBase64');
    return {
      name: String(pick(o, 'name', 'Name') ?? ''),
      owner: String(pick(o, 'owner', 'Owner') ?? ''),
      token: pick(o, 'token', 'Token'),
      ttl: ms(o, ['ttl_ms', 'TTLMs', 'ttlMs'], ['TTL']),
      remaining: ms(o, ['remaining_ms', 'RemainingMs', 'remainingMs'], ['Remaining']),
      acquired: parseTime(pick(o, 'acquired', 'Acquired')),
      session: String(pick(o, 'session', 'Session') ?? ''),
      // A count (or the list itself) when the server gives it.
      waiters: Array.isArray(waiters) ? waiters.length : num(waiters),
      waiterList: Array.isArray(waiters) ? waiters.map(normWaiter) : undefined,
      data: typeof data === 'string' ? data : undefined,
      dataBase64: typeof data64 === 'string' ? data64 : undefined,
    };
  }

  function normWaiter(o) {
    return {
      owner: String(pick(o, 'owner', 'Owner') ?? ''),
      session: String(pick(o, 'session', 'Session') ?? ''),
      since: parseTime(pick(o, 'since', 'Since')),
      waited: ms(o, ['waited_ms', 'WaitedMs', 'waitedMs'], ['Waited']),
    };
  }

  function normEvent(o) {
    return {
      type: String(pick(o, 'type', 'Type') ?? ''),
      name: String(pick(o, 'name', 'Name') ?? ''),
      owner: String(pick(o, 'owner', 'Owner') ?? ''),
      token: pick(o, 'token', 'Token'),
      time: parseTime(pick(o, 'time', 'Time')),
      handoff: ms(o, ['handoff_ms', 'HandoffMs', 'handoffMs'], ['Handoff']),
      waiters: num(pick(o, 'waiters', 'Waiters')),
    };
  }

  function listOf(body, ...keys) {
    if (Array.isArray(body)) return body;
    const v = pick(body, ...keys);
    return Array.isArray(v) ? v : [];
  }

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

  async function api(path, opts = {}) {
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

  const serverNow = () => Date.now() + state.skew;

  const leasePath = (name) => 'v1/leases/' + encodeURIComponent(name);

  // ---- messages, auth, connection state --------------------------------

  let errorKind = '';
  let errorTimer = null;

  function showError(msg, kind) {
    const p = $('error');
    p.textContent = msg;
    p.hidden = false;
    errorKind = kind;
    clearTimeout(errorTimer);
    if (kind === 'action') errorTimer = setTimeout(() => clearError('action'), 20000);
  }

  function clearError(kind) {
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
      ? `The server refused the token (${e.detail || e.title}). Enter another.`
      : 'The server needs a bearer token.';
    $('auth').hidden = false;
    setConn('disconnected', 'token needed');
  }

  function setConn(s, text) {
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
  let lastRefresh = -Infinity;
  let refreshTimer = null;

  // scheduleRefresh re-reads state soon, at most every MIN_REFRESH_MS,
  // folding bursts of events into one read.
  function scheduleRefresh() {
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
      renderStats(stats.value);
      sample(stats.value);
    }
    if (events.status === 'fulfilled') {
      const evs = listOf(events.value, 'events', 'Events').map(normEvent);
      evs.forEach((ev) => countFrom(ev)); // oldest first, so the last word stays
      const mine = evs.filter((ev) => !state.prefix || !ev.name || ev.name.startsWith(state.prefix));
      mine.forEach(remember);
      state.events = mine.slice(-EVENTS_N);
    }
    const names = new Set(state.leases.map((l) => l.name));
    for (const n of state.counts.keys()) if (!names.has(n)) state.counts.delete(n);
    await Promise.all([readDetail(), readCounts()]);
    render();
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
  function prune() {
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

  function startStream() {
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
      setText(c[2], l.token === undefined ? '–' : String(l.token));
      const w = l.waiters ?? state.counts.get(l.name);
      setText(c[5], w === undefined ? '…' : String(w));
      setText(c[6], l.session);
      c[6].title = l.session;
      const d = dataText(l);
      setText(c[7], d.short);
      c[7].title = d.long;
      c[7].classList.toggle('binary', d.binary);
      c[8].firstChild.setAttribute('aria-label', `Force release ${l.name}`);
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
      const v = draw.visible(l.data);
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
    draw.charts(document.querySelector('section.charts'), evs, state.samples, now, WINDOW_MS, BUCKET_MS);
    const lanes = draw.timeline($('timeline'), evs, state.leases, now, draw.zoom(evs, now, WINDOW_MS));
    $('no-timeline').hidden = lanes > 0;
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
      holder.textContent = d.missing ? 'Not held now.' : d.error;
      ol.replaceChildren();
      $('detail-empty').hidden = true;
      return;
    }
    const l = d.lease;
    const parts = [`Held by ${draw.visible(l.owner)}, token ${l.token}`];
    if (l.session) parts.push(`session ${l.session}`);
    const data = dataText(l);
    if (data.long) parts.push(`data ${draw.cut(data.long, 80)}`);
    holder.textContent = parts.join(' · ') + '.';
    ol.replaceChildren(
      ...d.waiters.map((w) =>
        el(
          'li',
          { dataset: { owner: w.owner } },
          el('strong', { class: 'owner', text: draw.visible(w.owner) }),
          w.session ? el('span', { class: 'session-of', text: `session ${w.session}` }) : null,
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
        if (ev.token !== undefined && ev.token !== 0) extra.push(`token ${ev.token}`);
        if (ev.handoff) extra.push(`handoff ${fmtDur(ev.handoff)}`);
        if (ev.waiters) extra.push(`${ev.waiters} waiting`);
        return el(
          'li',
          { dataset: { type: ev.type } },
          el('time', { datetime: ev.time ? new Date(ev.time).toISOString() : undefined, text: fmtClock(ev.time) }),
          el('span', { class: 'badge ' + ev.type.replace(/[^a-z]/g, ''), text: ev.type }),
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
    const holder = l ? `${l.owner} (token ${l.token})` : 'its holder';
    const ok = window.confirm(
      `Force release "${name}", held by ${holder}?\n\n` +
        'The holder is not asked: it learns that it lost the lease when it next renews.',
    );
    if (!ok) return;
    button.disabled = true;
    try {
      await api(leasePath(name) + '/force-release', { method: 'POST' });
      clearError('action');
    } catch (e) {
      if (e.status === 404) showError(`"${name}" was not held any more.`, 'action');
      else if (e.status) showError(`Force release of "${name}" refused (${e.status}): ${e.detail || e.title}`, 'action');
      else showError(`Force release of "${name}" failed: the server cannot be reached.`, 'action');
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

  init();
})();
