// Validates a state machine definition with asl-validator.
// Usage: node validate.js MACHINE.json  → prints {"isValid": bool, "errors": [...]}
const fs = require('fs');
const validator = require('asl-validator');
const def = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
const res = validator(def);
process.stdout.write(JSON.stringify({ isValid: res.isValid, errors: res.errors || [] }));
