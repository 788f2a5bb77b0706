package testenv

import (
	"io"
	"log/slog"
	"os"
	"testing"
)

// Logger returns a logger that writes to t's output at debug level when
// OUTBOX_TEST_LOG=1, and nowhere otherwise.
func Logger(t testing.TB) *slog.Logger {
	if os.Getenv("OUTBOX_TEST_LOG") == "1" {
		return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }
