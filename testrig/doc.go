// Package testrig holds leasehold's test rig: the fault suites of
// docs/verification.md (testrig/verify/...) and what the module's tests and
// the bench module share — finding and starting real engines (enginetest,
// pgcluster), running the leasehold command and servers as processes
// (proctest, servertest), deliberately wrong stores (brokenstore), a Step
// Functions executor (aslexec), a hung endpoint (silent), latency
// distributions (latency) and the workflow experiment (workflowbench).
//
// The product never imports the rig: only tests and the bench module do
// (docs/architecture.md, "The house"). Its Go API carries no compatibility
// promise.
package testrig
