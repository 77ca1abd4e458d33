package config

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// Render writes cfg as a config file (`nodedns config print`): a header
// naming the command line of the configuration, then every setting in
// table order after a comment with its help and whether a reload applies
// it.
func Render(cfg *Config, of string) ([]byte, error) {
	return Write(cfg, Layout{
		Header: []string{
			fmt.Sprintf("The effective configuration of `%s`:", strings.TrimSpace(of)),
			"built-in defaults, then the --config file, then the flags. [live]: a",
			"reload of the file applies the key; [restart]: it applies at the next start.",
		},
		Comment: func(s *Setting) []string {
			mode := "restart"
			if s.Live() {
				mode = "live"
			}
			return []string{fmt.Sprintf("[%s] %s", mode, s.help)}
		},
	})
}

// Layout says how Write lays a configuration out as a file: which
// settings, and the comments around them.
type Layout struct {
	// Header are the comment lines written first, above apiVersion and
	// kind.
	Header []string
	// Only, when set, chooses the settings written; nil: every one.
	Only func(s *Setting) bool
	// Comment returns the comment lines above a setting; nil: none.
	Comment func(s *Setting) []string
	// EntryComment, when set, returns the comment lines above one entry
	// of a map setting (a zone of stub-domains); the entries are then
	// written one by one, in the order of their keys.
	EntryComment func(s *Setting, key string) []string
}

// Write writes cfg as a config file the agent reads back to the same
// configuration, laid out by l: the header, apiVersion and kind, then each
// setting chosen, in table order, after a blank line and its comment.
// Every writer of configuration files (`nodedns config print`, `nodedns
// migrate`) goes through it, so values are spelled one way. A list, map or
// pointer that was never set (nil) is written commented out ("# key:"):
// its default is derived (upstream from resolv.conf), and an empty value
// would mean something else.
func Write(cfg *Config, l Layout) ([]byte, error) {
	var b strings.Builder
	for _, h := range l.Header {
		writeComment(&b, "", h)
	}
	fmt.Fprintf(&b, "apiVersion: %s\nkind: %s\n", configAPIVersion, configKind)
	for _, s := range settings {
		if l.Only != nil && !l.Only(s) {
			continue
		}
		b.WriteString("\n")
		if l.Comment != nil {
			for _, c := range l.Comment(s) {
				writeComment(&b, "", c)
			}
		}
		v := reflect.ValueOf(s.field(cfg)).Elem()
		if (v.Kind() == reflect.Slice || v.Kind() == reflect.Map || v.Kind() == reflect.Pointer) && v.IsNil() {
			fmt.Fprintf(&b, "# %s:\n", s.key)
			continue
		}
		if v.Kind() == reflect.Map && l.EntryComment != nil {
			if err := writeEntries(&b, s, v, l.EntryComment); err != nil {
				return nil, err
			}
			continue
		}
		y, err := toYAML(s.key, v.Interface())
		if err != nil {
			return nil, fmt.Errorf("rendering %s: %w", s.key, err)
		}
		b.WriteString(y)
	}
	return []byte(b.String()), nil
}

// writeEntries writes a map setting entry by entry, each after its
// comment, as the YAML of the whole map would have them.
func writeEntries(b *strings.Builder, s *Setting, v reflect.Value, comment func(*Setting, string) []string) error {
	keys := make([]string, 0, v.Len())
	for _, k := range v.MapKeys() {
		keys = append(keys, k.String())
	}
	sort.Strings(keys)
	fmt.Fprintf(b, "%s:", s.key)
	if len(keys) == 0 {
		b.WriteString(" {}\n")
		return nil
	}
	b.WriteString("\n")
	for _, k := range keys {
		for _, c := range comment(s, k) {
			writeComment(b, "  ", c)
		}
		y, err := toYAML(k, v.MapIndex(reflect.ValueOf(k).Convert(v.Type().Key())).Interface())
		if err != nil {
			return fmt.Errorf("rendering %s %s: %w", s.key, k, err)
		}
		for _, line := range strings.SplitAfter(strings.TrimSuffix(y, "\n"), "\n") {
			b.WriteString("  " + strings.TrimSuffix(line, "\n") + "\n")
		}
	}
	return nil
}

// toYAML is key: v in YAML, v spelled as its JSON form (the form the file
// is read in).
func toYAML(key string, v any) (string, error) {
	j, err := json.Marshal(map[string]any{key: v})
	if err != nil {
		return "", err
	}
	y, err := yaml.JSONToYAML(j)
	return string(y), err
}

func writeComment(b *strings.Builder, indent, text string) {
	if text == "" {
		b.WriteString(indent + "#\n")
		return
	}
	b.WriteString(indent + "# " + text + "\n")
}
