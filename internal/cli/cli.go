// Package cli implements reservoir's subcommands. main only calls Run;
// everything here takes its arguments and writers, so each subcommand is
// testable in-process.
//
// Each command (and each rollout action) owns its flags: a flag it does not
// define is refused with a suggestion, never ignored; flags may come before
// or after the positional arguments. Exit status: 0 success, 1 failure, 2
// bad usage (docs/cli.md).
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
)

// command is one subcommand.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, out, errOut io.Writer) error
}

var commands = map[string]command{
	"migrate":   {"apply or inspect the MySQL schema migrations", runMigrate},
	"reconcile": {"compare each pod's stores shop by shop, against the store that decides each shop; --repair fixes the other side", runReconcile},
	"rollout":   {"status, advance, kill switch, history and the automatic controller", runRollout},
	"bench":     {"benchmark the stores and the facade under load, with network latency", runBench},
	"serve":     {"run the checkout API, and on the admin listener the admin API, /metrics and the diff dashboard", runServe},
	"clients":   {"make a checkout API client's token and its clients file entry", runClients},
	"operators": {"make an admin API operator's token and its operators file entry (a name and a role)", runOperators},
	"demo":      {"the one-command tour: three pods, traffic, a shadow rollout, the dashboard", runDemo},
	"version":   {"the build: its version, commit and Go version", runVersion},
}

// Run is what the binary runs: library logs held back (see
// CaptureLibraryLogs), Ctrl-C and SIGTERM cancelling the context, and
// Main's exit status.
func Run(args []string) int { return RunContext(context.Background(), args) }

// RunContext is Run with base as the parent of the commands' context: it
// carries the program's own settings (WithFlagsProvider) to the
// commands.
func RunContext(base context.Context, args []string) int {
	stderr, release := CaptureLibraryLogs() // first: before anything reads os.Stderr
	ctx, stop := signal.NotifyContext(base, os.Interrupt, syscall.SIGTERM)
	code := Main(ctx, args, os.Stdout, stderr)
	stop()
	release()
	return code
}

// Main runs the subcommand named by args[0] and returns the exit status:
// 0 success (help asked for included: it goes to out), 1 failure, 2 bad
// usage. Every error is printed on errOut, once, prefixed with the command
// (and the action) it came from; bad usage adds where the help is.
func Main(ctx context.Context, args []string, out, errOut io.Writer) int {
	if len(args) == 0 {
		usage(errOut)
		return 2
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		if len(args) > 1 {
			return Main(ctx, []string{args[1], "-h"}, out, errOut)
		}
		usage(out)
		return 0
	}
	name := args[0]
	cmd, ok := commands[name]
	if !ok {
		if strings.HasPrefix(name, "-") {
			return report(errOut, "reservoir", usagef("flag %s before the command: flags go after it (reservoir COMMAND [flags])", name))
		}
		return report(errOut, "reservoir", usagef("unknown command %q%s", name, didYouMean(name, commandNames())))
	}
	return report(errOut, "reservoir "+name, cmd.run(ctx, args[1:], out, errOut))
}

// report prints err on errOut after prefix (and the action the error names,
// see inAction) and returns the exit status for it.
func report(errOut io.Writer, prefix string, err error) int {
	switch {
	case err == nil, errors.Is(err, errHelp):
		return 0
	}
	var a *actionError
	if errors.As(err, &a) {
		prefix += " " + a.action
	}
	msg := trimContext(err.Error(), prefix)
	var u *usageError
	var uf *unknownFlagError
	if errors.As(err, &u) || errors.As(err, &uf) || errors.Is(err, errUsage) {
		fmt.Fprintf(errOut, "%s: %s\nRun '%s -h' for usage.\n", prefix, msg, prefix)
		return 2
	}
	fmt.Fprintf(errOut, "%s: %s\n", prefix, msg)
	return 1
}

// trimContext drops the leading "word: " segments of msg that repeat a word
// of prefix: "reservoir rollout kill" and "rollout: kill: an actor and a
// reason are required" print as "reservoir rollout kill: an actor and a
// reason are required". Packages prefix their errors with their name, as Go
// errors do; the CLI has said it already.
func trimContext(msg, prefix string) string {
	words := strings.Fields(prefix)
	for trimmed := true; trimmed; {
		trimmed = false
		for _, w := range words[1:] {
			if rest, ok := strings.CutPrefix(msg, w+": "); ok {
				msg, trimmed = rest, true
			}
		}
	}
	return msg
}

func commandNames() []string {
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: reservoir COMMAND [flags]")
	fmt.Fprintln(w, "\ncommands:")
	for _, n := range commandNames() {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'reservoir COMMAND -h' for a command's flags; docs/cli.md has them all.")
}

// errUsage is bad usage whose message the command has printed already
// (Main adds where the help is, and exits 2). Prefer usagef, whose message
// Main prints.
var errUsage = errors.New("bad usage")

// usageError is bad usage: the arguments, not the world, are wrong. Main
// prints it, says where the help is, and exits 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

// usagef returns a usage error (exit status 2).
func usagef(format string, a ...any) error {
	return &usageError{fmt.Sprintf(format, a...)}
}

// actionError carries the action an error came from, so Main's prefix
// names it ("reservoir rollout kill: ...").
type actionError struct {
	action string
	err    error
}

func (e *actionError) Error() string { return e.err.Error() }
func (e *actionError) Unwrap() error { return e.err }

// inAction wraps err (nil stays nil) with the action it came from.
func inAction(action string, err error) error {
	if err == nil {
		return nil
	}
	return &actionError{action, err}
}
