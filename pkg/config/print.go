package config

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	"sigs.k8s.io/yaml"
)

// Render writes cfg as a config file (`nodedns config print`): the
// header, naming the command line of the configuration, then every setting
// in table order after a comment with its help and whether a reload
// applies it. A list or map that was never set (its default is derived,
// e.g. upstream from resolv.conf) is written commented out, so the file
// means what cfg means.
func Render(cfg *Config, of string) ([]byte, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "# The effective configuration of `%s`:\n", strings.TrimSpace(of))
	b.WriteString("# built-in defaults, then the --config file, then the flags. [live]: a\n")
	b.WriteString("# reload of the file applies the key; [restart]: it applies at the next start.\n")
	fmt.Fprintf(&b, "apiVersion: %s\nkind: %s\n", configAPIVersion, configKind)
	for _, s := range settings {
		mode := "restart"
		if s.Live() {
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
