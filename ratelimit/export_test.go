package ratelimit

// SetHooks sets the limiter's test hooks: waiting, as a call starts waiting in a scope (its
// timer registered), and renewed, after each round of renewals.
func (l *Limiter) SetHooks(waiting func(key string), renewed func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.waiting, l.renewed = waiting, renewed
}
