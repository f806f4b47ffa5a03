package workflows

import (
	"errors"

	"github.com/leasehold/leasehold/workflow"
)

// recordReused records a refusal of a reused request id; it reports false
// for any other error.
func recordReused(c *Call, err error) bool {
	var re *workflow.RequestReusedError
	if !errors.As(err, &re) {
		return false
	}
	e := re.Entry
	c.Answer, c.Entry, c.Err = AnsReused, &e, ""
	return true
}
