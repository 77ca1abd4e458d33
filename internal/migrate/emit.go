package migrate

import (
	"fmt"
	"strings"

	"github.com/nodedns/nodedns/pkg/config"
)

// emit writes the configuration file: the keys the migration set, in the
// order of the settings table, each after the comments saying where it
// came from, through the writer `nodedns config print` uses.
func (m *migrator) emit() ([]byte, error) {
	if len(m.stubs) > 0 {
		m.cfg.Stubs = config.StubsMap{}
		for z, st := range m.stubs {
			m.cfg.Stubs[z] = st.StubDomain
		}
		m.origins[m.key(&m.cfg.Stubs)] = &origin{}
	}
	src := m.opts.Source
	if src == "" {
		src = "a Corefile"
	}
	header := []string{
		fmt.Sprintf("nodedns configuration written by `nodedns migrate` from %s.", src),
		"Review it before use; what could not be carried was listed on stderr",
		"with its line.",
	}
	for _, h := range m.header {
		header = append(header, wrap("", h)...)
	}
	return config.Write(&m.cfg, config.Layout{
		Header: header,
		Only:   func(s *config.Setting) bool { return m.origins[s.Key()] != nil },
		Comment: func(s *config.Setting) []string {
			var out []string
			for _, c := range m.origins[s.Key()].comments {
				out = append(out, wrap("", c)...)
			}
			return out
		},
		EntryComment: func(_ *config.Setting, zone string) []string {
			var out []string
			if st := m.stubs[zone]; st != nil {
				for _, c := range st.comments {
					out = append(out, wrap("  ", c)...)
				}
			}
			return out
		},
	})
}

// wrap cuts text into comment lines that end near column 78 once written
// after indent and "# ".
func wrap(indent, text string) []string {
	var out []string
	line := ""
	for _, w := range strings.Fields(text) {
		if line != "" && len(indent)+2+len(line)+1+len(w) > 78 {
			out = append(out, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += w
	}
	return append(out, line)
}
