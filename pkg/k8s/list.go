package k8s

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/nodedns/nodedns/pkg/k8s/pbdecode"
)

// How the informers list.
//
// The reflector's first list asks for resourceVersion "0", and we keep it,
// without a page size: the API server answers it whole from its watch
// cache, as it does kube-proxy's, so a fleet of agents starting at once (a
// node-pool restart, an API-server upgrade) costs etcd nothing. A quorum
// list (resourceVersion "", or a continue token) is served from etcd, page
// by page, by API servers that cannot serve consistent reads from their
// cache (before 1.31, or with etcd older than 3.4.31/3.5.13) or cannot page
// from it (before 1.34's cache snapshots), and a reflector whose first list
// came back paged pages every relist at an exact version, from etcd again.
// Relists ask for the last version seen without a page size, which the
// watch cache serves too; only when that version is no longer available
// (410 Gone on the list itself) does client-go fall back to a quorum list.
//
// A whole list is the agent's peak allocation if it is decoded into the API
// types at once (10,000 Services and their EndpointSlices are some 40 MB of
// decoded objects, several times that with the fields a real cluster fills
// in: managed fields, target references). So the list is read as a stream:
// the protobuf response is walked item by item, and each item is read in
// place for the fields DNS needs (package pbdecode) and made into the
// stripped object by the constructor the informer transform uses
// (objects.go); nothing else of it is kept. JSON responses (a server or
// proxy that will not speak protobuf) and clients without a REST client
// (fakes in tests) take the typed path: the list decoded whole, then
// stripped by the informer transforms, which also strip every watch event.

// listSpec describes how one resource is listed.
type listSpec struct {
	resource  string         // plural, e.g. "services"
	rc        rest.Interface // the group's REST client; nil or a nil pointer: typed only
	typed     cache.ListWithContextFunc
	transform cache.TransformFunc
	// decode turns the protobuf bytes of one list item into the stripped
	// object.
	decode itemDecoder
	// opts sets the selectors of the resource on list and watch options.
	opts func(*metav1.ListOptions)
	// sized, when set, is told each list's stripped items before the
	// informer hands them over one by one, so the index can size its maps
	// once.
	sized func([]runtime.Object)
	// failed, when set, is told each failed list.
	failed func(error)
	log    *slog.Logger // nil: no log
}

// maxJSONList bounds a list body that is not protobuf, which is decoded
// whole: the API server sends protobuf, so such a body comes from
// something in between (a proxy, an aggregated API), and one that never
// ends must not be read until the node runs out of memory. A GiB is far
// above any cluster's list as JSON. (A variable for the test.)
var maxJSONList = 1 << 30

// contentTypes asks for protobuf and accepts JSON.
const contentTypes = "application/vnd.kubernetes.protobuf, application/json"

// lister returns the ListWithContextFunc of s for an informer.
func (s listSpec) lister() cache.ListWithContextFunc {
	list := s.list
	if s.failed == nil {
		return list
	}
	return func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
		l, err := list(ctx, opts)
		if err != nil {
			s.failed(err)
		}
		return l, err
	}
}

// list lists one page of the resource, stripped.
func (s listSpec) list(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	if s.opts != nil {
		s.opts(&opts)
	}
	if opts.ResourceVersion == "0" {
		// The watch cache ignores a page size at version "0", but an API
		// server whose cache is still initializing (just restarted or
		// upgraded) sends a list with a page size and no selector to etcd
		// instead, paged; and a first list that came back paged makes
		// client-go page every later relist at an exact version, from
		// etcd, for good. Without a page size it answers 429 with
		// Retry-After until its cache is ready, which the client honours.
		opts.Limit = 0
	}
	var (
		l     *strippedList
		err   error
		start = time.Now()
		body  countingReader
	)
	if rc, ok := s.rc.(*rest.RESTClient); !ok || rc == nil {
		var obj runtime.Object
		if obj, err = s.typed(ctx, opts); err != nil {
			return nil, err
		}
		if l, err = stripList(obj, s.transform); err != nil {
			return nil, err
		}
	} else {
		rc, err := s.rc.Get().Resource(s.resource).VersionedParams(&opts, scheme.ParameterCodec).
			SetHeader("Accept", contentTypes).Stream(ctx)
		if err != nil {
			return nil, err
		}
		defer rc.Close()
		body.r = rc
		if l, err = decodeListStream(bufio.NewReaderSize(&body, 64<<10), s.decode, s.transform); err != nil {
			return nil, fmt.Errorf("reading the list of %s: %w", s.resource, err)
		}
	}
	if s.log != nil {
		// One line per list: lists happen at start and after a watch
		// could not be resumed, and say how long the API server took.
		s.log.Info("listed", "resource", s.resource, "items", len(l.Items), "bytes", body.n,
			"resourceVersion", opts.ResourceVersion, "took", time.Since(start).Round(time.Millisecond).String())
	}
	if s.sized != nil {
		s.sized(l.Items)
	}
	return l, nil
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// stripList strips every item of a decoded list.
func stripList(obj runtime.Object, transform cache.TransformFunc) (*strippedList, error) {
	lm, err := meta.ListAccessor(obj)
	if err != nil {
		return nil, fmt.Errorf("list result %T: %w", obj, err)
	}
	items, err := meta.ExtractList(obj)
	if err != nil {
		return nil, fmt.Errorf("list result %T: %w", obj, err)
	}
	out := &strippedList{Items: make([]runtime.Object, 0, len(items))}
	out.ResourceVersion, out.Continue = lm.GetResourceVersion(), lm.GetContinue()
	out.RemainingItemCount = lm.GetRemainingItemCount()
	for _, it := range items {
		s, err := transform(it)
		if err != nil {
			return nil, err
		}
		out.Items = append(out.Items, s.(runtime.Object))
	}
	return out, nil
}

// decodeListStream reads a list response. A protobuf body is walked item
// by item; anything else is decoded whole as JSON and stripped.
func decodeListStream(br *bufio.Reader, decode itemDecoder, transform cache.TransformFunc) (*strippedList, error) {
	head, err := br.Peek(len(pbdecode.Magic))
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	if string(head) != pbdecode.Magic {
		data, err := io.ReadAll(io.LimitReader(br, int64(maxJSONList)+1))
		if err != nil {
			return nil, err
		}
		if len(data) > maxJSONList {
			return nil, fmt.Errorf("a non-protobuf list over %d MiB", maxJSONList>>20)
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(data, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("decoding a non-protobuf list: %w", err)
		}
		return stripList(obj, transform)
	}
	out := &strippedList{}
	var d pbdecode.Decoder // one for the list: its items are read in turn
	lm, err := pbdecode.ReadList(br, func(item []byte) error {
		obj, err := decode(&d, item)
		if err != nil {
			return err
		}
		out.Items = append(out.Items, obj.(runtime.Object))
		return nil
	})
	if err != nil {
		return nil, err
	}
	out.ListMeta = lm
	return out, nil
}

// itemDecoder turns the protobuf bytes of one list item into the stripped
// object, reading them with d.
type itemDecoder func(d *pbdecode.Decoder, item []byte) (any, error)

// The item decoders of the four kinds: each makes the stripped object
// with the constructor its informer transform uses, from the same fields
// read from the bytes.

// decodeService is the item decoder of v1.Services, matching
// transformService.
func decodeService(d *pbdecode.Decoder, b []byte) (any, error) {
	f, err := d.Service(b)
	if err != nil {
		return nil, err
	}
	return newService(f), nil
}

// endpointSliceDecoder returns the item decoder of discovery/v1
// EndpointSlices matching endpointSliceTransform(podNames).
func endpointSliceDecoder(podNames bool) itemDecoder {
	return func(d *pbdecode.Decoder, b []byte) (any, error) {
		f, err := d.EndpointSlice(b, podNames)
		if err != nil {
			return nil, err
		}
		return newEndpointSlice(f, podNames), nil
	}
}

// namespaceDecoder returns the item decoder of v1.Namespaces matching
// namespaceTransform(keys).
func namespaceDecoder(keys labelKeys) itemDecoder {
	return func(d *pbdecode.Decoder, b []byte) (any, error) {
		f, err := d.Namespace(b, len(keys) > 0)
		if err != nil {
			return nil, err
		}
		return newNamespace(f, keys), nil
	}
}

// podDecoder returns the item decoder of v1.Pods for node, matching
// podTransform(node).
func podDecoder(node string) itemDecoder {
	return func(d *pbdecode.Decoder, b []byte) (any, error) {
		f, err := d.Pod(b)
		if err != nil {
			return nil, err
		}
		return newPod(f, node), nil
	}
}

// strippedList is a list of stripped objects with the list's metadata.
type strippedList struct {
	metav1.TypeMeta
	metav1.ListMeta
	Items []runtime.Object
}

func (l *strippedList) DeepCopyObject() runtime.Object {
	c := *l
	c.Items = slices.Clone(l.Items)
	return &c
}
