package natsbox

import (
	"strings"

	"github.com/reins-run/reins/internal/natsbox/serverspec"
)

// The accounts of principals. NATS checks the subject a client publishes on, never the reply
// subject it names, and the server answers every request (a JetStream API call, a publish to a
// stream, "$SYS.REQ.USER.INFO") on that reply subject with its own authority: in one account, a
// principal who names a stream's subject as the reply of a message get has the server store a
// message of its choosing there (a forged event, a run record), and one who creates a push
// consumer, or pulls from one, has the server deliver stored messages to any subject (another
// run's deltas, its cancel subject, another client's inbox). So on the embedded server each
// principal but the engine and admins is in an account of its own: every subject there is its
// alone (its inboxes, the replies the server sends it), and it reaches the server's account,
// where JetStream and the engine are, only through imports of the subjects its roles may use,
// each answered back in its own account. Its permissions (Names.Permissions) still say which of
// those subjects it may publish on. The creation and removal of consumers are imported from
// the consumer proxy ([Box] runs it next to the embedded server, ServeConsumerProxy elsewhere),
// which checks what it asks and forwards it; push deliveries reach the principal through the
// proxy's deliver subjects (PrincipalDeliverPrefix), imported as its "_INBOX.>".

// AccountPrefix begins the name of a principal's account on the embedded server:
// "reins-principal-NAME".
const AccountPrefix = "reins-principal-"

// inboxPrefix begins every subject a principal's push consumers may deliver to: its inboxes.
const inboxPrefix = "_INBOX."

// proxyToken and deliverToken are the tokens after "[NS.]reins." of the consumer proxy's
// subjects: "[NS.]reins.jsproxy.PRINCIPAL.CONSUMER.CREATE.…", and of the subjects a principal's
// push consumers deliver to in the server's account: "[NS.]reins.deliver.PRINCIPAL._INBOX.…".
const (
	proxyToken   = "jsproxy"
	deliverToken = "deliver"
)

// ConsumerProxySubjects is the subject filter of the consumer proxy's requests:
// "[NS.]reins.jsproxy.*.>", the second wildcard the principal a request comes from.
func (n Names) ConsumerProxySubjects() string { return n.subject + "reins." + proxyToken + ".*.>" }

// ConsumerProxyPrefix begins the consumer proxy's requests from principal:
// "[NS.]reins.jsproxy.PRINCIPAL.". What follows is the JetStream API operation
// ("CONSUMER.CREATE.S.N").
func (n Names) ConsumerProxyPrefix(principal string) string {
	return n.subject + "reins." + proxyToken + "." + principal + "."
}

// PrincipalDeliverPrefix begins the deliver subject, in the server's account, of every push
// consumer the proxy creates for principal: "[NS.]reins.deliver.PRINCIPAL.". The principal's
// account imports "[NS.]reins.deliver.PRINCIPAL._INBOX.>" as its own "_INBOX.>".
func (n Names) PrincipalDeliverPrefix(principal string) string {
	return n.subject + "reins." + deliverToken + "." + principal + "."
}

// apiImports are the JetStream API requests a principal's account imports as they are (its
// permissions choose among them); the consumer operations are the proxy's. Streamed ones are
// answered with many messages: a pull's deliveries, a batch of message gets.
var apiImports = []struct {
	op       string
	streamed bool
}{
	{"INFO", false},
	{"STREAM.INFO.*", false},
	{"STREAM.MSG.GET.*", false},
	{"DIRECT.GET.*", true},
	{"DIRECT.GET.*.>", false},
	{"CONSUMER.INFO.*.*", false},
	{"CONSUMER.MSG.NEXT.*.*", true},
}

// proxiedOps are the JetStream API operations a principal's account reaches through the proxy.
var proxiedOps = []string{"CONSUMER.CREATE.>", "CONSUMER.DURABLE.CREATE.>", "CONSUMER.DELETE.>"}

// coreImports are the other subjects a principal's account imports as services: writes of KV
// buckets and object stores, acknowledgements, flow control, and the namespace's events and
// deltas (the server answers a publish to a stream in the publisher's account).
func (n Names) coreImports() []string {
	return []string{"$KV.>", "$O.>", "$JS.ACK.>", "$JS.FC.>", n.subject + eventPrefix + ">", n.subject + deltaPrefix + ">"}
}

// Exports are what the embedded server's own account offers principals' accounts: the imports
// of every principal (PrincipalAccount), the proxy's requests, the announcements of ended runs
// and the proxy's deliveries.
func (n Names) Exports() []serverspec.Export {
	var out []serverspec.Export
	for _, a := range apiImports {
		out = append(out, serverspec.Export{Subject: "$JS.API." + a.op, Streamed: a.streamed})
	}
	for _, s := range n.coreImports() {
		out = append(out, serverspec.Export{Subject: s})
	}
	return append(out,
		serverspec.Export{Subject: n.subject + "reins." + proxyToken + ".>"},
		serverspec.Export{Subject: n.CancelSubjects(), Stream: true},
		serverspec.Export{Subject: n.subject + "reins." + deliverToken + ".>", Stream: true})
}

// PrincipalAccount returns the account of id on the embedded server, nil for the engine and
// admins (the server's own account). Every principal imports the same subjects, but those
// naming it; its permissions (Permissions) choose among them.
func (n Names) PrincipalAccount(id Identity) *serverspec.Account {
	if id.Has(RoleEngine) || id.Has(RoleAdmin) {
		return nil
	}
	acct := &serverspec.Account{Name: AccountPrefix + id.Name}
	add := func(local, remote string, stream bool) {
		acct.Imports = append(acct.Imports, serverspec.Import{Local: local, Remote: remote, Stream: stream})
	}
	for _, a := range apiImports {
		add("$JS.API."+a.op, "", false)
	}
	proxy := n.ConsumerProxyPrefix(id.Name)
	for _, op := range proxiedOps {
		add("$JS.API."+op, proxy+op, false)
	}
	for _, s := range n.coreImports() {
		add(s, "", false)
	}
	add(n.CancelSubjects(), "", true)
	add(inboxPrefix+">", n.PrincipalDeliverPrefix(id.Name)+inboxPrefix+">", true)
	return acct
}

// proxyRequest splits the subject of a request to the consumer proxy: the principal it comes
// from and the JetStream API operation ("CONSUMER.CREATE.S.N"). ok is false for another shape.
func (n Names) proxyRequest(subject string) (principal, op string, ok bool) {
	rest, found := strings.CutPrefix(subject, n.subject+"reins."+proxyToken+".")
	if !found {
		return "", "", false
	}
	principal, op, found = strings.Cut(rest, ".")
	if !found || principal == "" || op == "" {
		return "", "", false
	}
	return principal, op, true
}
