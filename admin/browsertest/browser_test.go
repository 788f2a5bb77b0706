package browsertest_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/admin"
	"github.com/gormoutbox/outbox/admin/internal/admintest"
	"github.com/gormoutbox/outbox/internal/dialect"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

// secret is in every payload: no page may show it before it is asked.
const secret = admintest.Secret

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// eachDB runs fn per dialect on a fresh, migrated database.
func eachDB(t *testing.T, fn func(t *testing.T, db *gorm.DB)) {
	testenv.Each(t, func(t *testing.T, db *gorm.DB) {
		must(t, db.Use(&outbox.Plugin{AutoMigrate: true}))
		fn(t, db)
	})
}

// screenshotsEnv names the variable that makes the browser test also
// write its screenshots to docs/admin (the repository's copies).
const screenshotsEnv = "OUTBOX_UPDATE_SCREENSHOTS"

// chromium returns the path of a Chromium, skipping the test without one
// (failing it with OUTBOX_REQUIRE_SERVICES=1).
func chromium(t *testing.T) string {
	for _, name := range []string{"/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "no Chromium found (install it: apt-get install -y chromium); the admin page's browser tests need one"
	if testenv.Required() {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// browser returns a chromedp context of a headless Chromium.
func browser(t *testing.T) context.Context {
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium(t)),
		chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1280, 900))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelA() })
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("starting Chromium: %v", err)
	}
	return ctx
}

// history publishes 240 more events spread over the last hour, so that
// the overview's chart has something to show.
func history(t *testing.T, db *gorm.DB) {
	testenv.Emit(t, db, 240, func(i int) outbox.Event {
		return outbox.Event{ID: fmt.Sprintf("hist-%03d", i), Type: "shipment.sent", Topic: "shipping", Payload: map[string]int{"n": i}}
	})
	r, err := relay.New(db, relay.PublisherFunc(func(context.Context, *outbox.Envelope) error { return nil }),
		relay.WithBatchSize(1000), relay.WithLogger(slog.New(slog.DiscardHandler)))
	must(t, err)
	_, err = r.RunOnce(t.Context())
	must(t, err)
	kind, err := dialect.Of(db)
	must(t, err)
	now := time.Now()
	must(t, db.Transaction(func(tx *gorm.DB) error {
		for i := range 240 {
			at := now.Add(-time.Duration((i*7)%59)*time.Minute - time.Duration(i%50)*time.Second)
			lag := time.Duration(100+(i*37)%2900) * time.Millisecond
			if err := tx.Exec("UPDATE outbox_events SET published_at = ?, created_at = ? WHERE event_id = ?",
				kind.Time(at), kind.Time(at.Add(-lag)), fmt.Sprintf("hist-%03d", i)).Error; err != nil {
				return err
			}
		}
		return nil
	}))
}

// An operator finds a dead event, reads it, and replays it, by clicking,
// in a real browser; the screenshots go to the test's artifacts (and to
// docs/admin with OUTBOX_UPDATE_SCREENSHOTS=1).
func TestBrowser(t *testing.T) {
	chromium(t)
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		history(t, db)
		admintest.Seed(t, db)
		mux := http.NewServeMux()
		h, err := admin.NewHandler(db, admin.WithPrefix("/outbox"))
		must(t, err)
		mux.Handle("/outbox/", h)
		srv := httptest.NewServer(mux)
		defer srv.Close()
		base := srv.URL + "/outbox"

		// A relay beats while the overview is shot, then stops, so that
		// nothing delivers the replayed event.
		rctx, stopRelay := context.WithCancel(context.Background())
		stopped := make(chan struct{})
		r, err := relay.New(db, relay.PublisherFunc(func(context.Context, *outbox.Envelope) error { return nil }),
			relay.WithHeartbeat(100*time.Millisecond), relay.WithWorkerID("relay-1"), relay.WithLogger(slog.New(slog.DiscardHandler)))
		must(t, err)
		go func() { _ = r.Start(rctx); close(stopped) }()
		defer func() { stopRelay(); <-stopped }()
		insp, err := relay.NewInspector(db)
		must(t, err)
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if rs, _ := insp.Relays(t.Context()); len(rs) > 0 || time.Now().After(deadline) {
				break
			}
		}

		ctx := browser(t)
		shots := &shooter{t: t, ctx: ctx, docs: t.Name() == "TestBrowser/sqlite" && os.Getenv(screenshotsEnv) == "1"}
		text := func(sel string) string {
			t.Helper()
			s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
			if err != nil {
				t.Fatalf("reading %s: %v", sel, err)
			}
			return s
		}
		step := func(what string, actions ...chromedp.Action[chromedp.Void]) {
			t.Helper()
			tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			if err := chromedp.Do(tctx, actions...); err != nil {
				t.Fatalf("%s: %v", what, err)
			}
		}

		step("load the overview", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS("#counts")))
		if s := text("#attention"); !strings.Contains(s, "2 dead event(s)") || !strings.Contains(s, "customer:42") {
			t.Errorf("attention: %q", s)
		}
		if s := text("#relays"); !strings.Contains(s, "relay-1") || !strings.Contains(s, "live") {
			t.Errorf("relays: %q", s)
		}
		shots.take("overview")
		stopRelay()
		<-stopped

		step("filter the list", chromedp.Navigate(base+"/events"), chromedp.WaitVisible(chromedp.CSS("#filters")),
			chromedp.SetValue(chromedp.CSS(`select[name="status"]`), "dead"),
			chromedp.Click(chromedp.CSS(`#filters button[type="submit"]`)), chromedp.WaitVisible(chromedp.CSS("#replay-all")))
		if s := text("#events"); !strings.Contains(s, "dead-1") || !strings.Contains(s, "dead-2") || strings.Contains(s, "hist-") {
			t.Errorf("the dead list: %q", s)
		}
		if strings.Contains(text("body"), secret) {
			t.Errorf("the list shows payload bytes")
		}
		shots.take("events")

		step("open the event", chromedp.Click(chromedp.CSS(`#events a[href$="/events/dead-1"]`)), chromedp.WaitVisible(chromedp.CSS("#reveal")))
		if s := text("#last-error"); !strings.Contains(s, "schema mismatch") {
			t.Errorf("last error: %q", s)
		}
		if strings.Contains(text("body"), secret) {
			t.Errorf("the event page shows the payload before it is asked")
		}
		shots.take("event")
		step("reveal the payload", chromedp.Click(chromedp.CSS("#reveal")), chromedp.WaitVisible(chromedp.CSS("#payload")))
		if s := text("#payload"); !strings.Contains(s, `"card": "`+secret+`"`) {
			t.Errorf("payload: %q", s)
		}
		shots.take("event-payload")

		step("replay", chromedp.Click(chromedp.CSS("#replay")), chromedp.WaitVisible(chromedp.CSS("#question")))
		if s := text("#question"); !strings.Contains(s, "Replay the dead event dead-1") {
			t.Errorf("confirmation: %q", s)
		}
		shots.take("confirm")
		step("confirm", chromedp.Click(chromedp.CSS("#confirm")), chromedp.WaitVisible(chromedp.CSS("#done")))
		if s := text("#done"); !strings.Contains(s, "Replayed 1 event (dead-1)") {
			t.Errorf("outcome: %q", s)
		}
		step("back to the event", chromedp.Click(chromedp.CSS("#follow")), chromedp.WaitVisible(chromedp.CSS("#status")))
		if s := text("#status"); s != "pending" {
			t.Errorf("the replayed event is %q, want pending", s)
		}
		shots.take("replayed")

		step("blocked keys", chromedp.Navigate(base+"/keys"), chromedp.WaitVisible(chromedp.CSS("#keys")))
		if s := text("#keys"); !strings.Contains(s, "customer:42") || !strings.Contains(s, "broker timeout") {
			t.Errorf("blocked keys: %q", s)
		}
		shots.take("keys")
	})
}

// shooter saves full-page screenshots as test artifacts, and to
// docs/admin when docs is set.
type shooter struct {
	t    *testing.T
	ctx  context.Context
	docs bool
}

func (s *shooter) take(name string) {
	s.t.Helper()
	png, err := chromedp.Run(s.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		s.t.Fatalf("screenshot %s: %v", name, err)
	}
	dirs := []string{s.t.ArtifactDir()}
	if s.docs {
		dirs = append(dirs, filepath.Join("..", "..", "docs", "admin"))
	}
	for _, dir := range dirs {
		must(s.t, os.MkdirAll(dir, 0o755))
		must(s.t, os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644))
	}
}
