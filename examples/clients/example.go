// example.go — a well-behaved HTTP client of `sluice serve` in Go
// (docs/clients.md), standard library only: it sends N requests to URL,
// paces itself by the RateLimit header so as to spend the quota evenly,
// and after a 429/503 waits the server's Retry-After (or, with nothing
// remaining, its reset) plus full jitter before it retries. Prints one
// line per response, "elapsed_ms status retry_after_s slept_ms", then
// "done OK DENIED" (tests/integration/clients.sh checks them).
//
//	go run example.go 'http://127.0.0.1:8080/v1/throttle?key=me&policy=token_bucket:10/s:burst=5' 20
package main

import (
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"time"
)

const base, maxWait = 50 * time.Millisecond, 2 * time.Second // backoff

var item = regexp.MustCompile(`;r=(\d+);t=(\d+)`)

// limits: Retry-After (seconds), and the RateLimit field's least r (-1:
// none) with its t.
func limits(h http.Header) (retryAfter, r, t int) {
	retryAfter, _ = strconv.Atoi(h.Get("Retry-After"))
	r = -1
	for _, m := range item.FindAllStringSubmatch(h.Get("RateLimit"), -1) {
		ri, _ := strconv.Atoi(m[1])
		if r < 0 || ri < r {
			r = ri
			t, _ = strconv.Atoi(m[2])
		}
	}
	return
}

func main() {
	url := os.Args[1]
	n, _ := strconv.Atoi(os.Args[2])
	ok, denied, attempt := 0, 0, 0
	t0 := time.Now()
	for ok < n {
		res, err := http.Get(url)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		io.Copy(io.Discard, res.Body) // read the body: the connection is reused
		res.Body.Close()
		retryAfter, r, t := limits(res.Header)
		var wait time.Duration
		switch {
		case res.StatusCode == 429 || res.StatusCode == 503:
			denied++
			floor := retryAfter
			if r == 0 && t > floor {
				floor = t
			}
			ceil := base << attempt
			if ceil > maxWait || ceil <= 0 {
				ceil = maxWait
			}
			attempt++
			wait = time.Duration(floor)*time.Second + time.Duration(rand.Int63n(int64(ceil)))
		case res.StatusCode/100 == 2:
			ok++
			attempt = 0
			// Spread what is left until the reset: t / r (all of t at r=0).
			if ok < n && r > 0 {
				wait = time.Duration(t) * time.Second / time.Duration(r)
			} else if ok < n && r == 0 {
				wait = time.Duration(t) * time.Second
			}
		default:
			fmt.Fprintln(os.Stderr, "unexpected status", res.StatusCode)
			os.Exit(1)
		}
		fmt.Println(time.Since(t0).Milliseconds(), res.StatusCode, retryAfter, wait.Milliseconds())
		time.Sleep(wait)
	}
	fmt.Println("done", ok, denied)
}
