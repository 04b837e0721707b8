package sidecar

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/allot-io/allot/agent"
)

// fieldTypes say what each field of a request body must be, in the API's
// terms: what a JSON type error names instead of encoding/json's Go types
// ("cannot unmarshal number into Go struct field SettleRequest.reservation
// of type string").
type fieldTypes map[string]string

var checkFieldTypes = fieldTypes{
	"tenant": "a string", "plan": "a string", "user": "a string", "route": "a string", "ip": "a string",
	"priority": "a string (batch, interactive, critical or exempt)",
	"cost":     fmt.Sprintf("an integer from 0 to %d", int64(agent.MaxCost)),
}

var settleFieldTypes = fieldTypes{
	"reservation": `a string: the "reservation" /v1/reserve answered, quotes included`,
	"cost":        fmt.Sprintf("an integer from 0 to %d", int64(agent.MaxCost)),
}

// clarify rewrites a JSON type error as "FIELD must be TYPE, got a JSON
// KIND"; any other error is returned as it is.
func (ft fieldTypes) clarify(err error) error {
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) || te.Field == "" {
		return err
	}
	want, ok := ft[te.Field]
	if !ok {
		return err
	}
	return fmt.Errorf("%s must be %s, got a JSON %s", te.Field, want, te.Value)
}
