package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"

	"k8s.io/klog/v2"
)

// errReported wraps an error the command has already written to its log,
// so that run does not print it a second time in another format.
var errReported = errors.New("reported")

type reportedError struct{ err error }

func (e reportedError) Error() string        { return e.err.Error() }
func (e reportedError) Is(target error) bool { return target == errReported }
func (e reportedError) Unwrap() error        { return e.err }

// newLogger returns a logger writing format ("text" or "json") to w at
// level, and the LevelVar through which a reload changes the level. The
// values are those the config validated; others are an error.
func newLogger(level, format string, w io.Writer) (*slog.Logger, *slog.LevelVar, error) {
	lv := new(slog.LevelVar)
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text", "":
		return slog.New(slog.NewTextHandler(w, opts)), lv, nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), lv, nil
	}
	return nil, nil, fmt.Errorf("--log-format %q: want text or json", format)
}

// useLogger makes log the process's only log output: the default slog
// logger, the standard library's log package (slog.SetDefault redirects
// it), and klog, through which client-go reports (reflector errors,
// API server warnings), with component=client-go. One pod's log is then
// one format.
func useLogger(log *slog.Logger) {
	slog.SetDefault(log)
	klog.SetSlogLogger(log.With("component", "client-go"))
}
