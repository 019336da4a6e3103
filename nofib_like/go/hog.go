// hog in Go: the Go twin of nofib_like/hog.cpp, for the figure that
// docs/benchmarks.md quotes (Debian: golang-go).  Not run by run.py.
// Run: GOMAXPROCS=2 go run nofib_like/go/hog.go 200 1000
package main

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
	"time"
)

//go:noinline
func churn(x uint64, iters int64) uint64 {
	for i := int64(0); i < iters; i++ {
		x = x*6364136223846793005 + 1442695040888963407
	}
	return x
}

func calibrate(ms int64) int64 {
	iters := int64(1000000)
	for {
		t0 := time.Now()
		_ = churn(1, iters)
		dt := time.Since(t0)
		if dt >= 20*time.Millisecond {
			return int64(float64(iters) * float64(ms) * 1e6 / float64(dt.Nanoseconds()))
		}
		iters *= 4
	}
}

func forkShorts(n int64) float64 {
	var ran, sum int64
	last := make(chan time.Time, 1)
	t0 := time.Now()
	for i := int64(1); i <= n; i++ {
		i := i
		go func() {
			atomic.AddInt64(&sum, i)
			if atomic.AddInt64(&ran, 1) == n {
				last <- time.Now()
			}
		}()
	}
	t1 := <-last
	if atomic.LoadInt64(&sum) != n*(n+1)/2 {
		return -1
	}
	return float64(t1.Sub(t0).Nanoseconds()) / 1e6
}

func main() {
	n, _ := strconv.ParseInt(os.Args[1], 10, 64)
	ms, _ := strconv.ParseInt(os.Args[2], 10, 64)
	iters := calibrate(ms)
	alone := forkShorts(n)
	res := make(chan uint64)
	h0 := time.Now()
	var hogMs float64
	go func() {
		x := churn(7, iters)
		hogMs = float64(time.Since(h0).Nanoseconds()) / 1e6
		res <- x
	}()
	lastMs := forkShorts(n)
	<-res
	fmt.Printf("hog impl=go GOMAXPROCS=%d n=%d last_ms=%.3f alone_ms=%.3f hog_ms=%.1f\n", runtime.GOMAXPROCS(0), n, lastMs, alone, hogMs)
}
