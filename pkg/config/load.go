package config

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"reflect"
	"regexp"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// Config file header: optional, but when present it must name this schema.
const (
	configAPIGroup   = "nodedns.io"
	configAPIVersion = configAPIGroup + "/v1alpha1"
	configKind       = "Config"
)

// Result is what loading a configuration found besides the configuration
// itself: problems (the configuration must not be used) and warnings (it
// may, e.g. with an unknown key ignored). Each is one line.
type Result struct {
	Problems []string
	Warnings []string
	// Incomplete: the configuration is valid but cannot serve as it is
	// (nothing to listen on); serve and validate count it as a problem,
	// `config print` does not.
	Incomplete []string
}

func (r *Result) problem(format string, args ...any) {
	r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
}

func (r *Result) warn(format string, args ...any) {
	r.Warnings = append(r.Warnings, fmt.Sprintf(format, args...))
}

// All is every problem, the configuration's incompleteness included.
func (r *Result) All() []string { return append(slices.Clip(r.Problems), r.Incomplete...) }

// Err is nil without problems, else one line naming each of them.
func (r *Result) Err() error {
	if all := r.All(); len(all) > 0 {
		return errors.New(strings.Join(all, "; "))
	}
	return nil
}

// Load returns the configuration for args, the command line of `nodedns
// serve`: defaults, then the --config file, then the flags in args.
// Warnings (unknown keys in the file) are written to warn, one line each;
// nil: dropped.
func Load(args []string, warn io.Writer) (Config, error) {
	cfg, res, err := Parse(args, false, warn)
	if err != nil {
		return Config{}, err
	}
	if warn != nil {
		for _, w := range res.Warnings {
			fmt.Fprintln(warn, "warning:", w)
		}
	}
	return cfg, res.Err()
}

// Parse is Load with the findings returned. strict (`nodedns config
// validate`) makes unknown keys and an unknown schema version problems.
// err is a command-line error (-h, a bad flag: with -h the flags' help is
// written to usage); everything else is in the Result.
func Parse(args []string, strict bool, usage io.Writer) (Config, *Result, error) {
	res := &Result{}
	// First pass: only to find --config.
	var path string
	probe := flag.NewFlagSet("serve", flag.ContinueOnError)
	probe.SetOutput(io.Discard)
	tmp := Default()
	tmp.bind(probe, &path)
	if err := probe.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) && usage != nil {
			probe.SetOutput(usage)
			probe.PrintDefaults()
		}
		return Config{}, res, err // one line: the flag package names the bad value
	}
	if probe.NArg() > 0 {
		return Config{}, res, fmt.Errorf("unexpected argument %q", probe.Arg(0))
	}
	cfg := Default()
	cfg.given, cfg.fromFlags = map[string]bool{}, map[string]bool{}
	if path != "" {
		if !cfg.readFile(path, strict, res) {
			return cfg, res, nil
		}
	}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg.bind(fs, &path)
	if err := fs.Parse(args); err != nil {
		return Config{}, res, err
	}
	cfg.path = path
	cfg.Admin = normalizeHostPort(cfg.Admin)
	fs.Visit(func(f *flag.Flag) {
		if s := settingByFlag(f.Name); s != nil {
			cfg.given[s.key], cfg.fromFlags[s.key] = true, true
		}
	})
	cfg.validate(res)
	return cfg, res, nil
}

// readFile overlays the YAML file at path on c, recording what is wrong in
// res; false when the file could not be read or parsed at all. Each key is
// decoded on its own, so every bad key is reported, by name. An unknown key
// is a warning (a key of a newer version, kept in the ConfigMap while a
// rollback runs the older agent, must not crash-loop it) unless strict.
func (c *Config) readFile(path string, strict bool, res *Result) bool {
	b, err := ReadFile(path)
	if err != nil {
		res.problem("%v", err)
		return false
	}
	c.fileSum = SumOf(b)
	var doc any
	// Strict only about duplicate keys: which of two would win is a guess.
	if err := yaml.UnmarshalStrict(b, &doc); err != nil {
		res.problem("config %s: %s", path, yamlError(err))
		return false
	}
	if _, ok := doc.(map[string]any); doc != nil && !ok {
		res.problem("config %s: want a map of settings (key: value), got %s", path, jsonKind(reflect.TypeOf(doc).Kind().String()))
		return false
	}
	var raw map[string]json.RawMessage
	if err := yaml.Unmarshal(b, &raw); err != nil {
		res.problem("config %s: %s", path, yamlError(err))
		return false
	}
	c.file = raw
	if v, ok := raw["apiVersion"]; ok {
		var s string
		switch {
		case json.Unmarshal(v, &s) != nil:
			res.problem("config %s: apiVersion %s: want the string %q", path, v, configAPIVersion)
		case s == configAPIVersion:
		case strings.HasPrefix(s, configAPIGroup+"/") && !strict:
			res.warn("config %s: apiVersion %q: this agent reads %s; reading the keys it knows", path, s, configAPIVersion)
		default:
			res.problem("config %s: apiVersion %q: want %q", path, s, configAPIVersion)
		}
	}
	if v, ok := raw["kind"]; ok {
		var s string
		if json.Unmarshal(v, &s) != nil || s != configKind {
			res.problem("config %s: kind %s: want %q", path, v, configKind)
		}
	}
	for _, k := range sortedKeys(raw) {
		if k == "apiVersion" || k == "kind" {
			continue
		}
		s := SettingByKey(k)
		if s == nil {
			msg := fmt.Sprintf("config %s: unknown key %q", path, k)
			if near := nearestKey(k); near != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", near)
			}
			if strict {
				res.problem("%s", msg)
			} else {
				res.warn("%s; ignored", msg)
			}
			continue
		}
		if err := s.decode(c, raw[k]); err != nil {
			res.problem("config %s: key %q: %v", path, k, err)
			continue
		}
		c.given[k] = true
	}
	return true
}

// validate records every value the packages would reject later, each with
// a message naming the bad value. `nodedns serve` and `nodedns config
// validate` both come here (through Parse): there is one set of checks.
// Every line names where its values came from (locate).
func (c *Config) validate(res *Result) {
	for _, s := range settings {
		if s.check == nil {
			continue
		}
		if err := s.check(c); err != nil {
			res.problem("%s", c.locate(err.Error()))
		}
	}
	clean := len(res.Problems) == 0
	if clean {
		for _, a := range advice {
			if w := a(c); w != "" {
				res.warn("%s", c.locate(w))
			}
		}
	}
	if err := completeCheck(c); err != nil {
		res.Incomplete = append(res.Incomplete, c.locate(err.Error()))
	}
	for _, check := range crossChecks {
		if err := check(c); err != nil {
			res.problem("%s", c.locate(err.Error()))
		}
	}
	if clean {
		if err := clusterCheck(c); err != nil {
			res.problem("%s", c.locate(err.Error()))
		}
	}
}

// flagRef is a flag named in a check's message: --name.
var flagRef = regexp.MustCompile(`--([a-z0-9]+(?:-[a-z0-9]+)*)`)

// locate rewrites a check's message, written with flag names, for where
// the values came from: with a --config file, the line starts with
// "config FILE: " and names by its key each setting the file gave or that
// is left at its default (where the operator would add it); a setting a
// command-line flag gave keeps its flag name. Without a file the message
// is unchanged.
func (c *Config) locate(msg string) string {
	if c.path == "" {
		return msg
	}
	msg = flagRef.ReplaceAllStringFunc(msg, func(ref string) string {
		s := settingByFlag(ref[2:])
		if s == nil || c.fromFlags[s.key] {
			return ref
		}
		return s.key
	})
	return "config " + c.path + ": " + msg
}

// yamlError is the YAML decoder's error on one line, without the
// conversion step it names ("error converting YAML to JSON: yaml: ...").
func yamlError(err error) string {
	msg := strings.Join(strings.Fields(err.Error()), " ")
	for _, p := range []string{"error converting YAML to JSON: ", "yaml: ", "unmarshal errors: "} {
		msg = strings.TrimPrefix(msg, p)
	}
	return msg
}

// normalizeHostPort rewrites "[v4]:port" as "v4:port", so that one form,
// "[$(HOST_IP)]:9253" in a manifest, works whether the node's address is
// IPv4 or IPv6; anything else is returned as it is (validate judges it).
func normalizeHostPort(s string) string {
	if !strings.HasPrefix(s, "[") {
		return s
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return s
	}
	if a, err := netip.ParseAddr(host); err == nil && a.Is4() {
		return net.JoinHostPort(host, port)
	}
	return s
}
