package sidecar

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/allot-io/allot/agent"
	"github.com/allot-io/allot/agent/httplimit"
)

// SettleRequest is the JSON body of POST /v1/settle.
type SettleRequest struct {
	// Reservation is what POST /v1/reserve answered.
	Reservation string `json:"reservation"`
	// Cost is the request's actual cost, 0 to MaxCost; required.
	Cost *int64 `json:"cost"`
}

// SettleResponse is the answer of POST /v1/settle.
type SettleResponse struct {
	Estimate int64 `json:"estimate"`
	Actual   int64 `json:"actual"`
	// Charged is Actual − Estimate: charged when above 0, given back when
	// below.
	Charged int64 `json:"charged"`
}

// maxSettleBody bounds a settle body.
const maxSettleBody = 1 << 10

// ErrBadSettle is wrapped by every error decoding a settle request.
var ErrBadSettle = errors.New("agent: bad settle request")

// DecodeSettle reads a settle request strictly: one JSON object, no
// unknown fields, a reservation and a cost.
func DecodeSettle(body io.Reader) (agent.Reservation, int64, error) {
	raw, err := io.ReadAll(body)
	if err != nil {
		return agent.Reservation{}, 0, err
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		return agent.Reservation{}, 0, fmt.Errorf("%w: an empty body; send {\"reservation\": \"…\", \"cost\": N}", ErrBadSettle)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var s SettleRequest
	if err := dec.Decode(&s); err != nil {
		return agent.Reservation{}, 0, fmt.Errorf("%w: %w", ErrBadSettle, settleFieldTypes.clarify(err))
	}
	if dec.More() {
		return agent.Reservation{}, 0, fmt.Errorf("%w: data after the JSON object", ErrBadSettle)
	}
	id, err := strconv.ParseUint(s.Reservation, 10, 64)
	if err != nil || id == 0 {
		return agent.Reservation{}, 0, fmt.Errorf("%w: reservation: %q is not one /v1/reserve answered", ErrBadSettle, s.Reservation)
	}
	if s.Cost == nil {
		return agent.Reservation{}, 0, fmt.Errorf("%w: cost: required (the actual cost, 0 to %d)", ErrBadSettle, int64(agent.MaxCost))
	}
	if *s.Cost < 0 || *s.Cost > agent.MaxCost {
		return agent.Reservation{}, 0, fmt.Errorf("%w: cost: must be from 0 to %d, got %d", ErrBadSettle, int64(agent.MaxCost), *s.Cost)
	}
	return agent.ReservationFromID(id), *s.Cost, nil
}

// SettleHandler serves POST /v1/settle: it settles a reservation of
// POST /v1/reserve at the actual cost (agent.Agent.Settle). A malformed
// or empty body is 400, an unknown reservation (or one settled at its
// estimate when its TTL ran out) 404, one settled already 409.
func SettleHandler(a *agent.Agent) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			httplimit.WriteError(w, http.StatusMethodNotAllowed, "use POST with a JSON body")
			return
		}
		res, cost, err := DecodeSettle(http.MaxBytesReader(w, r.Body, maxSettleBody))
		if err != nil {
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) {
				httplimit.WriteError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body over %d bytes", maxSettleBody))
				return
			}
			httplimit.WriteError(w, http.StatusBadRequest, err.Error())
			return
		}
		s, err := a.Settle(res, cost)
		switch {
		case errors.Is(err, agent.ErrNoReservation):
			httplimit.WriteError(w, http.StatusNotFound, err.Error())
			return
		case errors.Is(err, agent.ErrSettled):
			httplimit.WriteError(w, http.StatusConflict, err.Error())
			return
		case err != nil:
			httplimit.WriteError(w, http.StatusBadRequest, err.Error())
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_ = json.NewEncoder(w).Encode(SettleResponse{Estimate: s.Estimate, Actual: s.Actual, Charged: s.Charged})
	})
}
