package natsbox

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/reins-run/reins/internal/testkit/natstest"
)

// TestLayoutNamesRefusedPermission: a tenant's user lacking one permission of its list, on a
// real nats-server, gets an error at start that names the subject the server refused and what
// was being set up, not "context deadline exceeded" after the layout's retries (the server
// answers a refused publish with nothing but an asynchronous error).
func TestLayoutNamesRefusedPermission(t *testing.T) {
	names, err := NewNames("acme")
	if err != nil {
		t.Fatal(err)
	}
	full := names.TenantPermissions()
	for _, tc := range []struct {
		name    string
		drop    func(subject string) bool // the publish permissions taken away
		refused string                    // the subject the error must name
		what    string                    // and what it was setting up
	}{
		{"sessions bucket", func(s string) bool { return strings.Contains(s, "KV_acme_reins_sessions") },
			"$JS.API.STREAM.INFO.KV_acme_reins_sessions", "KV bucket acme_reins_sessions"},
		{"triggers bucket", func(s string) bool { return strings.Contains(s, "KV_acme_reins_triggers") },
			"$JS.API.STREAM.INFO.KV_acme_reins_triggers", "KV bucket acme_reins_triggers"},
		{"events stream", func(s string) bool { return strings.Contains(s, "acme_REINS_EVENTS") },
			"$JS.API.STREAM.INFO.acme_REINS_EVENTS", "stream acme_REINS_EVENTS"},
		{"values", func(s string) bool { return strings.Contains(s, "OBJ_acme_reins_values") },
			"$JS.API.STREAM.INFO.OBJ_acme_reins_values", "object store acme_reins_values"},
		{"JetStream itself", func(s string) bool { return s == "$JS.API.INFO" }, "$JS.API.INFO", "JetStream is not available"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pub := slices.DeleteFunc(slices.Clone(full.PublishAllow), tc.drop)
			srv := natstest.StartServer(t, &server.Options{Users: []*server.User{{Username: "tenant", Password: "t",
				Permissions: &server.Permissions{
					Publish:   &server.SubjectPermission{Allow: pub},
					Subscribe: &server.SubjectPermission{Allow: full.SubscribeAllow},
				}}}})
			ctx := testCtx(t)
			b, err := Open(ctx, Options{URL: natstest.UserURL(srv.ClientURL(), "tenant", "t"), Namespace: "acme"})
			if err == nil {
				defer b.Close()
				err = EnsureLayout(ctx, b.JetStream(), b.Layout())
			}
			var refused *PermissionError
			if !errors.As(err, &refused) || refused.Subject != tc.refused || refused.Op != "publish" {
				t.Fatalf("start without %s: %v; want the refusal of publish to %q", tc.name, err, tc.refused)
			}
			if !errors.Is(err, ErrPermission) || !strings.Contains(err.Error(), tc.what) || !strings.Contains(err.Error(), `"`+tc.refused+`"`) {
				t.Errorf("error %q does not name %s and %s", err, tc.what, tc.refused)
			}
		})
	}
	t.Run("the whole list", func(t *testing.T) {
		srv := natstest.StartServer(t, &server.Options{Users: []*server.User{{Username: "tenant", Password: "t",
			Permissions: &server.Permissions{
				Publish:   &server.SubjectPermission{Allow: full.PublishAllow},
				Subscribe: &server.SubjectPermission{Allow: full.SubscribeAllow},
			}}}})
		b := open(t, Options{URL: natstest.UserURL(srv.ClientURL(), "tenant", "t"), Namespace: "acme"})
		if err := EnsureLayout(testCtx(t), b.JetStream(), b.Layout()); err != nil {
			t.Fatalf("EnsureLayout with the whole tenant list: %v", err)
		}
	})
}

func TestParsePermission(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want *PermissionError
	}{
		{errors.Join(nats.ErrPermissionViolation, errors.New(`Permissions Violation for Publish to "$JS.API.INFO"`)), &PermissionError{"publish", "$JS.API.INFO"}},
		{errors.Join(nats.ErrPermissionViolation, errors.New(`Permissions Violation for Subscription to "a.>" using queue "q"`)), &PermissionError{"subscribe", "a.>"}},
		{errors.New(`Permissions Violation for Publish to "x"`), nil}, // not the library's violation
		{nats.ErrPermissionViolation, nil},                            // no subject
		{nats.ErrTimeout, nil},
	} {
		got := parsePermission(tc.err)
		if (got == nil) != (tc.want == nil) || got != nil && *got != *tc.want {
			t.Errorf("parsePermission(%v) = %+v, want %+v", tc.err, got, tc.want)
		}
	}
}

// TestLayoutStepSaysWhatTimedOut: a step of the layout that gets no answer before its context
// ends says what it was setting up, not only "context deadline exceeded".
func TestLayoutStepSaysWhatTimedOut(t *testing.T) {
	b := open(t, Options{DataDir: t.TempDir()})
	ctx, cancel := context.WithTimeout(testCtx(t), 50*time.Millisecond)
	defer cancel()
	err := layoutStep(ctx, b.JetStream(), "KV bucket reins_sessions", func(ctx context.Context) error {
		<-ctx.Done() // a server that never answers
		return ctx.Err()
	})
	want := "natsbox: setting up KV bucket reins_sessions: the NATS server gave no answer in time"
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), want) {
		t.Errorf("layoutStep = %v, want an error saying %q", err, want)
	}
}

// FuzzParsePermission: any text of a violation parses without panicking, to a publish or a
// subscription of a subject without quotes, and a subject the server names comes back whole.
func FuzzParsePermission(f *testing.F) {
	f.Add(`Permissions Violation for Publish to "$JS.API.INFO"`, "a.b")
	f.Add(`Permissions Violation for Subscription to "x" using queue "q"`, "_INBOX.>")
	f.Add(`Permissions Violation for Publish to "`, "")
	f.Fuzz(func(t *testing.T, text, subject string) {
		if p := parsePermission(fmt.Errorf("%w: %s", nats.ErrPermissionViolation, text)); p != nil {
			if p.Op != "publish" && p.Op != "subscribe" || strings.Contains(p.Subject, `"`) {
				t.Errorf("parsePermission(%q) = %+v", text, p)
			}
		}
		if strings.ContainsAny(subject, "\"\n") {
			return
		}
		err := fmt.Errorf("%w: Permissions Violation for Publish to %q", nats.ErrPermissionViolation, subject)
		if strings.Contains(fmt.Sprintf("%q", subject), `\`) {
			return // escaped by %q: the server never escapes
		}
		if p := parsePermission(err); p == nil || p.Subject != subject || p.Op != "publish" {
			t.Errorf("parsePermission(%v) = %+v, want publish to %q", err, p, subject)
		}
	})
}
