package registry_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/reins-run/reins/model"
	"github.com/reins-run/reins/provider/registry"
)

// TestProviderErrorsHideTheKey: a server that answers 401 and echoes the key it was sent,
// whole or in part, never gets it into the error of either provider.
func TestProviderErrorsHideTheKey(t *testing.T) {
	const key = "sk-test-9f8e7d6c5b4a39281706f5e4d3c2"
	for _, kind := range []string{"openai", "anthropic"} {
		for _, echo := range []func(string) string{
			func(k string) string { return k },
			func(k string) string { return k[:12] + "****" },
		} {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				got := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
				if got == "" {
					got = r.Header.Get("X-Api-Key")
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusUnauthorized)
				fmt.Fprintf(w, `{"type":"error","error":{"type":"authentication_error","message":"Incorrect API key provided: %s"}}`, echo(got))
			}))
			base := srv.URL
			if kind == "openai" {
				base += "/v1"
			}
			m, err := registry.Open(kind+":m", registry.Options{BaseURL: base, APIKey: key, NoEnv: true})
			if err != nil {
				t.Fatal(err)
			}
			_, err = m.Generate(context.Background(), &model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: "hi"}}})
			srv.Close()
			if err == nil {
				t.Fatalf("%s: no error from a 401", kind)
			}
			if !strings.Contains(err.Error(), "401") {
				t.Errorf("%s: the error %q does not say 401", kind, err)
			}
			for _, text := range []string{err.Error(), fmt.Sprintf("%+v", err), fmt.Sprintf("%#v", err)} {
				for i := 0; i+8 <= len(key); i++ {
					if strings.Contains(text, key[i:i+8]) {
						t.Fatalf("%s: a piece of the key shows in %s", kind, text)
					}
				}
			}
		}
	}
}
