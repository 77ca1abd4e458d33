package k8s

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/nodedns/nodedns/internal/dnstest"
	"github.com/nodedns/nodedns/internal/k8stest"
	"github.com/nodedns/nodedns/pkg/k8s/pbdecode"
)

// fakeAPI is an HTTP API server for the list path: it serves fixed lists of
// the four resources the index watches, as protobuf or (with json set)
// JSON, records every list request, and holds watches open without events.
type fakeAPI struct {
	srv   *httptest.Server
	lists map[string]runtime.Object // path -> list
	json  bool
	// gone, when set, answers every list 410 Gone (resource version
	// expired), as an API server does after compaction.
	gone bool
	// forbid answers lists and watches of these paths 403 Forbidden, as
	// RBAC does; refused counts those answers.
	forbid  map[string]bool
	refused atomic.Int64

	mu      sync.Mutex
	asked   []*http.Request
	encoded map[string][]byte // content type + path -> body
}

// apiLists groups objs into the typed lists an API server returns, with
// their TypeMeta set and resource version rv.
func apiLists(rv string, objs ...runtime.Object) map[string]runtime.Object {
	svcs := &corev1.ServiceList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceList"}}
	sls := &discoveryv1.EndpointSliceList{TypeMeta: metav1.TypeMeta{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSliceList"}}
	nss := &corev1.NamespaceList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "NamespaceList"}}
	pods := &corev1.PodList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "PodList"}}
	for _, o := range objs {
		switch o := o.(type) {
		case *corev1.Service:
			svcs.Items = append(svcs.Items, *o)
		case *discoveryv1.EndpointSlice:
			sls.Items = append(sls.Items, *o)
		case *corev1.Namespace:
			nss.Items = append(nss.Items, *o)
		case *corev1.Pod:
			pods.Items = append(pods.Items, *o)
		}
	}
	svcs.ResourceVersion, sls.ResourceVersion, nss.ResourceVersion, pods.ResourceVersion = rv, rv, rv, rv
	return map[string]runtime.Object{
		"/api/v1/services": svcs, "/apis/discovery.k8s.io/v1/endpointslices": sls,
		"/api/v1/namespaces": nss, "/api/v1/pods": pods,
	}
}

func newFakeAPI(t testing.TB, lists map[string]runtime.Object) *fakeAPI {
	f := &fakeAPI{lists: lists}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeAPI) serve(w http.ResponseWriter, r *http.Request) {
	if f.forbid[r.URL.Path] {
		f.refused.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		_ = json.NewEncoder(w).Encode(&metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
			Status: metav1.StatusFailure, Reason: metav1.StatusReasonForbidden, Code: http.StatusForbidden,
			Message: `pods is forbidden: User "system:serviceaccount:kube-system:nodedns" cannot list resource "pods"`})
		return
	}
	if r.URL.Query().Get("watch") == "true" {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		return
	}
	f.mu.Lock()
	f.asked = append(f.asked, r.Clone(context.Background()))
	gone := f.gone
	f.mu.Unlock()
	if gone {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusGone)
		_ = json.NewEncoder(w).Encode(&metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
			Status: metav1.StatusFailure, Reason: metav1.StatusReasonExpired, Code: http.StatusGone, Message: "too old resource version"})
		return
	}
	body, ctype, ok := f.body(r.URL.Path)
	if !ok {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", ctype)
	_, _ = w.Write(body)
}

// body returns the encoded list of path, encoding it on first use (so
// that a benchmark measures the client, not the encoder).
func (f *fakeAPI) body(path string) ([]byte, string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ctype := "application/vnd.kubernetes.protobuf"
	if f.json {
		ctype = "application/json"
	}
	if b, ok := f.encoded[ctype+path]; ok {
		return b, ctype, true
	}
	l, ok := f.lists[path]
	if !ok {
		return nil, "", false
	}

	var buf bytes.Buffer
	var err error
	if f.json {
		err = json.NewEncoder(&buf).Encode(l)
	} else {
		err = protobuf.NewSerializer(scheme.Scheme, scheme.Scheme).Encode(l, &buf)
	}
	if err != nil {
		panic(err)
	}
	if f.encoded == nil {
		f.encoded = map[string][]byte{}
	}
	f.encoded[ctype+path] = buf.Bytes()
	return buf.Bytes(), ctype, true
}

// preEncode encodes every list now and drops the typed objects.
func (f *fakeAPI) preEncode() {
	for p := range f.lists {
		f.body(p)
	}
	f.mu.Lock()
	f.lists = nil
	f.mu.Unlock()
}

func (f *fakeAPI) requests() []*http.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*http.Request(nil), f.asked...)
}

// client returns a clientset for f configured as RESTConfig does.
func (f *fakeAPI) client(t testing.TB) kubernetes.Interface {
	cfg := &rest.Config{Host: f.srv.URL, QPS: -1}
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// protoList encodes l as the API server does.
func protoList(t testing.TB, l runtime.Object) []byte {
	var b bytes.Buffer
	if err := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme).Encode(l, &b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestListFromWatchCache runs the index against an HTTP API server: every
// list is asked at resourceVersion "0" (served whole from the API server's
// watch cache, never from etcd) with the selectors of its resource, in
// protobuf, and the index answers from what the streamed lists held.
func TestListFromWatchCache(t *testing.T) {
	objs := append(fixture(), testPod("ns1", "p1", "node-a", testNow, "10.244.0.9"))
	f := newFakeAPI(t, apiLists("7", objs...))
	ix, err := New(f.client(t), Config{TTL: 5, NodeName: "node-a", Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	ix.now = func() time.Time { return testNow }
	ctx, cancel := context.WithCancel(bg)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = ix.Run(ctx)
	}()
	defer func() {
		cancel()
		<-done
	}()
	dnstest.WaitFor(t, 5*time.Second, "sync", ix.Synced)

	waitAnswer(t, ix, "web.ns1.svc.cluster.local.", dns.TypeA, "NOERROR aa\nan web.ns1.svc.cluster.local. 5 A 10.96.0.10")
	waitAnswer(t, ix, "web-0.hl.ns1.svc.cluster.local.", dns.TypeA, "NOERROR aa\nan web-0.hl.ns1.svc.cluster.local. 5 A 10.244.1.5")
	waitAnswer(t, ix, "ext.ns1.svc.cluster.local.", dns.TypeA, "NOERROR aa ext=example.com.\nan ext.ns1.svc.cluster.local. 5 CNAME example.com.")
	if got, ok := ix.PodNamespace(mustAddr("10.244.0.9")); !ok || got != "ns1" {
		t.Errorf("PodNamespace(10.244.0.9) = %q, %v; want ns1 (from the streamed pod list)", got, ok)
	}

	seen := map[string]int{}
	for _, r := range f.requests() {
		q := r.URL.Query()
		seen[r.URL.Path]++
		if rv := q.Get("resourceVersion"); rv != "0" || q.Get("continue") != "" || q.Has("limit") {
			t.Errorf("%s asked resourceVersion=%q continue=%q limit=%q; want \"0\" (the watch cache), no continue, no page size", r.URL, rv, q.Get("continue"), q.Get("limit"))
		}
		if acc := r.Header.Get("Accept"); !strings.HasPrefix(acc, "application/vnd.kubernetes.protobuf") {
			t.Errorf("%s: Accept %q, want protobuf first", r.URL.Path, acc)
		}
		switch r.URL.Path {
		case "/apis/discovery.k8s.io/v1/endpointslices":
			if q.Get("labelSelector") != discoveryv1.LabelServiceName {
				t.Errorf("endpointslices listed with labelSelector %q", q.Get("labelSelector"))
			}
		case "/api/v1/pods":
			if q.Get("fieldSelector") != "spec.nodeName=node-a" {
				t.Errorf("pods listed with fieldSelector %q, want this node's", q.Get("fieldSelector"))
			}
		}
	}
	for _, p := range []string{"/api/v1/services", "/apis/discovery.k8s.io/v1/endpointslices", "/api/v1/namespaces", "/api/v1/pods"} {
		if seen[p] != 1 {
			t.Errorf("%s listed %d times, want once", p, seen[p])
		}
	}
}

// TestListKeepsOptions checks the list function passes the reflector's
// options through (resourceVersion "0", or the version of a relist) with
// the resource's selector added and no page size at version "0", on the
// typed path too.
func TestListKeepsOptions(t *testing.T) {
	var asked []metav1.ListOptions
	ls := listSpec{
		resource: "endpointslices", transform: endpointSliceTransform(false),
		opts: func(o *metav1.ListOptions) { o.LabelSelector = discoveryv1.LabelServiceName },
		typed: func(_ context.Context, o metav1.ListOptions) (runtime.Object, error) {
			asked = append(asked, o)
			l := &discoveryv1.EndpointSliceList{ListMeta: metav1.ListMeta{ResourceVersion: "42", Continue: "next"}}
			l.Items = append(l.Items, *slice("ns1", "a-1", "a", discoveryv1.AddressTypeIPv4, nil, ep{ips: []string{"10.244.0.1"}}))
			return l, nil
		},
	}
	list := ls.lister()
	in := []metav1.ListOptions{
		{ResourceVersion: "0", Limit: 500},
		{ResourceVersion: "17"},
		{ResourceVersion: "", Limit: 500},
		{ResourceVersion: "", Continue: "next", Limit: 500},
	}
	for _, o := range in {
		obj, err := list(bg, o)
		if err != nil {
			t.Fatal(err)
		}
		l := obj.(*strippedList)
		if l.ResourceVersion != "42" || l.Continue != "next" || len(l.Items) != 1 {
			t.Fatalf("list meta/items: %+v", l)
		}
		if e, ok := l.Items[0].(*endpointSlice); !ok || e.name != "a-1" || e.ip(0) != mustAddr("10.244.0.1") {
			t.Fatalf("item not stripped: %#v", l.Items[0])
		}
	}
	for i, o := range in {
		o.LabelSelector = discoveryv1.LabelServiceName
		if o.ResourceVersion == "0" {
			o.Limit = 0 // see list: no page size at version "0"
		}
		if asked[i] != o {
			t.Errorf("call %d asked %+v, want %+v", i, asked[i], o)
		}
	}
}

// TestListStreamMatchesTyped decodes the fixture's lists from protobuf (item
// by item) and from JSON (whole) and checks both give exactly the objects
// the informer transforms make of the API types, with the list metadata.
func TestListStreamMatchesTyped(t *testing.T) {
	objs := append(fixture(),
		testPod("ns1", "p1", "node-a", testNow, "10.244.0.9", "fd00:244::9"),
		testPod("ns2", "p2", "node-b", testNow.Add(time.Second)),
	)
	specs := map[string]struct {
		transform cache.TransformFunc
		decode    itemDecoder
	}{
		"/api/v1/services":                         {transformService, decodeService},
		"/apis/discovery.k8s.io/v1/endpointslices": {endpointSliceTransform(true), endpointSliceDecoder(true)},
		"/api/v1/namespaces":                       {namespaceTransform(testLabelKeys), namespaceDecoder(testLabelKeys)},
		"/api/v1/pods":                             {podTransform("node-a"), podDecoder("node-a")},
	}
	for path, l := range apiLists("99", objs...) {
		l.(metav1.ListInterface).SetContinue("c0ntinue")
		sp := specs[path]
		want, err := stripList(l, sp.transform)
		if err != nil {
			t.Fatal(err)
		}
		if len(want.Items) == 0 {
			t.Fatalf("%s: empty fixture", path)
		}
		js, err := json.Marshal(l)
		if err != nil {
			t.Fatal(err)
		}
		for kind, body := range map[string][]byte{"protobuf": protoList(t, l), "json": js} {
			got, err := decodeListStream(bufio.NewReader(bytes.NewReader(body)), sp.decode, sp.transform)
			if err != nil {
				t.Fatalf("%s %s: %v", path, kind, err)
			}
			if got.ResourceVersion != "99" || got.Continue != "c0ntinue" {
				t.Errorf("%s %s: list meta %+v", path, kind, got.ListMeta)
			}
			if !reflect.DeepEqual(got.Items, want.Items) {
				t.Errorf("%s %s: items differ from the typed path:\n got %s\nwant %s", path, kind, dumpItems(got.Items), dumpItems(want.Items))
			}
		}
	}
}

func dumpItems(items []runtime.Object) string {
	var b strings.Builder
	for _, it := range items {
		fmt.Fprintf(&b, "\n  %+v", it)
	}
	return b.String()
}

// TestListStreamErrors feeds broken bodies: each is an error, never a
// panic, a hang or a partial list.
func TestListStreamErrors(t *testing.T) {
	l := apiLists("5", fixture()...)["/api/v1/services"]
	good := protoList(t, l)
	decode := decodeService
	run := func(body []byte) error {
		_, err := decodeListStream(bufio.NewReader(bytes.NewReader(body)), decode, transformService)
		return err
	}
	if err := run(good); err != nil {
		t.Fatalf("good body: %v", err)
	}
	// Every truncation of a good body inside its list fails (a list cut
	// short is not a shorter list). What follows the list in the envelope
	// (empty content encoding and type) may go.
	var u runtime.Unknown
	if err := u.Unmarshal(good[len(pbdecode.Magic):]); err != nil {
		t.Fatal(err)
	}
	end := bytes.Index(good, u.Raw) + len(u.Raw)
	for n := 0; n < end; n++ {
		if err := run(good[:n]); err == nil {
			t.Fatalf("body cut to %d of %d bytes decoded without error", n, len(good))
		}
	}
	// An item whose length is over the bound is refused before it is read.
	var huge []byte
	huge = append(huge, pbdecode.Magic...)
	huge = append(huge, 2<<3|2)
	huge = binary.AppendUvarint(huge, pbdecode.MaxItem+100)
	huge = append(huge, 2<<3|2)
	huge = binary.AppendUvarint(huge, pbdecode.MaxItem+1)
	if err := run(huge); err == nil || !strings.Contains(err.Error(), "over the limit") {
		t.Errorf("oversized item: %v", err)
	}
	// A content encoding the decoder does not know.
	enc := append(append([]byte(nil), good...), 3<<3|2, 4, 'g', 'z', 'i', 'p')
	if err := run(enc); err == nil || !strings.Contains(err.Error(), "gzip") {
		t.Errorf("content encoding gzip: %v", err)
	}
	// Not protobuf, not JSON.
	if err := run([]byte("<html>")); err == nil {
		t.Error("an HTML body decoded")
	}
	// Protobuf magic without a list.
	if err := run([]byte(pbdecode.Magic)); err == nil {
		t.Error("a body without a list decoded")
	}
}

// TestListExpired checks a 410 Gone from the API server reaches the
// reflector as an Expired error, which is what makes it relist at the
// most recent version.
func TestListExpired(t *testing.T) {
	f := newFakeAPI(t, apiLists("1"))
	f.gone = true
	ls := listSpec{resource: "services", rc: f.client(t).CoreV1().RESTClient(), transform: transformService,
		decode: decodeService}
	_, err := ls.lister()(bg, metav1.ListOptions{ResourceVersion: "17"})
	if !apierrors.IsResourceExpired(err) {
		t.Fatalf("410 Gone gave %v, want an Expired error", err)
	}
}

// FuzzListStream feeds arbitrary bodies to the list decoder: it must not
// panic, and whatever it returns must be stripped objects.
func FuzzListStream(f *testing.F) {
	for _, l := range apiLists("3", fixture()...) {
		f.Add(protoList(f, l))
	}
	f.Add([]byte("{}"))
	f.Add([]byte(pbdecode.Magic))
	decoders := []struct {
		decode    itemDecoder
		transform cache.TransformFunc
	}{
		{decodeService, transformService},
		{endpointSliceDecoder(false), endpointSliceTransform(false)},
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, d := range decoders {
			l, err := decodeListStream(bufio.NewReader(bytes.NewReader(body)), d.decode, d.transform)
			if err != nil {
				continue
			}
			for _, it := range l.Items {
				switch it.(type) {
				case *service, *endpointSlice:
				default:
					t.Fatalf("decoded an unstripped %T", it)
				}
			}
		}
	})
}

// decodeCase is one protobuf object and the decoders to compare on it.
type decodeCase struct {
	name  string
	b     []byte
	typed func([]byte) (any, error) // API type + informer transform
	fast  func([]byte) (any, error) // the list path: package pbdecode + the same constructor
}

// protoDecoder returns the typed path of one list item: unmarshalled into
// a T, then stripped by transform.
func protoDecoder[T any, PT interface {
	*T
	Unmarshal([]byte) error
}](transform cache.TransformFunc) func([]byte) (any, error) {
	return func(b []byte) (any, error) {
		o := PT(new(T))
		if err := o.Unmarshal(b); err != nil {
			return nil, err
		}
		return transform(o)
	}
}

// protoCanon is b as the API type writes it again: Unmarshal then
// Marshal. The API server writes every object with that generated code.
func protoCanon[T any, PT interface {
	*T
	Unmarshal([]byte) error
	Marshal() ([]byte, error)
}](b []byte) ([]byte, error) {
	o := PT(new(T))
	if err := o.Unmarshal(b); err != nil {
		return nil, err
	}
	return o.Marshal()
}

// withDecoder is the list path of one item: dec with a Decoder of its
// own, kept from one call to the next as a list keeps it.
func withDecoder(dec itemDecoder) func([]byte) (any, error) {
	var d pbdecode.Decoder
	return func(b []byte) (any, error) { return dec(&d, b) }
}

func checkDecode(t *testing.T, c decodeCase) {
	t.Helper()
	want, err := c.typed(c.b)
	if err != nil {
		t.Fatalf("%s: the API type does not decode its own encoding: %v", c.name, err)
	}
	got, err := c.fast(c.b)
	if err != nil {
		t.Fatalf("%s: %v", c.name, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s: decoded\n%+v\nthe informer transform makes\n%+v", c.name, got, want)
	}
}

func marshal(t *testing.T, o interface{ Marshal() ([]byte, error) }) []byte {
	t.Helper()
	b, err := o.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestDecodeMatchesTyped checks the list path's item decoders (package
// pbdecode's Decoder, then the constructors) against the API types plus
// the informer transforms, on the fixture cluster and
// on thousands of random objects (every field filled at random, then the
// fields DNS reads steered to values with a meaning: service types,
// ClusterIPs and "None", address types, addresses valid and not, ready
// conditions, hostnames in mixed case, ports with and without numbers).
func TestDecodeMatchesTyped(t *testing.T) {
	svcT, svcF := protoDecoder[corev1.Service](transformService), withDecoder(decodeService)
	type pair struct{ typed, fast func([]byte) (any, error) }
	// Each option of the transforms: endpoint pod names, namespace labels.
	slicePairs := []pair{
		{protoDecoder[discoveryv1.EndpointSlice](endpointSliceTransform(false)), withDecoder(endpointSliceDecoder(false))},
		{protoDecoder[discoveryv1.EndpointSlice](endpointSliceTransform(true)), withDecoder(endpointSliceDecoder(true))},
	}
	nsPairs := []pair{
		{protoDecoder[corev1.Namespace](namespaceTransform(nil)), withDecoder(namespaceDecoder(nil))},
		{protoDecoder[corev1.Namespace](namespaceTransform(testLabelKeys)), withDecoder(namespaceDecoder(testLabelKeys))},
	}
	checkAll := func(name string, b []byte, ps []pair) {
		t.Helper()
		for i, p := range ps {
			checkDecode(t, decodeCase{fmt.Sprintf("%s (option %d)", name, i), b, p.typed, p.fast})
		}
	}
	podT := protoDecoder[corev1.Pod](podTransform("node-a"))
	podF := withDecoder(podDecoder("node-a"))

	objs := append(fixture(),
		testPod("ns1", "p1", "node-a", testNow, "10.244.0.9", "fd00:244::9"),
		testPod("ns1", "p0", "node-b", time.Time{}),
		ownedPod("ReplicaSet", "web-5d9f8c7b6", "5d9f8c7b6"),
		ownedPod("StatefulSet", "db", ""),
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns1", Name: "no-ports"}, Spec: corev1.ServiceSpec{ClusterIP: "10.96.0.99"}},
		&discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "ns1", Name: "fqdn"}, AddressType: discoveryv1.AddressTypeFQDN,
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"a.example.com"}}}},
	)
	for _, o := range objs {
		switch o := o.(type) {
		case *corev1.Service:
			checkDecode(t, decodeCase{"service " + o.Name, marshal(t, o), svcT, svcF})
		case *discoveryv1.EndpointSlice:
			checkAll("slice "+o.Name, marshal(t, o), slicePairs)
		case *corev1.Namespace:
			checkAll("namespace "+o.Name, marshal(t, o), nsPairs)
		case *corev1.Pod:
			checkDecode(t, decodeCase{"pod " + o.Name, marshal(t, o), podT, podF})
		}
	}

	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 1))
	f := k8stest.Filler(seed)
	pick := func(s ...string) string { return s[rng.IntN(len(s))] }
	ipish := func() string {
		return pick("10.96.0.1", "fd00:10:96::a", "::ffff:10.1.2.3", "None", "", "not-an-ip", "fe80::1%eth0", "10.244.7.7", "FD00::B")
	}
	for i := range 3000 {
		var s corev1.Service
		f.Fill(&s)
		s.Spec.Type = corev1.ServiceType(pick("ClusterIP", "NodePort", "LoadBalancer", "ExternalName", "", "Weird"))
		s.Spec.ClusterIP = ipish()
		if rng.IntN(3) > 0 {
			s.Spec.ClusterIPs = []string{ipish(), ipish()}[:rng.IntN(3)]
		}
		s.Spec.ExternalName = pick("Example.COM.", "example.com", "1.2.3.4", "", "web.ns1.svc.cluster.local", ".")
		for j := range s.Spec.Ports {
			s.Spec.Ports[j].Name = pick("HTTP", "dns", "")
			s.Spec.Ports[j].Protocol = corev1.Protocol(pick("TCP", "udp", "SCTP", "Other", ""))
		}
		checkDecode(t, decodeCase{fmt.Sprintf("random service %d", i), marshal(t, &s), svcT, svcF})

		var e discoveryv1.EndpointSlice
		f.Fill(&e)
		e.AddressType = discoveryv1.AddressType(pick("IPv4", "IPv6", "FQDN", ""))
		if rng.IntN(2) == 0 {
			if e.Labels == nil {
				e.Labels = map[string]string{}
			}
			e.Labels[discoveryv1.LabelServiceName] = pick("web", "", "Web")
		}
		for j := range e.Endpoints {
			ep := &e.Endpoints[j]
			ep.Addresses = []string{ipish(), ipish(), ipish()}[:rng.IntN(4)]
			if rng.IntN(2) == 0 {
				ep.Hostname = ptr(pick("Web-0", "", "x"))
			}
			if ep.TargetRef != nil {
				ep.TargetRef.Name = pick("web-6d4b75cb6d-x7k2p", "Web-0", "a.b", "", "-x", strings.Repeat("a", 64))
			}
		}
		for j := range e.Ports {
			if rng.IntN(2) == 0 {
				e.Ports[j].Protocol = ptr(corev1.Protocol(pick("TCP", "udp")))
			}
		}
		checkAll(fmt.Sprintf("random slice %d", i), marshal(t, &e), slicePairs)

		var n corev1.Namespace
		f.Fill(&n)
		if rng.IntN(2) == 0 { // labels the kept keys (testLabelKeys) name
			if n.Labels == nil {
				n.Labels = map[string]string{}
			}
			n.Labels[pick("env", "dns", "other")] = pick("prod", "yes", "")
		}
		checkAll(fmt.Sprintf("random namespace %d", i), marshal(t, &n), nsPairs)

		if i%3 == 0 { // pods are large; fewer of them
			var p corev1.Pod
			f.Fill(&p)
			p.Spec.NodeName = pick("node-a", "node-b", "")
			p.Status.Phase = corev1.PodPhase(pick("Running", "Succeeded", "Failed", "Pending", ""))
			p.Status.PodIP = ipish()
			p.Status.PodIPs = nil
			for range rng.IntN(3) {
				p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ipish()})
			}
			// Owners as controllers make them, and not: the workload a
			// pod of this node is reported under.
			yes, no := true, false
			for j := range p.OwnerReferences {
				p.OwnerReferences[j].Kind = pick("ReplicaSet", "StatefulSet", "Job", "", "Weird")
				p.OwnerReferences[j].Name = pick("web-5d9f8c7b6", "web", "db-0", "5d9f8c7b6", "-5d9f8c7b6")
				p.OwnerReferences[j].Controller = []*bool{&yes, &no, nil}[rng.IntN(3)]
			}
			if rng.IntN(2) == 0 {
				if p.Labels == nil {
					p.Labels = map[string]string{}
				}
				p.Labels[podTemplateHash] = pick("5d9f8c7b6", "", "x")
			}
			checkDecode(t, decodeCase{fmt.Sprintf("random pod %d", i), marshal(t, &p), podT, podF})
		}
	}
}

// ownedPod is a pod of node-a whose controller is kind/name, with the
// pod-template-hash label when hash is set.
func ownedPod(kind, name, hash string) *corev1.Pod {
	p := testPod("ns1", "owned-"+strings.ToLower(kind), "node-a", testNow, "10.244.0.10")
	yes := true
	p.OwnerReferences = []metav1.OwnerReference{{Kind: "Node", Name: "n"}, {Kind: kind, Name: name, Controller: &yes}}
	if hash != "" {
		p.Labels = map[string]string{podTemplateHash: hash}
	}
	return p
}

// FuzzDecode feeds arbitrary bytes to the item decoders: no panic, and
// whenever the API type accepts the bytes, the decoders agree with it.
func FuzzDecode(f *testing.F) {
	for _, o := range fixture() {
		if m, ok := o.(interface{ Marshal() ([]byte, error) }); ok {
			b, _ := m.Marshal()
			f.Add(b)
		}
	}
	pairs := []struct {
		typed, fast func([]byte) (any, error)
		canon       func([]byte) ([]byte, error)
	}{
		{protoDecoder[corev1.Service](transformService), withDecoder(decodeService), protoCanon[corev1.Service]},
		{protoDecoder[discoveryv1.EndpointSlice](endpointSliceTransform(false)), withDecoder(endpointSliceDecoder(false)), protoCanon[discoveryv1.EndpointSlice]},
		{protoDecoder[discoveryv1.EndpointSlice](endpointSliceTransform(true)), withDecoder(endpointSliceDecoder(true)), protoCanon[discoveryv1.EndpointSlice]},
		{protoDecoder[corev1.Namespace](namespaceTransform(testLabelKeys)), withDecoder(namespaceDecoder(testLabelKeys)), protoCanon[corev1.Namespace]},
		{protoDecoder[corev1.Pod](podTransform("node-a")), withDecoder(podDecoder("node-a")), protoCanon[corev1.Pod]},
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, p := range pairs {
			got, err := p.fast(b)
			want, werr := p.typed(b)
			if werr != nil || err != nil {
				continue // the decoders may be more lenient than the API type, or less on what it skips
			}
			if reflect.DeepEqual(got, want) {
				continue
			}
			// The generated code reads a map entry's key and value as
			// length-delimited whatever their wire type; the decoders
			// go by the wire type. No API server writes such an entry
			// (it writes with that same code): where the bytes are not
			// what the API type writes, the two must agree on what it
			// writes of them.
			c, cerr := p.canon(b)
			if cerr == nil && !bytes.Equal(c, b) {
				got, err = p.fast(c)
				want, werr = p.typed(c)
				if err != nil || werr != nil || reflect.DeepEqual(got, want) {
					if err != nil && werr == nil {
						t.Fatalf("decoding the API type's own encoding %x of input %x: %v; the API type gives %+v", c, b, err, want)
					}
					continue
				}
			}
			t.Fatalf("decoded %+v, the API type gives %+v", got, want)
		}
	})
}

// TestPodsForbidden runs the index against an API server whose RBAC does
// not let it list pods: with this node's pods wanted only for the
// search-path walk, the zone syncs and answers without them (saying why
// once); in verified mode, whose pod records need every pod, it does not.
func TestPodsForbidden(t *testing.T) {
	for _, mode := range []PodMode{PodsInsecure, PodsDisabled, PodsVerified} {
		t.Run(string(mode), func(t *testing.T) {
			f := newFakeAPI(t, apiLists("7", fixture()...))
			f.forbid = map[string]bool{"/api/v1/pods": true}
			var logs dnstest.SyncBuffer
			ix, err := New(f.client(t), Config{TTL: 5, NodeName: "node-a", Pods: mode,
				Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(bg)
			done := make(chan struct{})
			go func() {
				defer close(done)
				_ = ix.Run(ctx)
			}()
			defer func() {
				cancel()
				<-done
			}()
			if mode == PodsVerified {
				// The refusal is logged once it is known; a look of the
				// sync waiter made after that, with every other informer
				// synced, has weighed it: only then does "not synced" say
				// that the pods keep the zone from syncing.
				dnstest.WaitFor(t, 5*time.Second, "the refused pods list logged", func() bool {
					return strings.Contains(logs.String(), "pods verified needs list and watch on pods")
				})
				p0 := ix.Stats().SyncPasses
				dnstest.WaitFor(t, 5*time.Second, "a sync look with only the pods pending", func() bool {
					st := ix.Stats()
					return st.Synced || st.SyncPasses >= p0+2 && st.SyncPending == 1
				})
				if ix.Synced() {
					t.Fatal("verified mode synced without the pods it answers from")
				}
				return
			}
			dnstest.WaitFor(t, 5*time.Second, "sync without pods", ix.Synced)
			waitAnswer(t, ix, "web.ns1.svc.cluster.local.", dns.TypeA, "NOERROR aa\nan web.ns1.svc.cluster.local. 5 A 10.96.0.10")
			// The refusal is known (and may sync the zone) a moment before
			// it is logged; once logged, two more refused lists show it
			// is said once, not per retry.
			dnstest.WaitFor(t, 5*time.Second, "the refused pods list logged", func() bool {
				return strings.Contains(logs.String(), "listing this node's pods is forbidden")
			})
			r0 := f.refused.Load()
			dnstest.WaitFor(t, 5*time.Second, "two more refused pods lists", func() bool { return f.refused.Load() >= r0+2 })
			if n := strings.Count(logs.String(), "listing this node's pods is forbidden"); n != 1 {
				t.Errorf("the forbidden pods list logged %d times, want once:\n%s", n, logs.String())
			}
		})
	}
}
