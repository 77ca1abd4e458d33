package migrate

import (
	"strings"
	"testing"

	"github.com/nodedns/nodedns/pkg/config"
)

// TestFileNSID: file (its path, zones, reload and fallthrough) and nsid
// are carried whole, nothing dropped (exit 0).
func TestFileNSID(t *testing.T) {
	res := migrateFixture(t, "file-nsid", nil)
	if len(res.Dropped) != 0 {
		t.Fatalf("dropped: %s", droppedText(res))
	}
	c := res.Config
	if !c.NSID || c.NSIDData != "node-a" || len(c.NSIDZones) != 0 || strings.Join(c.NSIDExcept, ",") != "example.org" {
		t.Errorf("nsid %v %q zones %v except %v; want node-a on every name but example.org's (its block has no nsid)", c.NSID, c.NSIDData, c.NSIDZones, c.NSIDExcept)
	}
	if len(c.ZoneFiles) != 2 {
		t.Fatalf("zone files %+v", c.ZoneFiles)
	}
	byFile := map[string]config.ZoneFileConfig{}
	for _, z := range c.ZoneFiles {
		byFile[z.File] = z
	}
	org := byFile["/etc/coredns/zones/db.example.org"]
	if strings.Join(org.Zones, ",") != "example.org" || org.Reload == nil || org.Reload.String() != "10s" || org.Fallthrough.Set {
		t.Errorf("the example.org block's file: %+v", org)
	}
	in := byFile["/etc/coredns/zones/db.internal"]
	if strings.Join(in.Zones, ",") != "internal.example,corp.example" || in.Reload != nil || !in.Fallthrough.Set || len(in.Fallthrough.Zones) != 0 {
		t.Errorf("the root block's file: %+v", in)
	}
}

// TestFileNSIDOptions: nsid without data takes the node's name (said in a
// comment, nothing dropped); options nodedns does not know are dropped
// with their line.
func TestFileNSIDOptions(t *testing.T) {
	res, err := Migrate([]byte(".:53 {\n  nsid\n  file db.example example.org {\n    reload_by_mtime\n  }\n  forward . 192.0.2.1\n}\n"), Options{Env: testEnv, ClusterDomain: "cluster.local"})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Config.NSID || res.Config.NSIDData != "" || !strings.Contains(string(res.YAML), "node's name") {
		t.Errorf("nsid without data: %v %q\n%s", res.Config.NSID, res.Config.NSIDData, res.YAML)
	}
	if d := droppedText(res); !strings.Contains(d, "4: file option reload_by_mtime") || len(res.Dropped) != 1 {
		t.Errorf("dropped: %s", d)
	}
	if !strings.Contains(string(res.YAML), "db.example is relative") {
		t.Errorf("no word on the relative path:\n%s", res.YAML)
	}
}
