package conn_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/reins-run/reins"
	"github.com/reins-run/reins/conn"
	"github.com/reins-run/reins/operator"
)

// TestOptions: each Option sets its own field and nothing else.
func TestOptions(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	for _, tc := range []struct {
		name string
		opt  conn.Option
		want conn.Options
	}{
		{"Token", conn.Token("t"), conn.Options{Token: "t"}},
		{"UserCredentials", conn.UserCredentials("u.creds"), conn.Options{CredsFile: "u.creds"}},
		{"NKey", conn.NKey("seed.nk"), conn.Options{NKeyFile: "seed.nk"}},
		{"TLS", conn.TLS("c.pem", "k.pem", "ca.pem"), conn.Options{TLSCert: "c.pem", TLSKey: "k.pem", TLSCA: "ca.pem"}},
		{"Namespace", conn.Namespace("acme"), conn.Options{Namespace: "acme"}},
		{"Name", conn.Name("billing"), conn.Options{Name: "billing"}},
		{"JSDomain", conn.JSDomain("hub"), conn.Options{JSDomain: "hub"}},
		{"JSAPIPrefix", conn.JSAPIPrefix("JS.acme.API"), conn.Options{JSAPIPrefix: "JS.acme.API"}},
		{"Logger", conn.Logger(log), conn.Options{Logger: log}},
		{"WithOptions", conn.WithOptions(conn.Options{Token: "t", Namespace: "n"}), conn.Options{Token: "t", Namespace: "n"}},
	} {
		var got conn.Options
		tc.opt(&got)
		if got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// TestDial: a dialed connection knows its namespace and the principal its token names; no URL,
// or a namespace that is not one, is one sentence saying so.
func TestDial(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	r, err := reins.New(ctx, reins.Config{DataDir: dir, Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	token, err := operator.ReadAdminToken(dir)
	if err != nil {
		t.Fatal(err)
	}
	c, err := conn.Dial(ctx, r.ClientURL(), conn.Token(token))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if p, err := c.Principal(ctx); err != nil || p != "admin" || c.Namespace() != "" {
		t.Errorf("Principal %q, %v; Namespace %q: want admin in the default namespace", p, err, c.Namespace())
	}
	for _, tc := range []struct {
		url  string
		opts []conn.Option
		want string
	}{
		{"", nil, "the URL is empty"},
		{r.ClientURL(), []conn.Option{conn.Token(token), conn.Namespace("Not A Namespace")}, "namespace"},
		{r.ClientURL(), []conn.Option{conn.Token("not-the-token-4711")}, "refused the credentials"},
		{r.ClientURL(), []conn.Option{conn.Token(token), conn.JSDomain("hub.east")}, `JetStream domain "hub.east" is not one subject token`},
		{r.ClientURL(), []conn.Option{conn.Token(token), conn.JSAPIPrefix("JS.>")}, `API prefix "JS.>" is not a subject without wildcards`},
	} {
		_, err := conn.Dial(ctx, tc.url, tc.opts...)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("Dial(%q): %v, want one sentence with %q", tc.url, err, tc.want)
		} else if strings.Contains(err.Error(), "4711") {
			t.Errorf("Dial(%q): the error shows the token: %v", tc.url, err)
		}
	}
}
