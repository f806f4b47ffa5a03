// Checks a CloudFormation template (JSON) against the CloudFormation
// resource specification of the npm package @aws-cdk/cfnspec: every
// resource type exists; every property (and nested property of a
// property type) exists and every required one is there; every Ref,
// Fn::GetAtt and Fn::Sub ${...} names a resource, parameter or pseudo
// parameter, and GetAtt an attribute the type has; DependsOn targets
// exist. Usage: node cfncheck.js TEMPLATE.json
// Prints {"errors": [...], "spec": "<specification version>"}.
const fs = require('fs');
const spec = require('@aws-cdk/cfnspec/spec/specification.json');
const tmpl = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
const errors = [];
const resources = tmpl.Resources || {};
const params = tmpl.Parameters || {};
const PSEUDO = ['AWS::AccountId', 'AWS::NotificationARNs', 'AWS::NoValue', 'AWS::Partition',
  'AWS::Region', 'AWS::StackId', 'AWS::StackName', 'AWS::URLSuffix'];
const TOP = ['AWSTemplateFormatVersion', 'Description', 'Metadata', 'Parameters', 'Rules',
  'Mappings', 'Conditions', 'Transform', 'Resources', 'Outputs'];
const RESOURCE_KEYS = ['Type', 'Properties', 'DependsOn', 'DeletionPolicy', 'UpdateReplacePolicy',
  'Metadata', 'Condition', 'CreationPolicy', 'UpdatePolicy'];
const POLICIES = ['Delete', 'Retain', 'Snapshot', 'RetainExceptOnCreate'];

for (const k of Object.keys(tmpl)) if (!TOP.includes(k)) errors.push(`unknown top-level section ${k}`);
if (!tmpl.Resources || Object.keys(resources).length === 0) errors.push('no Resources');

function isIntrinsic(v) {
  if (!v || typeof v !== 'object' || Array.isArray(v)) return false;
  const ks = Object.keys(v);
  return ks.length === 1 && (ks[0] === 'Ref' || ks[0].startsWith('Fn::'));
}

// refs checks every intrinsic function inside v.
function refs(v, where) {
  if (Array.isArray(v)) { v.forEach((x, i) => refs(x, `${where}[${i}]`)); return; }
  if (!v || typeof v !== 'object') return;
  for (const [k, x] of Object.entries(v)) {
    if (k === 'Ref') {
      if (typeof x !== 'string' || !(x in resources || x in params || PSEUDO.includes(x))) errors.push(`${where}: Ref to unknown ${JSON.stringify(x)}`);
    } else if (k === 'Fn::GetAtt') {
      const [res, attr] = Array.isArray(x) ? x : String(x).split('.');
      const r = resources[res];
      if (!r) errors.push(`${where}: GetAtt of unknown resource ${res}`);
      else {
        const t = spec.ResourceTypes[r.Type];
        if (t && !(attr in (t.Attributes || {}))) errors.push(`${where}: ${r.Type} has no attribute ${attr}`);
      }
    } else if (k === 'Fn::Sub') {
      const s = Array.isArray(x) ? x[0] : x;
      const vars = Array.isArray(x) ? (x[1] || {}) : {};
      for (const m of String(s).matchAll(/\$\{([^!}][^}]*)\}/g)) {
        const [name, attr] = m[1].split('.');
        if (name in vars || name in params || PSEUDO.includes(m[1])) continue;
        const r = resources[name];
        if (!r) { errors.push(`${where}: Sub of unknown ${m[1]}`); continue; }
        const t = spec.ResourceTypes[r.Type];
        if (attr && t && !(attr in (t.Attributes || {}))) errors.push(`${where}: ${r.Type} has no attribute ${attr}`);
      }
    }
    refs(x, `${where}.${k}`);
  }
}

// props checks the properties given against a specification's Properties.
function props(given, specProps, typeName, where) {
  if (isIntrinsic(given)) return;
  if (!given || typeof given !== 'object' || Array.isArray(given)) {
    errors.push(`${where}: want an object of ${typeName}`);
    return;
  }
  for (const [name, p] of Object.entries(specProps)) {
    if (p.Required && !(name in given)) errors.push(`${where}: missing required property ${name}`);
  }
  for (const [name, value] of Object.entries(given)) {
    const p = specProps[name];
    if (!p) { errors.push(`${where}: ${typeName} has no property ${name}`); continue; }
    value1(value, p, typeName, `${where}.${name}`);
  }
}

function propType(typeName, sub) {
  const base = typeName.split('.')[0];
  return spec.PropertyTypes[`${base}.${sub}`] || spec.PropertyTypes[sub];
}

function value1(value, p, typeName, where) {
  if (isIntrinsic(value)) return;
  if (p.Type === 'List') {
    if (!Array.isArray(value)) { errors.push(`${where}: want a list`); return; }
    if (p.ItemType) {
      const t = propType(typeName, p.ItemType);
      value.forEach((x, i) => t && props(x, t.Properties || {}, `${typeName.split('.')[0]}.${p.ItemType}`, `${where}[${i}]`));
    } else if (p.PrimitiveItemType) {
      value.forEach((x, i) => primitive(x, p.PrimitiveItemType, `${where}[${i}]`));
    }
  } else if (p.Type === 'Map') {
    if (!value || typeof value !== 'object' || Array.isArray(value)) errors.push(`${where}: want a map`);
  } else if (p.Type) {
    const t = propType(typeName, p.Type);
    if (t) props(value, t.Properties || {}, `${typeName.split('.')[0]}.${p.Type}`, where);
  } else if (p.PrimitiveType) {
    primitive(value, p.PrimitiveType, where);
  }
}

function primitive(v, type, where) {
  if (isIntrinsic(v)) return;
  const ok = {
    String: typeof v === 'string', Integer: Number.isInteger(v) || /^-?\d+$/.test(v),
    Long: Number.isInteger(v) || /^-?\d+$/.test(v), Double: typeof v === 'number' || !isNaN(Number(v)),
    Boolean: typeof v === 'boolean' || v === 'true' || v === 'false', Json: typeof v === 'object' && v !== null,
    Timestamp: typeof v === 'string',
  }[type];
  if (ok === false) errors.push(`${where}: want ${type}, got ${JSON.stringify(v).slice(0, 60)}`);
}

for (const [id, r] of Object.entries(resources)) {
  const where = `Resources.${id}`;
  for (const k of Object.keys(r)) if (!RESOURCE_KEYS.includes(k)) errors.push(`${where}: unknown attribute ${k}`);
  for (const k of ['DeletionPolicy', 'UpdateReplacePolicy']) {
    if (k in r && !POLICIES.includes(r[k])) errors.push(`${where}.${k}: ${r[k]}`);
  }
  const t = spec.ResourceTypes[r.Type];
  if (!t) { errors.push(`${where}: unknown resource type ${r.Type}`); continue; }
  props(r.Properties || {}, t.Properties || {}, r.Type, `${where}.Properties`);
  for (const d of [].concat(r.DependsOn || [])) if (!(d in resources)) errors.push(`${where}: DependsOn unknown ${d}`);
  refs(r.Properties || {}, `${where}.Properties`);
}
for (const [id, o] of Object.entries(tmpl.Outputs || {})) {
  if (!('Value' in o)) errors.push(`Outputs.${id}: no Value`);
  refs(o, `Outputs.${id}`);
}
process.stdout.write(JSON.stringify({ errors, spec: spec.ResourceSpecificationVersion }));
