// Package operator is the configuration of a shared server by the person who runs it: the
// providers (kind, endpoint, credential, allowed models), the MCP servers, the principals (who
// may connect, with which token and roles) and the limits of docs/reference/server.md. Whatever
// has power on a server (keys, files, programs, endpoints, who decides) comes from here, never
// from a submitted workflow.
//
// It owns loading the operator's file (strict: an unknown key or role names the file, line and
// key), the defaults of a server started without one, reading the credentials it references at
// start (a missing environment variable or file fails then, naming it), authenticating a token
// to a principal, and checking a submitted workflow against it (E_OPERATOR_ONLY). It must not
// talk to NATS, models or MCP servers: it says what they are, others connect.
package operator

import "time"

// Roles a principal may hold (docs/reference/server.md, "Roles").
const (
	RoleAdmin     = "admin"     // the operator: everything, the engine's maintenance included
	RoleSubmitter = "submitter" // starts runs, reads them
	RoleApprover  = "approver"  // decides approvals, resumes and signals runs, reads them
	RoleViewer    = "viewer"    // reads runs
	RoleWorker    = "worker"    // serves tasks: reads tasks and bundles, answers, checkpoints
)

// Roles lists the built-in roles.
var Roles = []string{RoleAdmin, RoleSubmitter, RoleApprover, RoleViewer, RoleWorker}

// Config is an operator's configuration, as loaded (Load) or the defaults (Default).
type Config struct {
	// File is the file it was loaded from ("" for the defaults).
	File string
	// Providers by the name a workflow model's provider gives.
	Providers map[string]Provider
	// MCP servers by the name a workflow tool's mcp gives.
	MCP map[string]MCPServer
	// Principals by name.
	Principals map[string]Principal
	// Limits of run inputs and step outputs, and of a run's growth.
	Limits Limits
	// Webhooks are the hooks a workflow's webhook trigger may name, by name: POST
	// /v1/hooks/NAME is signed with the hook's secret ([webhooks.NAME]).
	Webhooks map[string]Webhook
	// TriggerSubjects are the NATS subject patterns subject triggers may listen on
	// ([triggers] subjects): a workflow's subject must be within one of them. None: subject
	// triggers are refused.
	TriggerSubjects []string
	// CustomRoles are role names besides the built-in ones, for approvers = ["role:NAME"];
	// they grant no permission.
	CustomRoles []string
	// TraceURL is the address of a run's trace in the operator's tracing backend, with
	// {trace_id} where the run's trace id goes ([console] trace_url): the console links each
	// run to it. Empty: no link.
	TraceURL string
}

// TraceIDPlaceholder is what TraceURL holds where a run's trace id goes.
const TraceIDPlaceholder = "{trace_id}"

// Provider is a model provider the operator pairs with its credential.
type Provider struct {
	Kind       string   // openai | anthropic
	BaseURL    string   // "" means the kind's official endpoint
	APIKeyEnv  string   // the environment variable holding the key, or
	APIKeyFile string   // the file holding it
	Models     []string // the only models workflows may ask for (empty: any)
	// Limits are the provider's shared rate limits, every model's calls together; ModelLimits
	// those of one model, by its name, on top (a call takes capacity from both). Every worker
	// of the server shares them (package ratelimit, docs/providers.md).
	Limits      RateLimits
	ModelLimits map[string]RateLimits
	// optional: the defaults' providers start without their key (a call then fails).
	optional bool
}

// RateLimits are the keys rpm, tpm and max_concurrent of a provider or of one of its models
// (0: not limited).
type RateLimits struct {
	RPM           int64 // requests that may start per minute
	TPM           int64 // tokens (input and output) calls may use per minute
	MaxConcurrent int64 // calls at once
}

// Zero reports whether r limits nothing.
func (r RateLimits) Zero() bool { return r.RPM == 0 && r.TPM == 0 && r.MaxConcurrent == 0 }

// MCPServer is an MCP server the operator runs for workflow tools: a program over stdio, or a
// streamable HTTP endpoint.
type MCPServer struct {
	Command []string
	URL     string
}

// Webhook is a hook the operator opens for webhook triggers: its secret, read at start from
// an environment variable or a file, signs every delivery (HMAC-SHA256 of the body).
type Webhook struct {
	SecretEnv  string
	SecretFile string
}

// Principal is who a token identifies.
type Principal struct {
	Name        string
	TokenEnv    string // the environment variable holding the token, or
	TokenSHA256 string // the hex SHA-256 of the token
	Roles       []string
}

// Limits bound what runs carry.
type Limits struct {
	MaxInputBytes  int64 // larger run inputs are refused before the run starts
	MaxOutputBytes int64 // larger step outputs end the step output_too_large
	// Growth bounds how far a run may grow (growth.go).
	Growth Growth
	// HTTP bounds the HTTP listener of reins serve (httplimits.go).
	HTTP HTTPLimits
	// MaxConsumersPerPrincipal caps the JetStream consumers each principal holds at once
	// (watches, ordered reads; the consumer proxy refuses one more): 0 takes the server's
	// default (natsbox.DefaultMaxConsumersPerPrincipal).
	MaxConsumersPerPrincipal int
	// ToolTimeout bounds a call of a tool that sets no timeout of its own (tool_timeout); a
	// side-effecting call runs on past its attempt's end up to it (docs/engine.md).
	ToolTimeout time.Duration
	// MaxToolTimeout caps what a workflow's tool asks for (max_tool_timeout): more is refused
	// at submission (workflow.EOverLimit). 0 takes the default ([DefaultMaxToolTimeout]), a
	// negative one leaves the cap out, as in [workflow.Bounds].
	MaxToolTimeout time.Duration
}

// MaxConsumersCap bounds [limits] max_consumers_per_principal.
const MaxConsumersCap = 100000

// DefaultMaxBytes is the default of both limits: 64 MiB.
const DefaultMaxBytes = 64 << 20
