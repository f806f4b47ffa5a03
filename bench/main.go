// Command bench measures leasehold side by side with references on this
// machine, in one run, and prints Markdown tables with medians and p99s.
// It is a module of its own so that neither the leasehold binary nor the
// main module's users link the peers (redsync, redislock) or the plotting
// library.
//
//	cd bench && go run . all                 # every table of docs/benchmarks.md
//	cd bench && go run . --smoke all         # every suite, tiny counts (CI)
//	cd bench && go run . server --help       # one suite's flags
//
// Suites: stores (leasehold's networked stores beside raw primitives and
// peer libraries), server (the lease server beside Redis), workflow (the
// workflow strategies beside three hand-written baselines) and all. The
// engines default to those of scripts/engines.sh ($LEASEHOLD_TEST_*).
//
// Every figure is measured in this run: quote ratios, not absolutes. A
// suite that cannot run an implementation or its reference fails (exit 1);
// timings never do. See docs/benchmarks.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/leasehold/leasehold/bench/serverbench"
)

// suite is one benchmark suite: its flags and how to run it.
type suite struct {
	name, what string
	flags      *flag.FlagSet
	run        func(ctx context.Context, smoke bool) error
}

func suites(out, progress io.Writer) []*suite {
	st := &suite{name: "stores", what: "every leasehold store (memory, SQLite, Redis, PostgreSQL, etcd, DynamoDB) beside the engine's raw primitives and peers (redsync, redislock, advisory locks, etcd's Mutex)"}
	st.flags = flag.NewFlagSet("stores", flag.ContinueOnError)
	sc := storesFlags(st.flags)
	st.run = func(ctx context.Context, smoke bool) error {
		if smoke {
			sc.smoke()
		}
		return runStores(ctx, sc, smoke, out)
	}

	sv := &suite{name: "server", what: "the lease server (leasehold serve's engine, durable and not) beside Redis: pairs/s, latency, handoff, memory per lease"}
	sv.flags = flag.NewFlagSet("server", flag.ContinueOnError)
	svc := serverFlags(sv.flags)
	sv.run = func(ctx context.Context, smoke bool) error { return runServer(ctx, svc, smoke, out) }

	wf := &suite{name: "workflow", what: "the workflow strategies (100 workers on one instance) beside three hand-written baselines"}
	wf.flags = flag.NewFlagSet("workflow", flag.ContinueOnError)
	wfc := workflowFlags(wf.flags)
	wf.run = func(ctx context.Context, smoke bool) error { return runWorkflow(ctx, wfc, smoke, out, progress) }
	return []*suite{st, sv, wf}
}

func main() {
	serverbench.ServeChild() // returns unless the server suite started this process as its server
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run parses args ([--smoke] SUITE [SUITE FLAGS], or all) and runs; it
// returns the exit code: 0, 1 (a suite failed) or 2 (usage).
func run(ctx context.Context, args []string, out, errOut io.Writer) int {
	all := suites(out, errOut)
	global := flag.NewFlagSet("bench", flag.ContinueOnError)
	global.SetOutput(errOut)
	smoke := global.Bool("smoke", false, "tiny counts and durations, every engine and reference required: checks that each suite still runs (CI); the figures mean nothing")
	global.Usage = func() { usage(errOut, global, all) }
	for _, s := range all {
		s.flags.SetOutput(errOut)
		s.flags.BoolVar(smoke, "smoke", false, "as the global --smoke")
		s.flags.Usage = func() {
			fmt.Fprintf(errOut, "usage: go run . %s [flags]\n\n%s.\n\nflags:\n", s.name, s.what)
			s.flags.VisitAll(func(f *flag.Flag) { printFlag(errOut, f) })
		}
	}
	if err := global.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if global.NArg() == 0 {
		usage(errOut, global, all)
		fmt.Fprintln(errOut, "\nbench: name a suite (or all)")
		return 2
	}
	name, rest := global.Arg(0), global.Args()[1:]
	var chosen []*suite
	switch name {
	case "all":
		if len(rest) > 0 && !(len(rest) == 1 && (rest[0] == "--smoke" || rest[0] == "-smoke")) {
			if rest[0] == "-h" || rest[0] == "--help" || rest[0] == "-help" {
				usage(errOut, global, all)
				return 0
			}
			fmt.Fprintf(errOut, "bench: all takes no flags but --smoke (got %s); run one suite to set its flags\n", strings.Join(rest, " "))
			return 2
		}
		*smoke = *smoke || len(rest) == 1
		chosen = all
	case "help":
		usage(errOut, global, all)
		return 0
	default:
		for _, s := range all {
			if s.name == name {
				chosen = []*suite{s}
			}
		}
		if chosen == nil {
			fmt.Fprintf(errOut, "bench: unknown suite %q (stores, server, workflow, all)\n", name)
			return 2
		}
		if err := chosen[0].flags.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return 0
			}
			return 2
		}
		if chosen[0].flags.NArg() > 0 {
			fmt.Fprintf(errOut, "bench: unexpected arguments %q\n", chosen[0].flags.Args())
			return 2
		}
	}
	failed := 0
	for _, s := range chosen {
		fmt.Fprintf(out, "## %s\n\n", s.name)
		t0 := time.Now()
		err := s.run(ctx, *smoke)
		fmt.Fprintf(errOut, "bench: %s: %s\n", s.name, map[bool]string{true: "ok", false: "FAILED"}[err == nil]+" in "+time.Since(t0).Round(100*time.Millisecond).String())
		if err != nil {
			fmt.Fprintf(errOut, "bench: %s: %v\n", s.name, err)
			failed++
		}
		fmt.Fprintln(out)
		if ctx.Err() != nil {
			break
		}
	}
	if failed > 0 {
		return 1
	}
	return 0
}

func usage(w io.Writer, global *flag.FlagSet, all []*suite) {
	fmt.Fprint(w, `usage: go run . [--smoke] SUITE [SUITE FLAGS]
       go run . [--smoke] all
       go run . SUITE --help

Measures leasehold beside references on this machine, in one run, and
prints Markdown tables. Timings depend on the machine and its load: compare
the rows of one run. Engines default to those of scripts/engines.sh
($LEASEHOLD_TEST_REDIS, $LEASEHOLD_TEST_POSTGRES, $LEASEHOLD_TEST_ETCD).
Exit 1 when a suite cannot run an implementation or its reference.

suites:
`)
	for _, s := range all {
		fmt.Fprintf(w, "  %-9s %s\n", s.name, s.what)
	}
	fmt.Fprintf(w, "  %-9s %s\n\nglobal flags:\n", "all", "every suite above, in this order, with its defaults")
	global.VisitAll(func(f *flag.Flag) { printFlag(w, f) })
	for _, s := range all {
		fmt.Fprintf(w, "\n%s flags:\n", s.name)
		s.flags.VisitAll(func(f *flag.Flag) {
			if f.Name != "smoke" {
				printFlag(w, f)
			}
		})
	}
}

// printFlag prints one line of the help; a default taken from the
// environment is not shown (the usage names the variable).
func printFlag(w io.Writer, f *flag.Flag) {
	def := ""
	if f.DefValue != "" && f.DefValue != "0" && f.DefValue != "false" && !strings.Contains(f.Usage, "(default") {
		def = " (default " + f.DefValue + ")"
	}
	fmt.Fprintf(w, "  --%-15s %s%s\n", f.Name, f.Usage, def)
}
