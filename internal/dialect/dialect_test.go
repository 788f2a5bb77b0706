package dialect_test

import (
	"strings"
	"testing"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox/internal/dialect"
)

// fakeDialector is a gorm.Dialector of a database no driver serves.
func fakeDialector() gorm.Dialector { return named{name: "sqlserver"} }

// An unknown dialect fails clearly, naming it and the supported ones;
// there is no fallback to another dialect.
func TestUnknownDialectFails(t *testing.T) {
	db := &gorm.DB{Config: &gorm.Config{Dialector: fakeDialector()}}
	if _, err := dialect.Of(db); err == nil || !strings.Contains(err.Error(), `"sqlserver"`) ||
		!strings.Contains(err.Error(), "postgres, mysql or sqlite") {
		t.Fatalf("Of(sqlserver) = %v, want an error naming sqlserver and the supported dialects", err)
	}
	if _, err := dialect.Open(db); err == nil {
		t.Fatal("Open(sqlserver) succeeded")
	}
	if _, err := dialect.For(dialect.Kind(99)); err == nil || !strings.Contains(err.Error(), "Kind(99)") {
		t.Fatalf("For(Kind(99)) = %v, want an error naming Kind(99)", err)
	}
	if _, err := dialect.For(0); err == nil {
		t.Fatal("For(0) succeeded")
	}
	defer func() {
		if p := recover(); p == nil || !strings.Contains(p.(string), "Kind(99)") {
			t.Fatalf("Kind(99).Now() recovered %v, want a panic naming Kind(99)", p)
		}
	}()
	dialect.Kind(99).Now()
}

// Every Kind has a driver whose name is the Kind's, serving the
// dialector names Of maps to the Kind.
func TestKindsHaveDrivers(t *testing.T) {
	want := map[dialect.Kind]string{dialect.Postgres: "postgres", dialect.MySQL: "mysql", dialect.SQLite: "sqlite"}
	kinds := dialect.Kinds()
	if len(kinds) != len(want) {
		t.Fatalf("Kinds() = %v, want %d", kinds, len(want))
	}
	for _, k := range kinds {
		d, err := dialect.For(k)
		if err != nil || d.Name() != want[k] || k.String() != want[k] {
			t.Fatalf("For(%v) = %v, %v; want the %s driver", k, d, err, want[k])
		}
		for _, n := range d.DialectorNames() {
			db := &gorm.DB{Config: &gorm.Config{Dialector: named{name: n}}}
			if got, err := dialect.Of(db); err != nil || got != k {
				t.Errorf("Of(%s) = %v, %v; want %v", n, got, err, k)
			}
		}
	}
}

// named is a gorm.Dialector of the given name.
type named struct {
	gorm.Dialector
	name string
}

func (n named) Name() string { return n.name }
