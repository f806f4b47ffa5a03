package leasehold_test

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The module's layers, bottom first (docs/architecture.md, "The house").
// A package may import packages of its own top-level folder and of lower
// layers only; two folders of one layer do not import each other. Test
// files are free: a test may drive anything.
var layers = [][]string{
	{"internal"},
	{"clock"},
	{"."},
	{"storekit", "wire"},
	{"memory", "sqlite", "postgres", "redis", "dynamodb", "etcd", "remote", "workflow", "storetest"},
	{"stores", "sfn", "server"},
	{"cmd"},
	{"testrig"},
}

const modulePath = "github.com/leasehold/leasehold"

// folder is the top-level folder of a package of this module ("." for the
// root package).
func folder(importPath string) string {
	rest := strings.TrimPrefix(strings.TrimPrefix(importPath, modulePath), "/")
	if rest == "" {
		return "."
	}
	top, _, _ := strings.Cut(rest, "/")
	return top
}

func TestLayoutImportsRunDown(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list over the module")
	}
	layer := map[string]int{}
	for i, fs := range layers {
		for _, f := range fs {
			layer[f] = i
		}
	}
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", modulePath+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	pkgs := 0
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		pkgs++
		from := folder(fields[0])
		lf, ok := layer[from]
		if !ok {
			t.Errorf("%s: its folder %q is on no layer: add it to layers here and to docs/architecture.md", fields[0], from)
			continue
		}
		for _, imp := range fields[1:] {
			if imp != modulePath && !strings.HasPrefix(imp, modulePath+"/") {
				continue
			}
			to := folder(imp)
			if to == from {
				continue
			}
			lt, ok := layer[to]
			if !ok || lt >= lf {
				t.Errorf("%s (layer %d, %s/) imports %s (layer %d, %s/): imports run down, to lower layers only", fields[0], lf, from, imp, lt, to)
			}
		}
	}
	if pkgs < 40 {
		t.Fatalf("go list named %d packages; expected the whole module", pkgs)
	}
}

// TestLayoutNoLongFiles keeps every non-test source file of the tree (Go,
// the Python client, the dashboard's scripts) at 700 lines or fewer: a file
// over that holds more than one concern.
func TestLayoutNoLongFiles(t *testing.T) {
	const maxLines = 700
	checked := 0
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "testdata", "node_modules", "tests", "__pycache__":
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(path) {
		case ".go", ".py", ".js":
		default:
			return nil
		}
		if strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		checked++
		if n := bytes.Count(b, []byte("\n")); n > maxLines {
			t.Errorf("%s: %d lines, over %d: split it by concern", path, n, maxLines)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 100 {
		t.Fatalf("checked %d files; expected the whole module", checked)
	}
}
