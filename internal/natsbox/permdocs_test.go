package natsbox

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

var updateDocs = flag.Bool("update-docs", false, "rewrite the generated permission lists of docs/deploy.md and docs/security.md")

// A generated block of a doc: the lines between "<!-- permissions:NAME -->" and
// "<!-- end permissions:NAME -->", rewritten by `go generate ./internal/natsbox`.
var docBlockRe = regexp.MustCompile(`(?s)(<!-- permissions:([a-z-]+) -->\n)(.*?)(<!-- end permissions:([a-z-]+) -->)`)

// permissionDocs are the generated blocks of each doc, by file and block name.
func permissionDocs(t *testing.T) map[string]map[string]string {
	t.Helper()
	acme, err := NewNames("acme")
	if err != nil {
		t.Fatal(err)
	}
	hub, err := NewAPI("hub", "")
	if err != nil {
		t.Fatal(err)
	}
	roles := &strings.Builder{}
	var deny []string
	for _, role := range []string{RoleSubmitter, RoleApprover, RoleViewer, RoleWorker} {
		p := Permissions(Identity{Name: "NAME", Roles: []string{role}})
		if deny == nil {
			deny = p.PublishDeny
		} else if !slices.Equal(deny, p.PublishDeny) {
			t.Fatalf("role %s denies other subjects than the others: the doc shows one deny list", role)
		}
		fmt.Fprintf(roles, "# %s\n%s\n", role, natsConf(&Perms{PublishAllow: p.PublishAllow, SubscribeAllow: p.SubscribeAllow}))
	}
	return map[string]map[string]string{
		"deploy.md": {
			"tenant":      fence(natsConf(acme.TenantPermissions())),
			"leaf-worker": fence(natsConf(hub.Permissions(acme.Permissions(Identity{Name: "wanda", Roles: []string{RoleWorker}})))),
			"accounts":    fence(accountsDoc(Names{}, Identity{Name: "vera", Roles: []string{RoleViewer}})),
		},
		"security.md": {
			"roles": fence(strings.TrimSuffix(roles.String(), "\n")),
			"deny":  fence(natsConf(&Perms{PublishDeny: deny})),
		},
	}
}

func fence(s string) string { return "```\n" + s + "\n```\n" }

// accountsDoc is accountsConf as docs/deploy.md shows it: the reins account's user and one
// principal's account, whose user's permissions are its roles' (docs/security.md).
func accountsDoc(n Names, id Identity) string {
	var b strings.Builder
	b.WriteString("accounts: {\n  REINS: {\n    users: [{user: reins, password: …}]     # reins serve, and the operator's workers\n    jetstream: enabled\n    exports: [\n")
	b.WriteString(exportsConf(n))
	acct := n.PrincipalAccount(id)
	fmt.Fprintf(&b, "    ]\n  }\n  %q: {\n    users: [{user: %s, password: …, permissions: {…the lists of %s's roles: docs/security.md…}}]\n    imports: [\n", acct.Name, id.Name, id.Name)
	for _, im := range acct.Imports {
		fmt.Fprintf(&b, "      %s\n", importConf(im))
	}
	b.WriteString("    ]\n  }\n}")
	return b.String()
}

// natsConf writes p as the permissions of a user in a nats-server configuration file.
func natsConf(p *Perms) string {
	var b strings.Builder
	b.WriteString("permissions: {\n")
	if len(p.PublishAllow)+len(p.PublishDeny) > 0 {
		b.WriteString("  publish: {\n")
		list(&b, "    allow: ", p.PublishAllow)
		list(&b, "    deny: ", p.PublishDeny)
		b.WriteString("  }\n")
	}
	if len(p.SubscribeAllow) > 0 {
		b.WriteString("  subscribe: {\n")
		list(&b, "    allow: ", p.SubscribeAllow)
		b.WriteString("  }\n")
	}
	b.WriteString("}")
	return b.String()
}

// list writes subjects as a quoted list after head, wrapped at 100 columns.
func list(b *strings.Builder, head string, subjects []string) {
	if len(subjects) == 0 {
		return
	}
	indent := strings.Repeat(" ", len(head)+1)
	line := head + "["
	for i, s := range subjects {
		item := fmt.Sprintf("%q", s)
		if i < len(subjects)-1 {
			item += ","
		}
		if i > 0 && len(line)+1+len(item) > 100 {
			b.WriteString(line + "\n")
			line = indent + item
			continue
		}
		if i > 0 {
			line += " "
		}
		line += item
	}
	b.WriteString(line + "]\n")
}

// TestPermissionDocs: the permission lists of docs/deploy.md and docs/security.md are what
// Names.TenantPermissions, Names.Permissions and API.Permissions give, so that the docs cannot
// drift from the code (they did: three buckets were missing from the tenant list). Run
// `go generate ./internal/natsbox` after a change of the permissions to rewrite them.
func TestPermissionDocs(t *testing.T) {
	for file, blocks := range permissionDocs(t) {
		path := filepath.Join("..", "..", "docs", file)
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		out := docBlockRe.ReplaceAllStringFunc(string(data), func(m string) string {
			g := docBlockRe.FindStringSubmatch(m)
			name := g[2]
			want, ok := blocks[name]
			if !ok || g[5] != name {
				t.Errorf("%s: block permissions:%s (ended by permissions:%s) is not one this test generates", path, name, g[5])
				return m
			}
			seen[name] = true
			if g[3] != want && !*updateDocs {
				t.Errorf("%s: block permissions:%s differs from the code: run go generate ./internal/natsbox\n--- the doc\n%s--- the code\n%s", path, name, g[3], want)
			}
			return g[1] + want + g[4]
		})
		for name := range blocks {
			if !seen[name] {
				t.Errorf("%s has no block permissions:%s", path, name)
			}
		}
		if *updateDocs && out != string(data) {
			if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}
