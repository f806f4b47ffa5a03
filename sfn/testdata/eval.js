// Evaluates every JSONata expression ("{% ... %}") in one state of a state
// machine, the way Step Functions would, with the jsonata reference
// implementation. Usage:
//   node eval.js MACHINE.json SCENARIO.json
// SCENARIO: {"state": NAME, "input": ..., "context": {...}, "result": ...,
//            "errorOutput": ..., "vars": {"lh_token": "3", ...}}
// Prints the state with every expression replaced by its value.
const fs = require('fs');
const jsonata = require('jsonata');

const machine = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
const sc = JSON.parse(fs.readFileSync(process.argv[3], 'utf8'));
const state = machine.States[sc.state];
if (!state) {
  console.error('no state ' + sc.state);
  process.exit(2);
}
const bindings = Object.assign({}, sc.vars || {}, {
  states: { input: sc.input, context: sc.context, result: sc.result, errorOutput: sc.errorOutput },
});
const EXPR = /^\{%([\s\S]*)%\}$/;

async function walk(v) {
  if (typeof v === 'string') {
    const m = EXPR.exec(v);
    if (!m) return v;
    const value = await jsonata(m[1].trim()).evaluate({}, bindings);
    return value === undefined ? null : value;
  }
  if (Array.isArray(v)) return Promise.all(v.map(walk));
  if (v && typeof v === 'object') {
    const out = {};
    for (const [k, x] of Object.entries(v)) out[k] = await walk(x);
    return out;
  }
  return v;
}

walk(state).then(
  (out) => process.stdout.write(JSON.stringify(out)),
  (err) => { console.error(String(err && err.message || err)); process.exit(1); },
);
