// Command pistil compiles, inspects, runs and serves Qwen3.6-35B-A3B.
//
// Each subcommand lives in its own file and registers itself in init, so adding one
// touches no shared code; its synopsis and example live in help.go.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
)

// command is one subcommand. Run gets the arguments after the subcommand name and returns
// an error to print.
type command struct {
	name    string
	summary string
	run     func(args []string) error
}

var commands = map[string]command{}

func register(c command) {
	if _, dup := commands[c.name]; dup {
		panic("pistil: command registered twice: " + c.name)
	}
	commands[c.name] = c
}

// errUsage asks main to exit with status 2 without printing an error line (what was
// wrong has been printed already).
var errUsage = errors.New("usage")

// exitError ends the program with a status of its own after its message (an interrupted
// generate exits 130, as a shell does for SIGINT).
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func main() {
	os.Exit(runMain(os.Args[1:], os.Stdout, os.Stderr))
}

// runMain runs the command line args and returns the exit status: 0 on success and for
// help, 2 for a usage mistake, 1 for a failure, or an exitError's own status.
func runMain(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help":
		usage(stdout)
		return 0
	case "-version", "--version", "version":
		fmt.Fprintln(stdout, versionLine())
		return 0
	case "help":
		if len(args) == 1 {
			usage(stdout)
			return 0
		}
		if _, ok := commands[args[1]]; !ok {
			fmt.Fprintf(stderr, "pistil help: unknown command %q\n\n", args[1])
			usage(stderr)
			return 2
		}
		args = []string{args[1], "-h"}
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "pistil: unknown command %q\n\n", args[0])
		usage(stderr)
		return 2
	}
	err := c.run(args[1:])
	var exit *exitError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		commandHelp(stdout, c.name)
		return 0
	case errors.Is(err, errUsage):
		return 2
	case errors.As(err, &exit):
		fmt.Fprintf(stderr, "pistil %s: %v\n", c.name, exit.err)
		return exit.code
	case isFlagError(c.name):
		fmt.Fprintf(stderr, "pistil %s: %v\nrun 'pistil help %s' for its flags and an example\n", c.name, err, c.name)
		return 2
	}
	fmt.Fprintf(stderr, "pistil %s: %v\n", c.name, err)
	return 1
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: pistil <command> [flags]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nrun 'pistil help <command>' (or 'pistil <command> --help') for its flags and an example;")
	fmt.Fprintln(w, "'pistil --version' prints the version and the source revision it was built from")
}

// flagSets are the flag sets the commands made, by command name, so that help can print
// a command's flags after its run function returned flag.ErrHelp.
var flagSets = map[string]*flag.FlagSet{}

// parseFailed names the commands whose flag set rejected its arguments: the flag
// package calls Usage on every parse error, so main can print the error once with a
// pointer to the help instead of the usage around it.
var parseFailed = map[string]bool{}

func isFlagError(name string) bool { return parseFailed[name] }

// newFlags returns a flag set that reports errors instead of exiting and prints nothing
// itself: main prints a parse error once, and the help on -h.
func newFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("pistil "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	delete(parseFailed, name)
	fs.Usage = func() { parseFailed[name] = true }
	flagSets[name] = fs
	return fs
}
