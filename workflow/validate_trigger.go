package workflow

import (
	"errors"
	"strconv"
	"strings"
)

// checkTriggers checks the [[triggers]]: a name of each (unique), exactly one of schedule,
// subject and webhook, the keys only schedules take, a cron expression that parses and is due
// some day, an IANA time zone, an overlap policy, a bounded catch-up, a subject reins may
// listen on, and a webhook name.
func (v *validator) checkTriggers() {
	seen := map[string]int{}
	for i, t := range v.d.Triggers {
		key := func(k string) string { return "triggers[" + strconv.Itoa(i) + "]." + k }
		at := "triggers[" + strconv.Itoa(i) + "]"
		switch {
		case t.Name == "":
			v.add(EMissingKey, key("name"), "trigger %s has no name: set name, made of A-Z, a-z, 0-9, _ and - (runs it starts are named after it)", at)
		case !valIDOK(t.Name) || len(t.Name) > 64:
			v.add(EBadName, key("name"), "trigger name %q must be 1 to 64 characters of A-Z, a-z, 0-9, _ and -", t.Name)
		default:
			if j, dup := seen[t.Name]; dup {
				v.add(EDuplicateID, key("name"), "trigger name %q is also the name of triggers[%d]: each trigger needs a name of its own", t.Name, j)
			} else {
				seen[t.Name] = i
			}
		}
		kinds := t.kinds()
		switch {
		case len(kinds) == 0 && (v.has(key("schedule")) || v.has(key("subject")) || v.has(key("webhook"))):
			// Written, and empty (or of a wrong type, which the parser reported at the key).
			for _, k := range []string{"schedule", "subject", "webhook"} {
				if v.has(key(k)) {
					v.add(EBadTrigger, key(k), "trigger %s: %s is empty", valTriggerName(t, i), k)
				}
			}
			continue
		case len(kinds) == 0:
			v.add(EBadTrigger, at, "trigger %s sets none of schedule, subject and webhook: set exactly one", valTriggerName(t, i))
			continue
		case len(kinds) > 1:
			v.add(EBadTrigger, key(kinds[1]), "trigger %s sets %s: set exactly one of schedule, subject and webhook (one trigger each)", valTriggerName(t, i), strings.Join(kinds, " and "))
			continue
		}
		if t.Schedule == "" {
			for _, k := range []string{"timezone", "overlap", "catch_up"} {
				if v.has(key(k)) || (k == "timezone" && t.Timezone != "") || (k == "overlap" && t.Overlap != "") || (k == "catch_up" && t.CatchUp != nil) {
					v.add(EBadTrigger, key(k), "trigger %s is a %s trigger: %s applies to schedule triggers only", valTriggerName(t, i), kinds[0], k)
				}
			}
		}
		switch kinds[0] {
		case "schedule":
			v.checkSchedule(t, key)
		case "subject":
			if err := CheckSubject(t.Subject); err != nil {
				v.add(EBadSubject, key("subject"), "trigger %s: %v", valTriggerName(t, i), err)
			}
		case "webhook":
			if !WebhookNameOK(t.Webhook) {
				v.add(EBadName, key("webhook"), "trigger %s: the webhook name %q must be 1 to 64 characters of a-z, 0-9, _ and - (it is the last part of the URL /v1/hooks/NAME)", valTriggerName(t, i), t.Webhook)
			}
		}
	}
}

// checkSchedule checks the keys of a schedule trigger.
func (v *validator) checkSchedule(t Trigger, key func(string) string) {
	if _, err := ParseSchedule(t.Schedule, t.Timezone); err != nil {
		var se *ScheduleError
		if errors.As(err, &se) && se.Code == EBadTimezone {
			v.add(EBadTimezone, key("timezone"), "%s", se.Msg)
		} else {
			v.add(EBadSchedule, key("schedule"), "%v", err)
		}
	}
	switch t.Overlap {
	case "", OverlapSkip, OverlapQueue, OverlapAllow:
	default:
		v.add(EBadValue, key("overlap"), "overlap %q is not a policy: want %s", t.Overlap, valOneOf(OverlapSkip, OverlapQueue, OverlapAllow))
	}
	if n := t.CatchUpOr(); n < 0 || n > MaxCatchUp {
		v.add(EBadBound, key("catch_up"), "catch_up is %d: want 0 (no missed due time starts a run) to %d", n, MaxCatchUp)
	}
}

// valTriggerName names trigger i in messages: its name, else its position.
func valTriggerName(t Trigger, i int) string {
	if t.Name != "" {
		return strconv.Quote(t.Name)
	}
	return "triggers[" + strconv.Itoa(i) + "]"
}
