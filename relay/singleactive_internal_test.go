package relay

import (
	"strings"
	"testing"
)

// The role shares the publisher column: it fits the column's size and
// splits back off; a description without a role is left alone.
func TestSingleActiveRoleInPublisherColumn(t *testing.T) {
	long := strings.Repeat("é", 300)
	for _, tc := range []struct{ publisher, role string }{
		{"asynq queue default (or the event's Topic)", RoleStandby},
		{"stdout", RoleActive},
		{"stdout", ""},
		{long, RoleStandby},
	} {
		col := withRole(tc.publisher, tc.role)
		if n := len([]rune(col)); n > maxDescription {
			t.Errorf("withRole(%.20q, %q) is %d characters, over %d", tc.publisher, tc.role, n, maxDescription)
		}
		p, role := splitRole(col)
		if role != tc.role || (tc.publisher != long && p != tc.publisher) || !strings.HasPrefix(tc.publisher, strings.TrimSuffix(p, "…")) {
			t.Errorf("splitRole(withRole(%.20q, %q)) = %.20q, %q", tc.publisher, tc.role, p, role)
		}
	}
}
