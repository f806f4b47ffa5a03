// The JSONata side of package aslexec: evaluates the "{% %}" templates of
// one state field at a time with the jsonata reference implementation.
//
// Requests and answers are JSON lines, answered out of order:
//   in:  {"id": N, "v": TEMPLATE, "b": {"states": {...}, "name": value, ...}}
//   out: {"id": N, "v": VALUE} or {"id": N, "err": {"loc": PATH, "msg": TEXT}}
// A string that is "{%" EXPRESSION "%}" as a whole is replaced by the
// expression's value; any other string, number, boolean or null is kept;
// arrays and objects are walked. An expression whose value is undefined is
// an error (Step Functions: States.QueryEvaluationError).
'use strict';
const jsonata = require('jsonata');
const crypto = require('crypto');
const readline = require('readline');

const EXPR = /^\{%([\s\S]*)%\}$/;
const compiled = new Map();

function compile(src) {
  let e = compiled.get(src);
  if (e) return e;
  e = jsonata(src);
  // Functions Step Functions adds to JSONata (the subset aslexec offers).
  e.registerFunction('uuid', () => crypto.randomUUID(), '<:s>');
  e.registerFunction('parse', (s) => JSON.parse(s), '<s:x>');
  if (compiled.size > 10000) compiled.clear();
  compiled.set(src, e);
  return e;
}

class EvalError extends Error {
  constructor(loc, msg) {
    super(msg);
    this.loc = loc;
  }
}

async function walk(v, b, loc) {
  if (typeof v === 'string') {
    const m = EXPR.exec(v);
    if (!m) return v;
    let value;
    try {
      value = await compile(m[1].trim()).evaluate({}, b);
    } catch (err) {
      throw new EvalError(loc, String((err && err.message) || err) + (err && err.token ? ' (token ' + err.token + ')' : ''));
    }
    if (value === undefined) throw new EvalError(loc, 'the expression ' + m[1].trim() + ' evaluated to undefined');
    // JSONata sequences and functions are not JSON: normalise them.
    return JSON.parse(JSON.stringify(value) ?? 'null');
  }
  if (Array.isArray(v)) {
    const out = [];
    for (let i = 0; i < v.length; i++) out.push(await walk(v[i], b, loc + '[' + i + ']'));
    return out;
  }
  if (v && typeof v === 'object') {
    const out = {};
    for (const [k, x] of Object.entries(v)) out[k] = await walk(x, b, loc ? loc + '.' + k : k);
    return out;
  }
  return v;
}

const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
rl.on('line', (line) => {
  let req;
  try {
    req = JSON.parse(line);
  } catch (err) {
    process.stderr.write('aslexec jsonata: bad request: ' + err.message + '\n');
    return;
  }
  walk(req.v, req.b || {}, req.loc || '').then(
    (v) => process.stdout.write(JSON.stringify({ id: req.id, v: v === undefined ? null : v }) + '\n'),
    (err) => process.stdout.write(JSON.stringify({ id: req.id, err: { loc: err.loc || req.loc || '', msg: String(err.message || err) } }) + '\n'),
  );
});
rl.on('close', () => process.exit(0));
