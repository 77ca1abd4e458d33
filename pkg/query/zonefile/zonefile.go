// Package zonefile serves zones from RFC 1035 zone files, as CoreDNS
// 1.15's file plugin: the apex (SOA, NS), CNAMEs chased inside the zone
// (a target it does not hold is looked up through the whole server by
// the pipeline), wildcards (RFC 4592), referrals below zone cuts,
// NXDOMAIN and NODATA with the SOA in authority, all authoritative. A
// zone file is re-read every reload interval (default 1m, CoreDNS's) and
// the new zone served only when its SOA serial differs from the one
// served; a file that no longer parses keeps the zone served, said in an
// error line and counted (Stats.Rejected, which the agent exports).
//
// Limits: no DNSSEC (signed zones are served as records: no RRSIG or NSEC
// added to answers, NSEC3 refused, as CoreDNS for DO=0 queries); DNAME
// records are answered as records but never synthesize a CNAME; no zone
// transfers or NOTIFY. Each file is at most MaxFileBytes and MaxRecords.
//
// Lookup runs on the reader: a name outside every zone costs a suffix
// test per zone and no allocation.
package zonefile

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/pkg/query/dnsname"
	"github.com/nodedns/nodedns/pkg/query/stage"
)

// MaxFiles bounds the zone files served.
const MaxFiles = 16

// maxOrigins bounds the zones one file is served for.
const maxOrigins = 16

// Zone is one zone file served for one or more zones (CoreDNS's `file
// FILE [ZONES...] { reload DURATION; fallthrough [ZONES...] }`).
type Zone struct {
	// File is the zone file's path (in Kubernetes typically a mounted
	// ConfigMap).
	File string
	// Origins are the zones it is served for (lower-case FQDNs): the
	// file is read once for each, $ORIGIN being the zone.
	Origins []string
	// Reload is how often the file is read again; 0 or less: never. A
	// file missing at start is an error unless Reload is set (then the
	// zone is SERVFAIL until the file appears, as CoreDNS's).
	Reload time.Duration
	// Fallthrough, when Fall is set, lists the zones (none: every name)
	// whose NXDOMAIN and empty NOERROR go on to the next stage.
	Fall        bool
	Fallthrough []string
}

// Config is the zone files served.
type Config struct {
	Zones  []Zone
	Logger *slog.Logger
}

func (c Config) validate() error {
	if len(c.Zones) > MaxFiles {
		return fmt.Errorf("zone files: %d, want at most %d", len(c.Zones), MaxFiles)
	}
	seen := map[string]string{}
	for _, z := range c.Zones {
		if z.File == "" {
			return errors.New("zone file: no file given")
		}
		if len(z.Origins) == 0 || len(z.Origins) > maxOrigins {
			return fmt.Errorf("zone file %s: %d zones, want 1 to %d", z.File, len(z.Origins), maxOrigins)
		}
		for _, o := range z.Origins {
			if _, ok := dns.IsDomainName(o); !ok || o != dnsname.Canonical(o) {
				return fmt.Errorf("zone file %s: zone %q is not a lower-case fully qualified name", z.File, o)
			}
			if f, dup := seen[o]; dup {
				return fmt.Errorf("zone %s is served from two files (%s and %s)", o, f, z.File)
			}
			seen[o] = z.File
		}
	}
	return nil
}

// served is one zone served from a file.
type served struct {
	origin string
	file   string
	reload time.Duration
	fall   bool
	falls  []string
	z      atomic.Pointer[zone] // nil: not loaded (SERVFAIL)
	// The file as last read, and when it is next due (Files.mu).
	stamp fileStamp
	due   time.Time
}

// fileStamp identifies a version of a file.
type fileStamp struct {
	size int64
	mod  time.Time
}

// Files answers the zones of the zone files. Safe for concurrent use.
type Files struct {
	log  *slog.Logger
	set  atomic.Pointer[[]*served] // the longest origin first; nil: none
	mu   sync.Mutex                // reloads: Prepare's apply and Run
	gen  atomic.Uint64
	wake chan struct{}
	// rejected counts file versions that did not parse (the zone served
	// before stayed); loaded counts zones read.
	rejected, loaded atomic.Uint64
}

// New reads the zone files of cfg. Errors name the file and the line.
func New(cfg Config) (*Files, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	f := &Files{log: log.With("component", "file"), wake: make(chan struct{}, 1)}
	apply, err := f.Prepare(cfg)
	if err != nil {
		return nil, err
	}
	apply()
	return f, nil
}

// Check reads the zone files of cfg without keeping them: what `config
// validate` reports.
func Check(cfg Config) error {
	f := &Files{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	_, err := f.Prepare(cfg)
	return err
}

// Prepare validates cfg and reads its files, changing nothing; apply then
// serves them (a configuration reload: every file is read again, as
// CoreDNS's reload builds its plugins anew).
func (f *Files) Prepare(cfg Config) (apply func(), err error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	var set []*served
	now := time.Now()
	for _, zc := range cfg.Zones {
		for _, o := range zc.Origins {
			s := &served{origin: o, file: zc.File, reload: zc.Reload, fall: zc.Fall, falls: zc.Fallthrough}
			z, st, err := readZone(zc.File, o, -1)
			switch {
			case errors.Is(err, fs.ErrNotExist) && zc.Reload > 0:
				f.log.Warn("zone file does not exist; the zone is answered SERVFAIL until it does", "file", zc.File, "zone", o, "retry", zc.Reload)
			case err != nil:
				return nil, err
			default:
				s.z.Store(z)
				s.stamp = st
			}
			s.due = now.Add(zc.Reload)
			set = append(set, s)
		}
	}
	// The longest origin first: a name is answered by the closest zone,
	// as CoreDNS picks the most specific.
	slices.SortStableFunc(set, func(a, b *served) int { return dns.CountLabel(b.origin) - dns.CountLabel(a.origin) })
	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if len(set) == 0 {
			f.set.Store(nil)
		} else {
			f.set.Store(&set)
		}
		for _, s := range set {
			if z := s.z.Load(); z != nil {
				f.loaded.Add(1)
				f.log.Info("zone loaded", "zone", s.origin, "file", s.file, "serial", z.soa.Serial, "records", z.records)
			}
		}
		f.gen.Add(1)
		select {
		case f.wake <- struct{}{}:
		default:
		}
	}, nil
}

// readZone reads the zone of origin from file; serial as parse's.
func readZone(file, origin string, serial int64) (*zone, fileStamp, error) {
	fh, err := os.Open(file)
	if err != nil {
		return nil, fileStamp{}, fmt.Errorf("opening zone file for %s: %w", origin, err)
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil {
		return nil, fileStamp{}, fmt.Errorf("zone file %s: %w", file, err)
	}
	if fi.IsDir() {
		return nil, fileStamp{}, fmt.Errorf("zone file %s is a directory", file)
	}
	if fi.Size() > MaxFileBytes {
		return nil, fileStamp{}, fmt.Errorf("zone file %s: %d bytes, more than %d MiB", file, fi.Size(), MaxFileBytes>>20)
	}
	st := fileStamp{size: fi.Size(), mod: fi.ModTime()}
	z, err := parse(io.LimitReader(fh, MaxFileBytes), origin, file, serial)
	return z, st, err
}

// Lookup implements stage.ZoneFiles.
func (f *Files) Lookup(name string, qtype uint16) (stage.ZoneAnswer, bool) {
	set := f.set.Load()
	if set == nil {
		return stage.ZoneAnswer{}, false
	}
	for _, s := range *set {
		if !dnsname.InZone(name, s.origin) {
			continue
		}
		return s.lookup(name, qtype)
	}
	return stage.ZoneAnswer{}, false
}

func (s *served) lookup(name string, qtype uint16) (stage.ZoneAnswer, bool) {
	z := s.z.Load()
	if z == nil || z.soa == nil {
		return stage.ZoneAnswer{Failed: true}, true
	}
	fd := z.lookup(name, qtype)
	if fd.target != "" {
		return stage.ZoneAnswer{Target: fd.target, Finish: func(reply *dns.Msg, failed bool) *dns.Msg {
			m, _ := z.ext(fd, reply, failed).msg() // the chain is never empty
			return m
		}}, true
	}
	if len(fd.answer) == 0 && (fd.res == nameError || fd.res == success) && s.passes(name) {
		return stage.ZoneAnswer{}, false
	}
	m, ok := fd.msg()
	if !ok {
		return stage.ZoneAnswer{Failed: true}, true
	}
	return stage.ZoneAnswer{Msg: m}, true
}

// passes reports whether fallthrough sends name on.
func (s *served) passes(name string) bool {
	if !s.fall {
		return false
	}
	return len(s.falls) == 0 || dnsname.InZones(name, s.falls)
}

// Generation implements stage.ZoneFiles.
func (f *Files) Generation() uint64 { return f.gen.Load() }

// Stats describe the zones served.
type Stats struct {
	Zones int `json:"zones"`
	// Loaded counts zones read (at start, reload, or a file changed);
	// Rejected the file versions that did not parse (the zone before
	// stayed).
	Loaded   uint64 `json:"loaded"`
	Rejected uint64 `json:"rejected"`
}

// Stats returns the figures of the zones.
func (f *Files) Stats() Stats {
	st := Stats{Loaded: f.loaded.Load(), Rejected: f.rejected.Load()}
	if set := f.set.Load(); set != nil {
		st.Zones = len(*set)
	}
	return st
}

// Run reads each zone file again every reload interval until ctx is done.
func (f *Files) Run(ctx context.Context) {
	for {
		var t *time.Timer
		var tick <-chan time.Time
		if next, ok := f.nextDue(); ok {
			t = time.NewTimer(max(time.Until(next), 0))
			tick = t.C
		}
		select {
		case <-ctx.Done():
		case <-f.wake:
		case <-tick:
			f.check(time.Now())
		}
		if t != nil {
			t.Stop()
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// nextDue is when the first zone is due to be read again.
func (f *Files) nextDue() (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	set := f.set.Load()
	if set == nil {
		return time.Time{}, false
	}
	var next time.Time
	for _, s := range *set {
		if s.reload > 0 && (next.IsZero() || s.due.Before(next)) {
			next = s.due
		}
	}
	return next, !next.IsZero()
}

// check reads again the files of the zones due at now.
func (f *Files) check(now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	set := f.set.Load()
	if set == nil {
		return
	}
	changed := false
	for _, s := range *set {
		if s.reload <= 0 || now.Before(s.due) {
			continue
		}
		s.due = now.Add(s.reload)
		if f.reread(s) {
			changed = true
		}
	}
	if changed {
		f.gen.Add(1)
	}
}

// reread reads s's file again, as CoreDNS's file every reload interval,
// and serves its zone if the serial changed; true when it did. A file that
// does not parse is said once per version of it (its size and time).
func (f *Files) reread(s *served) bool {
	old := s.z.Load()
	serial := int64(-1)
	if old != nil {
		serial = int64(old.soa.Serial)
	}
	z, st, err := readZone(s.file, s.origin, serial)
	switch {
	case errors.Is(err, errSerial):
		return false
	case err != nil:
		if st != s.stamp || st == (fileStamp{}) {
			f.rejected.Add(1)
			f.log.Error("zone file rejected; keeping the zone served", "zone", s.origin, "file", s.file, "err", err)
		}
		s.stamp = st
		return false
	}
	s.stamp = st
	s.z.Store(z)
	f.loaded.Add(1)
	f.log.Info("zone reloaded", "zone", s.origin, "file", s.file, "serial", z.soa.Serial, "records", z.records)
	return true
}
