// leasehold dashboard pictures: visible escapes for names and data, a
// timeline per name and small charts, drawn as inline SVG from the server's
// recent events and stats. No library; every piece of server data reaches
// the page as a text node or an attribute, never through HTML parsing.
'use strict';

window.leaseholdDraw = (() => {
  const NS = 'http://www.w3.org/2000/svg';

  // ---- visible escapes --------------------------------------------------

  // Characters a reader cannot see or tell from others: controls, format
  // characters (bidi overrides, zero-width), unassigned and private-use code
  // points, lone surrogates, line separators and non-ASCII spaces.
  const HIDDEN =
    /[\p{Cc}\p{Cf}\p{Co}\p{Cn}\p{Cs}\p{Zl}\p{Zp}\u00a0\u1680\u2000-\u200a\u202f\u205f\u3000\u034f\u115f\u1160\u17b4\u17b5\u180b-\u180f\u3164\uffa0\ufe00-\ufe0f\u{e0100}-\u{e01ef}]/u;
  const MARK = /\p{M}/u;
  const SHORT = { '\\': '\\\\', '\n': '\\n', '\r': '\\r', '\t': '\\t' };

  const hex = (n, w) => n.toString(16).toUpperCase().padStart(w, '0');

  // escape writes the code point c as \xNN (below 0x100), \uNNNN or
  // \u{NNNNN}.
  const escape = (c) => (c < 0x100 ? '\\x' + hex(c, 2) : c > 0xffff ? `\\u{${hex(c, 5)}}` : '\\u' + hex(c, 4));

  // A space HTML would collapse or a reader would miss: at either end, or
  // beside another space.
  const loneSpace = (cps, i) => i > 0 && i < cps.length - 1 && cps[i - 1] !== ' ' && cps[i + 1] !== ' ';

  // visible shows an identifier (a name, owner, token, session): printable
  // ASCII as it is, everything else as an escape (\n, \t, \x1B, \u202E,
  // \u0430, \u0301, \u{E0041}), a space at either end or beside another as
  // \x20, and backslashes doubled, so that two different identifiers never
  // look alike: not with invisible characters, not with look-alike letters
  // of another script (Cyrillic а for Latin a), not composed against
  // decomposed (é against e + U+0301), not with a trailing space.
  function visible(s) {
    const cps = Array.from(String(s));
    let out = '';
    cps.forEach((ch, i) => {
      const c = ch.codePointAt(0);
      if (SHORT[ch]) out += SHORT[ch];
      else if (ch === ' ') out += loneSpace(cps, i) ? ' ' : '\\x20';
      else if (c > 0x20 && c < 0x7f) out += ch;
      else out += escape(c);
    });
    return out;
  }

  // visibleText shows free text (a lease's data): letters of every script
  // as they are, but every character a reader could not see (HIDDEN), every
  // combining mark and spaces at the ends or in runs as escapes, and
  // backslashes doubled.
  function visibleText(s) {
    const cps = Array.from(String(s));
    let out = '';
    cps.forEach((ch, i) => {
      const c = ch.codePointAt(0);
      if (SHORT[ch]) out += SHORT[ch];
      else if (ch === ' ') out += loneSpace(cps, i) ? ' ' : '\\x20';
      else if (HIDDEN.test(ch) || MARK.test(ch)) out += escape(c);
      else out += ch;
    });
    return out;
  }

  // unhide returns a message (such as a problem's detail, which quotes names
  // itself) with only the characters a reader could not see escaped as in
  // visible; backslashes and line breaks stay as they are.
  function unhide(s) {
    let out = '';
    for (const ch of String(s)) {
      const c = ch.codePointAt(0);
      if (ch === '\n' || !HIDDEN.test(ch)) out += ch;
      else if (c < 0x100) out += '\\x' + hex(c, 2);
      else out += c > 0xffff ? `\\u{${hex(c, 5)}}` : '\\u' + hex(c, 4);
    }
    return out;
  }

  // visibleBytes shows binary data: printable ASCII as is, other bytes as
  // \xNN.
  function visibleBytes(bytes) {
    let out = '';
    for (const b of bytes) {
      if (b === 0x5c) out += '\\\\';
      else if (b >= 0x20 && b < 0x7f) out += String.fromCharCode(b);
      else out += '\\x' + hex(b, 2);
    }
    return out;
  }

  // cut shortens s to n code points, marking the cut with an ellipsis.
  function cut(s, n) {
    const cps = Array.from(s);
    return cps.length > n ? cps.slice(0, n).join('') + '…' : s;
  }

  // ---- SVG helpers ------------------------------------------------------

  function svg(tag, attrs, ...children) {
    const e = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v !== undefined && v !== null) e.setAttribute(k, String(v));
    }
    for (const c of children) if (c) e.append(c);
    return e;
  }

  function title(text) {
    const t = document.createElementNS(NS, 'title');
    t.textContent = text;
    return t;
  }

  function label(x, y, text, cls, anchor) {
    const t = svg('text', { x, y, class: cls, 'text-anchor': anchor || 'start' });
    t.textContent = text;
    return t;
  }

  const CHAR_W = 6.6; // px per character of the 11 px labels, generously

  function clock(t) {
    const d = new Date(t);
    const p = (n) => String(n).padStart(2, '0');
    return `${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
  }

  function dur(ms) {
    if (ms < 1) return ms.toFixed(2) + ' ms';
    if (ms < 1000) return Math.round(ms) + ' ms';
    if (ms < 60000) return (ms / 1000).toFixed(1) + ' s';
    return Math.floor(ms / 60000) + 'm ' + String(Math.floor((ms % 60000) / 1000)).padStart(2, '0') + 's';
  }

  const span = (ms) => (ms < 60000 ? `${Math.round(ms / 1000)} s` : `${Math.round(ms / 60000)} min`);

  // zoom picks the timeline's span: enough to show the first of events,
  // from 30 s up to max.
  function zoom(events, now, max) {
    const first = events.length ? events[0].time : now;
    for (const s of [30e3, 60e3, 120e3, 300e3, 600e3, 1800e3]) if (s >= max || now - first <= s * 0.9) return Math.min(s, max);
    return max;
  }

  function width(node) {
    return Math.max(120, Math.floor(node.getBoundingClientRect().width));
  }

  // ---- timeline ---------------------------------------------------------

  const LANES = 12;
  const STUB_W = 6; // px: a hold whose start is not known

  // spans turns one name's events (oldest first) into holds, waits and
  // marks (force releases, expiries) within [from, now].
  // A hold whose grant is not among the events read (the server keeps its
  // latest 256) began at a time the page does not know: it starts at the
  // live lease's acquired time when that is the same grant, else it is
  // drawn as a stub at its end and says that its start is unknown (it was
  // drawn from the window's start, claiming holds that never happened).
  // Likewise a wait whose start is not known (its queued event is not
  // among the events read, or it says a time before known: the server's
  // start, or the oldest event read) is a stub at its end that says so.
  function spans(evs, from, now, lease, known = -Infinity) {
    const holds = [];
    const waits = [];
    const marks = [];
    const waiting = new Map(); // owner → {start, startUnknown}
    // waited ends the wait of owner at t (how: granted, gave up).
    const waited = (owner, t, how) => {
      const w = waiting.get(owner);
      if (w) {
        waits.push({ owner, start: w.start, end: t, how, startUnknown: w.startUnknown });
        waiting.delete(owner);
      } else {
        waits.push({ owner, start: t, end: t, how, startUnknown: true });
      }
    };
    let open = null;
    const close = (end, how) => {
      holds.push({ ...open, end, how });
      open = null;
    };
    const begun = (ev) => {
      if (lease && lease.token === ev.token && lease.acquired !== undefined && !Number.isNaN(lease.acquired)) {
        return { owner: ev.owner, token: ev.token, start: Math.max(from, lease.acquired), clipped: lease.acquired < from };
      }
      return { owner: ev.owner, token: ev.token, start: Math.max(from, ev.time), startUnknown: true };
    };
    for (const ev of evs) {
      const t = Math.max(from, ev.time);
      switch (ev.type) {
        case 'granted':
          if (open) close(t, 'replaced');
          open = { owner: ev.owner, token: ev.token, start: t, handoff: ev.handoff };
          // A handoff went to a queued waiter.
          if (waiting.has(ev.owner) || ev.handoff > 0) waited(ev.owner, t, 'granted');
          break;
        case 'served': // a semaphore's waiter granted a permit (timeline)
          waited(ev.owner, t, 'granted');
          break;
        case 'renewed':
          if (!open) open = begun(ev);
          break;
        case 'released':
        case 'forced':
        case 'expired':
          if (!open) open = begun(ev);
          close(t, ev.type);
          if (ev.type !== 'released') marks.push({ type: ev.type, time: t, owner: ev.owner, token: ev.token });
          break;
        case 'queued':
          waiting.set(ev.owner, { start: t, startUnknown: ev.time < known });
          break;
        case 'dequeued':
          waited(ev.owner, t, 'gave up');
          break;
      }
    }
    if (open) holds.push({ ...open, end: now, how: lease && lease.token === open.token ? 'held' : 'unknown' });
    for (const [owner, w] of waiting) waits.push({ owner, start: w.start, end: now, how: 'waiting', startUnknown: w.startUnknown });
    return { holds, waits, marks };
  }

  // timeline draws a lane per name: who held it when (bars with owner and
  // token), who waited (thin bars below) and force releases and expiries
  // (red and amber marks), over [now - windowMs, now].
  // known is the earliest time whose waits the page knows (the server's
  // start, the oldest event read).
  function timeline(root, events, leases, now, windowMs, known = -Infinity) {
    const from = now - windowMs;
    const byName = new Map();
    for (const ev of events) {
      if (!ev.name || ev.time === undefined || ev.time < from || ev.type === 'overflow') continue;
      if (!byName.has(ev.name)) byName.set(ev.name, []);
      byName.get(ev.name).push(ev);
      // A semaphore's waiter queues under the semaphore's name and is
      // granted a permit (NAME/permit/I): its wait ends in NAME's lane.
      const sem = semaphoreOf(ev.name);
      if (ev.type === 'granted' && ev.handoff > 0 && sem && byName.has(sem)) {
        byName.get(sem).push({ ...ev, type: 'served', name: sem });
      }
    }
    const held = new Map(leases.map((l) => [l.name, l]));
    const names = [...byName.keys()].sort((a, b) => {
      const la = byName.get(a).at(-1).time;
      const lb = byName.get(b).at(-1).time;
      return lb - la || (a < b ? -1 : 1);
    });
    const shown = names.slice(0, LANES);
    const w = width(root);
    const x = (t) => ((Math.min(now, Math.max(from, t)) - from) / windowMs) * w;
    const lanes = shown.map((name) => {
      const s = spans(byName.get(name), from, now, held.get(name), known);
      const g = svg('svg', { class: 'tl-svg', width: w, height: 34, viewBox: `0 0 ${w} 34`, role: 'img' });
      g.append(title(`${visible(name)}: ${s.holds.length} holds, ${s.waits.length} waits in the last ${span(windowMs)}`));
      g.append(svg('line', { x1: 0, x2: w, y1: 12, y2: 12, class: 'tl-track' }));
      // Many holds (a busy name): one bar per pixel column is enough.
      let lastX = -1;
      const thin = s.holds.length > w / 2;
      for (const h of s.holds) {
        // A hold of unknown start: a stub at its end.
        const x0 = h.startUnknown ? Math.max(0, x(h.end) - STUB_W) : x(h.start);
        if (thin && Math.floor(x0) === lastX) continue;
        lastX = Math.floor(x0);
        const bw = h.startUnknown ? STUB_W : Math.max(2, x(h.end) - x0);
        const text = `${visible(h.owner)} #${h.token}`;
        const what = h.startUnknown
          ? `${visible(h.owner)} held it with token ${h.token} ` +
            `${h.how === 'held' ? 'and holds it now' : 'until ' + clock(h.end) + (h.how === 'unknown' ? '' : ' (' + h.how + ')')}; ` +
            `when it began is not known (its grant is no longer among the server's recent events)`
          : `${visible(h.owner)} held it with token ${h.token}, ` +
            `${h.clipped ? 'before ' : ''}${clock(h.start)} to ${h.how === 'held' ? 'now' : clock(h.end)} ` +
            `(${dur(h.end - h.start)}${h.how === 'held' || h.how === 'unknown' ? '' : ', ' + h.how})` +
            (h.handoff ? `, handed over in ${dur(h.handoff)}` : '');
        const bar = svg('g', {
          class: 'tl-hold' + (h.how === 'held' ? ' live' : '') + (h.startUnknown ? ' start-unknown' : ''),
          'data-owner': h.owner,
          'data-token': h.token,
        });
        bar.append(title(what), svg('rect', { x: x0, y: 3, width: Math.min(bw, w - x0), height: 18, rx: 3 }));
        if (text.length * CHAR_W + 8 <= Math.min(bw, w - x0)) bar.append(label(x0 + 4, 16, text, 'tl-label'));
        g.append(bar);
      }
      for (const wt of s.waits) {
        // A wait of unknown start: a stub at its end.
        const x0 = wt.startUnknown ? Math.max(0, x(wt.end) - STUB_W) : x(wt.start);
        const bw = wt.startUnknown ? Math.min(STUB_W, w - x0) : Math.max(2, Math.min(x(wt.end) - x0, w - x0));
        const what = wt.startUnknown
          ? `${visible(wt.owner)} ${wt.how === 'waiting' ? 'is waiting now' : 'waited until ' + clock(wt.end) + ' (' + wt.how + ')'}; ` +
            `when it began is not known (before the server's start or its oldest event read)`
          : `${visible(wt.owner)} waited from ${clock(wt.start)} (${dur(wt.end - wt.start)}, ${wt.how})`;
        g.append(
          svg(
            'rect',
            {
              class: 'tl-wait' + (wt.startUnknown ? ' start-unknown' : ''),
              'data-owner': wt.owner,
              x: x0,
              y: 25,
              width: bw,
              height: 6,
              rx: 2,
            },
            title(what),
          ),
        );
      }
      for (const m of s.marks) {
        const mx = Math.min(w - 1, Math.max(1, x(m.time)));
        g.append(
          svg(
            'path',
            { class: 'tl-mark tl-' + m.type, 'data-owner': m.owner, d: `M${mx} 0 V34 M${mx - 4} 0 H${mx + 4} L${mx} 6 Z` },
            title(`${m.type === 'forced' ? 'force-released' : 'expired'} at ${clock(m.time)}: ${visible(m.owner)}, token ${m.token}`),
          ),
        );
      }
      const lane = document.createElement('li');
      lane.className = 'tl-lane';
      lane.dataset.name = name;
      const head = document.createElement('div');
      head.className = 'tl-name';
      head.textContent = visible(name);
      lane.append(head, g);
      return lane;
    });
    const list = document.createElement('ol');
    list.className = 'tl-lanes';
    list.append(...lanes);
    const axis = document.createElement('div');
    axis.className = 'tl-axis';
    for (const text of [`−${span(windowMs)} (${clock(from)})`, `now (${clock(now)})`]) {
      const s = document.createElement('span');
      s.textContent = text;
      axis.append(s);
    }
    const more = document.createElement('p');
    more.className = 'empty';
    more.hidden = names.length <= LANES;
    more.textContent = `and ${names.length - LANES} more names`;
    root.replaceChildren(...(lanes.length ? [list, axis, more] : []));
    return lanes.length;
  }

  // ---- charts -----------------------------------------------------------

  const CH = 80; // chart height

  function frame(w, max, unit, from, now) {
    const g = svg('svg', { class: 'chart-svg', width: w, height: CH + 16, viewBox: `0 0 ${w} ${CH + 16}`, role: 'img' });
    g.append(
      svg('line', { class: 'axis', x1: 0, x2: w, y1: CH, y2: CH }),
      svg('line', { class: 'grid', x1: 0, x2: w, y1: 4, y2: 4 }),
      label(2, 14, `${max} ${unit}`.trim(), 'chart-label'),
      label(2, CH + 13, `−${span(now - from)}`, 'chart-label'),
      label(w - 2, CH + 13, 'now', 'chart-label', 'end'),
    );
    return g;
  }

  function nice(v) {
    if (v <= 0) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const k of [1, 2, 5, 10]) if (k * p >= v) return k * p;
    return 10 * p;
  }

  // grants draws grants per second in buckets of bucketMs over the part of
  // the window the page knows of: from known (the server's start, or the
  // oldest event the page has) if that is later than the window's start.
  // No bar is drawn before it and the average is over the span covered;
  // since says in words what known is.
  function grants(fig, events, now, windowMs, bucketMs, known = -Infinity, since = '') {
    const from = now - windowMs;
    const start = Math.min(now, Math.max(from, known));
    const n = Math.round(windowMs / bucketMs);
    const counts = new Array(n).fill(0);
    for (const ev of events) {
      if (ev.type !== 'granted' || ev.time === undefined || ev.time < start || ev.time > now) continue;
      counts[Math.min(n - 1, Math.floor((ev.time - from) / bucketMs))]++;
    }
    const first = Math.min(n - 1, Math.max(0, Math.floor((start - from) / bucketMs)));
    const bars = [];
    for (let i = first; i < n; i++) {
      const t0 = from + i * bucketMs;
      const lo = Math.max(t0, start);
      const hi = Math.min(t0 + bucketMs, now);
      bars.push({ c: counts[i], lo, t1: t0 + bucketMs, rate: counts[i] / Math.max(1, (hi - lo) / 1000) });
    }
    const max = nice(Math.max(...bars.map((b) => b.rate)));
    const w = width(fig);
    const g = frame(w, max, '/s', from, now);
    const x = (t) => ((t - from) / windowMs) * w;
    for (const b of bars) {
      const h = (b.rate / max) * (CH - 4);
      g.append(
        svg(
          'rect',
          {
            class: 'bar',
            'data-count': b.c,
            'data-from': b.lo,
            x: x(b.lo) + 0.5,
            y: CH - h,
            width: Math.max(1, x(b.t1) - x(b.lo) - 1),
            height: h,
          },
          title(`${clock(b.lo)}–${clock(b.t1)}: ${b.c} grants (${b.rate.toFixed(2)}/s)`),
        ),
      );
    }
    const total = bars.reduce((a, b) => a + b.c, 0);
    const covered = now - start;
    g.dataset.from = String(start);
    g.dataset.total = String(total);
    const avg = `${(total / Math.max(1, covered / 1000)).toFixed(2)}/s average`;
    if (start <= from) return { svg: g, value: `${avg}: ${total} grants in the last ${span(windowMs)}` };
    const why = since ? `, ${since}` : '';
    return { svg: g, value: `${avg}: ${total} grants in the last ${dur(covered)} (since ${clock(start)}${why})` };
  }

  // semaphoreOf is the semaphore a permit's lease name (NAME/permit/I)
  // belongs to, or ''.
  function semaphoreOf(name) {
    const m = /^(.+)\/permit\/(0|[1-9][0-9]*)$/.exec(name);
    return m ? m[1] : '';
  }

  // queueDelta is how an event changed its name's queue.
  function queueDelta(ev) {
    if (ev.type === 'queued') return 1;
    if (ev.type === 'dequeued' || (ev.type === 'granted' && ev.handoff > 0)) return -1;
    return 0;
  }

  // waiterSeries is the server's queued waiters over [from, now]: each event
  // carries its name's queue length after it, so the steps come from the
  // events; the waiters of names without events come from the latest
  // reading of the server's stats. Without events, the readings alone.
  // A permit's events count its semaphore's waiters (they wait under the
  // semaphore's name): they are counted under that name. The series
  // starts at from or, later, at known (the server's start, the first
  // event or reading): nothing is drawn for a time the page knows nothing of.
  function waiterSeries(events, samples, from, now, knownFrom = -Infinity) {
    const last = samples.at(-1);
    from = Math.max(from, knownFrom);
    const evs = events
      .filter((ev) => ev.waiters !== undefined && ev.time >= from && ev.time <= now)
      .map((ev) => (semaphoreOf(ev.name) ? { ...ev, name: semaphoreOf(ev.name) } : ev));
    if (!evs.length) return samples.filter((s) => s.t >= Math.max(from - 60000, knownFrom) && s.t <= now + 5000);
    const cur = new Map(); // name → its queue before its first event, then after each
    for (const ev of evs) if (!cur.has(ev.name)) cur.set(ev.name, Math.max(0, ev.waiters - queueDelta(ev)));
    const latest = new Map();
    for (const ev of evs) latest.set(ev.name, ev.waiters);
    let known = 0;
    for (const v of latest.values()) known += v;
    let total = last ? Math.max(0, last.waiters - known) : 0;
    for (const v of cur.values()) total += v;
    const pts = [{ t: from, waiters: total }];
    for (const ev of evs) {
      total += ev.waiters - cur.get(ev.name);
      cur.set(ev.name, ev.waiters);
      pts.push({ t: ev.time, waiters: total });
    }
    return pts;
  }

  // waiters draws the queued waiters over the window.
  function waiters(fig, events, samples, now, windowMs, known) {
    const from = now - windowMs;
    const pts = waiterSeries(events, samples, from, now, known);
    const max = nice(Math.max(1, ...pts.map((s) => s.waiters)));
    const w = width(fig);
    const g = frame(w, max, '', from, now);
    const x = (t) => ((Math.max(from, Math.min(now, t)) - from) / windowMs) * w;
    const y = (v) => CH - (v / max) * (CH - 4);
    if (pts.length) {
      let d = `M${x(pts[0].t)} ${y(pts[0].waiters)}`;
      for (let i = 1; i < pts.length; i++) d += ` H${x(pts[i].t)} V${y(pts[i].waiters)}`;
      d += ` H${x(now)}`;
      const top = Math.max(...pts.map((p) => p.waiters));
      g.append(svg('path', { class: 'line', d, 'data-points': pts.length, 'data-max': top }, title(`at most ${top} waiting`)));
    }
    const last = pts.at(-1);
    return { svg: g, value: last ? `${last.waiters} now` : 'no reading yet' };
  }

  // handoffs draws one dot per grant handed to a queued waiter: the time
  // from the release (or expiry) to that grant.
  function handoffs(fig, events, now, windowMs) {
    const from = now - windowMs;
    const hs = events.filter((ev) => ev.type === 'granted' && ev.handoff > 0 && ev.time >= from && ev.time <= now);
    const max = nice(Math.max(0.001, ...hs.map((ev) => ev.handoff)));
    const w = width(fig);
    const g = frame(w, dur(max), '', from, now);
    for (const ev of hs) {
      const cx = Math.min(w - 3, Math.max(3, ((ev.time - from) / windowMs) * w));
      g.append(
        svg(
          'circle',
          { class: 'dot', cx, cy: CH - (ev.handoff / max) * (CH - 4), r: 3, 'data-ms': ev.handoff },
          title(`${clock(ev.time)}: ${visible(ev.name)} handed to ${visible(ev.owner)} in ${dur(ev.handoff)}`),
        ),
      );
    }
    const last = hs.at(-1);
    return { svg: g, value: last ? `last ${dur(last.handoff)}, max ${dur(Math.max(...hs.map((e) => e.handoff)))}` : 'no handoffs' };
  }

  // charts fills the three figures of root (#chart-grants, #chart-waiters,
  // #chart-handoff).
  // known is the earliest time the page knows of and since says what it is
  // (see grants).
  function charts(root, events, samples, now, windowMs, bucketMs, known = -Infinity, since = '') {
    const put = (id, r) => {
      const fig = root.querySelector('#' + id);
      const plot = fig.querySelector('.plot');
      plot.replaceChildren(r.svg);
      fig.querySelector('.value').textContent = r.value;
    };
    const plotOf = (id) => root.querySelector('#' + id + ' .plot');
    put('chart-grants', grants(plotOf('chart-grants'), events, now, windowMs, bucketMs, known, since));
    put('chart-waiters', waiters(plotOf('chart-waiters'), events, samples, now, windowMs, known));
    put('chart-handoff', handoffs(plotOf('chart-handoff'), events, now, windowMs));
  }

  return { visible, visibleText, unhide, visibleBytes, cut, zoom, timeline, charts };
})();
