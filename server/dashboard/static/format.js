// leasehold dashboard, part 1 of 3: small helpers — building elements and
// reading the API's JSON (both snake_case and Go's CamelCase field names)
// into plain objects, and formatting durations and times. No state and no
// requests; read.js reads the server, dashboard.js renders.

export const $ = (id) => document.getElementById(id);

export function el(tag, props, ...children) {
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
export function pick(o, ...keys) {
  if (!o || typeof o !== 'object') return undefined;
  for (const k of keys) if (o[k] !== undefined && o[k] !== null) return o[k];
  return undefined;
}

export function num(v) {
  if (typeof v === 'number') return v;
  if (typeof v === 'string' && v.trim() !== '' && !isNaN(Number(v))) return Number(v);
  return undefined;
}

// ms reads a duration given in milliseconds (ttl_ms, TTLMs) or, failing
// that, as Go's time.Duration in nanoseconds (TTL).
export function ms(o, msKeys, nsKeys = []) {
  const v = num(pick(o, ...msKeys));
  if (v !== undefined) return v;
  const ns = num(pick(o, ...nsKeys));
  return ns === undefined ? undefined : ns / 1e6;
}

export function fmtDur(v) {
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

export function parseTime(v) {
  if (v === undefined || v === null || v === '') return undefined;
  const t = typeof v === 'number' ? v : Date.parse(v);
  // Go's zero time means "not known".
  return isNaN(t) || t <= 0 ? undefined : t;
}

export function fmtClock(t) {
  if (t === undefined) return '';
  const d = new Date(t);
  const p = (n, w = 2) => String(n).padStart(w, '0');
  return `${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}.${p(d.getMilliseconds(), 3)}`;
}

export function normLease(o) {
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

export function normWaiter(o) {
  return {
    owner: String(pick(o, 'owner', 'Owner') ?? ''),
    session: String(pick(o, 'session', 'Session') ?? ''),
    since: parseTime(pick(o, 'since', 'Since')),
    waited: ms(o, ['waited_ms', 'WaitedMs', 'waitedMs'], ['Waited']),
  };
}

export function normEvent(o) {
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

export function listOf(body, ...keys) {
  if (Array.isArray(body)) return body;
  const v = pick(body, ...keys);
  return Array.isArray(v) ? v : [];
}
