package natsbox

import (
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// API is where a connection reaches JetStream: its own account's API ("$JS.API."), that of
// another JetStream domain ("$JS.D.API.": a leaf node reaching its hub's), or that of another
// account imported under a prefix ("P."). nats.go addresses its own requests and KV writes
// through the prefix of the JetStream context; the subjects this package builds by hand (a
// message get from a stream's leader, the KV write of UpdateKV) go through API the same way, so
// that they reach the JetStream the context reaches. The zero value is the default API.
type API struct {
	domain string // the JetStream domain, "" for none
	prefix string // "" for the default, else the API prefix ending with "."
}

// NewAPI returns the API of JetStream domain domain, or of the API imported under prefix; at
// most one of them is set, and none is the default API. A domain is one subject token; a prefix
// is a subject without wildcards (a final "." is allowed, as nats.go allows it).
func NewAPI(domain, prefix string) (API, error) {
	switch {
	case domain != "" && prefix != "":
		return API{}, fmt.Errorf("natsbox: a JetStream domain (%q) and an API prefix (%q) are exclusive: set one of them", domain, prefix)
	case domain != "":
		if err := checkDomain(domain); err != nil {
			return API{}, err
		}
		return API{domain: domain, prefix: "$JS." + domain + ".API."}, nil
	case prefix != "":
		if err := checkAPIPrefix(prefix); err != nil {
			return API{}, err
		}
		if !strings.HasSuffix(prefix, ".") {
			prefix += "."
		}
		if prefix == jetstream.DefaultAPIPrefix {
			return API{}, nil
		}
		return API{prefix: prefix}, nil
	}
	return API{}, nil
}

// APIOf returns the API js reaches: its domain's or its API prefix's, else the default. It
// reads the context's options, without allocating for the default API (UpdateKV asks it on
// every write).
func APIOf(js jetstream.JetStream) API {
	o := js.Options()
	if o.Domain != "" {
		return API{domain: o.Domain, prefix: "$JS." + o.Domain + ".API."}
	}
	if o.APIPrefix == "" {
		return API{}
	}
	if prefix := strings.TrimSuffix(o.APIPrefix, ".") + "."; prefix != jetstream.DefaultAPIPrefix {
		return API{prefix: prefix}
	}
	return API{}
}

// Domain is the JetStream domain of the API, "" for none.
func (a API) Domain() string { return a.domain }

// Prefix is the prefix of the API's requests: "$JS.API." for the default.
func (a API) Prefix() string {
	if a.prefix == "" {
		return jetstream.DefaultAPIPrefix
	}
	return a.prefix
}

// Subject is the subject of the API request op ("STREAM.MSG.GET.S"): "$JS.API.STREAM.MSG.GET.S"
// by default, "$JS.D.API.STREAM.MSG.GET.S" in domain D.
func (a API) Subject(op string) string { return a.Prefix() + op }

// KVPut is the subject that writes key in the KV bucket named bucket: KVSubject(bucket, key) by
// default, behind the API prefix otherwise ("$JS.D.API.$KV.B.K"), which the server of the
// domain (or the exporting account) maps back to the bucket's subject, as nats.go's KV writes do.
// The bucket's stream stores the message under KVSubject(bucket, key) either way.
func (a API) KVPut(bucket, key string) string { return a.prefix + KVSubject(bucket, key) }

// Permissions returns p, permissions written for the default API (Names.Permissions,
// Names.TenantPermissions), as they must be for a connection that reaches JetStream through a:
// every "$JS.API.X" becomes a.Subject("X") ("$JS.hub.API.X" in domain hub, "P.X" under prefix
// P), and every KV write "$KV.B.…" becomes what KVPut publishes ("$JS.hub.API.$KV.B.…"). The
// rest stays as it is: object store writes ("$O.…"), acknowledgements ("$JS.ACK.…"), flow
// control ("$JS.FC.>"), the namespace's subjects and inboxes are core subjects that reach the
// streams and consumers where they are, a leaf node's hub or an exporting account (with its
// imports, docs/deploy.md). The deny list is rewritten too, so that what it forbids stays
// forbidden through a. p nil (everything) stays nil, and the default API returns p unchanged.
func (a API) Permissions(p *Perms) *Perms {
	if p == nil || a.prefix == "" {
		return p
	}
	return &Perms{PublishAllow: a.subjects(p.PublishAllow), PublishDeny: a.subjects(p.PublishDeny),
		SubscribeAllow: slices.Clone(p.SubscribeAllow)}
}

// subjects are list's subjects through a (Permissions).
func (a API) subjects(list []string) []string {
	if list == nil {
		return nil
	}
	out := make([]string, len(list))
	for i, s := range list {
		switch {
		case strings.HasPrefix(s, jetstream.DefaultAPIPrefix):
			out[i] = a.prefix + strings.TrimPrefix(s, jetstream.DefaultAPIPrefix)
		case strings.HasPrefix(s, "$KV."):
			out[i] = a.prefix + s
		default:
			out[i] = s
		}
	}
	return out
}

// checkDomain reports whether domain can name a JetStream domain: one subject token.
func checkDomain(domain string) error {
	if i := strings.IndexAny(domain, ".*> \t\r\n"); i >= 0 {
		return fmt.Errorf("natsbox: JetStream domain %q is not one subject token: it has %q at byte %d", domain, domain[i], i)
	}
	return nil
}

// checkAPIPrefix reports whether prefix can be an API prefix: a subject without wildcards.
func checkAPIPrefix(prefix string) error {
	if i := strings.IndexAny(prefix, "*> \t\r\n"); i >= 0 {
		return fmt.Errorf("natsbox: JetStream API prefix %q is not a subject without wildcards: it has %q at byte %d", prefix, prefix[i], i)
	}
	for i, tok := range strings.Split(strings.TrimSuffix(prefix, "."), ".") {
		if tok == "" {
			return fmt.Errorf("natsbox: JetStream API prefix %q is not a subject: its token %d is empty", prefix, i+1)
		}
	}
	return nil
}

// jetStream returns a JetStream context on nc that reaches a's API.
func (a API) jetStream(nc *nats.Conn) (jetstream.JetStream, error) {
	switch {
	case a.domain != "":
		return jetstream.NewWithDomain(nc, a.domain)
	case a.prefix != "":
		return jetstream.NewWithAPIPrefix(nc, a.prefix)
	}
	return jetstream.New(nc)
}

// where is the API for an error message: " (JetStream domain D)", " (JetStream API prefix P)",
// or "" for the default.
func (a API) where() string {
	switch {
	case a.domain != "":
		return " (JetStream domain " + a.domain + ")"
	case a.prefix != "":
		return " (JetStream API prefix " + strings.TrimSuffix(a.prefix, ".") + ")"
	}
	return ""
}
