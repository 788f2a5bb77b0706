package walbrokers

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/tests/internal/servers"
)

// The CLI in WAL mode on a server with wal_level=logical: `outbox migrate
// --wal` creates the slot (db.Use in WAL mode then accepts the server),
// `outbox stats` reports the slot with the events it holds and no
// streamer, and `outbox migrate --drop-wal` drops it.
func TestWALCLI(t *testing.T) {
	pg := servers.StartPostgres(t, servers.WithArgs("-c", "wal_level=logical", "-c", "max_wal_senders=10", "-c", "max_replication_slots=10"))
	bin := filepath.Join(t.TempDir(), "outbox")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = filepath.Join("..", "..", "cmd", "outbox")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the CLI: %v\n%s", err, out)
	}
	run := func(args ...string) string {
		t.Helper()
		c := exec.Command(bin, args...)
		c.Env = append(os.Environ(), "OUTBOX_DB="+pg.DSN())
		out, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("outbox %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run("migrate", "--wal")
	db, err := gorm.Open(postgres.Open(pg.DSN()), &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Use(&outbox.Plugin{WAL: &outbox.WAL{}}); err != nil {
		t.Fatalf("db.Use in WAL mode after outbox migrate --wal: %v", err)
	}
	sqlDB, _ := db.DB()
	defer sqlDB.Close()
	for range 10 {
		if err := db.Transaction(func(tx *gorm.DB) error { return outbox.Emit(tx, outbox.Event{Type: "cli.test"}) }); err != nil {
			t.Fatal(err)
		}
	}
	var stats struct {
		WAL *struct {
			Slot     string `json:"slot"`
			Status   string `json:"wal_status"`
			Active   bool   `json:"active"`
			LagBytes int64  `json:"lag_bytes"`
			Warning  string `json:"warning"`
		} `json:"wal"`
	}
	if err := json.Unmarshal([]byte(run("stats", "--json")), &stats); err != nil {
		t.Fatal(err)
	}
	if w := stats.WAL; w == nil || w.Slot != "outbox_events_wal" || w.Active || w.LagBytes <= 0 || w.Warning != "no relay streams the slot" {
		t.Errorf("stats' wal: %+v", w)
	}
	if text := run("stats"); !strings.Contains(text, "WAL slot") || !strings.Contains(text, "no relay streams it") {
		t.Errorf("stats text:\n%s", text)
	}
	// outbox relay --wal streams the slot: the ten events, as CloudEvents
	// JSON lines on stdout.
	if out := relayWAL(t, bin, pg.DSN(), 10); strings.Count(out, `"type":"cli.test"`) < 10 {
		t.Errorf("outbox relay --wal delivered fewer than 10 events:\n%s", out)
	}
	run("migrate", "--drop-wal")
	var n int
	if err := db.Raw(`SELECT count(*) FROM pg_replication_slots`).Scan(&n).Error; err != nil || n != 0 {
		t.Errorf("%d slots left after --drop-wal (%v)", n, err)
	}
}

// relayWAL runs `outbox relay --to stdout --wal` until it printed n lines
// (30 s at most), stops it with SIGTERM and returns what it printed.
func relayWAL(t *testing.T, bin, dsn string, n int) string {
	t.Helper()
	relayCmd := exec.Command(bin, "relay", "--to", "stdout", "--wal")
	relayCmd.Env = append(os.Environ(), "OUTBOX_DB="+dsn)
	var out syncBuffer
	relayCmd.Stdout = &out
	if err := relayCmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for strings.Count(out.String(), "\n") < n && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	_ = relayCmd.Process.Signal(syscall.SIGTERM)
	if err := relayCmd.Wait(); err != nil {
		t.Errorf("outbox relay --wal: %v", err)
	}
	return out.String()
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
