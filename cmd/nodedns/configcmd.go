package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"

	"sigs.k8s.io/yaml"
)

// configCmd is `nodedns config validate FILE [flags]` and `nodedns config
// print [flags]`.
func configCmd(args []string, stdout, stderr io.Writer) error {
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
      (the agent only warns). Exit 0, or print one line per problem and
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
	_, res, err := load(append([]string{"--config", file}, args[1:]...), true, stderr)
	if err != nil {
		return fmt.Errorf("validate: %w", err)
	}
	if all := res.all(); len(all) > 0 {
		for _, p := range all {
			fmt.Fprintln(stderr, p)
		}
		return errReported
	}
	fmt.Fprintf(stdout, "%s: ok\n", file)
	return nil
}

// configPrint writes the effective configuration as YAML.
func configPrint(args []string, stdout, stderr io.Writer) error {
	cfg, res, err := load(args, false, stderr)
	if err != nil {
		return fmt.Errorf("print: %w", err)
	}
	for _, w := range res.warnings {
		fmt.Fprintln(stderr, "warning:", w)
	}
	if len(res.problems) > 0 {
		return fmt.Errorf("print: %s", strings.Join(res.problems, "; "))
	}
	for _, p := range res.incomplete {
		fmt.Fprintf(stderr, "note: 'nodedns serve' refuses this configuration as it is: %s\n", p)
	}
	b, err := renderConfig(&cfg, "nodedns serve "+strings.Join(args, " "))
	if err != nil {
		return fmt.Errorf("print: %w", err)
	}
	_, err = stdout.Write(b)
	return err
}

// renderConfig writes cfg as a config file: the header, then every
// setting in table order after a comment with its help and whether a
// reload applies it. A list or map that was never set (its default is
// derived, e.g. upstream from resolv.conf) is written commented out, so
// the file means what cfg means.
func renderConfig(cfg *Config, of string) ([]byte, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "# The effective configuration of `%s`:\n", strings.TrimSpace(of))
	b.WriteString("# built-in defaults, then the --config file, then the flags. [live]: a\n")
	b.WriteString("# reload of the file applies the key; [restart]: it applies at the next start.\n")
	fmt.Fprintf(&b, "apiVersion: %s\nkind: %s\n", configAPIVersion, configKind)
	for _, s := range settings {
		mode := "restart"
		if s.live() {
			mode = "live"
		}
		fmt.Fprintf(&b, "\n# [%s] %s\n", mode, s.help)
		v := reflect.ValueOf(s.field(cfg)).Elem()
		if (v.Kind() == reflect.Slice || v.Kind() == reflect.Map || v.Kind() == reflect.Pointer) && v.IsNil() {
			fmt.Fprintf(&b, "# %s:\n", s.key)
			continue
		}
		j, err := json.Marshal(map[string]any{s.key: v.Interface()})
		if err != nil {
			return nil, fmt.Errorf("rendering %s: %w", s.key, err)
		}
		y, err := yaml.JSONToYAML(j)
		if err != nil {
			return nil, fmt.Errorf("rendering %s: %w", s.key, err)
		}
		b.Write(y)
	}
	return []byte(b.String()), nil
}
