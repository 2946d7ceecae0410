package cli

import (
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/seed31b0e981/reservoir/internal/suggest"
)

// errHelp is returned once the help asked for (-h) is printed: exit 0.
var errHelp = flag.ErrHelp

// newFlags returns a command's flag set. synopsis follows "usage:
// reservoir "; the help (-h) is printed on help. Parse it with parseArgs.
func newFlags(name, synopsis string, help io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(help)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: reservoir %s\n", synopsis)
		printFlags(fs.Output(), fs)
	}
	return fs
}

// printFlags lists fs's flags as docs/cli.md writes them: --name VALUE
// (-v for a one-letter flag), then the help, then the default when it is
// not the zero value.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n == 0 {
		return
	}
	fmt.Fprintln(w, "\nflags:")
	fs.VisitAll(func(f *flag.Flag) {
		typ, help := flag.UnquoteUsage(f)
		if isBool(f) {
			typ = ""
		}
		if t, ok := valueNames[typ]; ok {
			typ = t
		}
		line := "  --" + f.Name
		if len(f.Name) == 1 {
			line = "  -" + f.Name
		}
		if typ != "" {
			line += " " + typ
		}
		if f.DefValue != "" && f.DefValue != "0" && f.DefValue != "false" && f.DefValue != "0s" {
			help += fmt.Sprintf(" (default %s)", f.DefValue)
		}
		fmt.Fprintf(w, "%s\n      %s\n", line, strings.ReplaceAll(help, "\n", "\n      "))
	})
}

// valueNames replaces the flag package's names of values ("string") in
// the help, where a flag's usage does not name its value (`FILE`).
var valueNames = map[string]string{"string": "TEXT", "value": "VALUE", "int": "N", "int64": "N", "uint": "N", "duration": "DURATION", "float": "X"}

func isBool(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// unknownFlagError is a flag the command (or the action) does not define.
type unknownFlagError struct {
	name string
	hint string // "; did you mean --x?" or ""
}

func (e *unknownFlagError) Error() string {
	return fmt.Sprintf("unknown flag --%s%s", e.name, e.hint)
}

// parseArgs parses args with fs, flags before, between or after the
// positional arguments (which fs.Args returns; "--" ends the flags). -h
// prints fs's help and returns errHelp. A flag fs does not define is an
// *unknownFlagError, a bad value or a missing one a usage error: nothing
// is printed here, Main prints the error once.
func parseArgs(fs *flag.FlagSet, args []string) error {
	flags, pos, err := splitArgs(fs, args)
	if err != nil {
		return err
	}
	if flags == nil && pos == nil {
		fs.Usage()
		return errHelp
	}
	// The flag package prints its own errors and the usage: the message is
	// Main's to print, once.
	out, usage := fs.Output(), fs.Usage
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err = fs.Parse(append(append(flags, "--"), pos...))
	fs.SetOutput(out)
	fs.Usage = usage
	if err != nil {
		return usagef("%s", strings.Replace(err.Error(), " -", " --", 1))
	}
	return nil
}

// splitArgs sorts args into fs's flags (with their values) and the
// positional arguments. It returns nil, nil, nil when -h is among the
// flags.
func splitArgs(fs *flag.FlagSet, args []string) (flags, pos []string, err error) {
	flags, pos = []string{}, []string{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if len(a) < 2 || a[0] != '-' {
			pos = append(pos, a)
			continue
		}
		name := strings.TrimPrefix(a[1:], "-")
		name, _, hasValue := strings.Cut(name, "=")
		if name == "" || name[0] == '-' {
			return nil, nil, usagef("bad flag syntax: %s", a)
		}
		f := fs.Lookup(name)
		if f == nil {
			if name == "h" || name == "help" {
				return nil, nil, nil
			}
			return nil, nil, &unknownFlagError{name: name, hint: flagHint(name, fs)}
		}
		flags = append(flags, a)
		if !hasValue && !isBool(f) {
			if i+1 == len(args) {
				return nil, nil, usagef("flag --%s needs a value", name)
			}
			flags = append(flags, args[i+1])
			i++
		}
	}
	return flags, pos, nil
}

// flagHint suggests the flag of fs closest to name.
func flagHint(name string, fs *flag.FlagSet) string {
	if m := suggest.Closest(name, flagNames(fs)); m != "" {
		return fmt.Sprintf("; did you mean --%s?", m)
	}
	return ""
}

func flagNames(fs *flag.FlagSet) []string {
	var names []string
	fs.VisitAll(func(f *flag.Flag) {
		if f.Name != "h" && f.Name != "help" {
			names = append(names, f.Name)
		}
	})
	return names
}

// unknownAction is the usage error for an action not among actions: the
// closest one, else the list.
func unknownAction(name string, actions []string) error {
	if hint := didYouMean(name, actions); hint != "" {
		return usagef("unknown action %q%s", name, hint)
	}
	return usagef("unknown action %q (actions: %s)", name, strings.Join(actions, ", "))
}

// didYouMean returns `; did you mean "x"?` for the candidate closest to
// name, or "" when none is close.
func didYouMean(name string, candidates []string) string {
	if m := suggest.Closest(name, candidates); m != "" {
		return fmt.Sprintf("; did you mean %q?", m)
	}
	return ""
}

// parseFlags parses args with fs, which must take no positional argument.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	return noArgs(fs)
}

// noArgs refuses positional arguments left after the flags.
func noArgs(fs *flag.FlagSet) error {
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q (this command takes flags only)", fs.Arg(0))
	}
	return nil
}

// envString registers a string flag whose default is $env. The help names
// the variable, not its value (a DSN's password stays off the screen), and
// says "default" once.
func envString(fs *flag.FlagSet, name, env, usage string) *string {
	v := &envValue{s: os.Getenv(env)}
	fs.Var(v, name, usage+" (default $"+env+")")
	return &v.s
}

// envValue is envString's flag.Value. String is "" until the flag is set,
// so the flag package prints no default of its own.
type envValue struct {
	s   string
	set bool
}

func (v *envValue) Set(s string) error { v.s, v.set = s, true; return nil }
func (v *envValue) String() string {
	if v == nil || !v.set {
		return ""
	}
	return v.s
}

// topologyFlag registers --topology, defaulting to $RESERVOIR_TOPOLOGY.
func topologyFlag(fs *flag.FlagSet) *string {
	return envString(fs, "topology", "RESERVOIR_TOPOLOGY",
		"the topology `FILE` (TOML: the pods, their MySQL and Redis, the control database, where the flags live)")
}

// requireTopology is the error for a missing --topology.
func requireTopology(path string) error {
	if path == "" {
		return usagef("no topology: give --topology FILE or set RESERVOIR_TOPOLOGY (the pods, their MySQL and Redis, the control database; deploy/topology.example.toml)")
	}
	return nil
}

// verboseFlag registers -v: the libraries' own logs (flagd's, the flag
// source's, the cell's) on stderr. Without it they are dropped: a command
// says what matters itself.
func verboseFlag(fs *flag.FlagSet) *bool {
	return fs.Bool("v", false, verboseUsage)
}

const verboseUsage = "verbose: print the libraries' logs (the flag source's, flagd's, the cell's) on stderr"

// oneOf refuses a value outside allowed, naming them (and the closest).
func oneOf(flagName, value string, allowed ...string) error {
	if slices.Contains(allowed, value) {
		return nil
	}
	list := strings.Join(allowed[:len(allowed)-1], ", ") + " or " + allowed[len(allowed)-1]
	return usagef("--%s must be %s, got %q%s", flagName, list, value, didYouMean(value, allowed))
}
