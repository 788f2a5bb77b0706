package admin_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/admin"
	"github.com/gormoutbox/outbox/internal/testenv"
)

// Mount the admin page under /outbox, behind basic authentication,
// answering the name a proxy forwards (ops.example.com) beside loopback.
func ExampleNewHandler() {
	dir, _ := os.MkdirTemp("", "outbox-admin")
	defer os.RemoveAll(dir)
	db, _ := gorm.Open(testenv.SQLiteDialector(filepath.Join(dir, "app.db")), &gorm.Config{}) // sqlite.Open(…) in your code
	_ = db.Use(&outbox.Plugin{AutoMigrate: true})

	h, err := admin.NewHandler(db,
		admin.WithPrefix("/outbox"),
		admin.WithMiddleware(admin.BasicAuth("ops", "correct horse")),
		admin.WithAllowedHosts("ops.example.com"))
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/outbox/", h)
	mux.Handle("/outbox", h)
	// http.ListenAndServe("127.0.0.1:8080", mux)

	req := httptest.NewRequest(http.MethodGet, "http://ops.example.com/outbox/events?status=dead", nil)
	req.SetBasicAuth("ops", "correct horse")
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, req)
	fmt.Println(rec.Code, strings.Contains(rec.Body.String(), "No event matches."))
	// Output: 200 true
}
