// Command pistil compiles, inspects, runs and serves Qwen3.6-35B-A3B.
//
// Each subcommand lives in its own file and registers itself in init, so adding one
// touches no shared code.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
)

// command is one subcommand. Run gets the arguments after the subcommand name and returns
// an error to print; errUsage prints the flag usage instead.
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

// errUsage asks main to exit with status 2 without printing an error line (the flag
// package has already printed the usage).
var errUsage = errors.New("usage")

func usage() {
	fmt.Fprintln(os.Stderr, "usage: pistil <command> [flags]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(os.Stderr, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(os.Stderr, "\nrun 'pistil <command> -h' for a command's flags")
}

func main() {
	if len(os.Args) < 2 || os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help" {
		usage()
		os.Exit(2)
	}
	c, ok := commands[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "pistil: unknown command %q\n\n", os.Args[1])
		usage()
		os.Exit(2)
	}
	if err := c.run(os.Args[2:]); err != nil {
		if errors.Is(err, errUsage) || errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		fmt.Fprintf(os.Stderr, "pistil %s: %v\n", c.name, err)
		os.Exit(1)
	}
}

// newFlags returns a flag set that reports errors instead of exiting, so run functions
// stay testable.
func newFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("pistil "+name, flag.ContinueOnError)
	return fs
}
