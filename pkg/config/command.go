package config

import (
	"errors"
	"fmt"
	"io"
	"strings"
)

// ErrInvalid is returned by Command when `config validate` found problems;
// they are written to stderr already, one line each.
var ErrInvalid = errors.New("invalid configuration")

// Command is `nodedns config validate FILE [serve flags]` and `nodedns
// config print [serve flags]`.
func Command(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return errors.New("want a subcommand: validate FILE, or print [serve flags]")
	}
	switch args[0] {
	case "validate":
		return configValidate(args[1:], stdout, stderr)
	case "print":
		return configPrint(args[1:], stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, configUsage)
		return nil
	}
	return fmt.Errorf("unknown subcommand %q: want validate or print", args[0])
}

const configUsage = `usage:
  nodedns config validate FILE [serve flags]
      Check FILE as 'nodedns serve --config FILE [serve flags]' would load
      it, more strictly: an unknown key or another apiVersion is an error
      (the agent only warns). The checks are serve's own; each line
      names the file and its keys. Warnings serve would log are printed
      too ("warning: ..."). Exit 0, or print one line per problem and
      exit 1.
  nodedns config print [serve flags]
      Print the effective configuration of 'nodedns serve [serve flags]'
      (defaults, then the --config file, then the flags) as a config file
      the agent accepts, each key with its help and whether a reload
      applies it. Without flags: the defaults. A bad value is an error;
      a configuration that is valid but has nothing to listen on is
      printed, with a note.
`

// configValidate reports every problem of FILE, one line each.
func configValidate(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			fmt.Fprint(stdout, configUsage)
			return nil
		}
		return errors.New("validate: want FILE first, then any serve flags")
	}
	file := args[0]
	_, res, err := Parse(append([]string{"--config", file}, args[1:]...), true, stderr)
	if err != nil {
		return fmt.Errorf("validate: %w", err)
	}
	// The same warnings serve logs at start (each names the file and key).
	for _, w := range res.Warnings {
		fmt.Fprintln(stderr, "warning:", w)
	}
	if all := res.All(); len(all) > 0 {
		for _, p := range all {
			fmt.Fprintln(stderr, p)
		}
		return ErrInvalid
	}
	fmt.Fprintf(stdout, "%s: ok\n", file)
	return nil
}

// configPrint writes the effective configuration as YAML.
func configPrint(args []string, stdout, stderr io.Writer) error {
	cfg, res, err := Parse(args, false, stderr)
	if err != nil {
		return fmt.Errorf("print: %w", err)
	}
	for _, w := range res.Warnings {
		fmt.Fprintln(stderr, "warning:", w)
	}
	if len(res.Problems) > 0 {
		return fmt.Errorf("print: %s", strings.Join(res.Problems, "; "))
	}
	for _, p := range res.Incomplete {
		fmt.Fprintf(stderr, "note: 'nodedns serve' refuses this configuration as it is: %s\n", p)
	}
	b, err := Render(&cfg, "nodedns serve "+strings.Join(args, " "))
	if err != nil {
		return fmt.Errorf("print: %w", err)
	}
	_, err = stdout.Write(b)
	return err
}
