package k8s

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
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
// the protobuf response is walked item by item, and each item is decoded
// straight into the stripped object (decode.go); nothing else of it is
// kept. JSON responses (a server or proxy that will
// not speak protobuf) and clients without a REST client (fakes in tests)
// take the typed path: the list decoded whole, then stripped by the
// informer transforms, which also strip every watch event.

// listSpec describes how one resource is listed.
type listSpec struct {
	resource  string         // plural, e.g. "services"
	rc        rest.Interface // the group's REST client; nil or a nil pointer: typed only
	typed     cache.ListWithContextFunc
	transform cache.TransformFunc
	// decode turns the protobuf bytes of one list item into the stripped
	// object.
	decode func([]byte) (any, error)
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

// maxListItem bounds the size of one encoded list item. etcd refuses
// values above 1.5 MiB unless told otherwise; this is far above any
// object the API server can store and keeps a corrupt length from
// allocating without bound.
const maxListItem = 16 << 20

// maxJSONList bounds a list body that is not protobuf, which is decoded
// whole: the API server sends protobuf, so such a body comes from
// something in between (a proxy, an aggregated API), and one that never
// ends must not be read until the node runs out of memory. A GiB is far
// above any cluster's list as JSON. (A variable for the test.)
var maxJSONList = 1 << 30

// pbMagic starts every Kubernetes protobuf body.
var pbMagic = []byte{'k', '8', 's', 0}

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
func decodeListStream(br *bufio.Reader, decode func([]byte) (any, error), transform cache.TransformFunc) (*strippedList, error) {
	head, err := br.Peek(len(pbMagic))
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	if !bytes.Equal(head, pbMagic) {
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
	_, _ = br.Discard(len(pbMagic))

	// The body is a runtime.Unknown message that runs to EOF; its field 2
	// (raw) is the list message: ListMeta (1) and the items (2).
	out := &strippedList{}
	pr := &pbReader{br: br, n: -1}
	sawRaw := false
	for {
		field, wt, err := pr.tag()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		switch {
		case field == 2 && wt == 2 && !sawRaw:
			sawRaw = true
			n, err := pr.length()
			if err != nil {
				return nil, err
			}
			if err := decodeList(&pbReader{br: br, n: n}, out, decode); err != nil {
				return nil, err
			}
		case field == 3 && wt == 2:
			enc, err := pr.bytes(nil, 256)
			if err != nil {
				return nil, err
			}
			if len(enc) > 0 {
				return nil, fmt.Errorf("protobuf list with content encoding %q", enc)
			}
		default:
			if err := pr.skip(wt); err != nil {
				return nil, err
			}
		}
	}
	if !sawRaw {
		return nil, errors.New("protobuf body without a list")
	}
	return out, nil
}

// decodeList reads the fields of a list message from pr.
func decodeList(pr *pbReader, out *strippedList, decode func([]byte) (any, error)) error {
	var buf []byte
	for pr.n > 0 {
		field, wt, err := pr.tag()
		if err != nil {
			return err
		}
		switch {
		case field == 1 && wt == 2:
			if buf, err = pr.bytes(buf, maxListItem); err != nil {
				return err
			}
			var lm metav1.ListMeta
			if err := lm.Unmarshal(buf); err != nil {
				return fmt.Errorf("list metadata: %w", err)
			}
			out.ListMeta = lm
		case field == 2 && wt == 2:
			if buf, err = pr.bytes(buf, maxListItem); err != nil {
				return err
			}
			obj, err := decode(buf)
			if err != nil {
				return fmt.Errorf("list item %d: %w", len(out.Items), err)
			}
			out.Items = append(out.Items, obj.(runtime.Object))
		default:
			if err := pr.skip(wt); err != nil {
				return err
			}
		}
	}
	return nil
}

// pbReader reads protobuf fields from a stream: n bytes of one message,
// or up to EOF when n is negative.
type pbReader struct {
	br *bufio.Reader
	n  int64
}

var errTruncated = errors.New("protobuf: truncated message")

func (p *pbReader) ReadByte() (byte, error) {
	if p.n == 0 {
		return 0, errTruncated
	}
	b, err := p.br.ReadByte()
	if err != nil {
		if p.n > 0 && errors.Is(err, io.EOF) {
			err = errTruncated
		}
		return 0, err
	}
	if p.n > 0 {
		p.n--
	}
	return b, nil
}

// tag reads a field's key. At the end of an unbounded message it returns
// io.EOF.
func (p *pbReader) tag() (field uint64, wireType int, err error) {
	if p.n < 0 {
		if _, err := p.br.Peek(1); errors.Is(err, io.EOF) {
			return 0, 0, io.EOF
		}
	}
	k, err := binary.ReadUvarint(p)
	if err != nil {
		return 0, 0, fmt.Errorf("protobuf key: %w", err)
	}
	if k>>3 == 0 {
		return 0, 0, errors.New("protobuf: field number 0")
	}
	return k >> 3, int(k & 7), nil
}

// length reads the length of a length-delimited field.
func (p *pbReader) length() (int64, error) {
	v, err := binary.ReadUvarint(p)
	if err != nil {
		return 0, fmt.Errorf("protobuf length: %w", err)
	}
	if v > 1<<40 || (p.n >= 0 && int64(v) > p.n) {
		return 0, errTruncated
	}
	return int64(v), nil
}

// bytes reads a length-delimited field of at most limit bytes into buf.
func (p *pbReader) bytes(buf []byte, limit int64) ([]byte, error) {
	n, err := p.length()
	if err != nil {
		return nil, err
	}
	if n > limit {
		return nil, fmt.Errorf("protobuf field of %d bytes, over the limit of %d", n, limit)
	}
	buf = slices.Grow(buf[:0], int(n))[:n]
	if _, err := io.ReadFull(p.br, buf); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			err = errTruncated
		}
		return nil, err
	}
	if p.n > 0 {
		p.n -= n
	}
	return buf, nil
}

// skip skips a field's value.
func (p *pbReader) skip(wireType int) error {
	var n int64
	switch wireType {
	case 0:
		_, err := binary.ReadUvarint(p)
		return err
	case 1:
		n = 8
	case 2:
		var err error
		if n, err = p.length(); err != nil {
			return err
		}
	case 5:
		n = 4
	default:
		return fmt.Errorf("protobuf: unsupported wire type %d", wireType)
	}
	if p.n >= 0 && n > p.n {
		return errTruncated
	}
	if d, err := p.br.Discard(int(n)); err != nil || int64(d) != n {
		return errTruncated
	}
	if p.n > 0 {
		p.n -= n
	}
	return nil
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

// protoDecoder returns a decode function for listSpec: the item is
// unmarshalled into a T and stripped by transform.
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
