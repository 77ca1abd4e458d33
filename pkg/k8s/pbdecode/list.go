package pbdecode

import (
	"bufio"
	"errors"
	"fmt"
	"io"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Magic starts every Kubernetes protobuf body.
const Magic = "k8s\x00"

// MaxItem bounds the size of one encoded list item. etcd refuses values
// above 1.5 MiB unless told otherwise; this is far above any object the
// API server can store and keeps a corrupt length from allocating without
// bound.
const MaxItem = 16 << 20

// ReadList reads a protobuf list body from br, which starts with Magic,
// item by item: item is called with the bytes of each item in turn, which
// are valid until it returns (the next item reuses them). It returns the
// list's metadata. An error of item ends the read, wrapped with the
// item's index.
//
// The body is a runtime.Unknown message that runs to EOF; its field 2
// (raw) is the list message, ListMeta (1) and the items (2); its field 3
// (contentEncoding) must be empty.
func ReadList(br *bufio.Reader, item func([]byte) error) (metav1.ListMeta, error) {
	var lm metav1.ListMeta
	if head, err := br.Peek(len(Magic)); string(head) != Magic {
		if err != nil && !errors.Is(err, io.EOF) {
			return lm, err
		}
		return lm, errors.New("protobuf: a body without the Kubernetes magic")
	}
	_, _ = br.Discard(len(Magic))
	pr := &streamReader{br: br, n: -1}
	sawRaw := false
	for {
		field, wt, err := pr.tag()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return lm, err
		}
		switch {
		case field == 2 && wt == wireBytes && !sawRaw:
			sawRaw = true
			n, err := pr.length()
			if err != nil {
				return lm, err
			}
			if err := readList(&streamReader{br: br, n: n}, &lm, item); err != nil {
				return lm, err
			}
		case field == 3 && wt == wireBytes:
			enc, err := pr.bytes(nil, 256)
			if err != nil {
				return lm, err
			}
			if len(enc) > 0 {
				return lm, fmt.Errorf("protobuf list with content encoding %q", enc)
			}
		default:
			if err := pr.skip(wt); err != nil {
				return lm, err
			}
		}
	}
	if !sawRaw {
		return lm, errors.New("protobuf body without a list")
	}
	return lm, nil
}

// readList reads the fields of a list message from pr: its metadata into
// lm, its items to item.
func readList(pr *streamReader, lm *metav1.ListMeta, item func([]byte) error) error {
	var buf []byte
	items := 0
	for pr.n > 0 {
		field, wt, err := pr.tag()
		if err != nil {
			return err
		}
		switch {
		case field == 1 && wt == wireBytes:
			if buf, err = pr.bytes(buf, MaxItem); err != nil {
				return err
			}
			var m metav1.ListMeta
			if err := m.Unmarshal(buf); err != nil {
				return fmt.Errorf("list metadata: %w", err)
			}
			*lm = m
		case field == 2 && wt == wireBytes:
			if buf, err = pr.bytes(buf, MaxItem); err != nil {
				return err
			}
			if err := item(buf); err != nil {
				return fmt.Errorf("list item %d: %w", items, err)
			}
			items++
		default:
			if err := pr.skip(wt); err != nil {
				return err
			}
		}
	}
	return nil
}
