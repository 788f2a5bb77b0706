// Package browsertest drives the admin page in a real browser (Debian's
// Chromium, through chromedp): an operator finds a dead event, reads it and
// replays it by clicking, on each database, and the screenshots of
// docs/admin are taken (OUTBOX_UPDATE_SCREENSHOTS=1 writes them there).
// It is a module of its own so that the browser driver is not in the core
// module's go.mod: run it from this folder (go test -race ./...), as
// .ci/run does. Without a Chromium the test is skipped, naming what to
// install, or fails with OUTBOX_REQUIRE_SERVICES=1.
package browsertest
