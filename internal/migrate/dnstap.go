package migrate

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/nodedns/nodedns/pkg/config"
	"github.com/nodedns/nodedns/pkg/observe/dnstap"
)

// dnstap maps `dnstap SOCKET [full] [WRITEBUFFER [QUEUE]] { identity;
// version; extra; skipverify }` onto an entry of the dnstap key. A
// listening tap (`dnstap listen`) is not carried: the agent connects to
// collectors.
func (m *migrator) dnstap(b *block, d *Directive) {
	args := d.ArgTexts()
	if len(args) == 0 {
		m.drop(d.Line, "%s: no socket; not carried", d.String())
		return
	}
	if args[0] == "listen" {
		m.drop(d.Line, "%s: not carried; nodedns connects to dnstap collectors, it does not accept them (give the collector's socket: dnstap SOCKET)", d.String())
		return
	}
	t := config.DnstapConfig{Socket: args[0], Full: len(args) > 1 && args[1] == "full"}
	if len(args) > 1 && !t.Full {
		m.drop(d.Line, "%s: %q is not full; not carried", d.String(), args[1])
		return
	}
	var comments []string
	if len(args) > 2 {
		// The TCP write buffer: nodedns writes stretches of whole frames
		// straight from its queue.
		comments = append(comments, fmt.Sprintf("line %d: the write buffer multiplier %s is not needed: frames are written from the queue as they come", d.Line, args[2]))
	}
	if len(args) > 3 {
		q, err := strconv.Atoi(args[3])
		if err != nil || q < 1 {
			m.drop(d.Line, "%s: queue multiplier %q; not carried", d.String(), args[3])
			return
		}
		t.QueueMessages = min(q*dnstap.DefaultQueueMessages, dnstap.MaxQueueMessages)
		if q*dnstap.DefaultQueueMessages > dnstap.MaxQueueMessages {
			comments = append(comments, fmt.Sprintf("line %d: a queue of %d messages, nodedns's most (CoreDNS's would hold %d)", d.Line, dnstap.MaxQueueMessages, q*dnstap.DefaultQueueMessages))
		}
		// Bytes in step with messages, as at the defaults.
		t.QueueBytes = config.Bytes(min(int64(t.QueueMessages/dnstap.DefaultQueueMessages)*dnstap.DefaultQueueBytes, dnstap.MaxQueueBytes))
	}
	if len(args) > 4 {
		m.drop(d.Line, "%s: more arguments than SOCKET full WRITEBUFFER QUEUE; not carried", d.String())
		return
	}
	for _, o := range d.Block {
		oa := o.ArgTexts()
		switch o.Name {
		case "identity", "version", "extra":
			if len(oa) != 1 {
				m.drop(o.Line, "dnstap %s: want one value; not carried", o.String())
				continue
			}
			switch o.Name {
			case "identity":
				t.Identity = oa[0]
			case "version":
				t.Version = oa[0]
			case "extra":
				t.Extra = oa[0]
				if strings.Contains(oa[0], "{") {
					m.drop(o.Line, "dnstap %s: the placeholders are not replaced; nodedns sends the text as written", o.String())
				}
			}
		case "skipverify":
			t.SkipVerify = true
		default:
			m.drop(o.Line, "dnstap option %s: not known to nodedns", o.String())
		}
	}
	if t.Version == "" {
		comments = append(comments, fmt.Sprintf("line %d: the version field is nodedns-VERSION where CoreDNS sent CoreDNS-1.15.0", d.Line))
	}
	if !b.root {
		comments = append(comments, fmt.Sprintf("line %d: the queries and exchanges of every zone are logged, not only %s's", d.Line, strings.Join(trimAll(b.zones), " ")))
	}
	if m.isSet(&m.cfg.Dnstap) && slices.ContainsFunc(m.cfg.Dnstap, func(o config.DnstapConfig) bool { return o.Socket == t.Socket }) {
		// The same collector from several blocks: one tap logs every zone.
		if !slices.Contains(m.cfg.Dnstap, t) {
			m.drop(d.Line, "%s: the socket is already used with other options; the first kept", d.String())
		}
		return
	}
	if !m.isSet(&m.cfg.Dnstap) {
		set(m, &m.cfg.Dnstap, []config.DnstapConfig{t}, d.Line, comments...)
	} else {
		m.cfg.Dnstap = append(m.cfg.Dnstap, t)
		for _, c := range comments {
			m.comment(&m.cfg.Dnstap, c)
		}
	}
	if err := config.CheckDnstap(&m.cfg); err != nil {
		m.cfg.Dnstap = m.cfg.Dnstap[:len(m.cfg.Dnstap)-1]
		m.drop(d.Line, "%s: %v; not carried", d.String(), err)
		if len(m.cfg.Dnstap) == 0 {
			m.unset(&m.cfg.Dnstap)
		}
	}
}
