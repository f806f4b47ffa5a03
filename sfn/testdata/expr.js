// Evaluates JSONata expressions ("{% ... %}" strings)
// with the jsonata reference implementation, each with its own bindings,
// and reports each value or error. Usage:
//   node expr.js CASES.json
// CASES: [{"expr": "{% ... %}" (any other string is its own value), "vars": {...}, "states": {...}, "repeat": N}, ...]
// Prints [{"values": [...]} | {"error": "..."}, ...] (repeat: N values of
// the same expression, for $random).
const fs = require('fs');
const jsonata = require('jsonata');

const EXPR = /^\{%([\s\S]*)%\}$/;
const cases = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));

async function one(c) {
  const m = EXPR.exec(c.expr);
  // A string that is not "{% ... %}" is a literal, as Step Functions reads it.
  if (!m) return { values: Array(c.repeat || 1).fill(c.expr) };
  const src = m[1].trim();
  const bindings = Object.assign({}, c.vars || {}, { states: c.states || {} });
  const values = [];
  try {
    const e = jsonata(src);
    for (let i = 0; i < (c.repeat || 1); i++) {
      const v = await e.evaluate({}, bindings);
      values.push(v === undefined ? null : v);
    }
    return { values };
  } catch (err) {
    return { error: String((err && err.message) || err) };
  }
}

Promise.all(cases.map(one)).then(
  (out) => process.stdout.write(JSON.stringify(out)),
  (err) => { console.error(String(err)); process.exit(1); },
);
