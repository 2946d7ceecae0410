package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/dualwrite"
	"github.com/seed31b0e981/reservoir/reservation"
	"github.com/seed31b0e981/reservoir/rollout/flagsource"
)

// Every error a facade call can return maps to the status and code
// docs/api.md's client contract gives it. An error that says the outcome
// is unknown (flags unavailable, decider unreachable, claim in progress)
// is a 503 whatever it wraps: no answer comes with it. Anything unknown
// is a 503 "unavailable", never a definite answer.
func TestStoreProblemMapsEveryAnswer(t *testing.T) {
	s := &Server{log: slog.New(slog.DiscardHandler), cfg: Config{RequestTimeout: time.Second}}
	r := httptest.NewRequest("POST", "/v1/shops/1/reservations", nil)
	for _, c := range []struct {
		err    error
		status int
		code   string
	}{
		{reservation.ErrNotFound, http.StatusNotFound, "not_found"},
		{reservation.ErrExpired, http.StatusGone, "expired"},
		{reservation.ErrReleased, http.StatusConflict, "released"},
		{reservation.ErrAlreadyClaimed, http.StatusConflict, "already_claimed"},
		{reservation.ErrTokenConflict, http.StatusConflict, "token_conflict"},
		{reservation.ErrInsufficientStock, http.StatusConflict, "insufficient_stock"},
		{&reservation.ValidationError{Field: "token", Reason: "bad"}, http.StatusBadRequest, "invalid_input"},
		{reservation.ErrContention, http.StatusServiceUnavailable, "contention"},
		{fmt.Errorf("redisstore: release: %w", reservation.ErrClaimInProgress), http.StatusServiceUnavailable, "claim_in_progress"},
		{fmt.Errorf("%w: %w", dualwrite.ErrFlagsUnavailable, flagsource.ErrFlagsNotLoaded), http.StatusServiceUnavailable, "flags_unavailable"},
		{fmt.Errorf("%w: shop 1: %w", dualwrite.ErrDeciderUnreachable, errors.New("dial tcp: refused")), http.StatusServiceUnavailable, "unavailable"},
		// Unknown outcomes win over whatever they wrap.
		{fmt.Errorf("%w: shop 1: %w", dualwrite.ErrDeciderUnreachable, reservation.ErrNotFound), http.StatusServiceUnavailable, "unavailable"},
		{fmt.Errorf("%w: %w", dualwrite.ErrFlagsUnavailable, reservation.ErrExpired), http.StatusServiceUnavailable, "flags_unavailable"},
		{fmt.Errorf("%w: %w", reservation.ErrClaimInProgress, reservation.ErrAlreadyClaimed), http.StatusServiceUnavailable, "claim_in_progress"},
		// A store that does not decide never reaches a caller as an answer.
		{&reservation.NotDeciderError{Shop: 1, Store: reservation.AuthorityMySQL, Fence: reservation.NoFence}, http.StatusServiceUnavailable, "unavailable"},
		{context.DeadlineExceeded, http.StatusServiceUnavailable, "unavailable"},
		{errors.New("i/o timeout"), http.StatusServiceUnavailable, "unavailable"},
	} {
		p := s.storeProblem(r, "pod-a", c.err)
		if p.Status != c.status || p.Code != c.code || p.Message == "" {
			t.Errorf("%v: %d %s %q, want %d %s", c.err, p.Status, p.Code, p.Message, c.status, c.code)
		}
		if p.Status == http.StatusServiceUnavailable && (p.RetryAfter <= 0 || !strings.Contains(p.Message, "retry")) {
			t.Errorf("%v: a 503 without Retry-After or without saying to retry: %q", c.err, p.Message)
		}
	}
}
