package outboxredis

import (
	"testing"
)

func TestVersionAtLeast(t *testing.T) {
	cases := map[string]bool{"8.6.0": true, "8.6": true, "8.10.1": true, "9.0.0": true, "8.5.9": false, "7.0.15": false, "": false, "x.y": false}
	for v, want := range cases {
		if got := versionAtLeast(v, 8, 6); got != want {
			t.Errorf("versionAtLeast(%q) = %v", v, got)
		}
	}
	if got := infoField("# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n", "redis_version"); got != "7.0.15" {
		t.Errorf("infoField = %q", got)
	}
}

func TestSlotKeySharesTheStreamsSlot(t *testing.T) {
	cases := map[string]string{
		"orders":        "{orders}:x",
		"{shop}:orders": "{shop}:orders:x",
		"a{}b":          "a{}b:x", // no valid tag: another slot
		"a}b":           "a}b:x",
	}
	for stream, want := range cases {
		if got := slotKey(stream, ":x"); got != want {
			t.Errorf("slotKey(%q) = %q, want %q", stream, got, want)
		}
	}
}
