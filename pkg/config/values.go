package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// List is a comma-separated flag, or a YAML list (or comma-separated
// string) in the config file. Setting it replaces the value. An empty
// string is the empty list (--fallthrough= means none); an empty item in
// a list (",,", "a,,b", "" in a YAML list) is refused: dropping it would
// turn a list meant to hold something into one meaning "default" or "all"
// (--namespaces=,,).
type List []string

func (l *List) String() string { return strings.Join(*l, ",") }

// Set implements flag.Value.
func (l *List) Set(s string) error {
	*l = List{}
	if strings.TrimSpace(s) == "" {
		return nil
	}
	for i, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p == "" {
			return fmt.Errorf("%q: item %d is empty", s, i+1)
		}
		*l = append(*l, p)
	}
	return nil
}

// UnmarshalJSON accepts a list of strings or one comma-separated string.
func (l *List) UnmarshalJSON(b []byte) error {
	var ss []string
	if err := json.Unmarshal(b, &ss); err == nil {
		*l = List{}
		for i, s := range ss {
			if strings.TrimSpace(s) == "" {
				return fmt.Errorf("item %d is empty", i+1)
			}
			if err := l.append(s); err != nil {
				return err
			}
		}
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("want a list of strings or a comma-separated string, got %s", b)
	}
	return l.Set(s)
}

func (l *List) append(s string) error {
	var one List
	if err := one.Set(s); err != nil {
		return err
	}
	*l = append(*l, one...)
	return nil
}

// repeatList is a List flag that may be repeated: its first use on a
// command line replaces the value (the default, or the file's), later uses
// add to it. Each use may also hold a comma-separated list.
type repeatList struct {
	l    *List
	used bool
}

func (r *repeatList) String() string {
	if r.l == nil {
		return ""
	}
	return r.l.String()
}

// Set implements flag.Value.
func (r *repeatList) Set(s string) error {
	if !r.used {
		*r.l, r.used = List{}, true
	}
	return r.l.append(s)
}

// Duration is a time.Duration written as a Go duration string ("60s") in
// flags and in the file. A bare number in the file is an error rather than
// a guess at its unit (node-cache's -syncinterval trap).
type Duration time.Duration

func (d Duration) String() string { return time.Duration(d).String() }

// Set implements flag.Value.
func (d *Duration) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q is not a Go duration such as 5s or 1m30s", s)
	}
	*d = Duration(v)
	return nil
}

// UnmarshalJSON reads a duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration %s: want a string such as \"5s\"", b)
	}
	return d.Set(s)
}

// MarshalJSON writes the duration string UnmarshalJSON reads.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// Bytes is a size in bytes: a plain number, or one with a binary (Ki, Mi,
// Gi) or decimal (k, M, G) suffix and an optional trailing B ("32Mi",
// "64MiB", "1G"), in flags and in the file.
type Bytes int64

func (b Bytes) String() string {
	switch {
	case b != 0 && b%(1<<30) == 0:
		return fmt.Sprintf("%dGi", b>>30)
	case b != 0 && b%(1<<20) == 0:
		return fmt.Sprintf("%dMi", b>>20)
	case b != 0 && b%(1<<10) == 0:
		return fmt.Sprintf("%dKi", b>>10)
	}
	return strconv.FormatInt(int64(b), 10)
}

// Set implements flag.Value.
func (b *Bytes) Set(s string) error {
	t := strings.TrimSuffix(strings.TrimSpace(s), "B")
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"k", 1e3}, {"K", 1e3}, {"M", 1e6}, {"G", 1e9}} {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSuffix(t, u.suffix), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return fmt.Errorf("%q is not a size such as 33554432, 32Mi or 64MiB", s)
	}
	*b = Bytes(n * mult)
	return nil
}

// MarshalJSON writes the size string Set reads.
func (b Bytes) MarshalJSON() ([]byte, error) { return json.Marshal(b.String()) }

// UnmarshalJSON reads a number or a size string.
func (b *Bytes) UnmarshalJSON(data []byte) error {
	var n int64
	if err := json.Unmarshal(data, &n); err == nil {
		return b.Set(strconv.FormatInt(n, 10))
	}
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return fmt.Errorf("size %s: want a number of bytes or a string such as \"32Mi\"", data)
	}
	return b.Set(s)
}

// StubsMap maps a zone to its servers and their options. As a flag, each
// use adds zone=server[,server...].
type StubsMap map[string]StubDomain

func (m *StubsMap) String() string {
	var parts []string
	for _, z := range m.SortedZones() {
		l := (*m)[z].Servers
		parts = append(parts, z+"="+l.String())
	}
	return strings.Join(parts, " ")
}

// Set implements flag.Value.
func (m *StubsMap) Set(s string) error {
	zone, servers, ok := strings.Cut(s, "=")
	if !ok || strings.TrimSpace(zone) == "" || strings.TrimSpace(servers) == "" {
		return fmt.Errorf("%q: want zone=server[,server...]", s)
	}
	if *m == nil {
		*m = StubsMap{}
	}
	var l List
	_ = l.Set(servers)
	(*m)[strings.TrimSpace(zone)] = StubDomain{Servers: l}
	return nil
}

// Values for the plain Go types of Config fields, as flag.Value.

type stringValue string

func (v *stringValue) Set(s string) error { *v = stringValue(s); return nil }
func (v *stringValue) String() string     { return string(*v) }

type intValue int

func (v *intValue) Set(s string) error {
	n, err := strconv.ParseInt(s, 0, strconv.IntSize)
	if err != nil {
		return fmt.Errorf("%q is not an integer", s)
	}
	*v = intValue(n)
	return nil
}
func (v *intValue) String() string { return strconv.Itoa(int(*v)) }

type boolValue bool

func (v *boolValue) Set(s string) error {
	b, err := strconv.ParseBool(s)
	if err != nil {
		return fmt.Errorf("%q is not true or false", s)
	}
	*v = boolValue(b)
	return nil
}
func (v *boolValue) String() string   { return strconv.FormatBool(bool(*v)) }
func (v *boolValue) IsBoolFlag() bool { return true }

type floatValue float64

func (v *floatValue) Set(s string) error {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return fmt.Errorf("%q is not a number", s)
	}
	*v = floatValue(f)
	return nil
}
func (v *floatValue) String() string { return strconv.FormatFloat(float64(*v), 'g', -1, 64) }

// decodeStrict decodes one key's JSON value into p, refusing fields p does
// not have (in keys whose values are objects) and trailing data.
func decodeStrict(b []byte, p any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(p); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return typeError(te, b)
		}
		return err
	}
	return nil
}

// typeError says what a value of the wrong type is and what was wanted. A
// quoted scalar where a bool or a number is wanted (autopath: 'true') is
// named as the string it is, with the fix.
func typeError(te *json.UnmarshalTypeError, raw []byte) error {
	want := jsonKind(te.Type.Kind().String())
	var str string
	if te.Value == "string" && json.Unmarshal(raw, &str) == nil {
		switch te.Type.Kind() {
		case reflect.Bool:
			if str == "true" || str == "false" {
				return fmt.Errorf("want true or false, got the string %q: write it without quotes", str)
			}
		case reflect.Int, reflect.Int64, reflect.Int32, reflect.Uint, reflect.Uint64, reflect.Uint32, reflect.Uint16, reflect.Float64, reflect.Float32:
			if _, err := strconv.ParseFloat(str, 64); err == nil {
				return fmt.Errorf("want %s, got the string %q: write it without quotes", want, str)
			}
		}
		return fmt.Errorf("want %s, got the string %q", want, str)
	}
	got := map[string]string{"bool": "true or false", "number": "a number", "array": "a list", "object": "a map", "string": "a string"}[te.Value]
	if got == "" {
		got = te.Value
	}
	return fmt.Errorf("want %s, got %s %s", want, got, bytes.TrimSpace(raw))
}

func jsonKind(goKind string) string {
	switch goKind {
	case "int", "int64", "int32", "uint", "uint64", "uint32", "uint16":
		return "an integer"
	case "float64", "float32":
		return "a number"
	case "bool":
		return "true or false"
	case "string":
		return "a string"
	case "slice":
		return "a list"
	case "map", "struct":
		return "a map"
	}
	return "a " + goKind
}
