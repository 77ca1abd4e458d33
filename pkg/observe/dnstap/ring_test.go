package dnstap

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"
)

// TestRing: frames come out whole, in order, across the wrap of the
// buffer, whatever the sizes and however the writer takes them; the
// bounds in bytes and frames hold.
func TestRing(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	q := newRing(1000, 20)
	next, want := 0, 0 // the next frame's number put, and taken
	used := 0
	for step := range 20000 {
		if rng.IntN(3) > 0 {
			n := 8 + rng.IntN(200) // the length and the frame's number at least
			ok := q.put(n, func(b []byte) []byte {
				b = binary.BigEndian.AppendUint32(b, uint32(next))
				for len(b) < n {
					b = append(b, byte(next))
				}
				return b
			})
			frames, bytes := q.len()
			if ok {
				next++
				used += n
			} else if frames == 0 {
				t.Fatalf("step %d: no room for %d bytes in an empty queue (r %d w %d wrap %d used %d)", step, n, q.r, q.w, q.wrap, q.used)
			}
			if bytes != used || bytes > 1000 || frames > 20 {
				t.Fatalf("step %d: %d frames, %d bytes, want %d bytes within 1000 and 20 frames", step, frames, bytes, used)
			}
			continue
		}
		b, count := q.take(1 + rng.IntN(400))
		off := 0
		for range count {
			l := int(binary.BigEndian.Uint32(b[off:]))
			if got := int(binary.BigEndian.Uint32(b[off+4:])); got != want {
				t.Fatalf("step %d: frame %d, want %d", step, got, want)
			}
			for _, c := range b[off+8 : off+4+l] {
				if c != byte(want) {
					t.Fatalf("step %d: frame %d corrupted", step, want)
				}
			}
			off += 4 + l
			want++
		}
		if off != len(b) {
			t.Fatalf("step %d: stretch of %d bytes, frames of %d", step, len(b), off)
		}
		q.release(len(b), count)
		used -= len(b)
	}
	if want < 1000 {
		t.Fatalf("only %d frames went through", want)
	}
	// A frame larger than the buffer never fits.
	if q.put(2000, func(b []byte) []byte { return append(b, make([]byte, 1996)...) }) {
		t.Error("a frame larger than the queue was queued")
	}
	// An encoder that appends more than it said is refused.
	q = newRing(1000, 20)
	if q.put(10, func(b []byte) []byte { return append(b, make([]byte, 20)...) }) {
		t.Error("an encoder writing past its frame was queued")
	}
	if f, n := q.len(); f != 0 || n != 0 {
		t.Errorf("after a refused frame: %d frames, %d bytes", f, n)
	}
}
