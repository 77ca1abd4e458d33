// Package config owns the configuration schema of `nodedns serve`: the
// typed Config and the settings table (keys.go) that declares each setting
// once, with its file key and flag, default, help, check and how a reload
// applies it. From that table come the serve flags, the reading of the
// YAML file named by --config (strict about its shape, apiVersion and
// kind; an unknown key is a warning, or a problem for `nodedns config
// validate`), the defaults, the checks, and the file a Config is written
// back as (Write: `nodedns config print`, and `nodedns migrate`, which
// builds a Config from a Corefile).
//
// Precedence: built-in defaults, then the file, then the flags given on the
// command line. Values are checked with the checks of the packages that
// will take them (pkg/upstream, pkg/query/hosts, pkg/k8s,
// ...) and against the bounds of bounds.go (every number has a range,
// every list a length), so that a bad value is one line naming it before
// anything starts;
// the mappings those checks need (ClusterSettings, HostsSettings,
// Rewriter) live here too.
//
// The package applies nothing. Whether a reload applies a setting is a
// property of the table (its Apply classes); pkg/agent owns what each
// class does in the running agent.
package config
