package config

import (
	"fmt"
	"strings"
	"testing"
)

// TestAttackPluginListBounds: the structured keys' lists (acl, templates,
// the cache's disable zones, a group's except zones, chaos authors) are
// bounded like every other list: at the bound taken, past it refused with
// the key and the bound named.
func TestAttackPluginListBounds(t *testing.T) {
	list := func(n int, f func(i int) string) string {
		items := make([]string, n)
		for i := range items {
			items[i] = f(i)
		}
		return "[" + strings.Join(items, ", ") + "]"
	}
	zone := func(i int) string { return fmt.Sprintf("z%d.example", i) }
	acl := func(n int) string {
		return "acl: " + list(n, func(int) string { return "{policies: [{action: block, types: [TXT]}]}" }) + "\n"
	}
	policies := func(n int) string {
		return "acl: [{policies: " + list(n, func(int) string { return "{action: block, types: [TXT]}" }) + "}]\n"
	}
	types := func(n int) string {
		return "acl: [{policies: [{action: block, nets: " + list(n, func(i int) string { return fmt.Sprintf("192.0.%d.%d/32", i/256, i%256) }) + "}]}]\n"
	}
	templates := func(n int) string {
		return "templates: " + list(n, func(i int) string { return fmt.Sprintf("{type: TXT, zones: [%s], rcode: NOERROR}", zone(i)) }) + "\n"
	}
	tzones := func(n int) string {
		return "templates: [{type: TXT, rcode: NOERROR, zones: " + list(n, zone) + "}]\n"
	}
	disable := func(n int) string { return "cache-disable-success: " + list(n, zone) + "\n" }
	except := func(n int) string { return "upstream-except: " + list(n, zone) + "\n" }
	authors := func(n int) string {
		return "chaos: true\nchaos-authors: " + list(n, func(i int) string { return fmt.Sprintf("a%d", i) }) + "\n"
	}
	for _, c := range []struct {
		what string
		at   string
		past string
		want string
	}{
		{"acl rules", acl(maxACLRules), acl(maxACLRules + 1), "acl: 65 rules: want at most 64"},
		{"acl policies", policies(maxACLPolicies), policies(maxACLPolicies + 1), "acl rule 1: at most 64 policies"},
		{"acl nets", types(maxACLItems), types(maxACLItems + 1), "acl rule 1, policy 1: at most 256 types and 256 nets"},
		{"templates", templates(maxTemplates), templates(maxTemplates + 1), "templates: 65 templates: want at most 64"},
		{"template zones", tzones(maxTemplateItems), tzones(maxTemplateItems + 1), "template 1: a list of 65 items: want at most 64"},
		{"cache-disable-success", disable(maxDisableZones), disable(maxDisableZones + 1), "65"},
		{"upstream-except", except(maxExcept), except(maxExcept + 1), "65"},
		{"chaos-authors", authors(maxChaosAuthors), authors(maxChaosAuthors + 1), "config.yaml: chaos-authors: 65 authors: want at most 64"},
	} {
		if _, err := loadFile(t, "listen: [127.0.0.1:5300]\nupstream: [192.0.2.1]\n"+c.at); err != nil {
			t.Errorf("%s at the bound: %v", c.what, err)
		}
		_, err := loadFile(t, "listen: [127.0.0.1:5300]\nupstream: [192.0.2.1]\n"+c.past)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s past the bound: %v; want an error containing %q", c.what, err, c.want)
		}
	}
}
