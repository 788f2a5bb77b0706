package outbox_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/testenv"
)

// captureLogger is a GORM logger that keeps every line it would print.
type captureLogger struct {
	mu    sync.Mutex
	lines []string
	inner logger.Interface
}

func newCaptureLogger(slow time.Duration) *captureLogger {
	c := &captureLogger{}
	c.inner = logger.New(c, logger.Config{SlowThreshold: slow, LogLevel: logger.Warn})
	return c
}

func (c *captureLogger) Printf(format string, args ...any) {
	c.mu.Lock()
	c.lines = append(c.lines, fmt.Sprintf(format, args...))
	c.mu.Unlock()
}

func (c *captureLogger) all() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.lines, "\n")
}

// The outbox INSERT passes through the application's GORM logger when it
// is slow or fails: its payload and headers must not be in the log.
func TestNoPayloadInLogs(t *testing.T) {
	const secret, header = "SECRET-PAYLOAD-7f3a", "SECRET-HEADER-91c2"
	ev := outbox.Event{ID: "logged-event", Type: "logged", Payload: map[string]string{"card": secret}, Headers: map[string]string{"auth": header}}
	for _, d := range testenv.Dialects {
		t.Run(d, func(t *testing.T) {
			for _, c := range []struct {
				name     string
				slow     time.Duration
				migrate  bool
				wantFail bool
			}{
				{"slow", time.Nanosecond, true, false},
				{"failing", time.Hour, false, true}, // no outbox table: the INSERT fails
			} {
				t.Run(c.name, func(t *testing.T) {
					capture := newCaptureLogger(c.slow)
					cfg := testenv.Config()
					cfg.Logger = capture.inner
					db := testenv.OpenConfig(t, d, cfg)
					must(t, db.Use(&outbox.Plugin{AutoMigrate: c.migrate}))
					must(t, db.AutoMigrate(&Account{}))
					for _, run := range []func() error{
						func() error {
							return db.Transaction(func(tx *gorm.DB) error { return outbox.Emit(tx, ev) })
						},
						func() error {
							acc := Account{Owner: "o"}
							acc.Record(ev)
							return db.Create(&acc).Error
						},
					} {
						if err := run(); (err != nil) != c.wantFail {
							t.Fatalf("err = %v, want failure: %v", err, c.wantFail)
						}
					}
					out := capture.all()
					if !strings.Contains(out, "INSERT INTO outbox_events") {
						t.Fatalf("the outbox INSERT was not logged; the log:\n%s", out)
					}
					if !strings.Contains(out, "logged-event") {
						t.Errorf("the event id is not in the log; the log:\n%s", out)
					}
					for _, s := range []string{secret, header} {
						if strings.Contains(out, s) {
							t.Errorf("%s is in the log:\n%s", s, out)
						}
					}
				})
			}
		})
	}
}
