// Package abuse holds suite R11 of the verification plan: abusive HTTP
// traffic against a real in-process server with auth on — missing and bad
// credentials, names that try to escape the token's prefix (dot segments,
// encoded and double-encoded slashes, NUL, look-alike characters), twice
// the rate limit, oversized bodies and slow headers — each answered with
// the status the server is designed to give and none changing any lease,
// while a polite client's latency is measured beside it. The tests are in
// the _test files; this file only documents the package.
package abuse
