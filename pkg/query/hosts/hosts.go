// Package hosts answers names from static records, as CoreDNS's hosts
// plugin does: hosts(5) lines given in the configuration and an optional
// hosts-format file, which is checked for changes and re-read. It answers A
// and AAAA for the names, and PTR for their addresses (unless NoReverse),
// authoritatively and with one TTL.
//
// The semantics, from CoreDNS 1.15 (plugin/hosts):
//   - Only names inside Zones (default: every name) are kept and answered;
//     other names go on to the next stage whatever Fallthrough says.
//   - A name with records of the other family (or only of the other) gets
//     NODATA for the type it lacks: NOERROR, AA, no records, no SOA. So do
//     types other than A, AAAA and PTR for a known name, unless
//     FallthroughUnsupported sends them on.
//   - A name inside the zones with no record at all falls through when
//     Fallthrough covers it, and is otherwise answered SERVFAIL (CoreDNS
//     would answer NXDOMAIN but has no SOA to go with it).
//   - PTR is answered whatever the zones for every address a name was
//     given, one PTR per name; an address without names falls through.
//   - `*.example.com` matches one label below example.com, not the apex
//     and not deeper names; exact names win; wildcards get no PTR.
//   - Names are matched case-insensitively; answers carry the name asked.
//   - The file's records come first, then the configured entries'.
//
// Differences, on purpose: a line that does not parse (an address that is
// not one, a name that is not a domain name, an address without a name) is
// an error naming the line, not skipped; at start that stops the agent, on
// a re-read the previous records stay. Duplicate addresses of a name are
// answered once. A name given in both sources, exactly in one and as a
// wildcard in the other, answers from the exact records.
//
// Bounds: the file is read only up to 16 MiB (lines up to 64 KiB) and
// 100,000 names (each name of each line counts; the configured entries
// the same again); a larger one is an error naming the file and the bound. Answers are built on a name's first query and
// kept with the records, so a repeated question allocates nothing.
package hosts

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/pkg/query/dnsname"
	"github.com/nodedns/nodedns/pkg/query/stage"
)

// Defaults.
const (
	DefaultTTL    = 3600 * time.Second
	DefaultReload = 5 * time.Second
)

// Config configures Hosts. The zero value answers nothing.
type Config struct {
	// Entries are hosts(5) lines: "IP name [alias...]".
	Entries []string
	// File is a hosts(5) file, read at start and again whenever its size,
	// modification time or inode changes (checked every Reload). A file
	// missing at start is a warning: it is read once it appears.
	File string
	// TTL of every record, 1s to 65535s in whole seconds; default 1h.
	TTL time.Duration
	// NoReverse: no PTR records for the addresses.
	NoReverse bool
	// Zones limits the names kept and answered (FQDNs, any case); default
	// every name.
	Zones []string
	// Fallthrough lists the zones where a name without records goes on to
	// the next stage instead of SERVFAIL. nil: none; an empty, non-nil
	// list: every zone (CoreDNS's bare `fallthrough`).
	Fallthrough []string
	// FallthroughUnsupported sends types other than A, AAAA and PTR for a
	// known name on to the next stage (when Fallthrough covers the name)
	// instead of answering NODATA.
	FallthroughUnsupported bool
	// Reload is how often File is checked; default 5s; negative: never.
	Reload time.Duration
	Logger *slog.Logger
}

// Enabled reports whether c configures any records.
func (c Config) Enabled() bool { return len(c.Entries) > 0 || c.File != "" }

// settings are a validated Config.
type settings struct {
	entries         []entry
	file            string
	ttl             uint32
	noReverse       bool
	zones, fall     []string
	fallUnsupported bool
	reload          time.Duration
}

func (c Config) validate() (*settings, error) {
	s := &settings{file: c.File, noReverse: c.NoReverse, fallUnsupported: c.FallthroughUnsupported, reload: c.Reload}
	var err error
	if s.entries, err = parseEntries(c.Entries); err != nil {
		return nil, err
	}
	ttl := c.TTL
	if ttl == 0 {
		ttl = DefaultTTL
	}
	if ttl < time.Second || ttl > 65535*time.Second || ttl%time.Second != 0 {
		return nil, fmt.Errorf("hosts ttl %s: want whole seconds from 1s to 65535s", c.TTL)
	}
	s.ttl = uint32(ttl / time.Second)
	if s.reload == 0 {
		s.reload = DefaultReload
	}
	if s.zones, err = zoneList("hosts zone", c.Zones); err != nil {
		return nil, err
	}
	if len(s.zones) == 0 {
		s.zones = []string{"."}
	}
	if c.Fallthrough != nil {
		if s.fall, err = zoneList("hosts fallthrough zone", c.Fallthrough); err != nil {
			return nil, err
		}
		if s.fall == nil {
			s.fall = []string{}
		}
		if len(s.fall) > 0 && dnsname.InZones(".", s.fall) {
			s.fall = []string{} // "." is every zone
		}
	}
	if c.FallthroughUnsupported && c.Fallthrough == nil {
		return nil, errors.New("hosts fallthrough-unsupported needs fallthrough")
	}
	return s, nil
}

func zoneList(what string, zones []string) ([]string, error) {
	var out []string
	for _, z := range zones {
		n := dnsname.Canonical(strings.TrimSpace(z))
		if _, ok := dns.IsDomainName(n); !ok || !dns.IsFqdn(n) || strings.Contains(n, "..") && n != "." {
			return nil, fmt.Errorf("%s %q is not a domain name", what, z)
		}
		out = append(out, n)
	}
	return out, nil
}

// Hosts answers from static records. It is safe for concurrent use; Lookup
// is cheap (map lookups, no allocation for a repeated question).
type Hosts struct {
	log *slog.Logger
	t   atomic.Pointer[table] // nil: disabled

	mu   sync.Mutex // writers: Update and the file watcher
	cfg  *settings  // nil: disabled
	file []entry    // the file's records as last read
	stat fileStamp  // the file as last read
	// lastReload is when the records last changed (unix nanoseconds);
	// gen counts the changes (Generation).
	lastReload atomic.Int64
	gen        atomic.Uint64
	// rejected counts versions of the file that were rejected.
	rejected atomic.Uint64
	wake     chan struct{}
}

// fileStamp identifies a version of the file.
type fileStamp struct {
	path    string
	exists  bool
	size    int64
	mod     time.Time
	ino     uint64
	checked bool
}

// New validates cfg and reads the file. Bad entries or a bad file line are
// errors naming them.
func New(cfg Config) (*Hosts, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	h := &Hosts{log: log.With("component", "hosts"), wake: make(chan struct{}, 1)}
	if err := h.Update(cfg); err != nil {
		return nil, err
	}
	return h, nil
}

// Update replaces the configuration (a live reload). On error nothing
// changes. The file is read again when its path changed.
func (h *Hosts) Update(cfg Config) error {
	apply, err := h.Prepare(cfg)
	if err != nil {
		return err
	}
	apply()
	return nil
}

// Prepare validates cfg and reads its file when the path changed, without
// changing anything; apply then makes cfg the running configuration. It
// lets a reload check every setting before it applies any.
func (h *Hosts) Prepare(cfg Config) (apply func(), err error) {
	if !cfg.Enabled() {
		return func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			h.cfg, h.file, h.stat = nil, nil, fileStamp{}
			h.t.Store(nil)
			h.gen.Add(1)
		}, nil
	}
	s, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	file, stat := h.file, h.stat
	h.mu.Unlock()
	// The file's entries are kept whole (names outside the zones are
	// dropped only when the table is built), so only a new path is read.
	readNew := s.file != stat.path || !stat.checked
	if readNew {
		if file, stat, err = h.readFile(s.file); err != nil {
			return nil, err
		}
	}
	return func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if readNew {
			h.file, h.stat = file, stat
		} // else: the watcher's latest reading of the same file stays
		h.cfg = s
		h.rebuild()
		if s.fall == nil {
			h.log.Warn("hosts without fallthrough: every other name in its zones is answered SERVFAIL, as CoreDNS does (add fallthrough to pass them on)",
				"zones", s.zones)
		}
		select {
		case h.wake <- struct{}{}: // the watcher picks up a new interval
		default:
		}
	}, nil
}

// rebuild makes a new table from cfg, the file and the entries; h.mu held.
func (h *Hosts) rebuild() {
	t := newTable(h.cfg, h.file, h.cfg.entries)
	h.t.Store(t)
	h.gen.Add(1)
	h.lastReload.Store(time.Now().UnixNano())
}

// Generation moves after every change of the records: a reload, the file
// re-read or removed (stage.Hosts).
func (h *Hosts) Generation() uint64 { return h.gen.Load() }

// readFile reads path ("" reads nothing). A missing file is no error: its
// stamp says so, and it is read when it appears.
func (h *Hosts) readFile(path string) ([]entry, fileStamp, error) {
	st := fileStamp{path: path, checked: true}
	if path == "" {
		return nil, st, nil
	}
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		h.log.Warn("hosts file does not exist; serving the configured entries until it does", "file", path)
		return nil, st, nil
	}
	if err != nil {
		return nil, st, fmt.Errorf("opening hosts file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, st, fmt.Errorf("hosts file %s: %w", path, err)
	}
	if fi.IsDir() {
		return nil, st, fmt.Errorf("hosts file %s is a directory", path)
	}
	if fi.Size() > maxFileSize {
		return nil, st, fmt.Errorf("hosts file %s: %d bytes, more than %d MiB", path, fi.Size(), maxFileSize>>20)
	}
	entries, err := parseFile(path, f)
	if err != nil {
		return nil, st, err
	}
	st.exists, st.size, st.mod, st.ino = true, fi.Size(), fi.ModTime(), inode(fi)
	return entries, st, nil
}

// Lookup answers (name, qtype) from the records: name is a lower-case FQDN.
// ok false means the next stage answers. The message is shared: never
// modify it.
func (h *Hosts) Lookup(name string, qtype uint16) (res stage.Result, ok bool) {
	t := h.t.Load()
	if t == nil {
		return stage.Result{}, false
	}
	m, ok := t.lookup(name, qtype)
	return stage.Result{Msg: m}, ok
}

// Stats describe the records served.
type Stats struct {
	// Entries counts addresses across names, wildcards included.
	Entries int `json:"entries"`
	// LastReload is when the records last changed.
	LastReload time.Time `json:"last_reload"`
	// Rejected counts versions of the file that did not parse (the
	// records before them stayed).
	Rejected uint64 `json:"rejected"`
}

// Stats returns the figures of the current records.
func (h *Hosts) Stats() Stats {
	t := h.t.Load()
	if t == nil {
		return Stats{}
	}
	return Stats{Entries: t.count, LastReload: time.Unix(0, h.lastReload.Load()), Rejected: h.rejected.Load()}
}

// Run re-reads the file whenever it changes until ctx is done. A file that
// no longer parses leaves the previous records in place (logged as an
// error); a file that is removed leaves the configured entries.
func (h *Hosts) Run(ctx context.Context) {
	for {
		h.mu.Lock()
		every := time.Duration(-1)
		if h.cfg != nil && h.cfg.file != "" {
			every = h.cfg.reload
		}
		h.mu.Unlock()
		var tick <-chan time.Time
		var t *time.Timer
		if every > 0 {
			t = time.NewTimer(every)
			tick = t.C
		}
		select {
		case <-ctx.Done():
		case <-h.wake:
		case <-tick:
			h.check()
		}
		if t != nil {
			t.Stop()
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// check re-reads the file if it changed.
func (h *Hosts) check() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cfg == nil || h.cfg.file == "" {
		return
	}
	path := h.cfg.file
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if h.stat.exists {
			h.log.Warn("hosts file removed; serving the configured entries", "file", path)
			h.file, h.stat = nil, fileStamp{path: path, checked: true}
			h.rebuild()
		}
		return
	case err != nil:
		h.log.Error("checking hosts file; keeping the records", "file", path, "err", err)
		return
	}
	if h.stat.exists && fi.Size() == h.stat.size && fi.ModTime().Equal(h.stat.mod) && inode(fi) == h.stat.ino {
		return
	}
	entries, st, err := h.readFile(path)
	if err != nil {
		h.log.Error("hosts file rejected; keeping the previous records", "file", path, "err", err)
		h.rejected.Add(1)
		// Remember this version so the error is logged once per change.
		h.stat = fileStamp{path: path, checked: true, exists: true, size: fi.Size(), mod: fi.ModTime(), ino: inode(fi)}
		return
	}
	h.file, h.stat = entries, st
	h.rebuild()
	h.log.Info("hosts file reloaded", "file", path, "entries", h.t.Load().count)
}

// Check validates cfg and parses its file when the file exists, without
// keeping anything: what a configuration check reports before the agent
// would fail to start on it.
func Check(cfg Config) error {
	if !cfg.Enabled() {
		return nil
	}
	s, err := cfg.validate()
	if err != nil {
		return err
	}
	if s.file == "" {
		return nil
	}
	f, err := os.Open(s.file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("opening hosts file: %w", err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.IsDir() {
		return fmt.Errorf("hosts file %s is a directory", s.file)
	}
	_, err = parseFile(s.file, f)
	return err
}
