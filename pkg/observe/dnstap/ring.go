package dnstap

import (
	"encoding/binary"
	"sync"
)

// ring is a tap's queue: Frame Streams data frames (a 4-byte big-endian
// length, then the message) laid end to end in one buffer allocated once,
// bounded in bytes (the buffer) and in frames. A frame never straddles
// the end of the buffer: one that does not fit there starts again at the
// beginning (a bip buffer), so the writer always takes whole frames from
// one contiguous stretch and writes them with one call.
//
// The senders encode into it under its lock; the writer takes a stretch
// (take), writes it without the lock (senders never touch the stretch:
// it is not free until release) and gives it back.
type ring struct {
	mu  sync.Mutex
	buf []byte
	// Data is [r, w) when wrap < 0; else [r, wrap) then [0, w), the free
	// room [w, r).
	r, w, wrap int
	// frames and used are what is queued; maxFrames bounds frames.
	frames, used, maxFrames int
}

func newRing(size, maxFrames int) *ring {
	return &ring{buf: make([]byte, size), wrap: -1, maxFrames: maxFrames}
}

// put encodes a frame of n bytes (the length prefix included) with enc,
// which must append exactly n-4 bytes to the slice it is given. ok false:
// no room, nothing written.
func (q *ring) put(n int, enc func([]byte) []byte) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.frames >= q.maxFrames {
		return false
	}
	off, wrapped := -1, false
	switch {
	case q.wrap < 0 && len(q.buf)-q.w >= n:
		off = q.w
	case q.wrap < 0 && q.r >= n:
		// Room at the beginning, before the oldest frame (the writer's
		// stretch starts there): wrap.
		off, wrapped = 0, true
	case q.wrap >= 0 && q.r-q.w >= n:
		off = q.w
	}
	if off < 0 {
		return false
	}
	b := q.buf[off : off+4 : off+n]
	binary.BigEndian.PutUint32(b, uint32(n-4))
	if out := enc(b); len(out) != n || &out[0] != &q.buf[off] {
		// The encoder appended another length than it said: the frame
		// is not queued (never the case: sizeDnstap is exact).
		return false
	}
	if wrapped {
		q.wrap = q.w
	}
	q.w = off + n
	q.frames++
	q.used += n
	return true
}

// take returns the oldest stretch of whole frames, at most max bytes (at
// least one frame), and how many frames it holds; nil when the queue is
// empty. The stretch stays queued until release.
func (q *ring) take(max int) ([]byte, int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.frames == 0 {
		return nil, 0
	}
	if q.wrap >= 0 && q.r == q.wrap {
		q.r, q.wrap = 0, -1
	}
	end := q.w
	if q.wrap >= 0 {
		end = q.wrap
	}
	n, count := 0, 0
	for q.r+n < end {
		l := 4 + int(binary.BigEndian.Uint32(q.buf[q.r+n:]))
		if n > 0 && n+l > max {
			break
		}
		n += l
		count++
	}
	return q.buf[q.r : q.r+n], count
}

// release frees the stretch take returned, of n bytes and count frames.
func (q *ring) release(n, count int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.r += n
	q.frames -= count
	q.used -= n
	if q.wrap >= 0 && q.r == q.wrap {
		q.r, q.wrap = 0, -1
	}
	if q.frames == 0 {
		q.r, q.w, q.wrap = 0, 0, -1
	}
}

// len returns the frames and bytes queued.
func (q *ring) len() (frames, bytes int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.frames, q.used
}
