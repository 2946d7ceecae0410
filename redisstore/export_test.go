package redisstore

// Test-only access to the store's knobs.

// SetAfterDeduct installs a hook run in an authority Claim between the
// ledger deduction and the Redis cleanup; an error from it stands for a
// cleanup that failed (the cleanup script is not run).
func SetAfterDeduct(s *Store, f func() error) { s.afterDeduct = f }

// SetSkipTokenCheck makes the reserve script ignore an existing hold for
// the token: a script that is not idempotent.
func SetSkipTokenCheck(s *Store, v bool) { s.skipTokenCheck = v }

// ScriptHash returns the SHA1 of a script by its caller's name, so a test
// can recognise the call on the wire.
func ScriptHash(name string) string {
	switch name {
	case "reserve":
		return scriptReserve.Hash()
	case "release":
		return scriptRelease.Hash()
	case "claim_check":
		return scriptClaimCheck.Hash()
	case "claim_cleanup":
		return scriptSettle.Hash()
	case "adjust", "apply_adjust":
		return scriptAdjust.Hash()
	case "apply_state":
		return scriptApplyState.Hash()
	case "reap":
		return scriptReap.Hash()
	case "yield", "force", "apply_fence":
		return scriptFence.Hash()
	}
	panic("redisstore: no script " + name)
}

// NewUnchecked is New without Validate, so without the refusal of clients
// that resend: for the test that shows what the scripts do when a
// misconfigured client resends.
func NewUnchecked(cfg Config) (*Store, error) {
	cfg = cfg.WithDefaults()
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	return &Store{client: cfg.Client, cfg: cfg, metrics: m}, nil
}
