// Command xtime is the Go anchor of sluice's benchmarks: golang.org/x/time/rate
// used the way a Go service would keep one limiter per key.
//
// Build (offline, Debian's Go 1.19 and golang-golang-x-time-dev):
//
//	cd bench/xtime && GO111MODULE=off GOPATH=/usr/share/gocode GOCACHE=$(mktemp -d) go build -o OUT .
//
// Run:
//
//	OUT [-keys 1000000] [-threads 1] [-seconds 2]
//
// It prints exactly one line:
//
//	anchor=x_time_rate keys=N threads=T decisions_per_s=D ns_per_decision=X bytes_per_key=B
//
// The table: 256 shards, each a map[string]*rate.Limiter guarded by its own
// sync.Mutex, the shard picked by FNV-1a of the key. A decision looks the
// key up (creating its limiter if absent) and calls Allow(). Every limiter
// is rate.NewLimiter(rate.Limit(1000.0/3600.0), 1000): 1000 per hour with a
// burst of 1000, so almost every call is allowed and every key stays live.
//
// Keys are "user:N", N uniform random in [0, keys), drawn by each goroutine
// with its own splitmix64 and written into a reused byte buffer for each
// decision, exactly as `sluice bench` does (a server finds the key in the
// request it just read; the map lookup m[string(buf)] does not allocate).
// Every key is decided once before timing (the warm-up): the table holds all
// of them from the start, as in a steady state.
//
// decisions_per_s: all goroutines' decisions / wall seconds.
// ns_per_decision: wall ns * threads / decisions (per-thread time per
// decision, as `sluice bench` reports it).
// bytes_per_key: (HeapAlloc after the warm-up - HeapAlloc before it) / keys,
// each read after runtime.GC(): the maps, their key strings and the limiters.
package main

import (
	"flag"
	"fmt"
	"math/bits"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

const (
	nShards = 256
	// The stop flag is read once per this many decisions.
	checkEvery = 64
)

type shard struct {
	mu sync.Mutex
	m  map[string]*rate.Limiter
	_  [64 - 16]byte // one shard per cache line: no false sharing of locks
}

type table struct {
	shards [nShards]shard
}

func newTable() *table {
	t := &table{}
	for i := range t.shards {
		t.shards[i].m = make(map[string]*rate.Limiter)
	}
	return t
}

// fnv1a is 32-bit FNV-1a, inlined so that hashing a key does not allocate.
func fnv1a(b []byte) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(b); i++ {
		h ^= uint32(b[i])
		h *= 16777619
	}
	return h
}

// allow is one decision: find or create the key's limiter, then Allow().
func (t *table) allow(key []byte) bool {
	sh := &t.shards[fnv1a(key)&(nShards-1)]
	sh.mu.Lock()
	lim, ok := sh.m[string(key)] // no allocation for a lookup
	if !ok {
		lim = rate.NewLimiter(rate.Limit(1000.0/3600.0), 1000)
		sh.m[string(key)] = lim
	}
	sh.mu.Unlock()
	return lim.Allow()
}

// formatKey writes "user:N" into buf[:0].
func formatKey(buf []byte, n uint64) []byte {
	return strconv.AppendUint(append(buf[:0], "user:"...), n, 10)
}

// splitmix64 is the PRNG `sluice bench` uses.
func splitmix64(x *uint64) uint64 {
	*x += 0x9e3779b97f4a7c15
	z := *x
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

func heapAlloc() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

func die(format string, a ...interface{}) {
	fmt.Fprintf(os.Stderr, "xtime: "+format+"\n", a...)
	os.Exit(2)
}

func main() {
	keys := flag.Int("keys", 1000000, "distinct keys, user:0 .. user:keys-1")
	threads := flag.Int("threads", 1, "goroutines deciding (GOMAXPROCS too)")
	seconds := flag.Int("seconds", 2, "timed seconds")
	flag.Parse()
	if flag.NArg() != 0 {
		die("unexpected argument %q", flag.Arg(0))
	}
	if *keys < 1 || *keys > 1<<31-1 {
		die("-keys must be in [1, 2147483647]")
	}
	if *threads < 1 || *threads > 4096 {
		die("-threads must be in [1, 4096]")
	}
	if *seconds < 1 {
		die("-seconds must be at least 1")
	}
	runtime.GOMAXPROCS(*threads)

	// Warm-up: every key decided once; its growth of the heap is the table
	// (the limiters and the map entries with their key strings).
	t := newTable()
	before := heapAlloc()
	buf := make([]byte, 0, 32)
	for i := 0; i < *keys; i++ {
		buf = formatKey(buf, uint64(i))
		t.allow(buf)
	}
	after := heapAlloc()
	var grown uint64
	if after > before {
		grown = after - before
	}
	bytesPerKey := (grown + uint64(*keys)/2) / uint64(*keys)

	var stop int32
	counts := make([]uint64, *threads)
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	ready.Add(*threads)
	done.Add(*threads)
	for g := 0; g < *threads; g++ {
		go func(g int) {
			defer done.Done()
			rng := uint64(g)*7919 + 1
			key := make([]byte, 0, 32)
			nk := uint64(*keys)
			var n uint64
			ready.Done()
			<-start
			for atomic.LoadInt32(&stop) == 0 {
				for j := 0; j < checkEvery; j++ {
					k, _ := bits.Mul64(splitmix64(&rng), nk) // uniform in [0, keys)
					key = formatKey(key, k)
					t.allow(key)
				}
				n += checkEvery
			}
			counts[g] = n
		}(g)
	}
	ready.Wait()
	t0 := time.Now()
	close(start)
	time.Sleep(time.Duration(*seconds) * time.Second)
	atomic.StoreInt32(&stop, 1)
	done.Wait()
	elapsed := time.Since(t0).Seconds()

	var total uint64
	for _, n := range counts {
		total += n
	}
	fmt.Printf("anchor=x_time_rate keys=%d threads=%d decisions_per_s=%.0f "+
		"ns_per_decision=%.1f bytes_per_key=%d\n",
		*keys, *threads, float64(total)/elapsed,
		elapsed*1e9*float64(*threads)/float64(total), bytesPerKey)
	runtime.KeepAlive(t)
}
