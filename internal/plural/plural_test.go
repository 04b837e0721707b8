package plural

import "testing"

func TestCount(t *testing.T) {
	tests := []struct {
		got, want string
	}{
		{Count(0, "rule"), "0 rules"},
		{Count(1, "rule"), "1 rule"},
		{Count(uint64(2), "batch"), "2 batches"},
		{Count(int64(3), "entry"), "3 entries"},
		{Count(4, "day"), "4 days"},
		{Count(5, "process"), "5 processes"},
		{Count(1, "time"), "1 time"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}
