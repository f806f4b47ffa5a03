package enginetest

import (
	"os"
	"os/exec"
	"testing"
)

// NodeCommand returns the command that runs node with args (a script and
// its arguments, or options) with the npm packages scripts/engines.sh
// installs ($LEASEHOLD_TEST_NODE_MODULES, as NODE_PATH). Without node or
// the packages, see [Missing].
func NodeCommand(t testing.TB, args ...string) *exec.Cmd {
	t.Helper()
	mods := os.Getenv("LEASEHOLD_TEST_NODE_MODULES")
	nodeBin, err := exec.LookPath("node")
	if mods == "" || err != nil {
		Missing(t, "node and the npm packages", "$LEASEHOLD_TEST_NODE_MODULES is empty or node is not in PATH")
	}
	cmd := exec.Command(nodeBin, args...)
	cmd.Env = append(os.Environ(), "NODE_PATH="+mods)
	return cmd
}
