package operator

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// WithPrincipals returns the defaults (Default) with the principals ps, given in Go rather than
// in a file (a program that embeds reins and lets other processes in), checked as Load checks
// the file's [principals.NAME] tables. Each problem is one line naming the principal by its
// index in ps and its name; Resolve then reads their tokens.
func WithPrincipals(ps []Principal) (*Config, error) {
	cfg := Default()
	var errs []string
	for i, p := range ps {
		where := fmt.Sprintf("Principals[%d]", i)
		if p.Name != "" {
			where += fmt.Sprintf(" (%s)", p.Name)
		}
		if msg := principalProblem(p); msg != "" {
			errs = append(errs, where+": "+msg)
			continue
		}
		if _, dup := cfg.Principals[p.Name]; dup {
			errs = append(errs, where+": another principal has this name")
			continue
		}
		p.TokenSHA256 = strings.ToLower(p.TokenSHA256)
		p.Roles = slices.Clone(p.Roles)
		cfg.Principals[p.Name] = p
	}
	if len(errs) > 0 {
		return nil, errors.New(strings.Join(errs, "\n"))
	}
	return cfg, nil
}

// principalProblem says what is wrong with p, or "".
func principalProblem(p Principal) string {
	switch {
	case p.Name == RoleAdmin:
		return "the principal admin is the data directory's (its token is in DATA/admin.token): give the admin role to a principal of another name"
	case !namePattern.MatchString(p.Name):
		return "a name is 1 to 64 characters of [a-z0-9_-]"
	}
	switch field, problem := tokenProblem(p, "TokenEnv", "TokenSHA256"); {
	case field != "":
		return field + ": " + problem
	case problem != "":
		return problem
	case len(p.Roles) == 0:
		return fmt.Sprintf("missing roles: name the principal's roles (%s)", strings.Join(Roles, ", "))
	}
	for i, r := range p.Roles {
		if !slices.Contains(Roles, r) {
			return fmt.Sprintf("Roles[%d]: unknown role %q (known: %s)", i, r, strings.Join(Roles, ", "))
		}
	}
	return ""
}
