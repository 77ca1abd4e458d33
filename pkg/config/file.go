package config

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
)

// MaxFileBytes bounds the --config file: a ConfigMap holds at most 1 MiB
// (the API server refuses a larger one), so a larger file is no
// configuration the DaemonSet could have mounted, and reading it whole
// (at start, by `config validate`, and at every reload poll) would let a
// broken file take the agent's memory.
const MaxFileBytes = 1 << 20

// ErrTooLarge is the error of a --config file over MaxFileBytes.
var ErrTooLarge = errors.New("larger than 1 MiB (1048576 bytes), the most a ConfigMap holds")

// ReadFile reads the --config file at path, refusing one over MaxFileBytes
// without reading more than that and a byte. Every error names the file;
// one of a file too large wraps ErrTooLarge.
func ReadFile(path string) ([]byte, error) { return ReadConfigMapFile("config", path) }

// ReadConfigMapFile reads a file that comes from a ConfigMap (what names
// it in errors: "config", "Corefile"), with ReadFile's bound.
func ReadConfigMapFile(what, path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading %s %s: %w", what, path, err)
	}
	defer f.Close()
	// The size first, so that an oversized file polled every few seconds
	// is not read at all, and so that a file is read into one buffer of
	// its size. The limited read catches a file that grew since, and
	// files whose size stat does not tell.
	n := MaxFileBytes + 1
	if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
		if fi.Size() > MaxFileBytes {
			return nil, fmt.Errorf("%s %s: %w", what, path, ErrTooLarge)
		}
		n = int(fi.Size()) + 1 // one more: a file that grew shows
	}
	buf := make([]byte, n)
	got, err := io.ReadFull(f, buf)
	switch {
	case err == io.EOF || err == io.ErrUnexpectedEOF:
		return buf[:got], nil
	case err != nil:
		return nil, fmt.Errorf("reading %s %s: %w", what, path, err)
	case got > MaxFileBytes:
		return nil, fmt.Errorf("%s %s: %w", what, path, ErrTooLarge)
	}
	// It grew since stat: the rest, up to the bound.
	rest, err := io.ReadAll(io.LimitReader(f, int64(MaxFileBytes+1-got)))
	if err != nil {
		return nil, fmt.Errorf("reading %s %s: %w", what, path, err)
	}
	if got+len(rest) > MaxFileBytes {
		return nil, fmt.Errorf("%s %s: %w", what, path, ErrTooLarge)
	}
	return append(buf[:got], rest...), nil
}

// FileSum is the SHA-256 of a --config file's content: what a reload poll
// compares, instead of keeping the content itself.
type FileSum [sha256.Size]byte

// SumOf returns the FileSum of content.
func SumOf(content []byte) FileSum { return sha256.Sum256(content) }
