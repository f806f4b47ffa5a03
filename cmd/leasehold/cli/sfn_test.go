package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSfnFormats: every --format writes a JSON document of its kind; bad
// combinations are usage errors that write nothing.
func TestSfnFormats(t *testing.T) {
	h := newHarness(t)
	base := []string{"sfn", "--table", "leasehold", "--lock", "nightly",
		"--lambda", "arn:aws:lambda:eu-west-1:123456789012:function:f", "--lambda-timeout", "1m"}
	for format, key := range map[string]string{
		"machine": "StartAt", "cleanup": "StartAt", "cloudformation": "Resources", "terraform": "resource",
	} {
		r := h.run(append(base, "--format", format)...)
		var doc map[string]any
		if r.code != ExitOK || json.Unmarshal([]byte(r.stdout), &doc) != nil || doc[key] == nil {
			t.Errorf("--format %s: exit %d, stdout %.120q, stderr %q", format, r.code, r.stdout, r.stderr)
		}
	}
	dir := t.TempDir()
	task := filepath.Join(dir, "task.json")
	if err := os.WriteFile(task, []byte(`{"Type": "Task", "Resource": "arn:aws:states:::ecs:runTask.sync", "Arguments": {}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "machine.json")
	if r := h.run("sfn", "--table", "leasehold", "--lock", "batch", "--task", task, "--task-grace", "1m", "--output", out); r.code != ExitOK {
		t.Fatalf("--task with --task-grace: exit %d, %s", r.code, r.stderr)
	}
	if b, err := os.ReadFile(out); err != nil || !strings.Contains(string(b), `"QueryLanguage": "JSONata"`) {
		t.Fatalf("the machine file: %v %.100q", err, b)
	}
	for _, args := range [][]string{
		append(base, "--format", "yaml"),
		{"sfn", "--table", "leasehold", "--lock", "nightly", "--lambda", "arn:aws:lambda:eu-west-1:123456789012:function:f"},
		{"sfn", "--table", "leasehold", "--lock", "batch", "--task", task},
		{"sfn", "--table", "leasehold", "--lock", "batch", "--task", task, "--task-grace", "1m", "--format", "cloudformation"},
		append(base, "--ttl", "30s"),
		append(base, "--wait", "2h", "--max-attempts", "10"),
		append(base[:4:4], "a\x01b", "--lambda", "arn:aws:lambda:eu-west-1:123456789012:function:f", "--lambda-timeout", "1m"),
	} {
		out := filepath.Join(t.TempDir(), "out.json")
		r := h.run(append(args, "--output", out)...)
		if r.code != ExitUsage || !strings.Contains(r.stderr, "sfn") {
			t.Errorf("%q: exit %d (stderr %q), want %d", args, r.code, r.stderr, ExitUsage)
		}
		if _, err := os.Stat(out); err == nil {
			t.Errorf("%q: wrote %s", args, out)
		}
	}
}
