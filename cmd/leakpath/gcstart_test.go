package main

import (
	"os"
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

// TestDelayFirstGC: GOGC is firstGCPercent until the first collection,
// 100 from then on; a GOGC of the user's is left alone.
func TestDelayFirstGC(t *testing.T) {
	if v, set := os.LookupEnv("GOGC"); set {
		t.Skipf("GOGC=%s is set in this test's environment", v)
	}
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	delayFirstGC()
	if got := debug.SetGCPercent(firstGCPercent); got != firstGCPercent {
		t.Fatalf("GOGC %d before the first collection, want %d", got, firstGCPercent)
	}
	deadline := time.Now().Add(hangGuard)
	for {
		runtime.GC() // the finalizer runs on its own goroutine after it
		time.Sleep(time.Millisecond)
		got := debug.SetGCPercent(-1)
		debug.SetGCPercent(got)
		if got == 100 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GOGC still %d %v after collections, want 100", got, hangGuard)
		}
	}
	t.Setenv("GOGC", "300")
	debug.SetGCPercent(300)
	delayFirstGC()
	if got := debug.SetGCPercent(100); got != 300 {
		t.Errorf("with GOGC=300 in the environment: GOGC %d", got)
	}
}
