package pbdecode

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
)

// Wire types (protobuf's encoding guide).
const (
	wireVarint  = 0
	wireFixed64 = 1
	wireBytes   = 2 // length-delimited: strings, bytes, messages, packed repeated fields
	wireFixed32 = 5
)

// errMalformed is wrapped by every error of a message read in memory
// (fieldIter).
var errMalformed = errors.New("malformed protobuf")

// errTruncated is a message read from a stream that ends inside it.
var errTruncated = errors.New("protobuf: truncated message")

// fieldIter walks the fields of one protobuf message held in memory.
type fieldIter struct {
	b   []byte
	err error
	// The current field: its number and wire type, its varint value (wire
	// type 0) or its bytes (wire type 2).
	field uint64
	wt    int
	v     uint64
	data  []byte
}

// next advances to the next field; false at the end or on an error
// (it.err).
func (it *fieldIter) next() bool {
	if it.err != nil || len(it.b) == 0 {
		return false
	}
	k, n := binary.Uvarint(it.b)
	if n <= 0 || k>>3 == 0 {
		return it.fail("field key")
	}
	it.b = it.b[n:]
	it.field, it.wt, it.data, it.v = k>>3, int(k&7), nil, 0
	switch it.wt {
	case wireVarint:
		v, n := binary.Uvarint(it.b)
		if n <= 0 {
			return it.fail("varint")
		}
		it.v, it.b = v, it.b[n:]
	case wireFixed64, wireFixed32:
		size := 8
		if it.wt == wireFixed32 {
			size = 4
		}
		if len(it.b) < size {
			return it.fail("fixed field")
		}
		it.b = it.b[size:]
	case wireBytes:
		l, n := binary.Uvarint(it.b)
		if n <= 0 || l > uint64(len(it.b)-n) {
			return it.fail("length")
		}
		it.data, it.b = it.b[n:n+int(l)], it.b[n+int(l):]
	default:
		return it.fail(fmt.Sprintf("wire type %d", it.wt))
	}
	return true
}

func (it *fieldIter) fail(what string) bool {
	it.err = fmt.Errorf("%w: bad %s", errMalformed, what)
	return false
}

// is reports whether the current field is number f of wire type wt.
func (it *fieldIter) is(f uint64, wt int) bool { return it.field == f && it.wt == wt }

// sub returns an iterator over the current field's bytes.
func (it *fieldIter) sub() fieldIter { return fieldIter{b: it.data} }

// streamReader reads protobuf fields from a stream: n bytes of one
// message, or up to EOF when n is negative.
type streamReader struct {
	br *bufio.Reader
	n  int64
}

func (p *streamReader) ReadByte() (byte, error) {
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
func (p *streamReader) tag() (field uint64, wireType int, err error) {
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
func (p *streamReader) length() (int64, error) {
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
func (p *streamReader) bytes(buf []byte, limit int64) ([]byte, error) {
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
func (p *streamReader) skip(wireType int) error {
	var n int64
	switch wireType {
	case wireVarint:
		_, err := binary.ReadUvarint(p)
		return err
	case wireFixed64:
		n = 8
	case wireBytes:
		var err error
		if n, err = p.length(); err != nil {
			return err
		}
	case wireFixed32:
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
