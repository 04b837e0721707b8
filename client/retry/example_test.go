package retry_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"time"

	"github.com/allot-io/allot/client/retry"
)

// A server that rejects the first request with 429 and Retry-After: 0. The
// Transport waits MinDelay rather than retrying at once, then succeeds.
func Example() {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After", "0")
			http.Error(w, "slow down", http.StatusTooManyRequests)
			return
		}
		fmt.Fprint(w, "hello")
	}))
	defer srv.Close()

	budget, err := retry.NewBudget(10, 0.1) // may be shared by several Transports
	if err != nil {
		panic(err)
	}
	rt, err := retry.New(srv.Client().Transport, retry.Options{
		MinDelay: 10 * time.Millisecond,
		Budget:   budget,
		OnRetry: func(attempt int, delay time.Duration, resp *http.Response, err error) {
			fmt.Printf("attempt %d: %s, retrying in %v\n", attempt, resp.Status, delay)
		},
	})
	if err != nil {
		panic(err)
	}
	client := &http.Client{Transport: rt}

	resp, err := client.Get(srv.URL)
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.Status, string(body))
	// Output:
	// attempt 1: 429 Too Many Requests, retrying in 10ms
	// 200 OK hello
}
