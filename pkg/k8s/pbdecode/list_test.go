package pbdecode

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// listBody encodes items as the API server sends a list: Magic, then a
// runtime.Unknown whose raw bytes are the list.
func listBody(t testing.TB, items ...corev1.Service) []byte {
	t.Helper()
	l := &corev1.ServiceList{ListMeta: metav1.ListMeta{ResourceVersion: "42", Continue: "c0ntinue"}, Items: items}
	raw, err := l.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	u := runtime.Unknown{TypeMeta: runtime.TypeMeta{APIVersion: "v1", Kind: "ServiceList"}, Raw: raw,
		ContentType: "application/vnd.kubernetes.protobuf"}
	b, err := u.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return append([]byte(Magic), b...)
}

func readAll(body []byte) (metav1.ListMeta, [][]byte, error) {
	var items [][]byte
	lm, err := ReadList(bufio.NewReader(bytes.NewReader(body)), func(b []byte) error {
		items = append(items, bytes.Clone(b))
		return nil
	})
	return lm, items, err
}

// TestReadList reads a list body item by item: each item's bytes are its
// encoding, the metadata the list's.
func TestReadList(t *testing.T) {
	svcs := []corev1.Service{
		{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns1"}, Spec: corev1.ServiceSpec{ClusterIP: "10.96.0.1"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "ns1"}, Spec: corev1.ServiceSpec{ClusterIP: "None"}},
	}
	lm, items, err := readAll(listBody(t, svcs...))
	if err != nil {
		t.Fatal(err)
	}
	if lm.ResourceVersion != "42" || lm.Continue != "c0ntinue" {
		t.Errorf("list metadata %+v", lm)
	}
	if len(items) != len(svcs) {
		t.Fatalf("%d items, want %d", len(items), len(svcs))
	}
	for i := range svcs {
		if want, _ := svcs[i].Marshal(); !bytes.Equal(items[i], want) {
			t.Errorf("item %d is not its encoding", i)
		}
	}
	// An empty list.
	if _, items, err := readAll(listBody(t)); err != nil || len(items) != 0 {
		t.Errorf("empty list: %d items, %v", len(items), err)
	}
}

// TestReadListErrors feeds broken bodies: each is an error, never a panic,
// a hang or a partial list.
func TestReadListErrors(t *testing.T) {
	good := listBody(t, corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns1"}})
	var u runtime.Unknown
	if err := u.Unmarshal(good[len(Magic):]); err != nil {
		t.Fatal(err)
	}
	// Every cut inside the list fails (a list cut short is not a shorter
	// list); what follows it in the envelope (content type) may go.
	end := bytes.Index(good, u.Raw) + len(u.Raw)
	for n := range end {
		if _, _, err := readAll(good[:n]); err == nil {
			t.Fatalf("body cut to %d of %d bytes read without error", n, len(good))
		}
	}
	// An envelope whose list holds an item over MaxItem: refused before
	// it is read.
	huge := binary.AppendUvarint(append([]byte(Magic), 2<<3|wireBytes), MaxItem+100)
	huge = binary.AppendUvarint(append(huge, 2<<3|wireBytes), MaxItem+1)
	for name, c := range map[string]struct {
		body []byte
		want string
	}{
		"no magic":         {[]byte("{}"), "without the Kubernetes magic"},
		"no list":          {[]byte(Magic), "without a list"},
		"content encoding": {append(bytes.Clone(good), 3<<3|wireBytes, 4, 'g', 'z', 'i', 'p'), `content encoding "gzip"`},
		"oversized item":   {huge, "over the limit"},
	} {
		if _, _, err := readAll(c.body); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want an error saying %q", name, err, c.want)
		}
	}
	// An item's error ends the read, wrapped with the item's index.
	two := listBody(t, corev1.Service{}, corev1.Service{})
	errBad := errors.New("bad item")
	calls := 0
	_, err := ReadList(bufio.NewReader(bytes.NewReader(two)), func([]byte) error {
		if calls++; calls == 2 {
			return errBad
		}
		return nil
	})
	if !errors.Is(err, errBad) || err.Error() != fmt.Sprintf("list item 1: %v", errBad) || calls != 2 {
		t.Errorf("an item's error: %v after %d items", err, calls)
	}
}

// FuzzReadList: no body makes ReadList panic, and a body it reads whole
// reads the same again.
func FuzzReadList(f *testing.F) {
	f.Add([]byte(Magic))
	f.Add([]byte{})
	f.Add(listBody(f, corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns1"}}, corev1.Service{}))
	f.Fuzz(func(t *testing.T, body []byte) {
		lm, items, err := readAll(body)
		if err != nil {
			return
		}
		lm2, items2, err := readAll(body)
		if err != nil || !reflect.DeepEqual(lm, lm2) || !reflect.DeepEqual(items, items2) {
			t.Fatalf("read twice, the same body differs: %v", err)
		}
	})
}
