package reservation_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/seed31b0e981/reservoir/reservation"
)

// Every domain answer has a name, the name leads back to the same error
// (wrapped or not), and a failure has neither.
func TestAnswerNames(t *testing.T) {
	for _, err := range []error{
		reservation.ErrNotFound, reservation.ErrExpired, reservation.ErrReleased, reservation.ErrAlreadyClaimed,
		reservation.ErrTokenConflict, reservation.ErrInsufficientStock, reservation.ErrInvalidInput,
	} {
		name := reservation.AnswerName(fmt.Errorf("store: %w", err))
		if name == "" {
			t.Errorf("%v has no answer name", err)
			continue
		}
		if back := reservation.AnswerError(name); back != err {
			t.Errorf("AnswerError(%q) = %v, want %v", name, back, err)
		}
	}
	if name := reservation.AnswerName(&reservation.ValidationError{Field: "token", Reason: "empty"}); name != "invalid_input" {
		t.Errorf("a ValidationError is named %q, want invalid_input", name)
	}
	for _, err := range []error{reservation.ErrContention, reservation.ErrClaimInProgress,
		&reservation.NotDeciderError{Shop: 1, Store: reservation.AuthorityMySQL, Fence: reservation.NoFence}, errors.New("i/o timeout"), nil} {
		if name := reservation.AnswerName(err); name != "" {
			t.Errorf("AnswerName(%v) = %q, want none: a failure's outcome is unknown", err, name)
		}
	}
	if err := reservation.AnswerError("unavailable"); err != nil {
		t.Errorf("AnswerError(unavailable) = %v, want nil", err)
	}
}
